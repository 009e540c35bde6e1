package providertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
)

// answer is a composed answer: its text and tool calls, usage, and the ids the calls get.
type answer struct {
	model, text string
	calls       []ToolCall
	usage
}

// compose makes the answer to a call: the response's text and tool calls, else the Answerer's text; a
// call that forces a tool gets that tool called with the text as its input (the text itself when it is
// a JSON object, else {"answer": text}), as a model forced to call it would.
func (s *Server) compose(a ask, resp Response) answer {
	ans := answer{model: a.model, text: resp.Text, calls: append([]ToolCall(nil), resp.ToolCalls...),
		usage: usage{in: resp.InputTokens, read: resp.CacheRead, write: resp.CacheWrite, out: resp.OutputTokens}}
	if ans.in == 0 && ans.out == 0 {
		ans.in, ans.out = 12, 7
	}
	if ans.text == "" && len(ans.calls) == 0 {
		ans.text = s.answer(a.model, a.prompt)
	}
	if a.forced != "" && len(ans.calls) == 0 {
		args := strings.TrimSpace(ans.text)
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
			raw, _ := json.Marshal(map[string]string{"answer": ans.text})
			args = string(raw)
		}
		ans.text, ans.calls = "", []ToolCall{{Name: a.forced, Arguments: args}}
	}
	for i := range ans.calls {
		if ans.calls[i].ID == "" && s.Format != Gemini {
			prefix := "call_"
			if s.Format == Anthropic {
				prefix = "toolu_"
			}
			ans.calls[i].ID = fmt.Sprintf("%s%02d", prefix, i+1)
		}
		if ans.calls[i].Arguments == "" {
			ans.calls[i].Arguments = "{}"
		}
	}
	return ans
}

// whole is a composed answer in one body.
func (s *Server) whole(a ask, resp Response) Response {
	ans := s.compose(a, resp)
	out := Response{Header: map[string]string{}, Cut: resp.Cut, KeepAlive: resp.KeepAlive}
	switch s.Format {
	case Anthropic:
		out.Header["request-id"] = "req_011"
		out.Body = anthropicAnswer(ans)
	case Gemini:
		out.Body = geminiChunk(ans.model, geminiParts(ans.text, ans.calls), "STOP", ans.usage)
	default:
		out.Header["x-request-id"] = "req_abc"
		out.Body = chatAnswer(ans)
	}
	for k, v := range resp.Header {
		out.Header[k] = v
	}
	return out
}

