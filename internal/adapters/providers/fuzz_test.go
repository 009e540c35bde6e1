package providers

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// FuzzParseResponses feeds every adapter's parser any body, status and rate-limit headers, as a whole
// answer and as a stream of events: each ends in a reply or a classified error, never a panic, and never
// quotes more than a bounded part of what it was given. A reply's tool calls all have ids, and a
// stream's pieces put together are its reply.
func FuzzParseResponses(f *testing.F) {
	f.Add(200, `{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`, "5", "1s")
	f.Add(200, `{"content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`, "", "")
	f.Add(200, `{"candidates":[{"content":{"parts":[{"text":"hi"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3}}`, "", "")
	f.Add(429, `{"error":{"message":"slow down","type":"rate_limit_error"}}`, "0", "30")
	f.Add(200, `{"error":{"message":"generation failed","code":502}}`, "", "")
	f.Add(500, `<html>oops</html>`, "", "")
	f.Add(200, `{"choices":[]}`, "-1", "999999999999")
	f.Add(200, `{"id":"x","choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},{"function":{"name":"g","arguments":{"b":2}}}]},"finish_reason":"tool_calls"}]}`, "", "")
	f.Add(200, `{"id":"msg","type":"message","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}},{"type":"tool_use","name":"answer","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":1}}`, "", "")
	f.Add(200, `{"candidates":[{"content":{"parts":[{"text":"hi"},{"functionCall":{"name":"f","args":{"a":1}},"thoughtSignature":"c2ln"},{"functionCall":{"name":"g"}}]},"finishReason":"STOP"}],"responseId":"r"}`, "", "")
	f.Add(200, "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"he\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\"}}]}}]}\n\n"+
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n", "", "")
	f.Add(200, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n"+
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"+
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n"+
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n"+
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", "", "")
	f.Add(200, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", "", "")
	f.Add(200, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]}\r\n\r\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":{}}}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":3}}\r\n\r\n", "", "")
	f.Add(200, "data: {\"error\":{\"code\":503,\"message\":\"overloaded\",\"status\":\"UNAVAILABLE\"}}\n\n", "", "")
	f.Fuzz(func(t *testing.T, status int, body, remaining, reset string) {
		h := http.Header{}
		h.Set("x-ratelimit-remaining-requests", remaining)
		h.Set("x-ratelimit-reset-requests", reset)
		h.Set("retry-after", reset)
		h.Set("anthropic-ratelimit-requests-remaining", remaining)
		status = 100 + (status%500+500)%500
		now := func() time.Time { return time.Unix(1_700_000_000, 0) }
		parsers := map[string]func() (Reply, error){
			"openai": func() (Reply, error) {
				return (&OpenAI{Provider: "groq", Profile: ProfileOf("groq"), Now: now}).ParseChat("m", status, h, []byte(body))
			},
			"anthropic": func() (Reply, error) {
				return (&Anthropic{Provider: "anthropic"}).ParseMessage("m", status, h, []byte(body))
			},
			"anthropic with a response format": func() (Reply, error) {
				return (&Anthropic{Provider: "anthropic"}).parseMessage("m", status, h, []byte(body), "answer")
			},
			"gemini": func() (Reply, error) {
				return (&Gemini{Provider: "gemini"}).ParseGenerate("m", status, h, []byte(body))
			},
		}
		classified := func(name string, err error) {
			var re *resilience.Error
			if !errors.As(err, &re) || re.Kind == "" {
				t.Fatalf("%s: an error without a kind: %v", name, err)
			}
			if len(err.Error()) > 4096 {
				t.Fatalf("%s: an error of %d bytes", name, len(err.Error()))
			}
		}
		for name, parse := range parsers {
			reply, err := parse()
			if err != nil {
				classified(name, err)
				continue
			}
			if status >= 300 {
				t.Fatalf("%s: status %d parsed as an answer %+v", name, status, reply)
			}
			for _, c := range reply.ToolCalls {
				if c.ID == "" {
					t.Fatalf("%s: a tool call without an id: %+v", name, reply.ToolCalls)
				}
			}
		}
		ctx := context.Background()
		streams := map[string]func(onDelta func(Delta)) (Reply, error){
			"openai stream": func(onDelta func(Delta)) (Reply, error) {
				return (&OpenAI{Provider: "openrouter", Profile: ProfileOf("openrouter"), Now: now}).ReadChatStream(ctx, "m", 200, h, strings.NewReader(body), onDelta)
			},
			"anthropic stream": func(onDelta func(Delta)) (Reply, error) {
				return (&Anthropic{Provider: "anthropic", Now: now}).ReadMessageStream(ctx, "m", "", 200, h, strings.NewReader(body), onDelta)
			},
			"gemini stream": func(onDelta func(Delta)) (Reply, error) {
				return (&Gemini{Provider: "gemini", Now: now}).ReadGenerateStream(ctx, "m", 200, h, strings.NewReader(body), onDelta)
			},
		}
		for name, read := range streams {
			var deltas []Delta
			reply, err := read(func(d Delta) { deltas = append(deltas, d) })
			if err != nil {
				classified(name, err)
				continue
			}
			text, calls := assemble(deltas)
			if text != reply.Text || !slices.Equal(calls, reply.ToolCalls) {
				t.Fatalf("%s: pieces make %q %+v, the reply is %q %+v", name, text, calls, reply.Text, reply.ToolCalls)
			}
			for _, c := range reply.ToolCalls {
				if c.ID == "" {
					t.Fatalf("%s: a tool call without an id: %+v", name, reply.ToolCalls)
				}
			}
		}
	})
}
