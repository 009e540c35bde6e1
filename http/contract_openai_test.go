// The fuzzing build (make fuzz, -tags fuzz) leaves this file out, as openai_test.go.

//go:build !fuzz

package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/pb33f/jsonschema/v6"
)

// The contract of the OpenAI surface, with OpenAI's own clients as callers (openai-go here, the Node
// SDK in contract_node_test.go), unchanged but for their base URL, against Conclave over a real
// provider whose upstream speaks OpenAI's wire format on loopback. Assertions are on what the upstream
// received and on what the client got.

// pixelPNG is a whole PNG image of one pixel, as a data URI carries it.
const pixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

// directModel is the upstream model a direct call names.
const directModel = "qwen-a"

// contractUpstreams is Conclave over the loopback upstreams, with the SDK's token.
func contractUpstreams(t *testing.T) *upstreams {
	return newUpstreams(t, func(c *config.Config) { c.APIToken = secret.String(sdkToken) })
}

// sent decodes the body of the last call an upstream received.
func sent(t *testing.T, s *providertest.Server) map[string]any {
	t.Helper()
	last := s.Last()
	if last.Body == nil {
		t.Fatal("the upstream received no call")
	}
	var body map[string]any
	if err := json.Unmarshal(last.Body, &body); err != nil {
		t.Fatalf("the upstream received %s: %v", last.Body, err)
	}
	return body
}

// toolCallCompletion is an OpenAI answer that calls a function.
func toolCallCompletion(model, id, name, args string) string {
	q := func(s string) string { raw, _ := json.Marshal(s); return string(raw) }
	return fmt.Sprintf(`{"id":"chatcmpl-2","object":"chat.completion","created":1767225600,"model":%s,`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":%s,"type":"function","function":{"name":%s,"arguments":%s}}]},`+
		`"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}}`, q(model), q(id), q(name), q(args))
}

// weatherSchema is the JSON schema of a structured answer.
var weatherSchema = map[string]any{
	"type": "object", "additionalProperties": false, "required": []any{"city", "temp_c"},
	"properties": map[string]any{"city": map[string]any{"type": "string"}, "temp_c": map[string]any{"type": "number"}},
}

// validates checks a JSON text against a schema.
func validates(t *testing.T, schema map[string]any, text string) {
	t.Helper()
	c := jsonschema.NewCompiler()
	if err := c.AddResource("answer.json", schema); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("answer.json")
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the answer %q is no JSON: %v", text, err)
	}
	if err := sch.Validate(v); err != nil {
		t.Fatalf("the answer %q does not match its schema: %v", text, err)
	}
}

// sameJSON compares two values as JSON.
func sameJSON(a, b any) bool {
	ra, _ := json.Marshal(a)
	rb, _ := json.Marshal(b)
	var va, vb any
	_ = json.Unmarshal(ra, &va)
	_ = json.Unmarshal(rb, &vb)
	return reflect.DeepEqual(va, vb)
}

