package intake

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/types/known/structpb"
)

// env is the embedded catalog, with an embeddings model, and the embedded blueprints.
type env struct {
	cat *catalog.Catalog
	set *blueprints.Set
}

func (e env) Catalog() *catalog.Catalog   { return e.cat }
func (e env) Blueprints() *blueprints.Set { return e.set }

func testEnv(t *testing.T) env {
	t.Helper()
	base, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	cat, err := base.With(catalog.Model{ID: "text-embedding-3-small", Provider: "openrouter", ContextWindow: 8192, Tier: 3, Capabilities: []string{catalog.Embeddings}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := blueprints.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	return env{cat, set}
}

func ptr[T any](v T) *T { return &v }

// A known model of the embedded catalog.
const known = "deepseek-chat"

func text(s string) []*messages.ContentPart {
	return []*messages.ContentPart{{Type: messages.PartText, Text: s}}
}

func TestCheck(t *testing.T) {
	e := testEnv(t)
	md, _ := structpb.NewStruct(map[string]any{"answer_kind": 7})
	badKind, _ := structpb.NewStruct(map[string]any{"answer_kind": "vibes"})
	user := &messages.ChatMessage{Role: "user", Content: text("hi")}
	call := func(id, name, args string) *messages.ToolCall {
		return &messages.ToolCall{Id: id, Name: name, Arguments: args}
	}
	for _, tc := range []struct {
		desc string
		req  *messages.RouteRequest
		// bad and unknown are the problems' fields, in order.
		bad, unknown []string
	}{
		{"a plain task", &messages.RouteRequest{Task: "What is 2 + 2?"}, nil, nil},
		{"no request", nil, []string{"body"}, nil},
		{"an invisible task", &messages.RouteRequest{Task: " \u200b\t"}, []string{"task"}, nil},
		{"an unknown blueprint and model", &messages.RouteRequest{Task: "x", Category: "astrology", Models: []string{known, "gpt-17"}}, nil, []string{"category", "models[1]"}},
		{"models empty, too long, twice, of embeddings", &messages.RouteRequest{Task: "x", Models: []string{"", strings.Repeat("m", 201), known, known, "text-embedding-3-small"}},
			[]string{"models[0]", "models[1]", "models[3]", "models[4]"}, nil},
		{"too many models", &messages.RouteRequest{Task: "x", Models: make([]string, MaxModels+1)}, []string{"models"}, nil},
		{"every override out of range, NaN among them", &messages.RouteRequest{Task: "x", Strategy: ptr("vibes"), TimeoutSeconds: ptr(math.NaN()),
			Quorum: ptr("sometimes"), QuorumTau: ptr(1.0), QuorumGraceSeconds: ptr(-1.0), Workers: ptr[int32](0), MinResponses: ptr[int32](99)},
			[]string{"strategy", "timeout", "quorum", "quorum_tau", "quorum_grace_seconds", "workers", "min_responses"}, nil},
		{"min_responses above workers", &messages.RouteRequest{Task: "x", Workers: ptr[int32](2), MinResponses: ptr[int32](3)}, []string{"min_responses"}, nil},
		{"min_responses above the models", &messages.RouteRequest{Task: "x", Models: []string{known}, MinResponses: ptr[int32](2)}, []string{"min_responses"}, nil},
		{"min_responses above the blueprint's workers", &messages.RouteRequest{Task: "x", Category: "documentation", MinResponses: ptr[int32](4)}, []string{"min_responses"}, nil},
		{"an answer kind that is no string", &messages.RouteRequest{Task: "x", Metadata: md}, []string{"metadata.answer_kind"}, nil},
		{"an unknown answer kind", &messages.RouteRequest{Task: "x", Metadata: badKind}, []string{"metadata.answer_kind"}, nil},
		{"a direct call of two models", &messages.RouteRequest{Task: "x", Direct: true, Models: []string{known, "01-ai/yi-large"}}, []string{"models"}, nil},
		{"fallbacks of a panel", &messages.RouteRequest{Task: "x", Fallbacks: []string{known}}, []string{"fallbacks"}, nil},
		{"fallbacks empty, the model, unknown, of embeddings", &messages.RouteRequest{Task: "x", Direct: true, Models: []string{known},
			Fallbacks: []string{"", known, "gpt-17", "text-embedding-3-small"}}, []string{"fallbacks[0]", "fallbacks[1]", "fallbacks[3]"}, []string{"fallbacks[2]"}},
		{"sampling out of range", &messages.RouteRequest{Task: "x", Ask: &messages.Ask{Sampling: &messages.Sampling{Temperature: ptr(2.5), TopP: ptr(math.NaN()),
			MaxTokens: ptr[int32](0), Stop: []string{"a", ""}, LogitBias: map[string]int32{"12": 101, "abc": 1}, User: strings.Repeat("u", 257)}}},
			[]string{"parameters.temperature", "parameters.top_p", "parameters.max_tokens", "parameters.stop[1]", "parameters.logit_bias.12",
				"parameters.logit_bias.abc", "parameters.user"}, nil},
		{"five stops", &messages.RouteRequest{Task: "x", Ask: &messages.Ask{Sampling: &messages.Sampling{Stop: []string{"a", "b", "c", "d", "e"}}}},
			[]string{"parameters.stop"}, nil},
		{"tools of every fault", &messages.RouteRequest{Task: "x", Ask: &messages.Ask{Tools: []*messages.Tool{{Name: "a b"}, {Name: "f", Parameters: "[1]"}, {Name: "f"}}}},
			[]string{"tools[0].function.name", "tools[1].function.parameters", "tools[2].function.name"}, nil},
		{"a tool required, without tools", &messages.RouteRequest{Task: "x", Ask: &messages.Ask{ToolChoice: &messages.ToolChoice{Mode: "required"}}}, []string{"tool_choice"}, nil},
		{"a tool choice naming no tool", &messages.RouteRequest{Task: "x", Ask: &messages.Ask{Tools: []*messages.Tool{{Name: "f"}},
			ToolChoice: &messages.ToolChoice{Mode: "function", Name: "g"}}}, []string{"tool_choice.function.name"}, nil},
		{"an unknown tool choice", &messages.RouteRequest{Task: "x", Ask: &messages.Ask{ToolChoice: &messages.ToolChoice{Mode: "sometimes"}}}, []string{"tool_choice"}, nil},
		{"a format without type", &messages.RouteRequest{Task: "x", Ask: &messages.Ask{ResponseFormat: &messages.OutputFormat{}}}, []string{"response_format.type"}, nil},
		{"a JSON schema badly named, not an object", &messages.RouteRequest{Task: "x", Ask: &messages.Ask{ResponseFormat: &messages.OutputFormat{Type: "json_schema", Name: "my schema", Schema: "true"}}},
			[]string{"response_format.json_schema.name", "response_format.json_schema.schema"}, nil},
		{"a JSON schema without a schema", &messages.RouteRequest{Task: "x", Ask: &messages.Ask{ResponseFormat: &messages.OutputFormat{Type: "json_schema", Name: "w"}}},
			[]string{"response_format.json_schema.schema"}, nil},
		{"a conversation of tool calls", &messages.RouteRequest{Task: "x", Ask: &messages.Ask{Messages: []*messages.ChatMessage{user,
			{Role: "assistant", ToolCalls: []*messages.ToolCall{call("c", "f", "{}")}},
			{Role: "tool", ToolCallId: "c", Content: text("21 C")}}}}, nil, nil},
		{"a conversation of every fault", &messages.RouteRequest{Task: "x", Ask: &messages.Ask{Messages: []*messages.ChatMessage{
			{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "hi"}, {Type: messages.PartImage, ImageUrl: "http://images.example/a.png", Detail: "max"},
				{Type: "audio"}}, ToolCalls: []*messages.ToolCall{call("u", "f", "{}")}, ToolCallId: "u"},
			{Role: "system", Content: []*messages.ContentPart{{Type: messages.PartImage, ImageUrl: "https://images.example/a.png"}}},
			{Role: "assistant", Name: strings.Repeat("n", 257), ToolCalls: []*messages.ToolCall{call("c", "f", "[1]"), call("c", "g h", "{}"), call("", "f", "")}},
			{Role: "tool", Content: text("21 C")},
			{Role: "tool", ToolCallId: "nope"},
			{Role: "assistant"},
			{Role: "function", Content: text("x")}}}},
			[]string{"messages[0].tool_call_id", "messages[0].content[1].image_url.detail", "messages[0].content[1].image_url.url", "messages[0].content[2].type",
				"messages[0].tool_calls", "messages[1].content[0].type",
				"messages[2].name", "messages[2].tool_calls[0].function.arguments", "messages[2].tool_calls[1].id", "messages[2].tool_calls[1].function.name",
				"messages[2].tool_calls[2].id", "messages[2].tool_calls[2].function.arguments",
				"messages[3].tool_call_id", "messages[4].tool_call_id", "messages[4].content", "messages[5].content", "messages[6].role"}, nil},
		{"no user turn", &messages.RouteRequest{Task: "x", Ask: &messages.Ask{Messages: []*messages.ChatMessage{{Role: "system", Content: text("x")}}}},
			[]string{"messages"}, nil},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			v := Check(tc.req, e)
			if got := fields(v.Bad); !slices.Equal(got, tc.bad) {
				t.Errorf("bad %v, want %v: %v", got, tc.bad, v.Bad)
			}
			if got := fields(v.Unknown); !slices.Equal(got, tc.unknown) {
				t.Errorf("unknown %v, want %v: %v", got, tc.unknown, v.Unknown)
			}
			if v.OK() != (tc.bad == nil && tc.unknown == nil) || v.NotFound() != (tc.bad == nil && tc.unknown != nil) {
				t.Errorf("OK %v, NotFound %v", v.OK(), v.NotFound())
			}
			for _, p := range append(v.Bad, v.Unknown...) {
				if p.Message == "" {
					t.Errorf("%s has no message", p.Field)
				}
			}
		})
	}
}

