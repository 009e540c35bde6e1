// The fuzzing build (make fuzz, -tags fuzz) leaves this file out: the libraries it checks against are
// large, and the fuzzer would instrument them on every cold build.

//go:build !fuzz

package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

const sdkToken = "sdk-token-0123456789"

// sdkClient is OpenAI's own Go client, unchanged but for its base URL (and no retries, so a test sees
// each answer).
func sdkClient(tb *testbed, token string) openai.Client {
	return openai.NewClient(oaoption.WithBaseURL(tb.srv.URL+"/v1/"), oaoption.WithAPIKey(token), oaoption.WithMaxRetries(0))
}

func withToken(c *config.Config) { c.APIToken = secret.String(sdkToken) }

// extension reads Conclave's extension object from a completion's raw JSON.
func extension(t *testing.T, raw string) map[string]any {
	t.Helper()
	var body struct {
		Conclave map[string]any `json:"conclave"`
	}
	if err := json.Unmarshal([]byte(raw), &body); err != nil || body.Conclave == nil {
		t.Fatalf("no conclave extension in %s (%v)", raw, err)
	}
	return body.Conclave
}

func TestOpenAISDKChatCompletions(t *testing.T) {
	tb := newTestbed(t, withToken)
	client := sdkClient(tb, sdkToken)
	tests := []struct {
		desc, model string
		// asked is how many models the pipeline must have called, 0 for any number above one.
		asked     int
		blueprint string
	}{
		{"classified, then the whole pipeline", "conclave/auto", 0, ""},
		{"a named blueprint", "conclave/general", 0, "general"},
		{"one catalog model: a plain gateway call", groqModels[0], 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model:    tt.model,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Answer with one letter."), openai.UserMessage(mcq)},
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" || resp.Choices[0].FinishReason != "stop" {
				t.Fatalf("choices %+v", resp.Choices)
			}
			if resp.Model != tt.model || resp.Object != "chat.completion" {
				t.Fatalf("model %q object %q", resp.Model, resp.Object)
			}
			// The id is the request id: the record is there, with the same answer and usage.
			rec := tb.record(resp.ID)
			if rec["answer"] != resp.Choices[0].Message.Content {
				t.Fatalf("record answer %q, completion %q", rec["answer"], resp.Choices[0].Message.Content)
			}
			in, out := usageOf(rec)
			if resp.Usage.PromptTokens != in || resp.Usage.CompletionTokens != out || resp.Usage.TotalTokens != in+out || in == 0 {
				t.Fatalf("usage %+v, record %d in %d out", resp.Usage, in, out)
			}
			ext := extension(t, resp.RawJSON())
			asked := len(ext["models_asked"].([]any))
			if (tt.asked == 0 && asked < 2) || (tt.asked > 0 && asked != tt.asked) {
				t.Fatalf("%d models asked: %v", asked, ext)
			}
			if tt.asked == 1 && ext["models_asked"].([]any)[0] != tt.model {
				t.Fatalf("the gateway call went to %v", ext["models_asked"])
			}
			if tt.blueprint != "" && ext["blueprint"] != tt.blueprint {
				t.Fatalf("blueprint %v, want %s", ext["blueprint"], tt.blueprint)
			}
			for _, k := range []string{"category", "agreement", "degraded", "cost_usd"} {
				if _, ok := ext[k]; !ok {
					t.Fatalf("extension without %s: %v", k, ext)
				}
			}
			// The whole conversation reached the models.
			if task, _ := rec["task"].(string); !strings.Contains(task, "System: Answer with one letter.") || !strings.Contains(task, "User: "+mcq) {
				t.Fatalf("task %q", task)
			}
		})
	}
}

func usageOf(rec map[string]any) (in, out int64) {
	u, _ := rec["usage"].(map[string]any)
	f := func(k string) int64 {
		switch v := u[k].(type) {
		case float64:
			return int64(v)
		case string:
			var n int64
			_ = json.Unmarshal([]byte(v), &n)
			return n
		}
		return 0
	}
	return f("input_tokens"), f("output_tokens")
}

func TestOpenAISDKStreams(t *testing.T) {
	tb := newTestbed(t, withToken)
	client := sdkClient(tb, sdkToken)
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "conclave/general",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Propose how the billing service should cache exchange rates, with the trade-offs of each option.")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if chunks < 3 || len(acc.Choices) != 1 {
		t.Fatalf("%d chunks, choices %+v", chunks, acc.Choices)
	}
	rec := tb.record(acc.ID)
	if got := acc.Choices[0].Message.Content; got != rec["answer"] || got == "" {
		t.Fatalf("streamed %q, record %q", got, rec["answer"])
	}
	if in, out := usageOf(rec); acc.Usage.TotalTokens != in+out || in == 0 {
		t.Fatalf("streamed usage %+v, record %d + %d", acc.Usage, in, out)
	}
}