func TestOpenAIGoContract(t *testing.T) {
	u := contractUpstreams(t)
	client := sdkClient(u.testbed, sdkToken)
	ctx := context.Background()
	ask := func(t *testing.T, p openai.ChatCompletionNewParams) *openai.ChatCompletion {
		t.Helper()
		resp, err := client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		meetsSpec(t, "/chat/completions", http.StatusOK, resp.RawJSON())
		return resp
	}

	t.Run("temperature and max_tokens reach the upstream of a direct call", func(t *testing.T) {
		resp := ask(t, openai.ChatCompletionNewParams{Model: directModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(mcq)},
			Temperature: openai.Float(0.1), MaxTokens: openai.Int(5)})
		body := sent(t, u.local)
		if body["temperature"] != 0.1 || body["max_tokens"] != 5.0 || body["model"] != directModel {
			t.Fatalf("the upstream received %v", body)
		}
		if ext := extension(t, resp.RawJSON()); !sameJSON(ext["dropped_parameters"], []string{}) || !sameJSON(ext["models_asked"], []string{directModel}) {
			t.Fatalf("extension %v", ext)
		}
	})

	t.Run("no output limit is sent for a caller who gave none", func(t *testing.T) {
		ask(t, openai.ChatCompletionNewParams{Model: directModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(mcq)}})
		body := sent(t, u.local)
		if _, has := body["max_tokens"]; has {
			t.Fatalf("the upstream received max_tokens %v", body["max_tokens"])
		}
		if _, has := body["max_completion_tokens"]; has {
			t.Fatalf("the upstream received max_completion_tokens %v", body["max_completion_tokens"])
		}
		// Anthropic's Messages API requires one: the model's max_output.
		const claude = "claude-3-5-haiku-20241022"
		m, ok := u.engine.Catalog().Get(claude)
		if !ok || m.MaxOutputTokens == 0 {
			t.Fatalf("the catalog has no max_output for %s", claude)
		}
		ask(t, openai.ChatCompletionNewParams{Model: claude, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(mcq)}})
		if got := sent(t, u.anthropic)["max_tokens"]; got != float64(m.MaxOutputTokens) {
			t.Fatalf("Anthropic received max_tokens %v, want the model's max_output %d", got, m.MaxOutputTokens)
		}
	})

	t.Run("top_p and stop reach the upstream of a direct call", func(t *testing.T) {
		ask(t, openai.ChatCompletionNewParams{Model: directModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(mcq)},
			TopP: openai.Float(0.5), Stop: openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"END", "STOP"}}, Seed: openai.Int(7)})
		body := sent(t, u.local)
		if body["top_p"] != 0.5 || !sameJSON(body["stop"], []string{"END", "STOP"}) || body["seed"] != 7.0 {
			t.Fatalf("the upstream received %v", body)
		}
	})

	t.Run("a two-turn tool conversation round-trips", func(t *testing.T) {
		tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather", Description: openai.String("The weather of a city"),
			Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
		})}
		msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")}
		u.local.Queue(providertest.Response{Body: toolCallCompletion(directModel, "call_7", "get_weather", `{"city":"Paris"}`)})
		first := ask(t, openai.ChatCompletionNewParams{Model: directModel, Messages: msgs, Tools: tools})
		if body := sent(t, u.local); !sameJSON(body["tools"], []any{map[string]any{"type": "function", "function": map[string]any{
			"name": "get_weather", "description": "The weather of a city", "parameters": map[string]any{"type": "object",
				"properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}}) {
			t.Fatalf("the upstream received tools %v", body["tools"])
		}
		choice := first.Choices[0]
		if choice.FinishReason != "tool_calls" || len(choice.Message.ToolCalls) != 1 || choice.Message.Content != "" {
			t.Fatalf("first answer %s", first.RawJSON())
		}
		if call := choice.Message.ToolCalls[0]; call.ID != "call_7" || call.Function.Name != "get_weather" || call.Function.Arguments != `{"city":"Paris"}` {
			t.Fatalf("tool call %+v", call)
		}
		if !strings.Contains(first.RawJSON(), `"content":null`) {
			t.Fatalf("content of a tool call alone is not null: %s", first.RawJSON())
		}

		msgs = append(msgs, choice.Message.ToParam(), openai.ToolMessage("21 C and sunny", "call_7"))
		u.local.Queue(providertest.Response{Body: providertest.ChatCompletion(directModel, "It is 21 C and sunny in Paris.", 30, 9)})
		second := ask(t, openai.ChatCompletionNewParams{Model: directModel, Messages: msgs, Tools: tools})
		if second.Choices[0].Message.Content != "It is 21 C and sunny in Paris." || second.Choices[0].FinishReason != "stop" {
			t.Fatalf("second answer %s", second.RawJSON())
		}
		turns, _ := sent(t, u.local)["messages"].([]any)
		if len(turns) != 3 {
			t.Fatalf("the upstream received %d turns: %v", len(turns), turns)
		}
		assistant, _ := turns[1].(map[string]any)
		if assistant["role"] != "assistant" || !sameJSON(assistant["tool_calls"], []any{map[string]any{"id": "call_7", "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}) {
			t.Fatalf("the assistant's turn reached the upstream as %v", assistant)
		}
		if tool, _ := turns[2].(map[string]any); tool["role"] != "tool" || tool["tool_call_id"] != "call_7" || tool["content"] != "21 C and sunny" {
			t.Fatalf("the tool's turn reached the upstream as %v", tool)
		}
	})

	t.Run("a JSON schema answer validates", func(t *testing.T) {
		u.local.Queue(providertest.Response{Body: providertest.ChatCompletion(directModel, `{"city": "Paris", "temp_c": 21.5}`, 20, 9)})
		resp := ask(t, openai.ChatCompletionNewParams{Model: directModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris as JSON")},
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "weather", Schema: weatherSchema, Strict: openai.Bool(true)}}}})
		validates(t, weatherSchema, resp.Choices[0].Message.Content)
		format, _ := sent(t, u.local)["response_format"].(map[string]any)
		js, _ := format["json_schema"].(map[string]any)
		if format["type"] != "json_schema" || js["name"] != "weather" || js["strict"] != true || !sameJSON(js["schema"], weatherSchema) {
			t.Fatalf("the upstream received response_format %v", format)
		}
	})

	t.Run("an image part arrives", func(t *testing.T) {
		ask(t, openai.ChatCompletionNewParams{Model: directModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
			openai.TextContentPart("What is in this image?"),
			openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64," + pixelPNG, Detail: "low"}),
		})}})
		turns, _ := sent(t, u.local)["messages"].([]any)
		if len(turns) != 1 || !sameJSON(turns[0], map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "What is in this image?"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + pixelPNG, "detail": "low"}},
		}}) {
			t.Fatalf("the upstream received %v", turns)
		}
	})

	t.Run("a parameter the provider cannot carry is named", func(t *testing.T) {
		resp := ask(t, openai.ChatCompletionNewParams{Model: "claude-3-5-haiku-20241022", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(mcq)},
			Seed: openai.Int(7), Temperature: openai.Float(0.2)})
		if ext := extension(t, resp.RawJSON()); !sameJSON(ext["dropped_parameters"], []string{"seed"}) {
			t.Fatalf("extension %v", ext)
		}
		if _, has := sent(t, u.anthropic)["seed"]; has {
			t.Fatal("the seed reached Anthropic")
		}
		if rec := u.record(resp.ID); !sameJSON(rec["dropped_parameters"], []string{"seed"}) {
			t.Fatalf("record names %v", rec["dropped_parameters"])
		}
	})
}

