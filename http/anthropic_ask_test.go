package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// messagesBody is a Messages request: the model, max_tokens, a user's question, then the members given.
func messagesBody(model string, extra ...string) string {
	members := append([]string{`"model": "` + model + `"`, `"max_tokens": 256`, `"messages": [{"role": "user", "content": "What is the weather in Paris?"}]`}, extra...)
	return "{" + strings.Join(members, ", ") + "}"
}

// messagesConversation is a Messages request with its messages and more members.
func messagesConversation(msgs string, extra ...string) string {
	members := append([]string{`"model": "conclave/auto"`, `"max_tokens": 256`, `"messages": ` + msgs}, extra...)
	return "{" + strings.Join(members, ", ") + "}"
}

const anthropicWeatherTool = `"tools": [{"name": "get_weather", "description": "Weather of a city", "strict": true,
	"input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}, "required": ["city"]}}]`

const anthropicToolTurns = `[{"role": "user", "content": "Weather in Paris?"},
	{"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]},
	{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "21 C, sunny"}]}]`

var parisQuestion = &messages.ChatMessage{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "What is the weather in Paris?"}}}

func TestMessagesAskAccepted(t *testing.T) {
	s := parsingServer(t)
	model := s.engine.Catalog().All()[0].ID
	other := s.engine.Catalog().All()[1].ID
	tests := []struct {
		desc string
		body string
		// want is the ask expected (compared as a message); task a substring of the task.
		want     *messages.Ask
		task     string
		stream   bool
		direct   bool
		fallback []string
	}{
		{
			desc: "system as a string, every sampling parameter, metadata.user_id, a stream",
			body: messagesBody("conclave/auto", `"system": "Answer briefly."`, `"temperature": 0.1`, `"top_p": 0.9`, `"stop_sequences": ["END", "\n\n"]`,
				`"metadata": {"user_id": "u-42"}`, `"stream": true`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{{Role: "system", Content: []*messages.ContentPart{{Type: "text", Text: "Answer briefly."}}}, parisQuestion},
				Sampling: &messages.Sampling{Temperature: ptr(0.1), TopP: ptr(0.9), MaxTokens: ptr[int32](256), Stop: []string{"END", "\n\n"}, User: "u-42"}},
			task:   "System: Answer briefly.\n\nUser: What is the weather in Paris?",
			stream: true,
		},
		{
			desc: "system as text blocks; an empty stop_sequences and nulls are left out",
			body: messagesBody("conclave/auto", `"system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use metric units."}]`,
				`"stop_sequences": []`, `"temperature": null`, `"metadata": {"user_id": null}`, `"top_k": null`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{{Role: "system", Content: []*messages.ContentPart{{Type: "text", Text: "Be brief."}, {Type: "text", Text: "Use metric units."}}}, parisQuestion},
				Sampling: &messages.Sampling{MaxTokens: ptr[int32](256)}},
		},
		{
			desc: "a tool conversation: tool_use becomes the assistant's call, tool_result a tool turn, as the OpenAI door writes them",
			body: messagesConversation(anthropicToolTurns, anthropicWeatherTool, `"tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true}`),
			want: &messages.Ask{
				Messages: []*messages.ChatMessage{
					{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "Weather in Paris?"}}},
					{Role: "assistant", ToolCalls: []*messages.ToolCall{{Id: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
					{Role: "tool", ToolCallId: "call_1", Content: []*messages.ContentPart{{Type: "text", Text: "21 C, sunny"}}},
				},
				Tools: []*messages.Tool{{Name: "get_weather", Description: "Weather of a city", Strict: true,
					Parameters: `{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string"}},"required":["city"]}`}},
				ToolChoice: &messages.ToolChoice{Mode: "function", Name: "get_weather"},
				Sampling:   &messages.Sampling{MaxTokens: ptr[int32](256), ParallelToolCalls: ptr(false)},
			},
			task: `Assistant: [calls get_weather({"city":"Paris"})]`,
		},
		{
			desc: "results first, then the user's text, in one turn; a failed tool says so; text beside a call; any and none",
			body: messagesConversation(`[{"role": "user", "content": "Weather in Paris and Rome?"},
				{"role": "assistant", "content": [{"type": "text", "text": "Looking.", "citations": null},
					{"type": "tool_use", "id": "a", "name": "get_weather", "input": {"city": "Paris"}, "caller": {"type": "direct"}},
					{"type": "tool_use", "id": "b", "name": "get_weather", "input": {}}]},
				{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "sunny"}]},
					{"type": "tool_result", "tool_use_id": "b", "is_error": true, "content": "no such city"},
					{"type": "text", "text": "And tomorrow?"}]}]`, anthropicWeatherTool, `"tool_choice": {"type": "any"}`),
			want: &messages.Ask{
				Messages: []*messages.ChatMessage{
					{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "Weather in Paris and Rome?"}}},
					{Role: "assistant", Content: []*messages.ContentPart{{Type: "text", Text: "Looking."}},
						ToolCalls: []*messages.ToolCall{{Id: "a", Name: "get_weather", Arguments: `{"city":"Paris"}`}, {Id: "b", Name: "get_weather", Arguments: `{}`}}},
					{Role: "tool", ToolCallId: "a", Content: []*messages.ContentPart{{Type: "text", Text: "sunny"}}},
					{Role: "tool", ToolCallId: "b", Content: []*messages.ContentPart{{Type: "text", Text: "Error: no such city"}}},
					{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "And tomorrow?"}}},
				},
				Tools: []*messages.Tool{{Name: "get_weather", Description: "Weather of a city", Strict: true,
					Parameters: `{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string"}},"required":["city"]}`}},
				ToolChoice: &messages.ToolChoice{Mode: "required"},
				Sampling:   &messages.Sampling{MaxTokens: ptr[int32](256)},
			},
		},
		{
			desc: "images by base64 source and by https URL",
			body: messagesConversation(`[{"role": "user", "content": [{"type": "text", "text": "What is this?"},
				{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "` + onePixelPNG + `"}},
				{"type": "image", "source": {"type": "url", "url": "https://images.example/cat.png"}}]}]`),
			want: &messages.Ask{Messages: []*messages.ChatMessage{
				{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: "What is this?"},
					{Type: "image_url", ImageUrl: "data:image/png;base64," + onePixelPNG},
					{Type: "image_url", ImageUrl: "https://images.example/cat.png"}}},
			}, Sampling: &messages.Sampling{MaxTokens: ptr[int32](256)}},
			task: "What is this?\n[image]\n[image]",
		},
		{
			desc:     "a direct call with fallbacks",
			body:     messagesBody(model, `"fallbacks": ["`+other+`"]`, `"tool_choice": {"type": "none"}`),
			want:     &messages.Ask{Messages: []*messages.ChatMessage{parisQuestion}, ToolChoice: &messages.ToolChoice{Mode: "none"}, Sampling: &messages.Sampling{MaxTokens: ptr[int32](256)}},
			direct:   true,
			fallback: []string{other},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			msg, status, ps := s.parseMessages([]byte(tt.body))
			if status != 0 {
				t.Fatalf("status %d: %v", status, ps)
			}
			if !proto.Equal(msg.route.Ask, tt.want) {
				got, _ := protojson.Marshal(msg.route.Ask)
				want, _ := protojson.Marshal(tt.want)
				t.Fatalf("ask\n got %s\nwant %s", got, want)
			}
			if tt.task != "" && !strings.Contains(msg.route.Task, tt.task) {
				t.Fatalf("task %q lacks %q", msg.route.Task, tt.task)
			}
			if msg.stream != tt.stream || msg.route.Direct != tt.direct || !slices.Equal(msg.route.Fallbacks, tt.fallback) {
				t.Fatalf("stream %v direct %v fallbacks %v", msg.stream, msg.route.Direct, msg.route.Fallbacks)
			}
		})
	}
}

