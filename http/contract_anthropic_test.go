// The fuzzing build (make fuzz, -tags fuzz) leaves this file out, as contract_openai_test.go.

//go:build !fuzz

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/testenv"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/pb33f/libopenapi/orderedmap"
)

// The contract of the Anthropic door, with Anthropic's own Go client as the caller, unchanged but for
// its base URL and key, against Conclave over loopback upstreams that speak Anthropic's, OpenAI's and
// Gemini's wire formats. Assertions are on what the upstream received and on what the client got; every
// whole answer and error is also checked against the official specification of the Messages API.

// claudeModel and geminiModel are catalog models of the loopback Anthropic and Gemini upstreams.
const (
	claudeModel = "claude-3-5-haiku-20241022"
	geminiModel = "gemini-2.0-flash"
)

// anthropicClient is Anthropic's own Go client, unchanged but for its base URL and key (and no
// retries, so a test sees each answer).
func anthropicClient(tb *testbed, key string, opts ...aoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]aoption.RequestOption{aoption.WithBaseURL(tb.srv.URL), aoption.WithAPIKey(key), aoption.WithMaxRetries(0)}, opts...)...)
}

// messagesSpec is the validator of POST /v1/messages in the official specification, built once.
var messagesSpec = struct {
	once    sync.Once
	v       validator.Validator
	model   *v3.Document
	schemas schema_validation.SchemaValidator
	err     error
}{}

// anthropicSpec builds the specification's validator once, skipping the test where it is absent.
func anthropicSpec(t *testing.T) {
	t.Helper()
	dir := testenv.SharedDir(t, "specs")
	messagesSpec.once.Do(func() {
		spec, err := os.ReadFile(filepath.Join(dir, "anthropic.openapi.json"))
		if err != nil {
			messagesSpec.err = err
			return
		}
		doc, err := libopenapi.NewDocument(spec)
		if err != nil {
			messagesSpec.err = err
			return
		}
		model, err := doc.BuildV3Model()
		if err != nil {
			messagesSpec.err = fmt.Errorf("the specification: %w", err)
			return
		}
		// Only the operation of the door: compiling every schema of the document takes a minute.
		only := orderedmap.New[string, *v3.PathItem]()
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			only.Set(path, model.Model.Paths.PathItems.GetOrZero(path))
		}
		model.Model.Paths.PathItems = only
		messagesSpec.v = validator.NewValidatorFromV3Model(&model.Model, config.WithoutOpenAPIMode())
		messagesSpec.model = &model.Model
		messagesSpec.schemas = schema_validation.NewSchemaValidator(config.WithoutOpenAPIMode())
	})
	if messagesSpec.err != nil {
		t.Fatal(messagesSpec.err)
	}
}

// meetsAnthropicSpec checks an answer of /v1/messages (a message or an error) against the specification.
func meetsAnthropicSpec(t *testing.T, status int, raw string) {
	t.Helper()
	meetsAnthropicSpecAt(t, "/v1/messages", status, raw)
}

// meetsAnthropicSpecAt checks an answer of POST path against the specification.
func meetsAnthropicSpecAt(t *testing.T, path string, status int, raw string) {
	t.Helper()
	if p := anthropicProblems(t, path, status, raw); p != "" {
		t.Fatalf("the answer does not meet the specification:%s\n%s", p, raw)
	}
}

// anthropicProblems says how an answer of POST path breaks Anthropic's specification, or "".
func anthropicProblems(t *testing.T, path string, status int, raw string) string {
	t.Helper()
	anthropicSpec(t)
	if status >= 500 {
		status = http.StatusBadRequest // the specification lists its error body under 4XX alone; a 5xx carries the same
	}
	req, _ := http.NewRequest(http.MethodPost, "https://api.anthropic.com"+path, strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	resp := &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(raw)), Request: req}
	if ok, errs := messagesSpec.v.ValidateHttpResponse(req, resp); !ok {
		return specReport(errs)
	}
	return ""
}