func TestOpenAIErrorsInOpenAIsShape(t *testing.T) {
	tb := newTestbed(t, withToken)
	tests := []struct {
		desc   string
		token  string
		params openai.ChatCompletionNewParams
		status int
		typ    string
		param  string
	}{
		{"unknown model", sdkToken, openai.ChatCompletionNewParams{Model: "conclave/astrology", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}, 404, "not_found_error", "model"},
		{"more than one choice", sdkToken, openai.ChatCompletionNewParams{Model: "conclave/auto", N: openai.Int(2), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}, 400, "invalid_request_error", "n"},
		{"no user message", sdkToken, openai.ChatCompletionNewParams{Model: "conclave/auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief")}}, 400, "invalid_request_error", "messages"},
		{"wrong key", "not-the-token-at-all", openai.ChatCompletionNewParams{Model: "conclave/auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}, 401, "authentication_error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			client := sdkClient(tb, tt.token)
			_, err := client.Chat.Completions.New(context.Background(), tt.params)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %v is not an API error", err)
			}
			if apiErr.StatusCode != tt.status || apiErr.Type != tt.typ || apiErr.Param != tt.param || apiErr.Message == "" {
				t.Fatalf("status %d type %q param %q message %q", apiErr.StatusCode, apiErr.Type, apiErr.Param, apiErr.Message)
			}
		})
	}
	t.Run("models", func(t *testing.T) {
		client := sdkClient(tb, sdkToken)
		page, err := client.Models.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, m := range page.Data {
			ids[m.ID] = true
		}
		for _, want := range []string{"conclave/auto", "conclave/general", "conclave/security_audit", groqModels[0]} {
			if !ids[want] {
				t.Fatalf("GET /v1/models lacks %s (%d models)", want, len(ids))
			}
		}
	})
}

// A stream that has begun (keep-alives went out while the models were asked) and then fails ends with
// an error event, never with a clean, empty end of stream.
func TestOpenAIStreamFailingAfterItBeganEndsWithAnError(t *testing.T) {
	tb := newTestbed(t, func(c *config.Config) { c.Retry = config.Retry{Scale: 0.001, Rounds: 1} }, quickBlueprints(t, 0.3))
	for _, p := range allProviders {
		tb.engine.Sim.SetFault(p, providers.Fault{TimeoutRate: 1})
	}
	body := `{"model": "conclave/quick", "stream": true, "messages": [{"role": "user", "content": "` + mcq[:20] + `"}]}`
	req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q: the keep-alives should have begun the stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() != "" {
			lines = append(lines, sc.Text())
		}
	}
	if len(lines) < 2 || lines[0] != ": keep-alive" {
		t.Fatalf("stream %q", lines)
	}
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, `data: {"error":`) || strings.Contains(strings.Join(lines, "\n"), "[DONE]") {
		t.Fatalf("the stream ended with %q", last)
	}
	// The SDK sees it as an error too.
	client := sdkClient(tb, "")
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "conclave/quick", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(mcq[:20])},
	})
	for stream.Next() {
	}
	var streamErr *ssestream.StreamError
	if !errors.As(stream.Err(), &streamErr) {
		t.Fatalf("the SDK saw %v", stream.Err())
	}
}

func TestV1ModelAndUnknownPaths(t *testing.T) {
	tb := newTestbed(t, withToken)
	client := sdkClient(tb, sdkToken)
	t.Run("a model by id", func(t *testing.T) {
		for _, id := range []string{"conclave/auto", "conclave/security_audit", groqModels[0]} {
			m, err := client.Models.Get(context.Background(), id)
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if m.ID != id || m.Object != "model" || m.OwnedBy == "" {
				t.Fatalf("%s: %+v", id, m)
			}
		}
	})
	tests := []struct {
		desc, method, path string
		status             int
		typ, code          string
	}{
		{"an unknown model", http.MethodGet, "/v1/models/conclave/astrology", 404, "not_found_error", "model_not_found"},
		{"an unknown path", http.MethodPost, "/v1/assistants", 404, "not_found_error", "unknown_url"},
		{"the bare /v1", http.MethodGet, "/v1", 404, "not_found_error", "unknown_url"},
		{"a method the path does not take", http.MethodGet, "/v1/chat/completions", 405, "invalid_request_error", "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var body struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			resp, raw := tb.do(tt.method, tt.path, nil, &body)
			if resp.StatusCode != tt.status || body.Error.Type != tt.typ || body.Error.Code == nil || *body.Error.Code != tt.code || body.Error.Message == "" {
				t.Fatalf("%d %s", resp.StatusCode, raw)
			}
		})
	}
	t.Run("the SDK reads the type of an unknown path", func(t *testing.T) {
		err := client.Get(context.Background(), "no-such-endpoint", nil, nil)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Type != "not_found_error" || apiErr.Code != "unknown_url" {
			t.Fatalf("%v", err)
		}
	})
	t.Run("Conclave's own paths keep Conclave's shape", func(t *testing.T) {
		var body errorResponse
		resp, raw := tb.do(http.MethodGet, "/nowhere", nil, &body)
		if resp.StatusCode != 404 || body.Error.Code != "not_found" {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
	})
}