// /route-thompson takes the same parameters, under parameters, and names what was dropped.
func TestRouteParametersReachTheUpstream(t *testing.T) {
	u := newUpstreams(t, nil)
	var out struct {
		Answer    string   `json:"answer"`
		Dropped   []string `json:"dropped_parameters"`
		Responses []struct {
			Model string `json:"model"`
		} `json:"responses"`
	}
	resp, raw := u.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "category": "general", "models": []string{directModel}, "min_responses": 1,
		"workers": 1, "parameters": map[string]any{"temperature": 0.1, "max_tokens": 5}}, &out)
	if resp.StatusCode != http.StatusOK || out.Answer == "" || out.Dropped == nil || len(out.Dropped) != 0 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	if body := sent(t, u.local); body["temperature"] != 0.1 || body["max_tokens"] != 5.0 {
		t.Fatalf("the upstream received %v", body)
	}
	if !slices.ContainsFunc(out.Responses, func(r struct {
		Model string `json:"model"`
	}) bool {
		return r.Model == directModel
	}) {
		t.Fatalf("responses %s", raw)
	}
}

// A direct call with stream: true streams for real: openai-go reads the first chunk while the upstream
// still holds the rest, tool calls arrive in pieces it puts together, and the record holds the whole
// answer.
func TestOpenAIGoStreamsADirectCall(t *testing.T) {
	u := contractUpstreams(t)
	client := sdkClient(u.testbed, sdkToken)
	params := openai.ChatCompletionNewParams{Model: directModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(mcq)},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}

	for _, tc := range []struct {
		desc     string
		upstream *providertest.Server
		model    string
		// ahead is how many of the upstream's events go before its first word's
		ahead int
	}{
		{"OpenAI's wire format", u.local, directModel, 1},
		{"Anthropic's wire format", u.anthropic, "claude-3-5-haiku-20241022", 3},
		{"Gemini's wire format", u.gemini, "gemini-2.0-flash", 0},
	} {
		t.Run("text in "+tc.desc+", the first chunk before the upstream ends", func(t *testing.T) {
			streamText(t, u, client, tc.upstream, tc.model, tc.ahead)
		})
	}

	t.Run("a tool call in pieces", func(t *testing.T) {
		u.local.Queue(providertest.Response{ToolCalls: []providertest.ToolCall{{ID: "call_9", Name: "get_weather", Arguments: `{"city":"Paris"}`}}})
		p := params
		p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})}
		stream := client.Chat.Completions.NewStreaming(context.Background(), p)
		defer stream.Close()
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			chunkMeetsSpec(t, stream.Current().RawJSON())
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		calls := acc.Choices[0].Message.ToolCalls
		if len(calls) != 1 || calls[0].ID != "call_9" || calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments != `{"city":"Paris"}` ||
			acc.Choices[0].FinishReason != "tool_calls" {
			t.Fatalf("accumulated %+v, finish %q", calls, acc.Choices[0].FinishReason)
		}
	})
}