func chatAnswer(ans answer) string {
	if len(ans.calls) == 0 {
		return chatCompletion(ans.model, ans.text, ans.usage)
	}
	content := "null"
	if ans.text != "" {
		content = quote(ans.text)
	}
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","created":1767225600,"model":%s,`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":%s,"refusal":null,"tool_calls":[%s]},"logprobs":null,"finish_reason":"tool_calls"}],`+
		`"usage":%s}`, quote(ans.model), content, chatCalls(ans.calls), ans.usage.openAI())
}

func chatCalls(calls []ToolCall) string {
	var out []string
	for _, c := range calls {
		out = append(out, fmt.Sprintf(`{"id":%s,"type":"function","function":{"name":%s,"arguments":%s}}`, quote(c.ID), quote(c.Name), quote(c.Arguments)))
	}
	return strings.Join(out, ",")
}

func anthropicAnswer(ans answer) string {
	if len(ans.calls) == 0 {
		return anthropicMessage(ans.model, ans.text, ans.usage)
	}
	var blocks []string
	if ans.text != "" {
		blocks = append(blocks, fmt.Sprintf(`{"type":"text","text":%s,"citations":null}`, quote(ans.text)))
	}
	for _, c := range ans.calls {
		blocks = append(blocks, fmt.Sprintf(`{"type":"tool_use","id":%s,"name":%s,"input":%s,"caller":{"type":"direct"}}`, quote(c.ID), quote(c.Name), c.Arguments))
	}
	return fmt.Sprintf(`{"id":"msg_01","type":"message","role":"assistant","model":%s,"content":[%s],`+
		`"stop_reason":"tool_use","stop_sequence":null,"stop_details":null,"container":null,"usage":%s}`, quote(ans.model), strings.Join(blocks, ","),
		ans.usage.anthropic())
}

// geminiParts are the parts of a model turn: its text, then its calls (the first with its signature).
func geminiParts(text string, calls []ToolCall) []string {
	var parts []string
	if text != "" || len(calls) == 0 {
		parts = append(parts, fmt.Sprintf(`{"text":%s}`, quote(text)))
	}
	for _, c := range calls {
		id := ""
		if c.ID != "" {
			id = `"id":` + quote(c.ID) + ","
		}
		sig := ""
		if c.Signature != "" {
			sig = `,"thoughtSignature":` + quote(c.Signature)
		}
		parts = append(parts, fmt.Sprintf(`{"functionCall":{%s"name":%s,"args":%s}%s}`, id, quote(c.Name), c.Arguments, sig))
	}
	return parts
}

// geminiChunk is a generateContent answer, or a chunk of a stream (finish empty but for the last).
func geminiChunk(model string, parts []string, finish string, u usage) string {
	reason := ""
	if finish != "" {
		reason = `"finishReason":` + quote(finish) + ","
	}
	return fmt.Sprintf(`{"candidates":[{"content":{"parts":[%s],"role":"model"},%s"index":0}],"usageMetadata":%s,"modelVersion":%s,"responseId":"resp-1"}`,
		strings.Join(parts, ","), reason, u.gemini(), quote(model))
}

// pieces splits text the way a stream carries it: word by word.
func pieces(text string) []string {
	var out []string
	for _, p := range strings.SplitAfter(text, " ") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// argPieces splits a call's arguments into pieces of a few characters, never inside a character.
func argPieces(args string) []string {
	var out []string
	for len(args) > 0 {
		n := 0
		for i := 0; i < 8 && n < len(args); i++ {
			_, size := utf8.DecodeRuneInString(args[n:])
			n += size
		}
		out = append(out, args[:n])
		args = args[n:]
	}
	return out
}

// event is one event of a stream: its name (Anthropic's) and data.
type event struct{ name, data string }

// stream writes a composed answer as the format streams it: each event written and flushed, the first
// at once and each later one when Pace allows; StreamError ends it with an error event after the text,
// Cut hangs up before its end.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, a ask, resp Response) {
	ans := s.compose(a, resp)
	body, end := s.events(a, ans)
	if e := resp.StreamError; e != nil {
		body = body[:textEvents(s.Format, body, ans)]
		end = []event{s.errorEvent(*e)}
	}
	array := s.Format == Gemini && !a.sse
	writeStreamHeader(w, resp.Header, array)
	all := body
	if !resp.Cut {
		all = append(all, end...)
	}
	for i, ev := range all {
		if i > 0 && !paced(r, resp.Pace) {
			return
		}
		writeEvent(w, i, ev, array)
		w.(http.Flusher).Flush()
	}
	if resp.Cut {
		hangUp(w)
		return
	}
	if array {
		io.WriteString(w, "]")
	}
}

// writeStreamHeader writes a stream's header: the response's own fields, and the content type of a
// JSON array (Gemini without alt=sse) or of an event stream.
func writeStreamHeader(w http.ResponseWriter, header map[string]string, array bool) {
	for k, v := range header {
		w.Header().Set(k, v)
	}
	if array {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
	}
	w.WriteHeader(http.StatusOK)
}

// paced waits until pace allows the next event (at once without a pace); false when the client has
// gone first.
func paced(r *http.Request, pace <-chan struct{}) bool {
	if pace == nil {
		return true
	}
	select {
	case <-pace:
		return true
	case <-r.Context().Done():
		return false
	}
}

// writeEvent writes event i of a stream: an element of the JSON array, or a server-sent event with its
// name when it has one.
func writeEvent(w http.ResponseWriter, i int, ev event, array bool) {
	switch {
	case array && i == 0:
		io.WriteString(w, "["+ev.data)
	case array:
		io.WriteString(w, ",\r\n"+ev.data)
	case ev.name != "":
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, ev.data)
	default:
		fmt.Fprintf(w, "data: %s\n\n", ev.data)
	}
}

// textEvents is how many events of a stream carry its start and text, before any tool call or end.
func textEvents(format string, body []event, ans answer) int {
	n := len(pieces(ans.text))
	switch format {
	case Anthropic:
		if ans.text != "" {
			n += 3 // message_start, content_block_start, ping
		} else {
			n = 1
		}
	case OpenAI:
		n++ // the role
	}
	return min(n, len(body))
}

// events are a composed answer's events: body (the start, the text, the calls) and end (the finish,
// the usage, the close).
func (s *Server) events(a ask, ans answer) (body, end []event) {
	words := pieces(ans.text)
	switch s.Format {
	case Anthropic:
		body = append(body, event{"message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":%s,`+
			`"content":[],"stop_reason":null,"stop_sequence":null,"stop_details":null,"container":null,"usage":%s}}`,
			quote(ans.model), usage{in: ans.in, read: ans.read, write: ans.write, out: 1}.anthropic())})
		index := 0
		if ans.text != "" {
			body = append(body, event{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"","citations":null}}`},
				event{"ping", `{"type": "ping"}`})
			for _, w := range words {
				body = append(body, event{"content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%s}}`, quote(w))})
			}
			body = append(body, event{"content_block_stop", `{"type":"content_block_stop","index":0}`})
			index++
		}
		for _, c := range ans.calls {
			body = append(body, event{"content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":%s,"name":%s,"input":{},"caller":{"type":"direct"}}}`,
				index, quote(c.ID), quote(c.Name))})
			for _, p := range argPieces(c.Arguments) {
				body = append(body, event{"content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, index, quote(p))})
			}
			body = append(body, event{"content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, index)})
			index++
		}
		stop := "end_turn"
		if len(ans.calls) > 0 {
			stop = "tool_use"
		}
		end = []event{{"message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%s,"stop_sequence":null,"stop_details":null,"container":null},`+
			`"usage":{"input_tokens":%d,"output_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"server_tool_use":null}}`, quote(stop),
			ans.in-ans.read-ans.write, ans.out, ans.write, ans.read)},
			{"message_stop", `{"type":"message_stop"}`}}
	case Gemini:
		for i, w := range words {
			body = append(body, event{"", geminiChunk(ans.model, []string{fmt.Sprintf(`{"text":%s}`, quote(w))}, "", usage{in: ans.in, read: ans.read, out: i + 1})})
		}
		if len(ans.calls) > 0 {
			body = append(body, event{"", geminiChunk(ans.model, geminiParts("", ans.calls), "", usage{in: ans.in, read: ans.read, out: len(words) + 1})})
		}
		// The last chunk carries the finish reason and the whole answer's usage.
		end = []event{{"", geminiChunk(ans.model, []string{`{"text":""}`}, "STOP", ans.usage)}}
	default:
		chunk := func(delta, finish string) event {
			return event{"", fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1767225600,"model":%s,"choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}`,
				quote(ans.model), delta, finish)}
		}
		body = append(body, chunk(`{"role":"assistant","content":""}`, "null"))
		for _, w := range words {
			body = append(body, chunk(fmt.Sprintf(`{"content":%s}`, quote(w)), "null"))
		}
		for i, c := range ans.calls {
			body = append(body, chunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":%s,"type":"function","function":{"name":%s,"arguments":""}}]}`, i, quote(c.ID), quote(c.Name)), "null"))
			for _, p := range argPieces(c.Arguments) {
				body = append(body, chunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}`, i, quote(p)), "null"))
			}
		}
		finish := `"stop"`
		if len(ans.calls) > 0 {
			finish = `"tool_calls"`
		}
		end = append(end, chunk(`{}`, finish))
		if a.usage {
			end = append(end, event{"", fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1767225600,"model":%s,"choices":[],"usage":%s}`,
				quote(ans.model), ans.usage.openAI())})
		}
		end = append(end, event{"", "[DONE]"})
	}
	return body, end
}

// errorEvent is the format's error event in a stream.
func (s *Server) errorEvent(e StreamError) event {
	switch s.Format {
	case Anthropic:
		return event{"error", AnthropicError(e.Type, e.Message)}
	case Gemini:
		return event{"", GeminiError(e.Code, e.Type, e.Message)}
	}
	var code any // OpenAI's code is a string or null; OpenRouter's a number
	if e.Code != 0 {
		code = e.Code
	}
	return event{"", OpenAIError(e.Message, e.Type, code)}
}
