package providers

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// A tool call's piece with a negative index is refused as one beyond the bound is: the stream breaks
// the format.
func TestANegativeToolCallIndexIsRefused(t *testing.T) {
	o := &OpenAI{Provider: "openrouter", Profile: ProfileOf("openrouter")}
	body := `data: {"choices":[{"delta":{"tool_calls":[{"index":-1,"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}` + "\n\n"
	_, err := o.ReadChatStream(context.Background(), "m", 200, http.Header{}, strings.NewReader(body), func(Delta) {})
	if resilience.KindOf(err) != resilience.ProviderUnavailable || !strings.Contains(err.Error(), "tool call index -1") {
		t.Fatalf("error %v, want provider_unavailable for the index", err)
	}
}

// Pieces of tool calls that come interleaved (a piece of the first call after the second opened) are
// each added to their own call.
func TestInterleavedToolCallPieces(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		desc string
		read func(onDelta func(Delta)) (Reply, error)
	}{
		{"openai", func(onDelta func(Delta)) (Reply, error) {
			body := `data: {"id":"c","choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\""}}]}}]}` + "\n\n" +
				`data: {"id":"c","choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}` + "\n\n" +
				`data: {"id":"c","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"}]}` + "\n\n" +
				"data: [DONE]\n\n"
			return (&OpenAI{Provider: "groq", Profile: ProfileOf("groq")}).ReadChatStream(ctx, "m", 200, http.Header{}, strings.NewReader(body), onDelta)
		}},
		{"anthropic", func(onDelta func(Delta)) (Reply, error) {
			body := "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"x\\\"\"}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"b\",\"name\":\"g\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\":1}\"}}\n\n" +
				"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n" +
				"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
			return (&Anthropic{Provider: "anthropic"}).ReadMessageStream(ctx, "m", "", 200, http.Header{}, strings.NewReader(body), onDelta)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var deltas []Delta
			reply, err := tt.read(func(d Delta) { deltas = append(deltas, d) })
			if err != nil {
				t.Fatal(err)
			}
			want := []ToolCall{{ID: "a", Name: "f", Arguments: `{"x":1}`}, {ID: "b", Name: "g", Arguments: "{}"}}
			if _, calls := assemble(deltas); !slices.Equal(reply.ToolCalls, want) || !slices.Equal(calls, want) {
				t.Fatalf("reply %+v, pieces make %+v, want %+v", reply.ToolCalls, calls, want)
			}
		})
	}
}