// The same conversation through either door is the same ask: the doors share it.
func TestBothDoorsBuildTheSameAsk(t *testing.T) {
	s := parsingServer(t)
	chat, status, ps := s.parseChat([]byte(conversationBody(`[{"role": "system", "content": "Be brief."},
		{"role": "user", "content": "Weather in Paris?"},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
		{"role": "tool", "tool_call_id": "call_1", "content": "21 C, sunny"}]`, weatherTool, `"max_tokens": 256`, `"stop": ["END"]`, `"tool_choice": "required"`)))
	if status != 0 {
		t.Fatalf("chat: %d %v", status, ps)
	}
	msg, status, ps := s.parseMessages([]byte(messagesConversation(anthropicToolTurns, `"system": "Be brief."`, anthropicWeatherTool,
		`"stop_sequences": ["END"]`, `"tool_choice": {"type": "any"}`)))
	if status != 0 {
		t.Fatalf("messages: %d %v", status, ps)
	}
	if !proto.Equal(chat.route.Ask, msg.route.Ask) || chat.route.Task != msg.route.Task {
		a, _ := protojson.Marshal(chat.route.Ask)
		b, _ := protojson.Marshal(msg.route.Ask)
		t.Fatalf("chat completions\n %s\n%q\nmessages\n %s\n%q", a, chat.route.Task, b, msg.route.Task)
	}
}