func TestAnthropicSDKContract(t *testing.T) {
	u := contractUpstreams(t)
	client := anthropicClient(u.testbed, sdkToken)
	ctx := context.Background()
	ask := func(t *testing.T, p anthropic.MessageNewParams, opts ...aoption.RequestOption) *anthropic.Message {
		t.Helper()
		msg, err := client.Messages.New(ctx, p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		meetsAnthropicSpec(t, http.StatusOK, msg.RawJSON())
		return msg
	}

	t.Run("a message: system, max_tokens, temperature, stop_sequences and the user's id arrive mapped", func(t *testing.T) {
		tests := []struct {
			desc, model string
			upstream    *providertest.Server
			// arrived checks what the upstream received; dropped is what the answer names as not carried.
			arrived func(body map[string]any) bool
			dropped []string
		}{
			{"an Anthropic-format upstream", claudeModel, u.anthropic, func(b map[string]any) bool {
				return b["system"] == "Answer with one letter." && b["max_tokens"] == 5.0 && b["temperature"] == 0.2 && sameJSON(b["stop_sequences"], []string{"END"}) &&
					sameJSON(b["metadata"], map[string]any{"user_id": "u-42"}) &&
					sameJSON(b["messages"], []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": mcq}}}})
			}, []string{}},
			{"an OpenAI-format upstream", directModel, u.local, func(b map[string]any) bool {
				return b["max_tokens"] == 5.0 && b["temperature"] == 0.2 && sameJSON(b["stop"], []string{"END"}) && b["user"] == "u-42" &&
					sameJSON(b["messages"], []any{map[string]any{"role": "system", "content": "Answer with one letter."}, map[string]any{"role": "user", "content": mcq}})
			}, []string{}},
			{"a Gemini-format upstream, which has no field for the user's id", geminiModel, u.gemini, func(b map[string]any) bool {
				g, _ := b["generationConfig"].(map[string]any)
				return g["maxOutputTokens"] == 5.0 && g["temperature"] == 0.2 && sameJSON(g["stopSequences"], []string{"END"}) && b["systemInstruction"] != nil
			}, []string{"user"}},
		}
		for _, tt := range tests {
			t.Run(tt.desc, func(t *testing.T) {
				// This version of the SDK has no field for the deprecated temperature: it sends it as the
				// SDK's own option for fields beyond its params.
				msg := ask(t, anthropic.MessageNewParams{Model: anthropic.Model(tt.model), MaxTokens: 5,
					StopSequences: []string{"END"}, System: []anthropic.TextBlockParam{{Text: "Answer with one letter."}},
					Metadata: anthropic.MetadataParam{UserID: anthropic.String("u-42")},
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(mcq))}}, aoption.WithJSONSet("temperature", 0.2))
				if body := sent(t, tt.upstream); !tt.arrived(body) {
					t.Fatalf("the upstream received %v", body)
				}
				if len(msg.Content) != 1 || msg.Content[0].Text != "The answer is (B)." || msg.StopReason != anthropic.StopReasonEndTurn ||
					msg.Usage.InputTokens != 12 || msg.Usage.OutputTokens != 7 || string(msg.Model) != tt.model || msg.Role != "assistant" {
					t.Fatalf("message %s", msg.RawJSON())
				}
				ext := extension(t, msg.RawJSON())
				if !sameJSON(ext["models_asked"], []string{tt.model}) || !sameJSON(ext["dropped_parameters"], tt.dropped) || ext["request_id"] != msg.ID {
					t.Fatalf("extension %v", ext)
				}
				if rec := u.record(msg.ID); rec["answer"] != "The answer is (B)." || !sameJSON(rec["dropped_parameters"], tt.dropped) {
					t.Fatalf("record %v %v", rec["answer"], rec["dropped_parameters"])
				}
			})
		}
	})

	weather := []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("The weather of a city"),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}}}}
	t.Run("a two-turn tool conversation round-trips", func(t *testing.T) {
		tests := []struct {
			desc, model, id string
			upstream        *providertest.Server
			// tools checks the tools the upstream received; turns the second call's assistant and tool turns.
			tools func(any) bool
			turns func([]any) bool
		}{
			{"an Anthropic-format upstream", claudeModel, "toolu_07", u.anthropic,
				func(tools any) bool {
					return sameJSON(tools, []any{map[string]any{"name": "get_weather", "description": "The weather of a city", "input_schema": map[string]any{
						"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}})
				},
				func(turns []any) bool {
					return len(turns) == 3 && sameJSON(turns[1], map[string]any{"role": "assistant", "content": []any{map[string]any{
						"type": "tool_use", "id": "toolu_07", "name": "get_weather", "input": map[string]any{"city": "Paris"}}}}) &&
						sameJSON(turns[2], map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_07",
							"content": []any{map[string]any{"type": "text", "text": "21 C and sunny"}}}}})
				}},
			{"an OpenAI-format upstream", directModel, "call_7", u.local,
				func(tools any) bool {
					return sameJSON(tools, []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "description": "The weather of a city",
						"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}})
				},
				func(turns []any) bool {
					return len(turns) == 3 && sameJSON(turns[1], map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
						"id": "call_7", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}}) &&
						sameJSON(turns[2], map[string]any{"role": "tool", "tool_call_id": "call_7", "content": "21 C and sunny"})
				}},
		}
		for _, tt := range tests {
			t.Run(tt.desc, func(t *testing.T) {
				msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is the weather in Paris?"))}
				tt.upstream.Queue(providertest.Response{ToolCalls: []providertest.ToolCall{{ID: tt.id, Name: "get_weather", Arguments: `{"city":"Paris"}`}}})
				first := ask(t, anthropic.MessageNewParams{Model: anthropic.Model(tt.model), MaxTokens: 256, Messages: msgs, Tools: weather})
				if body := sent(t, tt.upstream); !tt.tools(body["tools"]) {
					t.Fatalf("the upstream received tools %v", body["tools"])
				}
				if first.StopReason != anthropic.StopReasonToolUse || len(first.Content) != 1 {
					t.Fatalf("first answer %s", first.RawJSON())
				}
				use := first.Content[0].AsToolUse()
				if use.ID != tt.id || use.Name != "get_weather" || !sameJSON(json.RawMessage(use.Input), map[string]any{"city": "Paris"}) {
					t.Fatalf("tool use %s", first.Content[0].RawJSON())
				}

				msgs = append(msgs, first.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "21 C and sunny", false)))
				tt.upstream.Queue(providertest.Response{Text: "It is 21 C and sunny in Paris."})
				second := ask(t, anthropic.MessageNewParams{Model: anthropic.Model(tt.model), MaxTokens: 256, Messages: msgs, Tools: weather})
				if second.Content[0].Text != "It is 21 C and sunny in Paris." || second.StopReason != anthropic.StopReasonEndTurn {
					t.Fatalf("second answer %s", second.RawJSON())
				}
				if turns, _ := sent(t, tt.upstream)["messages"].([]any); !tt.turns(turns) {
					raw, _ := json.Marshal(turns)
					t.Fatalf("the upstream received the turns %s", raw)
				}
			})
		}
	})

	t.Run("an image block arrives", func(t *testing.T) {
		tests := []struct {
			desc, model string
			upstream    *providertest.Server
			want        any
		}{
			{"as an image block at an Anthropic-format upstream", claudeModel, u.anthropic, []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": "What is in this image?"},
				map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": pixelPNG}}}}}},
			{"as an image_url part at an OpenAI-format upstream", directModel, u.local, []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": "What is in this image?"},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + pixelPNG}}}}}},
		}
		for _, tt := range tests {
			t.Run(tt.desc, func(t *testing.T) {
				ask(t, anthropic.MessageNewParams{Model: anthropic.Model(tt.model), MaxTokens: 64, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(
					anthropic.NewTextBlock("What is in this image?"), anthropic.NewImageBlockBase64("image/png", pixelPNG))}})
				if turns := sent(t, tt.upstream)["messages"]; !sameJSON(turns, tt.want) {
					t.Fatalf("the upstream received %v", turns)
				}
			})
		}
	})

	t.Run("conclave/auto is answered by a panel", func(t *testing.T) {
		msg := ask(t, anthropic.MessageNewParams{Model: "conclave/auto", MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(mcq))}})
		ext := extension(t, msg.RawJSON())
		asked, _ := ext["models_asked"].([]any)
		if msg.Content[0].Text != "The answer is (B)." || string(msg.Model) != "conclave/auto" || len(asked) < 2 || ext["strategy"] == "" || ext["blueprint"] == "" {
			t.Fatalf("message %s", msg.RawJSON())
		}
	})
}

