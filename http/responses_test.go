package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// responsesBody is a Responses request: the model, input, then the fields given as JSON members.
func responsesBody(model, input string, extra ...string) string {
	members := append([]string{`"model": "` + model + `"`, `"input": ` + input}, extra...)
	return "{" + strings.Join(members, ", ") + "}"
}

const responsesTool = `"tools": [{"type": "function", "name": "get_weather", "description": "Weather of a city",
	"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, "strict": true}]`

// The Responses door builds the same ask as the chat door for the same request.
func TestResponsesAskAccepted(t *testing.T) {
	s := parsingServer(t)
	model := s.engine.Catalog().All()[0].ID
	user := func(text string) *messages.ChatMessage {
		return &messages.ChatMessage{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: text}}}
	}
	tests := []struct {
		desc string
		body string
		want *messages.Ask
		// task is a substring of the task; chat, when set, is the chat completion asking the same.
		task, chat string
		direct     bool
	}{
		{
			desc: "a text with instructions and sampling parameters, as a chat completion has them",
			body: responsesBody("conclave/auto", `"What is the weather in Paris?"`, `"instructions": "Be brief."`, `"temperature": 0.1`, `"top_p": 0.9`,
				`"max_output_tokens": 64`, `"user": "u-42"`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{{Role: "system", Content: []*messages.ContentPart{{Type: "text", Text: "Be brief."}}}, user("What is the weather in Paris?")},
				Sampling: &messages.Sampling{Temperature: ptr(0.1), TopP: ptr(0.9), MaxTokens: ptr[int32](64), User: "u-42"}},
			task: "System: Be brief.\n\nUser: What is the weather in Paris?",
			chat: conversationBody(`[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the weather in Paris?"}]`,
				`"temperature": 0.1`, `"top_p": 0.9`, `"max_tokens": 64`, `"user": "u-42"`),
		},
		{
			desc: "safety_identifier is the end user's id",
			body: responsesBody("conclave/auto", `"hi"`, `"safety_identifier": "hash-1"`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{user("hi")}, Sampling: &messages.Sampling{User: "hash-1"}},
		},
		{
			desc: "a two-turn function call conversation sent back whole, an answer's items as they came",
			body: responsesBody("conclave/auto", `[{"role": "user", "content": "Weather in Paris?"},
				{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look.", "annotations": [], "logprobs": []}]},
				{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}", "status": "completed"},
				{"type": "function_call_output", "call_id": "call_1", "output": "21 C, sunny"}]`,
				responsesTool, `"tool_choice": {"type": "function", "name": "get_weather"}`, `"parallel_tool_calls": false`),
			want: &messages.Ask{
				Messages: []*messages.ChatMessage{
					user("Weather in Paris?"),
					{Role: "assistant", Content: []*messages.ContentPart{{Type: "text", Text: "Let me look."}},
						ToolCalls: []*messages.ToolCall{{Id: "call_1", Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
					{Role: "tool", ToolCallId: "call_1", Content: []*messages.ContentPart{{Type: "text", Text: "21 C, sunny"}}},
				},
				Tools: []*messages.Tool{{Name: "get_weather", Description: "Weather of a city", Strict: true,
					Parameters: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`}},
				ToolChoice: &messages.ToolChoice{Mode: "function", Name: "get_weather"},
				Sampling:   &messages.Sampling{ParallelToolCalls: ptr(false)},
			},
			task: "Assistant: Let me look.\n[calls get_weather({\"city\": \"Paris\"})]\n\nTool: 21 C, sunny",
			chat: conversationBody(`[{"role": "user", "content": "Weather in Paris?"},
				{"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
				{"role": "tool", "tool_call_id": "call_1", "content": "21 C, sunny"}]`,
				weatherTool[:strings.Index(weatherTool, `"parameters"`)]+`"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, "strict": true}}]`,
				`"tool_choice": {"type": "function", "function": {"name": "get_weather"}}`, `"parallel_tool_calls": false`),
		},
		{
			desc: "calls made in parallel are one assistant turn; an output as parts of text",
			body: responsesBody("conclave/auto", `[{"role": "user", "content": "Weather in Paris and Rome?"},
				{"type": "function_call", "call_id": "a", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
				{"type": "function_call", "call_id": "b", "name": "get_weather", "arguments": ""},
				{"type": "function_call_output", "call_id": "b", "output": [{"type": "input_text", "text": "18 C"}]},
				{"type": "function_call_output", "call_id": "a", "output": "21 C"}]`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{
				user("Weather in Paris and Rome?"),
				{Role: "assistant", ToolCalls: []*messages.ToolCall{{Id: "a", Name: "get_weather", Arguments: `{"city": "Paris"}`}, {Id: "b", Name: "get_weather", Arguments: "{}"}}},
				{Role: "tool", ToolCallId: "b", Content: []*messages.ContentPart{{Type: "text", Text: "18 C"}}},
				{Role: "tool", ToolCallId: "a", Content: []*messages.ContentPart{{Type: "text", Text: "21 C"}}},
			}},
		},
		{
			desc: "parts: text and images in a user message, a developer's message as a system one",
			body: responsesBody("conclave/auto", `[{"type": "message", "role": "developer", "content": "Describe images."},
				{"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
				{"type": "input_image", "image_url": "https://images.example/cat.png", "detail": "low"},
				{"type": "input_image", "image_url": "data:image/png;base64,`+onePixelPNG+`", "detail": "auto", "file_id": null}]}]`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{
				{Role: "system", Content: []*messages.ContentPart{{Type: "text", Text: "Describe images."}}},
				{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "What is this?"},
					{Type: "image_url", ImageUrl: "https://images.example/cat.png", Detail: "low"},
					{Type: "image_url", ImageUrl: "data:image/png;base64," + onePixelPNG, Detail: "auto"}}},
			}},
			task: "Developer: Describe images.\n\nUser: What is this?\n[image]\n[image]",
		},
		{
			desc: "text.format json_schema is the response format, its description in the schema",
			body: responsesBody("conclave/auto", `"Weather in Paris as JSON"`, `"text": {"format": {"type": "json_schema", "name": "weather", "description": "The weather",
				"strict": true, "schema": {"type": "object", "properties": {"temp_c": {"type": "number"}}}}}`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{user("Weather in Paris as JSON")},
				ResponseFormat: &messages.OutputFormat{Type: "json_schema", Name: "weather", Strict: true,
					Schema: `{"description":"The weather","type":"object","properties":{"temp_c":{"type":"number"}}}`}},
		},
		{
			desc: "JSON mode, OpenAI's defaults sent as they are, nulls left out",
			body: responsesBody("conclave/auto", `"JSON please"`, `"text": {"format": {"type": "json_object"}, "verbosity": null}`, `"store": false`,
				`"truncation": "disabled"`, `"include": []`, `"background": false`, `"previous_response_id": null`, `"metadata": {"team": "billing"}`,
				`"stream_options": {"include_obfuscation": false}`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{user("JSON please")}, ResponseFormat: &messages.OutputFormat{Type: "json_object"}},
		},
		{
			desc:   "a catalog model is a direct call",
			body:   responsesBody(model, `"hi"`),
			want:   &messages.Ask{Messages: []*messages.ChatMessage{user("hi")}},
			direct: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			rr, status, ps := s.parseResponses([]byte(tt.body))
			if status != 0 {
				t.Fatalf("status %d: %v", status, ps)
			}
			if !proto.Equal(rr.route.Ask, tt.want) {
				got, _ := protojson.Marshal(rr.route.Ask)
				want, _ := protojson.Marshal(tt.want)
				t.Fatalf("ask\n got %s\nwant %s", got, want)
			}
			if !strings.Contains(rr.route.Task, tt.task) || rr.route.Direct != tt.direct {
				t.Fatalf("task %q (want %q), direct %v", rr.route.Task, tt.task, rr.route.Direct)
			}
			if tt.chat == "" {
				return
			}
			chat, status, ps := s.parseChat([]byte(tt.chat))
			if status != 0 || !proto.Equal(chat.route.Ask, rr.route.Ask) || chat.route.Task != rr.route.Task {
				got, _ := protojson.Marshal(chat.route.Ask)
				t.Fatalf("the chat door asks otherwise (%d %v):\n%s\n%q", status, ps, got, chat.route.GetTask())
			}
		})
	}
}

func TestResponsesAskRefused(t *testing.T) {
	s := parsingServer(t)
	tests := []struct {
		desc   string
		body   string
		status int
		// fields are the problems' fields, every one of them, in order.
		fields []string
	}{
		{"no input", `{"model": "conclave/auto"}`, 400, []string{"input"}},
		{"an unknown model", responsesBody("conclave/astrology", `"hi"`), 404, []string{"model"}},
		{"stored state Conclave does not keep", responsesBody("conclave/auto", `"hi"`, `"previous_response_id": "resp_1"`, `"conversation": "conv_1"`),
			400, []string{"conversation", "previous_response_id"}},
		{"background, reasoning and a prompt template", responsesBody("conclave/auto", `"hi"`, `"background": true`, `"reasoning": {"effort": "high"}`,
			`"prompt": {"id": "pmpt_1"}`), 400, []string{"prompt", "reasoning", "background"}},
		{"extra output, truncation and verbosity", responsesBody("conclave/auto", `"hi"`, `"include": ["reasoning.encrypted_content"]`, `"truncation": "auto"`,
			`"text": {"verbosity": "low"}`), 400, []string{"truncation", "include", "text.verbosity"}},
		{"built-in tools", responsesBody("conclave/auto", `"hi"`, `"tools": [{"type": "web_search"}, {"type": "function", "name": "f", "defer_loading": true}]`),
			400, []string{"tools[0].type", "tools[1].defer_loading"}},
		{"a hosted tool choice", responsesBody("conclave/auto", `"hi"`, `"tool_choice": {"type": "file_search"}`), 400, []string{"tool_choice.type"}},
		{"a tool choice naming no tool", responsesBody("conclave/auto", `"hi"`, responsesTool, `"tool_choice": {"type": "function", "name": "get_time"}`),
			400, []string{"tool_choice.name"}},
		{"a schema without its name", responsesBody("conclave/auto", `"hi"`, `"text": {"format": {"type": "json_schema", "schema": {"type": "object"}, "indent": 2}}`),
			400, []string{"text.format.indent", "text.format.name"}},
		{"sampling out of range, under the Responses API's names", responsesBody("conclave/auto", `"hi"`, `"temperature": 3`, `"max_output_tokens": 0`),
			400, []string{"temperature", "max_output_tokens"}},
		{"two end users", responsesBody("conclave/auto", `"hi"`, `"user": "a"`, `"safety_identifier": "b"`), 400, []string{"safety_identifier"}},
		{"items Conclave does not carry", responsesBody("conclave/auto", `[{"role": "user", "content": "hi"}, {"type": "reasoning", "summary": []},
			{"type": "item_reference", "id": "msg_1"}, {"type": "web_search_call", "id": "ws_1"}]`), 400, []string{"input[1].type", "input[2].type", "input[3].type"}},
		{"an output answering no call", responsesBody("conclave/auto", `[{"role": "user", "content": "hi"}, {"type": "function_call_output", "call_id": "call_9", "output": "x"}]`),
			400, []string{"input[1].call_id"}},
		{"files, audio and a stored image", responsesBody("conclave/auto", `[{"role": "user", "content": [{"type": "input_file", "file_id": "f"},
			{"type": "input_audio", "input_audio": {}}, {"type": "input_image", "file_id": "file-1", "detail": "auto"}]}]`),
			400, []string{"input[0].content[0].type", "input[0].content[1].type", "input[0].content[2].file_id"}},
		{"an image over http in a system message", responsesBody("conclave/auto", `[{"role": "system", "content": [{"type": "input_image", "image_url": "https://a.example/x.png"}]},
			{"role": "user", "content": [{"type": "input_image", "image_url": "http://a.example/x.png", "detail": "max"}]}]`),
			400, []string{"input[0].content[0].type", "input[1].content[0].detail", "input[1].content[0].image_url"}},
		{"no user message", responsesBody("conclave/auto", `[{"role": "system", "content": "be brief"}]`), 400, []string{"input"}},
		{"an unknown role and member", responsesBody("conclave/auto", `[{"role": "critic", "content": "hi"}, {"role": "user", "content": "hi", "mood": "x"}]`),
			400, []string{"input[0].role", "input[1].mood"}},
		{"every problem at once", responsesBody("conclave/auto", `"hi"`, `"top_p": 2`, `"best_of": 2`, `"service_tier": "flex"`, `"metadata": {"k": 1}`),
			400, []string{"best_of", "service_tier", "top_p", "metadata"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, status, ps := s.parseResponses([]byte(tt.body))
			var fields []string
			for _, p := range ps {
				fields = append(fields, p.Field)
			}
			if status != tt.status || !slices.Equal(fields, tt.fields) {
				t.Fatalf("status %d, problems %v; want %d with %v", status, ps, tt.status, tt.fields)
			}
		})
	}
}

// A response renders an answer's text, tool calls, usage and status in the Responses API's shape.
func TestResponseOfAnExecution(t *testing.T) {
	rr := &responsesRequest{chatRequest: &chatRequest{model: "conclave/auto", route: &messages.RouteRequest{Ask: &messages.Ask{}}}, parallelToolCall: true}
	tests := []struct {
		desc   string
		exec   *messages.Execution
		status string
		// output is the output items as JSON.
		output string
	}{
		{"text", &messages.Execution{RequestId: "r", Answer: "Sunny."}, "completed",
			`[{"type":"message","id":"msg_r","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Sunny.","annotations":[],"logprobs":[]}]}]`},
		{"a tool call alone", &messages.Execution{RequestId: "r", ToolCalls: []*messages.ToolCall{{Id: "call_1", Name: "f", Arguments: `{"x":1}`}}}, "completed",
			`[{"type":"function_call","id":"fc_r_0","status":"completed","call_id":"call_1","name":"f","arguments":"{\"x\":1}"}]`},
		{"text and a tool call", &messages.Execution{RequestId: "r", Answer: "Let me look.", ToolCalls: []*messages.ToolCall{{Id: "c", Name: "f", Arguments: `{}`}}}, "completed",
			`[{"type":"message","id":"msg_r","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Let me look.","annotations":[],"logprobs":[]}]},` +
				`{"type":"function_call","id":"fc_r_0","status":"completed","call_id":"c","name":"f","arguments":"{}"}]`},
		{"cut by its limit", &messages.Execution{RequestId: "r", Answer: "Sun", FinishReason: "max_tokens"}, "incomplete",
			`[{"type":"message","id":"msg_r","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"Sun","annotations":[],"logprobs":[]}]}]`},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			r := renderResponse(tt.exec, rr)
			output, _ := json.Marshal(r.Output)
			if r.Status != tt.status || string(output) != tt.output || r.ID != "resp_r" || (tt.status == "incomplete") != (r.IncompleteDetails != nil) {
				t.Fatalf("status %s, output %s\nwant %s, %s", r.Status, output, tt.status, tt.output)
			}
		})
	}
}