func TestMessagesAskRefused(t *testing.T) {
	s := parsingServer(t)
	tests := []struct {
		desc, body string
		status     int
		// field is a problem's field that must be listed, message a substring of its message.
		field, message string
	}{
		{"no max_tokens, which the Messages API requires", `{"model": "conclave/auto", "messages": [{"role": "user", "content": "hi"}]}`, 400, "max_tokens", "required"},
		{"max_tokens of zero", messagesBody("conclave/auto", `"max_tokens": 0`), 400, "max_tokens", "between 1"},
		{"an unknown model", messagesBody("conclave/astrology"), 404, "model", "unknown model"},
		{"top_k, refused by name", messagesBody("conclave/auto", `"top_k": 40`), 400, "top_k", "not supported"},
		{"thinking, refused by name", messagesBody("conclave/auto", `"thinking": {"type": "enabled", "budget_tokens": 1024}`), 400, "thinking", "not supported"},
		{"an unknown field", messagesBody("conclave/auto", `"frequency_penalty": 1`), 400, "frequency_penalty", "unknown field"},
		{"temperature above Anthropic's 1", messagesBody("conclave/auto", `"temperature": 1.5`), 400, "temperature", "between 0 and 1"},
		{"stop_sequences as a string", messagesBody("conclave/auto", `"stop_sequences": "END"`), 400, "stop_sequences", "list of strings"},
		{"five stop sequences", messagesBody("conclave/auto", `"stop_sequences": ["a", "b", "c", "d", "e"]`), 400, "stop_sequences", "between 1 and 4"},
		{"metadata beyond user_id", messagesBody("conclave/auto", `"metadata": {"session": "x"}`), 400, "metadata.session", "unknown field"},
		{"a system role in messages", messagesConversation(`[{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}]`), 400, "messages[0].role", "top-level system"},
		{"an empty text", messagesConversation(`[{"role": "user", "content": ""}]`), 400, "messages[0].content[0].text", "not be empty"},
		{"a cache_control of another type", messagesConversation(`[{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "forever"}}]}]`),
			400, "messages[0].content[0].cache_control.type", "ephemeral"},
		{"a cache_control ttl of a day", messagesConversation(`[{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "24h"}}]}]`),
			400, "messages[0].content[0].cache_control.ttl", "5m or 1h"},
		{"five cache_control marks", messagesBody("conclave/auto", `"system": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
			{"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "c", "cache_control": {"type": "ephemeral"}},
			{"type": "text", "text": "d", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "e", "cache_control": {"type": "ephemeral"}}]`),
			400, "cache_control", "at most 4"},
		{"a top-level cache_control", messagesBody("conclave/auto", `"cache_control": {"type": "ephemeral"}`), 400, "cache_control", "top level"},
		{"a thinking block", messagesConversation(`[{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}]}, {"role": "user", "content": "so?"}]`),
			400, "messages[1].content[0].type", "not supported"},
		{"a tool_result answering nothing", messagesConversation(`[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "1"}]}]`),
			400, "messages[0].content[0].tool_use_id", "answers no tool_use"},
		{"a tool_use left unanswered", messagesConversation(`[{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
			{"role": "user", "content": "well?"}]`), 400, "messages[2]", "tool_result"},
		{"text before a tool_result", messagesConversation(`[{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
			{"role": "user", "content": [{"type": "text", "text": "here"}, {"type": "tool_result", "tool_use_id": "a"}]}]`), 400, "messages[2].content[1]", "come first"},
		{"a tool_use whose input is no object", messagesConversation(`[{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": "x"}]},
			{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]}]`), 400, "messages[1].content[0].input", "JSON object"},
		{"an image of a type the providers do not take", messagesConversation(`[{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": "Qk0="}}]}]`),
			400, "messages[0].content[0].source.media_type", "image/png"},
		{"image bytes that are not what they say", messagesConversation(`[{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "` + onePixelPNG + `"}}]}]`),
			400, "messages[0].content[0].source.data", "not a image/jpeg"},
		{"an image by http URL", messagesConversation(`[{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://images.example/a.png"}}]}]`),
			400, "messages[0].content[0].source.url", "https"},
		{"an image in a tool_result", messagesConversation(`[{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
			{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": [{"type": "image", "source": {"type": "url", "url": "https://i.example/a.png"}}]}]}]`),
			400, "messages[2].content[0].content[0].type", "only text"},
		{"a server tool", messagesBody("conclave/auto", `"tools": [{"type": "web_search_20250305", "name": "web_search"}]`), 400, "tools[0].type", "server tools"},
		{"a tool without input_schema", messagesBody("conclave/auto", `"tools": [{"name": "f"}]`), 400, "tools[0].input_schema", "required"},
		{"an input_schema not of type object", messagesBody("conclave/auto", `"tools": [{"name": "f", "input_schema": {"type": "string"}}]`), 400, "tools[0].input_schema.type", "object"},
		{"tool_choice any without tools", messagesBody("conclave/auto", `"tool_choice": {"type": "any"}`), 400, "tool_choice", "needs tools"},
		{"tool_choice naming no tool", messagesBody("conclave/auto", anthropicWeatherTool, `"tool_choice": {"type": "tool", "name": "get_time"}`), 400, "tool_choice.name", "none of the tools"},
		{"fallbacks of a panel", messagesBody("conclave/auto", `"fallbacks": ["x"]`), 400, "fallbacks", "direct call"},
		{"no user turn", messagesConversation(`[{"role": "assistant", "content": "Hello."}]`), 400, "messages", "user message"},
		{"not an object", `[1]`, 400, "body", "JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, status, ps := s.parseMessages([]byte(tt.body))
			if status != tt.status {
				t.Fatalf("status %d, want %d: %v", status, tt.status, ps)
			}
			for _, p := range ps {
				if p.Field == tt.field && strings.Contains(p.Message, tt.message) {
					return
				}
			}
			t.Fatalf("no problem %s %q among %v", tt.field, tt.message, ps)
		})
	}
}

