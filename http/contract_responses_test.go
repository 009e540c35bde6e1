// The fuzzing build (make fuzz, -tags fuzz) leaves this file out, as openai_test.go.

//go:build !fuzz

package httpapi_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// The Responses API's contract, with openai-go's Responses client as the caller, unchanged but for its
// base URL, against Conclave over the loopback upstreams. Assertions are on what the upstream received,
// on what the client got, and on the answers' shapes against OpenAI's specification.

// requestIDOf is the request id a response's id carries (its record's id).
func requestIDOf(t *testing.T, id string) string {
	t.Helper()
	rid, ok := strings.CutPrefix(id, "resp_")
	if !ok {
		t.Fatalf("response id %q", id)
	}
	return rid
}

var weatherFunction = responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Description: openai.String("The weather of a city"),
	Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}

func TestOpenAIGoResponses(t *testing.T) {
	u := contractUpstreams(t)
	client := sdkClient(u.testbed, sdkToken)
	ctx := context.Background()
	ask := func(t *testing.T, p responses.ResponseNewParams) *responses.Response {
		t.Helper()
		resp, err := client.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		meetsSpec(t, "/responses", http.StatusOK, resp.RawJSON())
		return resp
	}

	t.Run("an answer: instructions and parameters reach the upstream", func(t *testing.T) {
		resp := ask(t, responses.ResponseNewParams{Model: directModel, Instructions: openai.String("Be brief."),
			Input:       responses.ResponseNewParamsInputUnion{OfString: openai.String(mcq)},
			Temperature: openai.Float(0.1), TopP: openai.Float(0.5), MaxOutputTokens: openai.Int(50), SafetyIdentifier: openai.String("user-hash-1")})
		body := sent(t, u.local)
		if body["temperature"] != 0.1 || body["top_p"] != 0.5 || body["max_tokens"] != 50.0 || body["user"] != "user-hash-1" || body["model"] != directModel {
			t.Fatalf("the upstream received %v", body)
		}
		if !sameJSON(body["messages"], []any{map[string]any{"role": "system", "content": "Be brief."}, map[string]any{"role": "user", "content": mcq}}) {
			t.Fatalf("the upstream received messages %v", body["messages"])
		}
		if resp.OutputText() != "The answer is (B)." || resp.Status != responses.ResponseStatusCompleted || resp.Usage.TotalTokens != 19 ||
			resp.Model != directModel || resp.Temperature != 0.1 || resp.Instructions.OfString != "Be brief." {
			t.Fatalf("response %s", resp.RawJSON())
		}
		if ext := extension(t, resp.RawJSON()); !sameJSON(ext["models_asked"], []string{directModel}) {
			t.Fatalf("extension %v", ext)
		}
		if rec := u.record(requestIDOf(t, resp.ID)); rec["answer"] != "The answer is (B)." {
			t.Fatalf("the record's answer %v", rec["answer"])
		}
	})

	t.Run("a structured answer validates", func(t *testing.T) {
		u.local.Queue(providertest.Response{Body: providertest.ChatCompletion(directModel, `{"city": "Paris", "temp_c": 21.5}`, 20, 9)})
		resp := ask(t, responses.ResponseNewParams{Model: directModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris as JSON")},
			Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{
				Name: "weather", Schema: weatherSchema, Strict: openai.Bool(true)}}}})
		validates(t, weatherSchema, resp.OutputText())
		format, _ := sent(t, u.local)["response_format"].(map[string]any)
		js, _ := format["json_schema"].(map[string]any)
		if format["type"] != "json_schema" || js["name"] != "weather" || js["strict"] != true || !sameJSON(js["schema"], weatherSchema) {
			t.Fatalf("the upstream received response_format %v", format)
		}
		if resp.Text.Format.Type != "json_schema" || resp.Text.Format.Name != "weather" {
			t.Fatalf("the format echoed %s", resp.Text.RawJSON())
		}
	})

	t.Run("a two-turn function call conversation", func(t *testing.T) {
		tools := []responses.ToolUnionParam{weatherFunction}
		question := responses.ResponseInputItemParamOfMessage("What is the weather in Paris?", responses.EasyInputMessageRoleUser)
		u.local.Queue(providertest.Response{Body: toolCallCompletion(directModel, "call_7", "get_weather", `{"city":"Paris"}`)})
		first := ask(t, responses.ResponseNewParams{Model: directModel, Tools: tools,
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{question}}})
		if len(first.Output) != 1 || first.Output[0].Type != "function_call" {
			t.Fatalf("first answer %s", first.RawJSON())
		}
		call := first.Output[0].AsFunctionCall()
		if call.CallID != "call_7" || call.Name != "get_weather" || call.Arguments != `{"city":"Paris"}` {
			t.Fatalf("function call %+v", call)
		}
		if tools, _ := sent(t, u.local)["tools"].([]any); len(tools) != 1 || !sameJSON(tools[0].(map[string]any)["function"].(map[string]any)["name"], "get_weather") {
			t.Fatalf("the upstream received tools %v", tools)
		}

		// The conversation goes back whole: the question, the call as it came, the function's output.
		callParam := call.ToParam()
		output := responses.ResponseInputItemParamOfFunctionCallOutput("21 C and sunny")
		output.OfFunctionCallOutput.CallID = openai.String(call.CallID)
		u.local.Queue(providertest.Response{Body: providertest.ChatCompletion(directModel, "It is 21 C and sunny in Paris.", 30, 9)})
		second := ask(t, responses.ResponseNewParams{Model: directModel, Tools: tools, Input: responses.ResponseNewParamsInputUnion{
			OfInputItemList: responses.ResponseInputParam{question, {OfFunctionCall: &callParam}, output}}})
		if second.OutputText() != "It is 21 C and sunny in Paris." {
			t.Fatalf("second answer %s", second.RawJSON())
		}
		turns, _ := sent(t, u.local)["messages"].([]any)
		if len(turns) != 3 {
			t.Fatalf("the upstream received %d turns: %v", len(turns), turns)
		}
		if assistant, _ := turns[1].(map[string]any); assistant["role"] != "assistant" || !sameJSON(assistant["tool_calls"], []any{map[string]any{"id": "call_7",
			"type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}) {
			t.Fatalf("the assistant's turn reached the upstream as %v", assistant)
		}
		if tool, _ := turns[2].(map[string]any); tool["role"] != "tool" || tool["tool_call_id"] != "call_7" || tool["content"] != "21 C and sunny" {
			t.Fatalf("the function's output reached the upstream as %v", tool)
		}
	})

	t.Run("errors in OpenAI's shape", func(t *testing.T) {
		tests := []struct {
			desc   string
			params responses.ResponseNewParams
			status int
			typ    string
			param  string
		}{
			{"an unknown model", responses.ResponseNewParams{Model: "conclave/astrology", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}},
				404, "not_found_error", "model"},
			{"a stored response to continue", responses.ResponseNewParams{Model: directModel, PreviousResponseID: openai.String("resp_1"),
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("and then?")}}, 400, "invalid_request_error", "previous_response_id"},
			{"a built-in tool", responses.ResponseNewParams{Model: directModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("news?")},
				Tools: []responses.ToolUnionParam{{OfWebSearch: &responses.WebSearchToolParam{Type: responses.WebSearchToolTypeWebSearch}}}}, 400, "invalid_request_error", "tools[0].type"},
		}
		for _, tt := range tests {
			t.Run(tt.desc, func(t *testing.T) {
				_, err := client.Responses.New(ctx, tt.params)
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.status || apiErr.Type != tt.typ || apiErr.Param != tt.param {
					t.Fatalf("error %v", err)
				}
			})
		}
	})
	u.assertNoKey(t)
}