// A direct call streams for real: the SDK reads the first text delta while the upstream still holds the
// rest, whatever the upstream's wire format, and its accumulated message is the answer.
func TestAnthropicSDKStreamsADirectCall(t *testing.T) {
	u := contractUpstreams(t)
	client := anthropicClient(u.testbed, sdkToken)
	const text = "Nitrogen makes up most of the air."
	tests := []struct {
		desc, model string
		upstream    *providertest.Server
		// lead is how many of the upstream's events after its first go before the first word: the
		// rest wait for the test.
		lead int
	}{
		{"from an Anthropic-format upstream", claudeModel, u.anthropic, 3}, // content_block_start, ping, the first word
		{"from an OpenAI-format upstream", directModel, u.local, 1},        // the first word, after the role's chunk
		{"from a Gemini-format upstream", geminiModel, u.gemini, 0},        // the first chunk holds the first word
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			pace := make(chan struct{}, tt.lead)
			for range tt.lead {
				pace <- struct{}{}
			}
			tt.upstream.Queue(providertest.Response{Text: text, Pace: pace})
			finished := tt.upstream.Finished()
			// A guard, not a measure: a stream that never delivers fails the test instead of hanging it.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: anthropic.Model(tt.model), MaxTokens: 256,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(mcq))}})
			defer stream.Close()
			var acc anthropic.Message
			first := ""
			for first == "" && stream.Next() {
				ev := stream.Current()
				if err := acc.Accumulate(ev); err != nil {
					t.Fatal(err)
				}
				if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" {
					first = ev.Delta.Text
				}
			}
			if first == "" || tt.upstream.Finished() != finished {
				t.Fatalf("first delta %q with the upstream's call finished: want a delta before the upstream ends (%v)", first, stream.Err())
			}
			close(pace)
			for stream.Next() {
				if err := acc.Accumulate(stream.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if len(acc.Content) != 1 || acc.Content[0].Text != text || acc.StopReason != anthropic.StopReasonEndTurn || acc.Usage.OutputTokens == 0 || acc.Usage.InputTokens == 0 {
				t.Fatalf("accumulated %s", acc.RawJSON())
			}
			// Gemini streams through its own method; the others say stream: true.
			if last := tt.upstream.Last(); !strings.Contains(last.Path, ":streamGenerateContent") && sent(t, tt.upstream)["stream"] != true {
				t.Fatalf("the upstream was not asked to stream: %s %s", last.Path, last.Body)
			}
			if rec := u.record(acc.ID); rec["answer"] != text {
				t.Fatalf("the record's answer %v", rec["answer"])
			}
		})
	}

	t.Run("a tool use in pieces", func(t *testing.T) {
		u.anthropic.Queue(providertest.Response{Text: "Let me look.", ToolCalls: []providertest.ToolCall{{ID: "toolu_09", Name: "get_weather", Arguments: `{"city":"Paris","unit":"celsius"}`}}})
		stream := client.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: claudeModel, MaxTokens: 256,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))},
			Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather",
				InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}}})
		defer stream.Close()
		var acc anthropic.Message
		for stream.Next() {
			if err := acc.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Content) != 2 || acc.Content[0].Text != "Let me look." || acc.StopReason != anthropic.StopReasonToolUse {
			t.Fatalf("accumulated %s", acc.RawJSON())
		}
		use := acc.Content[1].AsToolUse()
		if use.ID != "toolu_09" || use.Name != "get_weather" || !sameJSON(json.RawMessage(use.Input), map[string]any{"city": "Paris", "unit": "celsius"}) {
			t.Fatalf("tool use %s", acc.Content[1].RawJSON())
		}
	})

	t.Run("a panel streams its answer after consensus", func(t *testing.T) {
		stream := client.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: "conclave/auto", MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(mcq))}})
		defer stream.Close()
		var acc anthropic.Message
		for stream.Next() {
			if err := acc.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Content) != 1 || acc.Content[0].Text != "The answer is (B)." || acc.StopReason != anthropic.StopReasonEndTurn || string(acc.Model) != "conclave/auto" {
			t.Fatalf("accumulated %s", acc.RawJSON())
		}
	})

	for _, e := range []struct{ desc, kind string }{{"overloaded", "overloaded_error"}, {"refused", "invalid_request_error"}} {
		t.Run("a stream "+e.desc+" after it began ends with an error event", func(t *testing.T) {
			u.anthropic.Queue(providertest.Response{Text: "Half an", StreamError: &providertest.StreamError{Type: e.kind, Message: "no more"}})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hung request fails the test, not the suite
			defer cancel()
			stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: claudeModel, MaxTokens: 256,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(mcq))}})
			defer stream.Close()
			for stream.Next() {
			}
			var apiErr *anthropic.Error
			if !errors.As(stream.Err(), &apiErr) || !strings.Contains(apiErr.Message, "after it began") {
				t.Fatalf("the SDK saw %v", stream.Err())
			}
		})
	}
}

