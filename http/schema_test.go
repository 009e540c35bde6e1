package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
)

// countedCalls counts the calls that reach the providers.
type countedCalls struct {
	providers.Backend
	n atomic.Int64
}

func (c *countedCalls) Complete(ctx context.Context, call providers.Call) (providers.Reply, error) {
	c.n.Add(1)
	return c.Backend.Complete(ctx, call)
}

// A schema the answers' check cannot compile is refused with a 400 naming its field, before any model
// is called (it used to be refused after the panel answered).
func TestUncompilableSchemaIsRefusedBeforeAnyCall(t *testing.T) {
	backend := &countedCalls{Backend: simBackend(t)}
	tb := newTestbed(t, nil, withBackend(backend))
	cycle := json.RawMessage(`{"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}`)
	user := []map[string]any{{"role": "user", "content": "Weather in Paris as JSON"}}
	tests := []struct {
		desc, path   string
		body         map[string]any
		field, about string
	}{
		{"a $ref cycle in response_format", "/v1/chat/completions", map[string]any{"model": "conclave/auto", "messages": user,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "weather", "schema": cycle}}},
			"response_format.json_schema.schema", "cannot be compiled: #/$defs/a refers to itself"},
		{"a $ref to a URL in a tool's parameters", "/v1/chat/completions", map[string]any{"model": "conclave/auto", "messages": user,
			"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "get_weather",
				"parameters": json.RawMessage(`{"type": "object", "properties": {"city": {"$ref": "http://127.0.0.1:1/x.json"}}}`)}}}},
			"tools[0].function.parameters", "cannot be compiled: a schema may only refer to itself"},
		{"a $ref cycle in text.format", "/v1/responses", map[string]any{"model": "conclave/auto", "input": "Weather in Paris as JSON",
			"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "weather", "schema": cycle}}},
			"text.format.schema", "cannot be compiled"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var body struct {
				Error struct {
					Param   *string `json:"param"`
					Details []struct {
						Field   string `json:"field"`
						Message string `json:"message"`
					} `json:"details"`
				} `json:"error"`
			}
			resp, raw := tb.do(http.MethodPost, tt.path, tt.body, &body)
			if resp.StatusCode != http.StatusBadRequest || body.Error.Param == nil || *body.Error.Param != tt.field ||
				len(body.Error.Details) != 1 || !strings.Contains(body.Error.Details[0].Message, tt.about) {
				t.Fatalf("%d %s; want a 400 naming %s: %q", resp.StatusCode, raw, tt.field, tt.about)
			}
			if n := backend.n.Load(); n != 0 {
				t.Fatalf("%d provider calls were made", n)
			}
		})
	}
	// The same request with a schema that compiles is answered: the counter counts.
	resp, raw := tb.do(http.MethodPost, "/v1/chat/completions", map[string]any{"model": "conclave/auto", "messages": user,
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "weather",
			"schema": json.RawMessage(`{"type": "object", "properties": {"next": {"$ref": "#"}}}`)}}}, nil)
	if resp.StatusCode == http.StatusBadRequest || backend.n.Load() == 0 {
		t.Fatalf("a schema that compiles: %d %s, %d calls", resp.StatusCode, raw, backend.n.Load())
	}
}