// A direct call streams for real: openai-go reads the first text delta while the upstream holds the
// rest, the deltas add up to the answer, and every event meets its schema in the specification. A
// panel streams its answer after consensus, in the same events.
func TestOpenAIGoStreamsResponses(t *testing.T) {
	u := contractUpstreams(t)
	client := sdkClient(u.testbed, sdkToken)
	collect := func(t *testing.T, stream interface {
		Next() bool
		Current() responses.ResponseStreamEventUnion
		Err() error
	}, more func(string)) (text string, done *responses.Response) {
		t.Helper()
		var raws, types []string
		for stream.Next() {
			ev := stream.Current()
			raws, types = append(raws, ev.RawJSON()), append(types, ev.Type)
			switch ev.Type {
			case "response.output_text.delta":
				if more != nil && text == "" {
					more(ev.Delta)
				}
				text += ev.Delta
			case "response.completed":
				r := ev.Response
				done = &r
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		for i, raw := range raws {
			eventMeetsSpec(t, types[i], raw)
		}
		if done == nil {
			t.Fatalf("no response.completed among %v", types)
		}
		return text, done
	}

	t.Run("a direct call: the first delta before the upstream ends", func(t *testing.T) {
		pace := make(chan struct{}, 1)
		pace <- struct{}{} // the role's event and the first word's go; the rest wait
		u.local.Queue(providertest.Response{Text: "Nitrogen makes up most of the air.", Pace: pace})
		stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: directModel,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(mcq)}})
		defer stream.Close()
		text, done := collect(t, stream, func(first string) {
			if first == "" || u.local.Finished() != 0 {
				t.Errorf("first delta %q with %d upstream calls finished: want a delta before the upstream ends", first, u.local.Finished())
			}
			close(pace)
		})
		if text != "Nitrogen makes up most of the air." || done.OutputText() != text || done.Usage.TotalTokens == 0 {
			t.Fatalf("deltas %q, response %s", text, done.RawJSON())
		}
		if body := sent(t, u.local); body["stream"] != true {
			t.Fatalf("the upstream was not asked to stream: %v", body)
		}
		if rec := u.record(requestIDOf(t, done.ID)); rec["answer"] != text {
			t.Fatalf("the record's answer %v", rec["answer"])
		}
	})

	t.Run("a function call in pieces", func(t *testing.T) {
		u.local.Queue(providertest.Response{ToolCalls: []providertest.ToolCall{{ID: "call_9", Name: "get_weather", Arguments: `{"city":"Paris"}`}}})
		stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: directModel, Tools: []responses.ToolUnionParam{weatherFunction},
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")}})
		defer stream.Close()
		_, done := collect(t, stream, nil)
		if len(done.Output) != 1 {
			t.Fatalf("response %s", done.RawJSON())
		}
		if call := done.Output[0].AsFunctionCall(); call.CallID != "call_9" || call.Name != "get_weather" || call.Arguments != `{"city":"Paris"}` {
			t.Fatalf("function call %+v", call)
		}
	})

	t.Run("a panel after consensus", func(t *testing.T) {
		stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "conclave/general",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(mcq)}})
		defer stream.Close()
		text, done := collect(t, stream, nil)
		if text != "The answer is (B)." || done.OutputText() != text {
			t.Fatalf("deltas %q, response %s", text, done.RawJSON())
		}
		if ext := extension(t, done.RawJSON()); ext["blueprint"] != "general" {
			t.Fatalf("extension %v", ext)
		}
	})
}