// Errors come in Anthropic's shape, with the status and type its clients read.
func TestAnthropicSDKErrors(t *testing.T) {
	u := contractUpstreams(t)
	question := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}
	tests := []struct {
		desc   string
		key    string
		params anthropic.MessageNewParams
		opts   []aoption.RequestOption
		status int
		typ    string
		// message is a substring of the error's message.
		message string
	}{
		{"an unknown model", sdkToken, anthropic.MessageNewParams{Model: "conclave/astrology", MaxTokens: 64, Messages: question}, nil, 404, "not_found_error", "conclave/astrology"},
		{"no max_tokens", sdkToken, anthropic.MessageNewParams{Model: "conclave/auto", Messages: question}, []aoption.RequestOption{aoption.WithJSONDel("max_tokens")},
			400, "invalid_request_error", "max_tokens is required"},
		{"top_k, which Conclave cannot carry", sdkToken, anthropic.MessageNewParams{Model: "conclave/auto", MaxTokens: 64, Messages: question},
			[]aoption.RequestOption{aoption.WithJSONSet("top_k", 40)},
			400, "invalid_request_error", "top_k is not supported"},
		{"a wrong key", "not-the-key-at-all", anthropic.MessageNewParams{Model: "conclave/auto", MaxTokens: 64, Messages: question}, nil, 401, "authentication_error", "API key"},
		{"a wrong bearer token", "", anthropic.MessageNewParams{Model: "conclave/auto", MaxTokens: 64, Messages: question},
			[]aoption.RequestOption{aoption.WithAuthToken("not-the-token")}, 401, "authentication_error", "API key"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			client := anthropicClient(u.testbed, tt.key)
			_, err := client.Messages.New(context.Background(), tt.params, tt.opts...)
			var apiErr *anthropic.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %v is not an API error", err)
			}
			if apiErr.StatusCode != tt.status || string(apiErr.Type()) != tt.typ || !strings.Contains(apiErr.Message, tt.message) {
				t.Fatalf("status %d type %q message %q", apiErr.StatusCode, apiErr.Type(), apiErr.Message)
			}
			meetsAnthropicSpec(t, apiErr.StatusCode, apiErr.RawJSON())
		})
	}

	t.Run("a bearer token is as good as x-api-key", func(t *testing.T) {
		client := anthropic.NewClient(aoption.WithBaseURL(u.srv.URL), aoption.WithAuthToken(sdkToken), aoption.WithMaxRetries(0))
		if _, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{Model: claudeModel, MaxTokens: 64, Messages: question},
			aoption.WithHeaderDel("x-api-key")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an upstream that is overloaded", func(t *testing.T) {
		u.anthropic.Fail(providertest.Response{Status: 529, Body: providertest.AnthropicError("overloaded_error", "Overloaded")})
		defer u.anthropic.Fail()
		client := anthropicClient(u.testbed, sdkToken)
		_, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{Model: claudeModel, MaxTokens: 64, Messages: question})
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode/100 != 5 || apiErr.Type() != "overloaded_error" && apiErr.Type() != "api_error" {
			t.Fatalf("%v", err)
		}
		meetsAnthropicSpec(t, apiErr.StatusCode, apiErr.RawJSON())
	})
}

