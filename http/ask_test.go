package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// onePixelPNG is a whole PNG image, as a data URI carries it.
const onePixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

// parsingServer is a server over the embedded default, for parsing alone.
func parsingServer(t *testing.T) *Server {
	t.Helper()
	e, err := engine.New(engine.Options{Config: config.Default(), Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	return New(e, Options{})
}

// chatBody is a chat completion request: a user's question, then the fields given as JSON members.
func chatBody(model string, extra ...string) string {
	members := append([]string{`"model": "` + model + `"`, `"messages": [{"role": "user", "content": "What is the weather in Paris?"}]`}, extra...)
	return "{" + strings.Join(members, ", ") + "}"
}

// conversationBody is a chat completion request with its messages and more members.
func conversationBody(msgs string, extra ...string) string {
	members := append([]string{`"model": "conclave/auto"`, `"messages": ` + msgs}, extra...)
	return "{" + strings.Join(members, ", ") + "}"
}

func ptr[T any](v T) *T { return &v }

const weatherTool = `"tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
	"parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}, "required": ["city"]}, "strict": true}}]`

const toolTurns = `[{"role": "user", "content": "Weather in Paris?"},
	{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
	{"role": "tool", "tool_call_id": "call_1", "content": "21 C, sunny"}]`

func TestChatAskAccepted(t *testing.T) {
	s := parsingServer(t)
	model := s.engine.Catalog().All()[0].ID
	other := s.engine.Catalog().All()[1].ID
	tests := []struct {
		desc string
		body string
		// want is the ask expected (as protojson, compared as a message); task a substring of the task.
		want     *messages.Ask
		task     string
		strict   bool
		fallback []string
	}{
		{
			desc: "every sampling parameter",
			body: chatBody("conclave/auto", `"temperature": 0.1`, `"top_p": 0.9`, `"max_tokens": 5`, `"stop": "END"`, `"seed": 9007199254740993`,
				`"presence_penalty": -0.5`, `"frequency_penalty": 2`, `"logit_bias": {"50256": -100, "7": 3}`, `"user": "u-42"`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "What is the weather in Paris?"}}}},
				Sampling: &messages.Sampling{Temperature: ptr(0.1), TopP: ptr(0.9), MaxTokens: ptr[int32](5), Stop: []string{"END"},
					Seed: ptr[int64](9007199254740993), PresencePenalty: ptr(-0.5), FrequencyPenalty: ptr(2.0),
					LogitBias: map[string]int32{"50256": -100, "7": 3}, User: "u-42"}},
		},
		{
			desc: "max_completion_tokens and a list of stops; nulls are left out",
			body: chatBody("conclave/auto", `"max_completion_tokens": 64`, `"stop": ["\n\n", "END"]`, `"temperature": null`, `"tools": null`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "What is the weather in Paris?"}}}},
				Sampling: &messages.Sampling{MaxTokens: ptr[int32](64), Stop: []string{"\n\n", "END"}}},
		},
		{
			desc: "max_tokens and max_completion_tokens that agree",
			body: chatBody("conclave/auto", `"max_tokens": 7`, `"max_completion_tokens": 7`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "What is the weather in Paris?"}}}},
				Sampling: &messages.Sampling{MaxTokens: ptr[int32](7)}},
		},
		{
			desc: "a tool conversation: tools in the caller's key order, the assistant's call, the tool's answer",
			body: conversationBody(toolTurns, weatherTool, `"tool_choice": {"type": "function", "function": {"name": "get_weather"}}`, `"parallel_tool_calls": false`),
			want: &messages.Ask{
				Messages: []*messages.ChatMessage{
					{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "Weather in Paris?"}}},
					{Role: "assistant", ToolCalls: []*messages.ToolCall{{Id: "call_1", Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
					{Role: "tool", ToolCallId: "call_1", Content: []*messages.ContentPart{{Type: "text", Text: "21 C, sunny"}}},
				},
				Tools: []*messages.Tool{{Name: "get_weather", Description: "Weather of a city", Strict: true,
					Parameters: `{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string"}},"required":["city"]}`}},
				ToolChoice: &messages.ToolChoice{Mode: "function", Name: "get_weather"},
				Sampling:   &messages.Sampling{ParallelToolCalls: ptr(false)},
			},
			task: `Assistant: [calls get_weather({"city": "Paris"})]`,
		},
		{
			desc: "an answer sent back as it came: empty content beside tool calls, refusal and annotations",
			body: conversationBody(`[{"role": "user", "content": "Weather?"},
				{"role": "assistant", "content": "", "refusal": null, "annotations": [], "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}]},
				{"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "sunny"}]},
				{"role": "assistant", "content": null, "refusal": "I cannot say."},
				{"role": "user", "content": "Why?"}]`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{
				{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "Weather?"}}},
				{Role: "assistant", ToolCalls: []*messages.ToolCall{{Id: "c", Name: "f", Arguments: "{}"}}},
				{Role: "tool", ToolCallId: "c", Content: []*messages.ContentPart{{Type: "text", Text: "sunny"}}},
				{Role: "assistant", Content: []*messages.ContentPart{{Type: "text", Text: "I cannot say."}}},
				{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "Why?"}}},
			}},
		},
		{
			desc: "images by https URL and data URI, beside text; a developer's message is a system message",
			body: conversationBody(`[{"role": "developer", "content": "Describe images.", "name": "ops"},
				{"role": "user", "content": [{"type": "text", "text": "What is this?"},
				{"type": "image_url", "image_url": {"url": "https://images.example/cat.png", "detail": "low"}},
				{"type": "image_url", "image_url": {"url": "data:image/png;base64,` + onePixelPNG + `"}}]}]`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{
				{Role: "system", Name: "ops", Content: []*messages.ContentPart{{Type: "text", Text: "Describe images."}}},
				{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "What is this?"},
					{Type: "image_url", ImageUrl: "https://images.example/cat.png", Detail: "low"},
					{Type: "image_url", ImageUrl: "data:image/png;base64," + onePixelPNG}}},
			}},
			task: "Developer: Describe images.\n\nUser: What is this?\n[image]\n[image]",
		},
		{
			desc: "a JSON schema, its description carried in the schema",
			body: chatBody("conclave/auto", `"response_format": {"type": "json_schema", "json_schema": {"name": "weather", "description": "The weather",
				"strict": true, "schema": {"type": "object", "properties": {"temp_c": {"type": "number"}, "city": {"type": "string"}}}}}`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "What is the weather in Paris?"}}}},
				ResponseFormat: &messages.OutputFormat{Type: "json_schema", Name: "weather", Strict: true,
					Schema: `{"description":"The weather","type":"object","properties":{"temp_c":{"type":"number"},"city":{"type":"string"}}}`}},
		},
		{
			desc: "JSON mode",
			body: chatBody("conclave/auto", `"response_format": {"type": "json_object"}`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "What is the weather in Paris?"}}}},
				ResponseFormat: &messages.OutputFormat{Type: "json_object"}},
		},
		{
			desc:     "a direct call with fallbacks, strict about its parameters",
			body:     chatBody(model, `"fallbacks": ["`+other+`"]`, `"strict_parameters": true`),
			want:     &messages.Ask{Messages: []*messages.ChatMessage{{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "What is the weather in Paris?"}}}}},
			strict:   true,
			fallback: []string{other},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			chat, status, ps := s.parseChat([]byte(tt.body))
			if status != 0 {
				t.Fatalf("status %d: %v", status, ps)
			}
			if !proto.Equal(chat.route.Ask, tt.want) {
				got, _ := protojson.Marshal(chat.route.Ask)
				want, _ := protojson.Marshal(tt.want)
				t.Fatalf("ask\n got %s\nwant %s", got, want)
			}
			if tt.task != "" && !strings.Contains(chat.route.Task, tt.task) {
				t.Fatalf("task %q lacks %q", chat.route.Task, tt.task)
			}
			if chat.route.StrictParameters != tt.strict || !slices.Equal(chat.route.Fallbacks, tt.fallback) {
				t.Fatalf("strict %v fallbacks %v", chat.route.StrictParameters, chat.route.Fallbacks)
			}
		})
	}
}