// wireEvent is one event of a stream as it went over the wire.
type wireEvent struct{ name, data string }

// postStream posts a body and reads the stream of events it answers.
func postStream(t *testing.T, tb *testbed, path, body string) (*http.Response, []wireEvent, []string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if tb.token != "" {
		req.Header.Set("Authorization", "Bearer "+tb.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var events []wireEvent
	var comments []string
	for _, block := range strings.Split(string(raw), "\n\n") {
		var ev wireEvent
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
				comments = append(comments, line)
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
		if ev.name != "" || ev.data != "" {
			events = append(events, ev)
		}
	}
	return resp, events, comments
}

// A stream that fails ends with the failure, never with a clean, empty end: an error event when only
// keep-alives went out, response.failed once the response was announced. Both meet their schemas.
func TestResponsesStreamFailing(t *testing.T) {
	t.Run("after keep-alives: an error event", func(t *testing.T) {
		tb := newTestbed(t, func(c *config.Config) { c.Retry = config.Retry{Scale: 0.001, Rounds: 1} }, quickBlueprints(t, 0.3))
		for _, p := range allProviders {
			tb.engine.Sim.SetFault(p, providers.Fault{TimeoutRate: 1})
		}
		resp, events, comments := postStream(t, tb, "/v1/responses", `{"model": "conclave/quick", "stream": true, "input": "`+mcq[:20]+`"}`)
		if resp.StatusCode != http.StatusOK || len(comments) == 0 || len(events) != 1 || events[0].name != "error" {
			t.Fatalf("status %d, comments %v, events %v", resp.StatusCode, comments, events)
		}
		eventMeetsSpec(t, "error", events[0].data)
	})

	t.Run("a direct call's stream breaking: response.failed", func(t *testing.T) {
		u := newUpstreams(t, nil)
		u.local.Queue(providertest.Response{Text: "The answer is", StreamError: &providertest.StreamError{Code: 502, Type: "server_error", Message: "upstream connection lost"}})
		resp, events, _ := postStream(t, u.testbed, "/v1/responses", `{"model": "`+directModel+`", "stream": true, "input": "`+mcq[:20]+`"}`)
		if resp.StatusCode != http.StatusOK || len(events) < 3 || events[0].name != "response.created" || events[len(events)-1].name != "response.failed" {
			t.Fatalf("status %d, events %v", resp.StatusCode, events)
		}
		for _, ev := range events {
			eventMeetsSpec(t, ev.name, ev.data)
			if ev.name == "response.completed" {
				t.Fatal("a broken stream completed")
			}
		}
		if !strings.Contains(events[len(events)-1].data, `"status":"failed"`) {
			t.Fatalf("the last event %s", events[len(events)-1].data)
		}
	})
}