// Paths under /v1/messages answer in Anthropic's error shape; the rest of /v1 keeps OpenAI's.
func TestMessagesPathsAnswerInAnthropicsShape(t *testing.T) {
	tb := newTestbed(t, withToken)
	tests := []struct {
		desc, method, path, body string
		status                   int
		typ                      string
	}{
		{"a path under /v1/messages", http.MethodPost, "/v1/messages/batches", `{}`, 404, "not_found_error"},
		{"a count_tokens body without messages", http.MethodPost, "/v1/messages/count_tokens", `{"model": "conclave/auto"}`, 400, "invalid_request_error"},
		{"a method /v1/messages does not take", http.MethodGet, "/v1/messages", "", 405, "invalid_request_error"},
		{"a body that is not JSON", http.MethodPost, "/v1/messages", `{"model": `, 400, "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var body struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			resp, raw := tb.do(tt.method, tt.path, tt.body, &body)
			if resp.StatusCode != tt.status || body.Type != "error" || body.Error.Type != tt.typ || body.Error.Message == "" {
				t.Fatalf("%d %s", resp.StatusCode, raw)
			}
		})
	}
	t.Run("the rest of /v1 keeps OpenAI's shape", func(t *testing.T) {
		resp, raw := tb.do(http.MethodPost, "/v1/messagesx", `{}`, nil)
		if resp.StatusCode != 404 || !bytes.Contains(raw, []byte(`"code":"unknown_url"`)) || bytes.Contains(raw, []byte(`"type":"error"`)) {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
	})
}

