package httpapi

import (
	"encoding/json"
	"fmt"
	"github.com/conclave-ai/conclave/internal/core/wire"
	"net/http"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
	"github.com/julienschmidt/httprouter"
)

// Anthropic's surface: POST /v1/messages in the Messages API's request and response shapes, its
// events when streaming, and its error shape. A client written for Anthropic's API points its base URL
// at Conclave and names a model as on chat completions (conclave/auto, conclave/<blueprint>, or a
// catalog model for a direct call). The request becomes the same ask the OpenAI door builds
// (anthropic_ask.go), so the models, the record and consensus see no difference.

// messagesPath is the door's path; paths under it answer in Anthropic's error shape too.
const messagesPath = "/v1/messages"

// isMessagesPath reports whether a client of a path is Anthropic's.
func isMessagesPath(path string) bool {
	return path == messagesPath || strings.HasPrefix(path, messagesPath+"/")
}

// messagesFields are the request fields of the Messages API that Conclave takes, beside its own.
var messagesFields = map[string]bool{
	"model": true, "messages": true, "system": true, "max_tokens": true, "temperature": true, "top_p": true,
	"stop_sequences": true, "tools": true, "tool_choice": true, "metadata": true, "stream": true,
	"timeout": true, "strict_parameters": true, "fallbacks": true, "cache": true,
}

// messagesRefused are fields of the Messages API that Conclave does not carry, refused by name with why,
// rather than dropped: a caller learns at once what its request would have lost.
var messagesRefused = map[string]string{
	"top_k": "is not supported: Conclave's sampling has no top_k, and OpenAI's wire format cannot carry it to a panel's " +
		"members; use temperature or top_p",
	"thinking":           "is not supported: Conclave carries no extended thinking",
	"output_config":      "is not supported: Conclave carries no output configuration on /v1/messages (response_format on /v1/chat/completions is its structured output)",
	"cache_control":      noCaching,
	"service_tier":       "is not supported: Conclave chooses no provider's service tier",
	"container":          "is not supported: Conclave runs no server tools",
	"mcp_servers":        "is not supported: Conclave runs no server tools",
	"context_management": "is not supported: Conclave manages no context at a provider",
	"inference_geo":      "is not supported: Conclave chooses no provider's region",
}

// messagesTakes are the members objectFields lets through: those Conclave takes, and those it refuses by
// name (every other member is an unknown field).
var messagesTakes = withRefused(messagesFields, messagesRefused)

// parseMessages is the Messages API's decoder: it decodes a body and has intake judge the request,
// collecting every problem. The status is 0 when the request is valid, 400 for malformed input and 404
// when the model is unknown.
func (s *Server) parseMessages(body []byte) (*chatRequest, int, []*messages.Problem) {
	return decodeAsk(s, body, messagesTakes, s.readAnthropic)
}

// readAnthropic reads the Messages API's own members: those refused by name, the model, the
// conversation (the system prompt and the messages), the tools, the tool choice (with whether the
// model may call tools in parallel), the sampling parameters and the stream's.
func (s *Server) readAnthropic(fields map[string]json.RawMessage, bad *report) *chatRequest {
	out := s.readAnthropicPrompt(fields, bad)
	ask := out.route.Ask
	messagesSampling.readInto(ask.Sampling, fields, "", bad)
	if raw, ok := given(fields, "stream"); ok && json.Unmarshal(raw, &out.stream) != nil {
		bad.Add("stream", "must be a boolean")
	}
	return out
}

// readAnthropicPrompt reads what a message's prompt is made of: the members refused by name, the
// model, the conversation, the tools and the tool choice (the body of count_tokens, and of a message
// but for its sampling and stream).
func (s *Server) readAnthropicPrompt(fields map[string]json.RawMessage, bad *report) *chatRequest {
	refuseByName(fields, messagesRefused, bad)
	out := s.readModel(fields, bad)
	ask := &messages.Ask{}
	if conv := readAnthropicConversation(fields, bad); conv != nil {
		conv.into(out.route, ask)
	}
	bad.alias("task", "messages")
	bad.visit("tools")
	ask.Tools = readGiven(fields, "tools", readAnthropicTools, bad)
	ask.Sampling = &messages.Sampling{}
	if raw, ok := given(fields, "tool_choice"); ok {
		ask.ToolChoice, ask.Sampling.ParallelToolCalls = readAnthropicToolChoice(raw, bad)
	}
	if n := cacheMarks(ask); n > maxCacheMarks {
		bad.Add("cache_control", fmt.Sprintf("%d blocks and tools carry cache_control; the Messages API allows at most %d", n, maxCacheMarks))
	}
	out.route.Ask = ask
	return out
}