func TestChatAskRefused(t *testing.T) {
	s := parsingServer(t)
	model := s.engine.Catalog().All()[0].ID
	dataURI := func(typ, b64 string) string {
		return conversationBody(`[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:` + typ + `;base64,` + b64 + `"}}]}]`)
	}
	tests := []struct {
		desc   string
		body   string
		status int
		// fields are the problems' fields, every one of them, in order.
		fields []string
	}{
		{"a temperature above 2", chatBody("conclave/auto", `"temperature": 3`), 400, []string{"temperature"}},
		{"a top_p that is no number", chatBody("conclave/auto", `"top_p": "high"`), 400, []string{"top_p"}},
		{"penalties out of range", chatBody("conclave/auto", `"presence_penalty": -3`, `"frequency_penalty": 2.5`), 400, []string{"presence_penalty", "frequency_penalty"}},
		{"a seed that is no integer", chatBody("conclave/auto", `"seed": 1.5`), 400, []string{"seed"}},
		{"no tokens to write", chatBody("conclave/auto", `"max_tokens": 0`), 400, []string{"max_tokens"}},
		{"two output limits that differ", chatBody("conclave/auto", `"max_tokens": 5`, `"max_completion_tokens": 6`), 400, []string{"max_completion_tokens"}},
		{"five stops", chatBody("conclave/auto", `"stop": ["a", "b", "c", "d", "e"]`), 400, []string{"stop"}},
		{"an empty stop", chatBody("conclave/auto", `"stop": ["a", ""]`), 400, []string{"stop[1]"}},
		{"a stop that is no string", chatBody("conclave/auto", `"stop": 3`), 400, []string{"stop"}},
		{"logit biases of a word and out of range", chatBody("conclave/auto", `"logit_bias": {"abc": 1, "12": 101}`), 400, []string{"logit_bias.12", "logit_bias.abc"}},
		{"a user id too long", chatBody("conclave/auto", `"user": "`+strings.Repeat("u", 300)+`"`), 400, []string{"user"}},
		{"parallel_tool_calls that is no boolean", chatBody("conclave/auto", `"parallel_tool_calls": "yes"`), 400, []string{"parallel_tool_calls"}},
		{"an image over http", conversationBody(`[{"role": "user", "content": [{"type": "text", "text": "What?"}, {"type": "image_url", "image_url": {"url": "http://images.example/a.png"}}]}]`),
			400, []string{"messages[0].content[1].image_url.url"}},
		{"an image URL with credentials", conversationBody(`[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://u:p@images.example/a.png"}}]}]`),
			400, []string{"messages[0].content[0].image_url.url"}},
		{"a data URI whose bytes are text", dataURI("image/png", "aGVsbG8gd29ybGQ="), 400, []string{"messages[0].content[0].image_url.url"}},
		{"a data URI that is no base64", dataURI("image/png", "not base64!"), 400, []string{"messages[0].content[0].image_url.url"}},
		{"a data URI of a PDF", dataURI("application/pdf", "JVBERi0xLjQK"), 400, []string{"messages[0].content[0].image_url.url"}},
		{"a PNG declared as a JPEG", dataURI("image/jpeg", onePixelPNG), 400, []string{"messages[0].content[0].image_url.url"}},
		{"an image without url, with an unknown detail", conversationBody(`[{"role": "user", "content": [{"type": "image_url", "image_url": {"detail": "max"}}]}]`),
			400, []string{"messages[0].content[0].image_url.detail", "messages[0].content[0].image_url.url"}},
		{"an image in a system message", conversationBody(`[{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://images.example/a.png"}}]}, {"role": "user", "content": "hi"}]`),
			400, []string{"messages[0].content[0].type"}},
		{"audio", conversationBody(`[{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]`),
			400, []string{"messages[0].content[0].type"}},
		{"a tool message without its call's id", conversationBody(`[{"role": "user", "content": "hi"}, {"role": "tool", "content": "21 C"}]`),
			400, []string{"messages[1].tool_call_id"}},
		{"a tool message answering no call", conversationBody(`[{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_9", "content": "21 C"}]`),
			400, []string{"messages[1].tool_call_id"}},
		{"an assistant saying nothing", conversationBody(`[{"role": "user", "content": "hi"}, {"role": "assistant"}]`), 400, []string{"messages[1].content"}},
		{"tool calls whose arguments are no JSON object, of a user", conversationBody(`[{"role": "user", "content": "hi", "tool_calls": []},
			{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}, {"id": "c", "type": "custom", "function": {"name": "g h", "arguments": "{}"}}]}]`),
			400, []string{"messages[0].tool_calls", "messages[1].tool_calls[0].function.arguments", "messages[1].tool_calls[1].type",
				"messages[1].tool_calls[1].id", "messages[1].tool_calls[1].function.name"}},
		{"the deprecated function role", conversationBody(`[{"role": "user", "content": "hi"}, {"role": "function", "name": "f", "content": "x"}]`),
			400, []string{"messages[1].role"}},
		{"an unknown member of a message", conversationBody(`[{"role": "user", "content": "hi", "mood": "curious"}]`), 400, []string{"messages[0].mood"}},
		{"tools of every fault", chatBody("conclave/auto", `"tools": [{"type": "function", "function": {"name": "a b"}},
			{"type": "function", "function": {"name": "f", "parameters": [1]}}, {"type": "function", "function": {"name": "f"}}, {"type": "custom", "custom": {}}]`),
			400, []string{"tools[0].function.name", "tools[1].function.parameters", "tools[2].function.name", "tools[3].custom", "tools[3].type"}},
		{"a tool choice naming no tool", chatBody("conclave/auto", weatherTool, `"tool_choice": {"type": "function", "function": {"name": "get_time"}}`),
			400, []string{"tool_choice.function.name"}},
		{"a tool required, without tools", chatBody("conclave/auto", `"tool_choice": "required"`), 400, []string{"tool_choice"}},
		{"a JSON schema without a schema", chatBody("conclave/auto", `"response_format": {"type": "json_schema", "json_schema": {"name": "w"}}`),
			400, []string{"response_format.json_schema.schema"}},
		{"a JSON schema badly named, not an object", chatBody("conclave/auto", `"response_format": {"type": "json_schema", "json_schema": {"name": "my schema", "schema": true}}`),
			400, []string{"response_format.json_schema.name", "response_format.json_schema.schema"}},
		{"an unknown output format", chatBody("conclave/auto", `"response_format": {"type": "yaml"}`), 400, []string{"response_format.type"}},
		{"fallbacks of a panel", chatBody("conclave/auto", `"fallbacks": ["`+model+`"]`), 400, []string{"fallbacks"}},
		{"a fallback that is the model", chatBody(model, `"fallbacks": ["`+model+`"]`), 400, []string{"fallbacks[0]"}},
		{"an unknown fallback", chatBody(model, `"fallbacks": ["no-such-model"]`), 404, []string{"fallbacks[0]"}},
		{"strict_parameters that is no boolean", chatBody("conclave/auto", `"strict_parameters": "yes"`), 400, []string{"strict_parameters"}},
		{"every problem at once", chatBody("conclave/auto", `"temperature": -1`, `"top_p": 2`, `"tool_choice": "sometimes"`, `"best_of": 2`),
			400, []string{"best_of", "tool_choice", "temperature", "top_p"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, status, ps := s.parseChat([]byte(tt.body))
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

func TestRouteParameters(t *testing.T) {
	s := parsingServer(t)
	tests := []struct {
		desc   string
		body   string
		want   *messages.Sampling
		strict bool
		fields []string
	}{
		{"the chat completions names", `{"task": "Summarise the plan", "parameters": {"temperature": 0.1, "max_tokens": 5, "top_p": 0.5, "stop": ["END"], "seed": 7,
			"presence_penalty": 1, "frequency_penalty": 1, "logit_bias": {"1": 5}, "user": "u"}, "strict_parameters": true}`,
			&messages.Sampling{Temperature: ptr(0.1), MaxTokens: ptr[int32](5), TopP: ptr(0.5), Stop: []string{"END"}, Seed: ptr[int64](7),
				PresencePenalty: ptr(1.0), FrequencyPenalty: ptr(1.0), LogitBias: map[string]int32{"1": 5}, User: "u"}, true, nil},
		{"max_completion_tokens", `{"task": "Summarise the plan", "parameters": {"max_completion_tokens": 9}}`, &messages.Sampling{MaxTokens: ptr[int32](9)}, false, nil},
		{"no parameters", `{"task": "Summarise the plan", "parameters": {}}`, nil, false, nil},
		{"problems named under parameters", `{"task": "Summarise the plan", "parameters": {"temperature": 9, "tools": [], "stop": []}, "strict_parameters": 1}`,
			nil, false, []string{"parameters.tools", "parameters.temperature", "parameters.stop", "strict_parameters"}},
		{"parameters that are no object", `{"task": "Summarise the plan", "parameters": [1]}`, nil, false, []string{"parameters"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			req, status, ps := s.parseRoute([]byte(tt.body))
			var fields []string
			for _, p := range ps {
				fields = append(fields, p.Field)
			}
			if !slices.Equal(fields, tt.fields) {
				t.Fatalf("status %d problems %v, want %v", status, ps, tt.fields)
			}
			if tt.fields != nil {
				return
			}
			if !proto.Equal(req.GetAsk().GetSampling(), tt.want) || req.StrictParameters != tt.strict {
				t.Fatalf("sampling %v strict %v", req.GetAsk().GetSampling(), req.StrictParameters)
			}
		})
	}
}

func TestCompletionOfToolCalls(t *testing.T) {
	tests := []struct {
		desc string
		exec *messages.Execution
		// want is the choice and the extension's dropped parameters, as JSON.
		want, dropped string
	}{
		{"text", &messages.Execution{Answer: "Sunny.", FinishReason: "end_turn"},
			`{"index":0,"message":{"role":"assistant","content":"Sunny.","refusal":null},"logprobs":null,"finish_reason":"stop"}`, `[]`},
		{"only a tool call: content is null", &messages.Execution{ToolCalls: []*messages.ToolCall{{Id: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			DroppedParameters: []string{"seed"}},
			`{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"logprobs":null,"finish_reason":"tool_calls"}`,
			`["seed"]`},
		{"text and a tool call", &messages.Execution{Answer: "Let me look.", ToolCalls: []*messages.ToolCall{{Id: "c", Name: "f", Arguments: `{}`}}},
			`{"index":0,"message":{"role":"assistant","content":"Let me look.","refusal":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls"}`, `[]`},
		{"cut by its limit, in Anthropic's words", &messages.Execution{Answer: "Sun", FinishReason: "max_tokens"},
			`{"index":0,"message":{"role":"assistant","content":"Sun","refusal":null},"logprobs":null,"finish_reason":"length"}`, `[]`},
		{"stopped by Gemini's filter", &messages.Execution{Answer: "", FinishReason: "SAFETY"},
			`{"index":0,"message":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":"content_filter"}`, `[]`},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			c := renderCompletion(tt.exec, "conclave/auto")
			choice, _ := json.Marshal(c.Choices[0])
			dropped, _ := json.Marshal(c.Conclave.DroppedParameters)
			if string(choice) != tt.want || string(dropped) != tt.dropped {
				t.Fatalf("choice %s dropped %s\nwant   %s dropped %s", choice, dropped, tt.want, tt.dropped)
			}
		})
	}
}

// A streamed answer of tool calls comes as OpenAI streams them: indexed calls, then the finish reason.
func TestStreamOfToolCalls(t *testing.T) {
	rec := &recorder{header: http.Header{}}
	c := renderCompletion(&messages.Execution{RequestId: "r", ToolCalls: []*messages.ToolCall{{Id: "a", Name: "f", Arguments: `{"x":1}`}, {Id: "b", Name: "g", Arguments: `{}`}}}, "m")
	newStream(rec).completion(c, false)
	out := rec.body.String()
	for _, want := range []string{
		`"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]}`,
		`"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"g","arguments":"{}"}}]}`,
		`"finish_reason":"tool_calls"`, "data: [DONE]",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("stream lacks %s:\n%s", want, out)
		}
	}
}

// recorder is a ResponseWriter that keeps what it is written.
type recorder struct {
	header http.Header
	body   strings.Builder
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(int)             {}
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