// streamText streams a direct call of model through upstream and checks that the first word arrives
// while the upstream holds the rest (ahead events go before the first word's), that the pieces make the
// answer, and that the record holds it.
func streamText(t *testing.T, u *upstreams, client openai.Client, upstream *providertest.Server, model string, ahead int) {
	t.Helper()
	const answer = "Nitrogen makes up most of the air."
	pace := make(chan struct{}, ahead+1)
	for range ahead {
		pace <- struct{}{}
	}
	finished := upstream.Finished()
	upstream.Queue(providertest.Response{Text: answer, Pace: pace})
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: model,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(mcq)},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	first := ""
	for first == "" && stream.Next() {
		chunkMeetsSpec(t, stream.Current().RawJSON())
		acc.AddChunk(stream.Current())
		if len(stream.Current().Choices) > 0 {
			first = stream.Current().Choices[0].Delta.Content
		}
	}
	if first == "" || upstream.Finished() != finished {
		t.Fatalf("first piece %q, %d upstream calls finished meanwhile: want a piece before the upstream ends", first, upstream.Finished()-finished)
	}
	close(pace)
	for stream.Next() {
		chunkMeetsSpec(t, stream.Current().RawJSON())
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; got != answer || acc.Usage.TotalTokens == 0 {
		t.Fatalf("accumulated %q, usage %+v", got, acc.Usage)
	}
	if rec := u.record(acc.ID); rec["answer"] != answer {
		t.Fatalf("the record's answer %v", rec["answer"])
	}
}

// TestOpenAIGoAsksForLogprobs: logprobs and top_logprobs reach an OpenAI-format upstream and its log
// probabilities come back on the answer (checked against the specification by ask's check); a model
// whose provider's format has no log probabilities is refused, naming them, and nothing is sent.
func TestOpenAIGoAsksForLogprobs(t *testing.T) {
	u := contractUpstreams(t)
	client := sdkClient(u.testbed, sdkToken)
	const logprobs = `{"content":[{"token":"N","logprob":-0.01,"bytes":[78],"top_logprobs":[{"token":"N","logprob":-0.01,"bytes":[78]},` +
		`{"token":"O","logprob":-4.6,"bytes":[79]}]}],"refusal":null}`
	u.local.Queue(providertest.Response{Body: `{"id":"chatcmpl-9","object":"chat.completion","created":1767225600,"model":"qwen-a",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"N","refusal":null},"logprobs":` + logprobs + `,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`})
	params := func(model string) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(mcq)},
			Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2)}
	}
	resp, err := client.Chat.Completions.New(context.Background(), params(directModel))
	if err != nil {
		t.Fatal(err)
	}
	meetsSpec(t, "/chat/completions", http.StatusOK, resp.RawJSON())
	if body := sent(t, u.local); body["logprobs"] != true || body["top_logprobs"] != 2.0 {
		t.Fatalf("the upstream received %v", body)
	}
	lp := resp.Choices[0].Logprobs
	if len(lp.Content) != 1 || lp.Content[0].Token != "N" || len(lp.Content[0].TopLogprobs) != 2 || lp.Content[0].TopLogprobs[1].Token != "O" {
		t.Fatalf("the answer's logprobs %s", resp.RawJSON())
	}
	calls := u.modelCalls()
	_, err = client.Chat.Completions.New(context.Background(), params("claude-3-5-haiku-20241022"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode/100 != 4 || !strings.Contains(apiErr.RawJSON(), "logprobs") || u.modelCalls() != calls {
		t.Fatalf("logprobs of a model whose format has none: %v %s", err, apiErr.RawJSON())
	}
	if resp, raw := u.do(http.MethodPost, "/v1/chat/completions", map[string]any{"model": directModel, "top_logprobs": 2,
		"messages": []map[string]any{{"role": "user", "content": mcq}}}, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), "logprobs: true") {
		t.Fatalf("top_logprobs without logprobs: %d %s", resp.StatusCode, raw)
	}
}