// cacheMarks counts the blocks and tools of an ask that carry cache_control.
func cacheMarks(ask *messages.Ask) int {
	n := 0
	for _, m := range ask.GetMessages() {
		if m.CacheControl != "" {
			n++
		}
		for _, p := range m.Content {
			if p.CacheControl != "" {
				n++
			}
		}
	}
	for _, t := range ask.GetTools() {
		if t.CacheControl != "" {
			n++
		}
	}
	return n
}

// countTokensPath is the door that counts a message's input tokens (the Anthropic SDK's countTokens).
const countTokensPath = messagesPath + "/count_tokens"

// countTokensTakes are the members of a count_tokens body: a message's prompt, without its sampling.
var countTokensTakes = withRefused(map[string]bool{"model": true, "messages": true, "system": true, "tools": true, "tool_choice": true},
	messagesRefused)

// parseCountTokens is count_tokens' decoder: a message's body without max_tokens, judged as one.
func (s *Server) parseCountTokens(body []byte) (*chatRequest, int, []*messages.Problem) {
	return decodeAsk(s, body, countTokensTakes, s.readAnthropicPrompt)
}

// countTokens answers POST /v1/messages/count_tokens with {"input_tokens": n}: the prompt counted as
// the books count a call's (Engine.CountTokens), with no model called and nothing charged.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	serve(s, w, r, messagesDoor, s.parseCountTokens, func(_ exchange, req *chatRequest) {
		writeJSON(w, http.StatusOK, map[string]int{"input_tokens": s.engine.CountTokens(req.route)})
	})
}

// messageEncoder is the Messages API's encoder: a message, or its events.
type messageEncoder struct {
	msg    *chatRequest
	events *messageEvents // the stream's writer, once it began
}

func (e *messageEncoder) stream(x exchange, st *sseStream) func(*messages.Delta) {
	e.events = &messageEvents{st: st, id: x.id, model: e.msg.model}
	return e.events.delta
}

// render is the answer as a message; an answer whose tool calls cannot be tool_use blocks is a 502.
func (e *messageEncoder) render(x exchange, exec *messages.Execution) (anthropicMessage, *messages.Execution) {
	answer, err := renderMessage(exec, e.msg.model, e.msg.route.GetAsk().GetSampling().GetStop())
	if err != nil {
		return answer, &messages.Execution{RequestId: x.id, StatusCode: http.StatusBadGateway, Error: &messages.Failure{Code: "no_valid_answer", Message: err.Error()}}
	}
	return answer, exec
}

func (e *messageEncoder) finish(exec *messages.Execution, answer anthropicMessage) {
	if e.events.complete(exec) {
		e.events.finish(answer)
	}
}

func (e *messageEncoder) fail(exec *messages.Execution) { e.events.fail(exec) }

// anthropicMessage is the Messages API's answer, with Conclave's extension (which Anthropic's clients
// ignore, as they ignore any field they do not know).
type anthropicMessage struct {
	ID           string             `json:"id"`
	Type         string             `json:"type"`
	Role         string             `json:"role"`
	Model        string             `json:"model"`
	Content      []any              `json:"content"`
	StopReason   *string            `json:"stop_reason"`
	StopSequence *string            `json:"stop_sequence"`
	StopDetails  any                `json:"stop_details"`
	Container    any                `json:"container"`
	Usage        anthropicUsage     `json:"usage"`
	Conclave     *conclaveExtension `json:"conclave,omitempty"`
}

// anthropicUsage is the answer's usage: input_tokens leaves out the tokens read from and written to
// the providers' prompt caches, counted apart as the API counts them. Server tools, regions and
// service tiers are no part of Conclave: those fields are null, as the API writes what does not apply.
type anthropicUsage struct {
	InputTokens              int32 `json:"input_tokens"`
	OutputTokens             int32 `json:"output_tokens"`
	CacheCreation            any   `json:"cache_creation"`
	CacheCreationInputTokens int32 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int32 `json:"cache_read_input_tokens"`
	InferenceGeo             any   `json:"inference_geo"`
	ServerToolUse            any   `json:"server_tool_use"`
	ServiceTier              any   `json:"service_tier"`
}

// anthropicUsageOf is a record's usage as a message reports it.
func anthropicUsageOf(u *messages.Usage) anthropicUsage {
	read, written := u.GetCacheReadTokens(), u.GetCacheWriteTokens()
	return anthropicUsage{InputTokens: max(u.GetInputTokens()-read-written, 0), OutputTokens: u.GetOutputTokens(),
		CacheReadInputTokens: read, CacheCreationInputTokens: written}
}