// messageEventSchemas are the specification's schemas of the events a Messages stream sends.
var messageEventSchemas = map[string]string{
	"message_start": "MessageStartEvent", "content_block_start": "ContentBlockStartEvent", "content_block_delta": "ContentBlockDeltaEvent",
	"content_block_stop": "ContentBlockStopEvent", "message_delta": "MessageDeltaEvent", "message_stop": "MessageStopEvent",
	"ping": "Ping", "error": "ErrorResponse",
}

// messageEventProblems says how one event of a Messages stream breaks its schema, or "".
func messageEventProblems(t *testing.T, name, data string) string {
	t.Helper()
	anthropicSpec(t)
	schema, ok := messageEventSchemas[name]
	if !ok {
		return fmt.Sprintf("an event named %q, which the API does not send", name)
	}
	if ok, errs := messagesSpec.schemas.ValidateSchemaString(messagesSpec.model.Components.Schemas.GetOrZero(schema).Schema(), data); !ok {
		return schema + ":" + specReport(errs)
	}
	return ""
}

// streamEvents posts a Messages body and reads its stream's named events.
func streamEvents(t *testing.T, tb *testbed, body string) [][2]string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+"/v1/messages", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", tb.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	var events [][2]string
	for _, block := range strings.Split(string(raw), "\n\n") {
		var name, data string
		for _, line := range strings.Split(block, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				data = v
			}
		}
		if name != "" {
			events = append(events, [2]string{name, data})
		}
	}
	return events
}

// Every event of a stream meets its schema in the specification, in the order the API sends them.
func TestAnthropicStreamEventsMeetTheirSchemas(t *testing.T) {
	u := contractUpstreams(t)
	tests := []struct {
		desc, body string
		queue      func()
	}{
		{"a direct call's text and tool use, relayed", `{"model": "` + claudeModel + `", "max_tokens": 64, "stream": true,
			"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}`,
			func() {
				u.anthropic.Queue(providertest.Response{Text: "Let me look.", ToolCalls: []providertest.ToolCall{{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}})
			}},
		{"a panel's answer after consensus", `{"model": "conclave/auto", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "` +
			strings.ReplaceAll(mcq, "\n", `\n`) + `"}]}`, func() {}},
		{"a stream that breaks after it began", `{"model": "` + claudeModel + `", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "hi"}]}`,
			func() {
				u.anthropic.Queue(providertest.Response{Text: "Half an", StreamError: &providertest.StreamError{Type: "overloaded_error", Message: "Overloaded"}})
			}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			tt.queue()
			events := streamEvents(t, u.testbed, tt.body)
			var names []string
			for _, ev := range events {
				if p := messageEventProblems(t, ev[0], ev[1]); p != "" {
					t.Fatalf("the %s event breaks %s\n%.2000s", ev[0], p, ev[1])
				}
				if ev[0] != "ping" {
					names = append(names, ev[0])
				}
			}
			if len(names) < 2 || names[0] != "message_start" || names[len(names)-1] != "message_stop" && names[len(names)-1] != "error" {
				t.Fatalf("events %v", names)
			}
		})
	}
	t.Run("a broken event fails the check", func(t *testing.T) {
		if messageEventProblems(t, "content_block_delta", `{"type":"content_block_delta","delta":{"type":"text_delta","text":"Hi"}}`) == "" {
			t.Fatal("a delta without its index passed")
		}
		if messageEventProblems(t, "message_start", `{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[]}}`) == "" {
			t.Fatal("a message without its usage passed")
		}
	})
}

