package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"go.uber.org/zap"
)

// FuzzRouteAndChatBodies decodes any body as a route request, a chat completion request, a Responses
// request, an embeddings request and a Messages request, with their parameters, tools, schemas,
// content parts and blocks, input items, tool calls and tool results: each is valid or refused with 400
// or 404 and a bounded list of bounded problems, never a panic; a valid chat, Responses or Messages
// request's ask holds the conversation it was sent (a Messages one its max_tokens too), and a valid
// embeddings request a text for every input.
func FuzzRouteAndChatBodies(f *testing.F) {
	cfg := config.Default()
	base, err := catalog.Embedded()
	if err != nil {
		f.Fatal(err)
	}
	cat, err := base.With(catalog.Model{ID: "text-embedding-3-small", Provider: "openrouter", ContextWindow: 8192, Tier: 3, Capabilities: []string{catalog.Embeddings}})
	if err != nil {
		f.Fatal(err)
	}
	e, err := engine.New(engine.Options{Config: cfg, Log: zap.NewNop(), Catalog: cat})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	s := New(e, Options{})
	for _, seed := range []string{
		`{"task": "Review this diff", "category": "code_review", "workers": 3, "min_responses": 2}`,
		`{"task": "x", "models": ["gpt-4o", "gpt-4o"], "timeout": -1, "quorum": "adaptive", "quorum_tau": 1}`,
		`{"task": " \u200b ", "metadata": {"answer_kind": 3}, "extra": null}`,
		`{"model": "conclave/auto", "messages": [{"role": "user", "content": "hi"}], "stream": true, "n": 1}`,
		`{"model": "gpt-4o", "messages": [{"role": "tool", "content": [{"type": "image_url"}]}]}`,
		// The ask: parameters, tools, schemas, content parts, tool calls and their answers.
		`{"task": "x", "parameters": {"temperature": 0.1, "max_tokens": 5, "stop": ["END"], "seed": 9007199254740993, "logit_bias": {"50256": -100}}, "strict_parameters": true}`,
		`{"model": "conclave/auto", "temperature": 2.5, "top_p": null, "max_tokens": 5, "max_completion_tokens": 6, "stop": "", "user": 3,
			"messages": [{"role": "developer", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"},
			{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==", "detail": "low"}},
			{"type": "image_url", "image_url": {"url": "https://images.example/a.png"}}]}]}`,
		`{"model": "conclave/auto", "messages": [{"role": "user", "content": "Weather?"},
			{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
			{"role": "tool", "tool_call_id": "c1", "content": "21 C"}],
			"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true}}],
			"tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": false}`,
		`{"model": "conclave/auto", "messages": [{"role": "user", "content": "JSON"}], "response_format": {"type": "json_schema",
			"json_schema": {"name": "w", "description": "d", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "number"}}}}}}`,
		`{"model": "gpt-4o", "fallbacks": ["gpt-4o", ""], "messages": [{"role": "assistant", "refusal": "no", "tool_calls": [{"id": "", "type": "custom"}]},
			{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/gif;base64,!!"}}]}], "tool_choice": "required", "response_format": {"type": "json_object"}}`,
		// The Responses API: instructions, input items, flat tools, text.format, and what it refuses.
		`{"model": "conclave/auto", "instructions": "Be brief.", "input": "hi", "temperature": 0.1, "max_output_tokens": 16, "safety_identifier": "h",
			"text": {"format": {"type": "json_schema", "name": "w", "strict": true, "schema": {"type": "object"}}}, "stream": true, "metadata": {"k": "v"}}`,
		`{"model": "conclave/auto", "input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather?"}, {"type": "input_image", "image_url": "https://a.example/x.png", "detail": "low"}]},
			{"type": "message", "role": "assistant", "id": "msg_1", "status": "completed", "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
			{"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
			{"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "21 C"}]}],
			"tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": null}], "tool_choice": {"type": "function", "name": "get_weather"}}`,
		`{"model": "gpt-4o", "input": [{"type": "reasoning"}, {"type": "function_call_output", "call_id": "x"}], "previous_response_id": "resp_1",
			"tools": [{"type": "web_search"}], "include": ["x"], "truncation": "auto", "background": true, "text": {"verbosity": "low", "format": {"type": "yaml"}}}`,
		// Embeddings: texts, token arrays, dimensions and formats.
		`{"model": "text-embedding-3-small", "input": ["a", "b"], "dimensions": 8, "encoding_format": "base64", "user": "u"}`,
		`{"model": "conclave/auto", "input": [[1, 2], ""], "dimensions": 0, "encoding_format": "int8"}`,
		// Anthropic's Messages bodies: system, blocks of every kind, tools, tool choices, refused fields.
		`{"model": "conclave/auto", "max_tokens": 64, "system": [{"type": "text", "text": "be brief"}], "stop_sequences": ["END"], "temperature": 0.5,
			"metadata": {"user_id": "u"}, "stream": true, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"},
			{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="}},
			{"type": "image", "source": {"type": "url", "url": "https://images.example/a.png"}}]}]}`,
		`{"model": "gpt-4o", "max_tokens": 64, "fallbacks": ["gpt-4o-mini"], "messages": [{"role": "user", "content": "Weather?"},
			{"role": "assistant", "content": [{"type": "text", "text": "Looking."}, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}, "caller": {"type": "direct"}}]},
			{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": true, "content": [{"type": "text", "text": "21 C"}]}, {"type": "text", "text": "So?"}]}],
			"tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true}],
			"tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true}}`,
		`{"model": "conclave/auto", "top_k": 5, "thinking": {"type": "enabled"}, "messages": [{"role": "user", "content": [{"type": "text", "text": "", "cache_control": {"type": "ephemeral"}},
			{"type": "tool_result", "tool_use_id": "x"}, {"type": "document"}]}], "tools": [{"type": "web_search_20250305", "name": "web_search"}], "tool_choice": {"type": "any"}}`,
		`[1, 2, 3]`, `{"task": {"nested": [[[[]]]]}}`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if p := strictJSON(body); p != nil {
			return // refused before any field is read
		}
		// Problems may quote the input at length here: the answer's writer clips them.
		check := func(kind string, status int, listed int) {
			if status != 0 && status != http.StatusBadRequest && status != http.StatusNotFound {
				t.Fatalf("%s: status %d", kind, status)
			}
			if status != 0 && listed == 0 {
				t.Fatalf("%s: refused without a problem", kind)
			}
			if listed > problems.MaxProblems+1 {
				t.Fatalf("%s: %d problems", kind, listed)
			}
		}
		_, status, ps := s.parseRoute(body)
		check("route", status, len(ps))
		chat, status, ps := s.parseChat(body)
		check("chat", status, len(ps))
		if status == 0 && (len(chat.route.GetAsk().GetMessages()) == 0 || chat.route.Task == "") {
			t.Fatalf("a valid chat request without its conversation: %v", chat.route)
		}
		rr, status, ps := s.parseResponses(body)
		check("responses", status, len(ps))
		if status == 0 && (len(rr.route.GetAsk().GetMessages()) == 0 || rr.route.Task == "") {
			t.Fatalf("a valid Responses request without its conversation: %v", rr.route)
		}
		er, status, ps := s.parseEmbeddings(body)
		check("embeddings", status, len(ps))
		if status == 0 && (len(er.req.Inputs) == 0 || slices.Contains(er.req.Inputs, "")) {
			t.Fatalf("a valid embeddings request without its texts: %v", er.req)
		}
		msg, status, ps := s.parseMessages(body)
		check("messages", status, len(ps))
		if status != 0 {
			if raw, _ := json.Marshal(anthropicErrorOf(status, "", "the request is invalid", "", ps)); len(raw) > 64<<10 {
				t.Fatalf("messages: an error body of %d bytes", len(raw))
			}
			return
		}
		// A valid Messages request holds its conversation and the max_tokens it must have, and each
		// tool call it carries has arguments a tool_use block can hold again.
		if len(msg.route.GetAsk().GetMessages()) == 0 || msg.route.Task == "" || msg.route.GetAsk().GetSampling().MaxTokens == nil {
			t.Fatalf("a valid Messages request without its conversation or max_tokens: %v", msg.route)
		}
		for _, m := range msg.route.GetAsk().GetMessages() {
			for _, c := range m.ToolCalls {
				if _, err := toolInput(c); err != nil {
					t.Fatalf("a tool call read that could not be written back: %v", err)
				}
			}
		}
	})
}