type anthropicText struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Citations any    `json:"citations"`
}

type anthropicToolUse struct {
	Type   string          `json:"type"`
	ID     string          `json:"id"`
	Name   string          `json:"name"`
	Input  json.RawMessage `json:"input"`
	Caller anthropicCaller `json:"caller"`
}

// anthropicCaller says who called a tool: the model itself ("direct"), never a server tool here.
type anthropicCaller struct {
	Type string `json:"type"`
}

// renderMessage is an execution's answer as a message: its text, then its tool calls as tool_use
// blocks. stops are the caller's stop sequences. A tool call whose arguments are no JSON object cannot
// be a tool_use block: that is an error.
func renderMessage(e *messages.Execution, model string, stops []string) (anthropicMessage, error) {
	ext := extensionOf(e)
	reason := stopReason(e)
	m := anthropicMessage{ID: e.RequestId, Type: "message", Role: "assistant", Model: model, Content: []any{},
		StopReason: &reason, Conclave: &ext,
		Usage: anthropicUsageOf(e.GetUsage())}
	// Which sequence stopped the model is known for certain only when the caller gave one.
	if reason == "stop_sequence" && len(stops) == 1 {
		m.StopSequence = &stops[0]
	}
	if e.Answer != "" {
		m.Content = append(m.Content, anthropicText{Type: "text", Text: e.Answer})
	}
	for _, c := range e.ToolCalls {
		input, err := toolInput(c)
		if err != nil {
			return anthropicMessage{}, err
		}
		m.Content = append(m.Content, anthropicToolUse{Type: "tool_use", ID: wire.ToolUseID(c.Id), Name: c.Name, Input: input, Caller: anthropicCaller{Type: "direct"}})
	}
	return m, nil
}

// toolInput is a tool call's arguments as a tool_use block's input: a JSON object (none is {}).
func toolInput(c *messages.ToolCall) (json.RawMessage, error) {
	args := strings.TrimSpace(c.Arguments)
	if args == "" {
		return json.RawMessage("{}"), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("the model called %s with arguments that are not a JSON object", problems.Clip(c.Name, 64))
	}
	return json.RawMessage(args), nil
}

// stopReason is the answer's stop reason as the Messages API names it, whatever wire format the model
// answered in. stop_sequence is known only from a model that says so (Anthropic's): OpenAI's and
// Gemini's formats say stop for a stop sequence as for a natural end.
func stopReason(e *messages.Execution) string {
	switch finishReason(e) {
	case "tool_calls":
		return "tool_use"
	case "length":
		return "max_tokens"
	case "content_filter":
		return "refusal"
	}
	if strings.EqualFold(e.FinishReason, "stop_sequence") {
		return "stop_sequence"
	}
	return "end_turn"
}

// anthropicErrorBody is the Messages API's error shape. Conclave's code and the problems it found are
// in its extension beside it: the API's error.details is an object of its own.
type anthropicErrorBody struct {
	Type      string             `json:"type"`
	Error     anthropicError     `json:"error"`
	RequestID *string            `json:"request_id"`
	Conclave  *anthropicErrorExt `json:"conclave,omitempty"`
}

type anthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

type anthropicErrorExt struct {
	Code    string              `json:"code,omitempty"`
	Details []*messages.Problem `json:"details"`
}

// anthropicErrorType is the error type Anthropic's clients expect for a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529: // no model could answer now: Anthropic's overloaded
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	if status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// anthropicErrorOf is an error body: the message names the first problems, the extension lists them
// all (bounded). requestID is "" when the request got none.
func anthropicErrorOf(status int, code, message, requestID string, details []*messages.Problem) anthropicErrorBody {
	details = clipProblems(details)
	body := anthropicErrorBody{Type: "error", Error: anthropicError{Type: anthropicErrorType(status), Message: problemSummary(message, details)}}
	if requestID != "" {
		body.RequestID = &requestID
	}
	if code != "" || len(details) > 0 {
		body.Conclave = &anthropicErrorExt{Code: code, Details: details}
	}
	return body
}

// writeAnthropicError writes an error in Anthropic's shape, with the request's id when it has one.
func writeAnthropicError(w http.ResponseWriter, status int, code, message string, details []*messages.Problem) {
	writeJSON(w, status, anthropicErrorOf(status, code, message, w.Header().Get("X-Request-ID"), details))
}

// anthropicPing is the event that keeps a Messages stream open while it has nothing to say.
const anthropicPing = "event: ping\ndata: {\"type\": \"ping\"}\n\n"