// A schema the answers' check cannot compile is refused here, before any model is asked, under the
// field that holds it.
func TestSchemasAreCompiled(t *testing.T) {
	e := testEnv(t)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, `{"type":"string"}`)
	}))
	defer srv.Close()
	format := func(schema string) *messages.Ask {
		return &messages.Ask{ResponseFormat: &messages.OutputFormat{Type: "json_schema", Name: "answer", Schema: schema}}
	}
	tool := func(schemas ...string) *messages.Ask {
		ask := &messages.Ask{}
		for i, s := range schemas {
			ask.Tools = append(ask.Tools, &messages.Tool{Name: fmt.Sprintf("f%d", i), Parameters: s})
		}
		return ask
	}
	// flat is an object schema of n properties, each {}: n+2 objects.
	flat := func(n int) string {
		props := make([]string, n)
		for i := range props {
			props[i] = fmt.Sprintf(`"p%d":{}`, i)
		}
		return `{"type":"object","properties":{` + strings.Join(props, ",") + `}}`
	}
	const schemaField = "response_format.json_schema.schema"
	tests := []struct {
		desc    string
		ask     *messages.Ask
		fields  []string
		problem string // a part of every problem's message
	}{
		{"a recursive schema", format(`{"type":"object","properties":{"child":{"$ref":"#"}}}`), nil, ""},
		{"a $ref cycle", format(`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`), []string{schemaField},
			"cannot be compiled: #/$defs/a refers to itself"},
		{"a $ref to a missing definition", format(`{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`), []string{schemaField},
			"cannot be compiled: a $ref to #/$defs/missing finds nothing"},
		{"a $ref to a URL", format(`{"$ref":"http://127.0.0.1:1/x.json"}`), []string{schemaField}, "cannot be compiled: a schema may only refer to itself"},
		{"a $ref to a server", format(`{"$ref":"` + srv.URL + `/x.json"}`), []string{schemaField}, "cannot be compiled: a schema may only refer to itself"},
		{"a type that is none", format(`{"type":"strin"}`), []string{schemaField}, "cannot be compiled: not a valid JSON schema"},
		{"a deeply nested schema", format(strings.Repeat(`{"items":`, 40) + `{}` + strings.Repeat(`}`, 40)), []string{schemaField},
			"must nest at most 32 levels"},
		{"a multipleOf the compiler cannot read", format(`{"multipleOf":1e9999999}`), []string{schemaField}, "exponent"},
		{"tools' parameters of every fault", tool(`{"type":"object"}`, `{"$ref":"#/$defs/x"}`, `{"$ref":"#"}`, `{"properties":{"a":{"$ref":"https://example.com/a.json"}}}`),
			[]string{"tools[1].function.parameters", "tools[2].function.parameters", "tools[3].function.parameters"}, "cannot be compiled"},
		{"tools and a format sharing the bound", &messages.Ask{Tools: tool(flat(3000)).Tools, ResponseFormat: format(flat(3000)).ResponseFormat},
			[]string{schemaField}, fmt.Sprintf("at most %d objects and booleans", consensus.MaxSchemaNodes)},
		{"a reason clipped", format(`{"$ref":"#/$defs/` + strings.Repeat("x", 1000) + `"}`), []string{schemaField}, "..."},
		// 18 definitions, each an anyOf of two $refs to the next: a million evaluations of each value.
		{"a schema whose check multiplies", format(func() string {
			defs := make([]string, 18)
			for i := range defs {
				defs[i] = fmt.Sprintf(`"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i+1, i+1)
			}
			return `{"$ref":"#/$defs/d0","$defs":{` + strings.Join(defs, ",") + `,"d18":{"type":"string"}}}`
		}()), []string{schemaField}, "would take up to 1048574 evaluations of one value"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			v := Check(&messages.RouteRequest{Task: "x", Ask: tc.ask}, e)
			if got := fields(v.Bad); !slices.Equal(got, tc.fields) {
				t.Fatalf("bad %v, want %v: %v", got, tc.fields, v.Bad)
			}
			for _, p := range v.Bad {
				if !strings.Contains(p.Message, tc.problem) || len(p.Message) > MaxSchemaProblemBytes+3 {
					t.Errorf("%s: %q, want a message saying %q, of at most %d bytes", p.Field, p.Message, tc.problem, MaxSchemaProblemBytes)
				}
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("a schema's $ref was fetched %d times", n)
	}
}

func fields(ps problems.Errors) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Field)
	}
	return out
}

func TestImageURL(t *testing.T) {
	const onePixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	for _, tc := range []struct {
		url, problem string // problem is a part of the message, "" for none
	}{
		{"https://images.example/a.png", ""},
		{"data:image/png;base64," + onePixelPNG, ""},
		{"", "is required"},
		{"http://images.example/a.png", "https URL"},
		{"https://u:p@images.example/a.png", "credentials"},
		{"https://images.example/" + strings.Repeat("a", MaxImageURL), "at most"},
		{"data:image/png;base64,aGVsbG8gd29ybGQ=", "not a image/png"},
		{"data:image/png;base64,not base64!", "not base64"},
		{"data:application/pdf;base64,JVBERi0xLjQK", "image/png, image/jpeg"},
		{"data:image/jpeg;base64," + onePixelPNG, "not a image/jpeg"},
		{"data:image/png," + onePixelPNG, "base64"},
		// An image larger than a data URI may hold is refused before it is decoded whole.
		{"data:image/png;base64," + strings.Repeat("A", MaxImageBytes/3*4+8), "at most"},
	} {
		got := ImageURL(tc.url)
		if (tc.problem == "") != (got == "") || !strings.Contains(got, tc.problem) {
			t.Errorf("%.60s: %q, want %q", tc.url, got, tc.problem)
		}
	}
}