// The events of a streamed answer come in the Responses API's order, numbered from zero, ending with
// the response whose output is what was streamed.
func TestResponseEventsInOrder(t *testing.T) {
	rec := &recorder{header: http.Header{}}
	rr := &responsesRequest{chatRequest: &chatRequest{model: "m", route: &messages.RouteRequest{Ask: &messages.Ask{}}}, parallelToolCall: true}
	exec := &messages.Execution{RequestId: "r", Answer: "Looking.", ToolCalls: []*messages.ToolCall{{Id: "c", Name: "f", Arguments: `{"x":1}`}}}
	ev := newResponseEvents(newStream(rec), shellOf(rr, "r", exec.GetReceivedAt().AsTime()))
	ev.delta(&messages.Delta{Text: "Look"})
	ev.delta(&messages.Delta{Text: "ing.", ToolCalls: []*messages.ToolCallDelta{{Index: 0, Id: "c", Name: "f"}}})
	ev.delta(&messages.Delta{ToolCalls: []*messages.ToolCallDelta{{Index: 0, Arguments: `{"x":`}, {Index: 0, Arguments: `1}`}}})
	ev.finish(exec, renderResponse(exec, rr))
	var types []string
	var last map[string]any
	for i, block := range strings.Split(strings.TrimSpace(rec.body.String()), "\n\n") {
		name, data, _ := strings.Cut(block, "\n")
		var ev map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &ev); err != nil || "event: "+ev["type"].(string) != name || ev["sequence_number"] != float64(i) {
			t.Fatalf("event %d: %s (%v)", i, block, err)
		}
		types, last = append(types, ev["type"].(string)), ev
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_item.added", "response.function_call_arguments.delta",
		"response.function_call_arguments.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed"}
	if !slices.Equal(types, want) {
		t.Fatalf("events\n%v\nwant\n%v", types, want)
	}
	out, _ := json.Marshal(last["response"].(map[string]any)["output"])
	if !strings.Contains(string(out), `"text":"Looking."`) || !strings.Contains(string(out), `"arguments":"{\"x\":1}"`) {
		t.Fatalf("the response's output %s", out)
	}
}