// messageEvents writes a message as the Messages API streams it: message_start, then each content
// block (content_block_start, its deltas, content_block_stop), then message_delta with the stop reason
// and the usage, then message_stop. A direct call's pieces go out as its model writes them; its
// methods run on the engine's listener, one at a time.
type messageEvents struct {
	st      *sseStream
	id      string
	model   string
	started bool
	blocks  int             // content blocks started
	open    int             // the block open now, or -1
	text    bool            // the open block is text
	calls   map[int32]int   // each tool call's block, by the call's index
	relayed strings.Builder // the answer's text written so far
}

// start writes message_start: the message without content, its usage to come in message_delta.
func (m *messageEvents) start() {
	if m.started {
		return
	}
	m.started, m.open, m.calls = true, -1, map[int32]int{}
	m.st.named("message_start", map[string]any{"type": "message_start", "message": anthropicMessage{ID: m.id, Type: "message", Role: "assistant",
		Model: m.model, Content: []any{}}})
}

// begin closes the open block and starts the next one.
func (m *messageEvents) begin(block any, text bool) int {
	m.close()
	m.open, m.text = m.blocks, text
	m.blocks++
	m.st.named("content_block_start", map[string]any{"type": "content_block_start", "index": m.open, "content_block": block})
	return m.open
}

func (m *messageEvents) close() {
	if m.open >= 0 {
		m.st.named("content_block_stop", map[string]any{"type": "content_block_stop", "index": m.open})
		m.open = -1
	}
}

func (m *messageEvents) delta(d *messages.Delta) {
	m.start()
	if d.Text != "" {
		if m.open < 0 || !m.text {
			m.begin(anthropicText{Type: "text", Text: ""}, true)
		}
		m.st.named("content_block_delta", map[string]any{"type": "content_block_delta", "index": m.open,
			"delta": map[string]string{"type": "text_delta", "text": d.Text}})
		m.relayed.WriteString(d.Text)
	}
	for _, c := range d.ToolCalls {
		block, ok := m.calls[c.Index]
		if !ok {
			block = m.begin(anthropicToolUse{Type: "tool_use", ID: wire.ToolUseID(c.Id), Name: c.Name, Input: json.RawMessage("{}"),
				Caller: anthropicCaller{Type: "direct"}}, false)
			m.calls[c.Index] = block
		}
		if c.Arguments != "" {
			m.st.named("content_block_delta", map[string]any{"type": "content_block_delta", "index": block,
				"delta": map[string]string{"type": "input_json_delta", "partial_json": c.Arguments}})
		}
	}
}

// complete writes what the stream has not yet said of the answer: all of it when nothing was relayed
// (a panel's answer), the rest of a text the answer continues (a synthesis the consensus completed), and
// each tool call not relayed, whole. An answer that replaced the text relayed (the arbiter's verdict was
// not usable) ends the stream with an error instead, and complete reports false: the caller has read
// text that is not the answer, and the record holds the answer.
func (m *messageEvents) complete(e *messages.Execution) bool {
	m.start()
	add := func(piece string) { m.delta(&messages.Delta{Text: piece}) }
	fail := func() {
		failed := superseded(e.RequestId)
		failed.RequestId = e.RequestId
		m.fail(failed)
	}
	if !continueAnswer(e.Answer, m.relayed.String(), add, fail) {
		return false
	}
	for i, c := range e.ToolCalls {
		if _, relayed := m.calls[int32(i)]; relayed {
			continue
		}
		args, _ := toolInput(c) // renderMessage checked them
		m.delta(&messages.Delta{ToolCalls: []*messages.ToolCallDelta{{Index: int32(i), Id: c.Id, Name: c.Name, Arguments: string(args)}}})
	}
	return true
}

// finish ends the message: the open block, then message_delta with the stop reason, the usage (input
// tokens included: message_start could not know them) and Conclave's extension, then message_stop.
func (m *messageEvents) finish(answer anthropicMessage) {
	m.start()
	m.close()
	usage := answer.Usage
	m.st.named("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": answer.StopReason, "stop_sequence": answer.StopSequence, "stop_details": nil, "container": nil},
		"usage": usage, "conclave": answer.Conclave})
	m.st.named("message_stop", map[string]string{"type": "message_stop"})
}

// fail ends a begun stream with an error event: Anthropic's clients see an error, not a cut message.
func (m *messageEvents) fail(e *messages.Execution) {
	m.st.named("error", anthropicErrorOf(int(e.StatusCode), e.Error.GetCode(), e.Error.GetMessage(), e.RequestId, e.Error.GetDetails()))
}