// TestAnthropicSDKCountsTokens: countTokens answers the input tokens the books charge the same prompt
// (a call whose upstream reports no usage is charged the tokenizer's count of its prompt), calls no
// model and charges nothing; its answer meets the specification.
func TestAnthropicSDKCountsTokens(t *testing.T) {
	u := contractUpstreams(t)
	client := anthropicClient(u.testbed, sdkToken)
	ctx := context.Background()
	question := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Which gas makes up most of the air we breathe, and how much of it?"))}
	calls := u.modelCalls()
	count, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: claudeModel, Messages: question})
	if err != nil {
		t.Fatal(err)
	}
	meetsAnthropicSpecAt(t, "/v1/messages/count_tokens", http.StatusOK, count.RawJSON())
	if count.InputTokens <= 0 || u.modelCalls() != calls {
		t.Fatalf("%d input tokens, %v model calls", count.InputTokens, u.modelCalls()-calls)
	}
	longer, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: claudeModel,
		Messages: append(question, anthropic.NewAssistantMessage(anthropic.NewTextBlock("Nitrogen, about 78 percent.")),
			anthropic.NewUserMessage(anthropic.NewTextBlock("And the rest?")))})
	if err != nil || longer.InputTokens <= count.InputTokens {
		t.Fatalf("a longer conversation: %v, %v", longer, err)
	}
	// The same prompt, answered without a usage: charged what count_tokens said.
	u.anthropic.Queue(providertest.Response{Body: providertest.AnthropicMessage(claudeModel, "Nitrogen.", 0, 0)})
	msg, err := client.Messages.New(ctx, anthropic.MessageNewParams{Model: claudeModel, MaxTokens: 64, Messages: question})
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := usageOf(u.record(msg.ID)); in != count.InputTokens {
		t.Fatalf("the call was charged %d input tokens, count_tokens said %d", in, count.InputTokens)
	}
}

// TestAnthropicSDKCarriesCacheControl marks the system prompt, a message's text and a tool for the
// prompt cache with the SDK's cache_control: an Anthropic upstream receives each mark on its block
// (the hour-long one with its ttl), an OpenAI-format upstream none (OpenAI's format caches on its own
// and has no field for them), and the answer's usage reports what the upstream read from its cache.
func TestAnthropicSDKCarriesCacheControl(t *testing.T) {
	u := contractUpstreams(t)
	client := anthropicClient(u.testbed, sdkToken)
	hour := anthropic.CacheControlEphemeralParam{TTL: anthropic.CacheControlEphemeralTTLTTL1h}
	text := anthropic.NewTextBlock("Which gas makes up most of the air?")
	text.OfText.CacheControl = anthropic.NewCacheControlEphemeralParam()
	params := func(model string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 64,
			System:   []anthropic.TextBlockParam{{Text: "You are a chemist with a long manual.", CacheControl: hour}},
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(text)},
			Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather", CacheControl: anthropic.NewCacheControlEphemeralParam(),
				InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}}}
	}
	u.anthropic.Queue(providertest.Response{Text: "Nitrogen.", InputTokens: 3500, CacheRead: 2000, CacheWrite: 1000, OutputTokens: 9})
	msg, err := client.Messages.New(context.Background(), params(claudeModel))
	if err != nil {
		t.Fatal(err)
	}
	meetsAnthropicSpec(t, http.StatusOK, msg.RawJSON())
	body := sent(t, u.anthropic)
	ephemeral, hourLong := map[string]any{"type": "ephemeral"}, map[string]any{"type": "ephemeral", "ttl": "1h"}
	if !sameJSON(body["system"], []any{map[string]any{"type": "text", "text": "You are a chemist with a long manual.", "cache_control": hourLong}}) {
		t.Fatalf("the upstream's system %v", body["system"])
	}
	turns, _ := body["messages"].([]any)
	if len(turns) != 1 || !sameJSON(turns[0], map[string]any{"role": "user", "content": []any{map[string]any{"type": "text",
		"text": "Which gas makes up most of the air?", "cache_control": ephemeral}}}) {
		t.Fatalf("the upstream's messages %v", turns)
	}
	if tools, _ := body["tools"].([]any); len(tools) != 1 || !sameJSON(tools[0].(map[string]any)["cache_control"], ephemeral) {
		t.Fatalf("the upstream's tools %v", body["tools"])
	}
	if in := msg.Usage; in.InputTokens != 500 || in.CacheReadInputTokens != 2000 || in.CacheCreationInputTokens != 1000 {
		t.Fatalf("the answer's usage %+v", in)
	}
	if _, err := client.Messages.New(context.Background(), params(directModel)); err != nil {
		t.Fatal(err)
	}
	if raw := string(u.local.Last().Body); strings.Contains(raw, "cache_control") {
		t.Fatalf("an OpenAI-format upstream received cache_control: %s", raw)
	}
}