func TestRenderMessage(t *testing.T) {
	tests := []struct {
		desc  string
		exec  *messages.Execution
		stops []string
		// reason and sequence are the stop reason and sequence; blocks the content's types.
		reason, sequence string
		blocks           []string
		err              bool
	}{
		{"text that ended", &messages.Execution{Answer: "Hi.", FinishReason: "stop"}, nil, "end_turn", "", []string{"text"}, false},
		{"Anthropic's stop sequence, the caller's only one", &messages.Execution{Answer: "Hi", FinishReason: "stop_sequence"}, []string{"END"}, "stop_sequence", "END", []string{"text"}, false},
		{"a stop sequence among several: which is unknown", &messages.Execution{Answer: "Hi", FinishReason: "stop_sequence"}, []string{"A", "B"}, "stop_sequence", "", []string{"text"}, false},
		{"Gemini's MAX_TOKENS", &messages.Execution{Answer: "Hi", FinishReason: "MAX_TOKENS"}, nil, "max_tokens", "", []string{"text"}, false},
		{"a content filter", &messages.Execution{FinishReason: "content_filter"}, nil, "refusal", "", nil, false},
		{"text and tool calls", &messages.Execution{Answer: "Looking.", FinishReason: "tool_calls",
			ToolCalls: []*messages.ToolCall{{Id: "call_1", Name: "f", Arguments: `{"x":1}`}, {Id: "functions.g:0", Name: "g"}}}, nil, "tool_use", "", []string{"text", "tool_use", "tool_use"}, false},
		{"arguments that are no object", &messages.Execution{ToolCalls: []*messages.ToolCall{{Id: "c", Name: "f", Arguments: `[1]`}}}, nil, "", "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			m, err := renderMessage(tt.exec, "m", tt.stops)
			if (err != nil) != tt.err {
				t.Fatalf("error %v", err)
			}
			if err != nil {
				return
			}
			var blocks []string
			for _, b := range m.Content {
				switch b := b.(type) {
				case anthropicText:
					blocks = append(blocks, b.Type)
				case anthropicToolUse:
					blocks = append(blocks, b.Type)
					if !toolUseID.MatchString(b.ID) || len(b.Input) == 0 || b.Caller.Type != "direct" {
						t.Fatalf("tool_use %+v", b)
					}
				}
			}
			sequence := ""
			if m.StopSequence != nil {
				sequence = *m.StopSequence
			}
			if *m.StopReason != tt.reason || sequence != tt.sequence || !slices.Equal(blocks, tt.blocks) {
				t.Fatalf("reason %q sequence %q blocks %v", *m.StopReason, sequence, blocks)
			}
		})
	}
}

func TestAnthropicErrorTypes(t *testing.T) {
	for status, typ := range map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
		413: "request_too_large", 415: "invalid_request_error", 429: "rate_limit_error", 500: "api_error", 502: "api_error", 503: "overloaded_error",
		504: "timeout_error", 529: "overloaded_error"} {
		if got := anthropicErrorOf(status, "", "x", "", nil).Error.Type; got != typ {
			t.Errorf("%d: %s, want %s", status, got, typ)
		}
	}
	body := anthropicErrorOf(http.StatusBadRequest, "", "the request is invalid", "r-1", []*messages.Problem{{Field: "max_tokens", Message: "is required"}})
	if body.Type != "error" || *body.RequestID != "r-1" || body.Error.Message != "the request is invalid: max_tokens is required" || len(body.Conclave.Details) != 1 {
		t.Fatalf("%+v", body)
	}
}
