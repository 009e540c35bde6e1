package httpapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
	"github.com/google/uuid"
	"github.com/julienschmidt/httprouter"
	"go.uber.org/zap"
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
	"timeout": true, "strict_parameters": true, "fallbacks": true,
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
// name below (every other member is an unknown field).
var messagesTakes = func() map[string]bool {
	takes := map[string]bool{}
	for name := range messagesFields {
		takes[name] = true
	}
	for name := range messagesRefused {
		takes[name] = true
	}
	return takes
}()

// parseMessages decodes a Messages body and has intake judge the request, collecting every problem.
// The status is 0 when the request is valid, 400 for malformed input and 404 when the model is unknown.
func (s *Server) parseMessages(body []byte) (*chatRequest, int, []*messages.Problem) {
	fields, bad, ok := objectFields(body, messagesTakes)
	if !ok {
		return nil, http.StatusBadRequest, details(bad.errs)
	}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if why, refused := messagesRefused[name]; refused {
			if _, set := given(fields, name); set {
				bad.Add(name, why)
			}
		}
	}
	out := s.readModel(fields, bad)
	ask := &messages.Ask{}
	if conv := readAnthropicConversation(fields, bad); conv != nil {
		conv.into(out.route, ask)
	}
	bad.alias("task", "messages")
	bad.visit("tools")
	if raw, ok := given(fields, "tools"); ok {
		ask.Tools = readAnthropicTools(raw, bad)
	}
	var parallel *bool
	if raw, ok := given(fields, "tool_choice"); ok {
		ask.ToolChoice, parallel = readAnthropicToolChoice(raw, ask.Tools, bad)
	}
	ask.Sampling = askReader{fields: fields, bad: bad}.anthropicSampling(parallel)
	out.route.Ask = ask
	if raw, ok := given(fields, "stream"); ok && json.Unmarshal(raw, &out.stream) != nil {
		bad.Add("stream", "must be a boolean")
	}
	readOwn(fields, out, bad)
	if status, ps := s.judge(out.route, bad); status != 0 {
		return nil, status, ps
	}
	return out, 0, nil
}

// messagesHandler answers POST /v1/messages: a message, or its events when the caller streams.
func (s *Server) messagesHandler(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	received := time.Now()
	id := uuid.NewString()
	w.Header().Set("X-Request-ID", id)
	w.Header().Set("request-id", id) // where Anthropic's clients read a request's id
	body, ok := s.readJSONWith(w, r, writeAnthropicError)
	if !ok {
		return
	}
	msg, status, why := s.parseMessages(body)
	if status != 0 {
		s.log.Info("request rejected", zap.String("event", "request_rejected"), zap.String("request_id", id), zap.Int("status", status),
			zap.String("endpoint", "messages"), zap.Array("problems", problemsField(why)))
		text := "the request is invalid"
		if status == http.StatusNotFound {
			text = "the model does not exist"
		}
		writeAnthropicError(w, status, "", text, why)
		return
	}
	req := msg.route
	s.received(r, id, received, "messages", msg)

	routing(w) // before the pings, which read it
	var stream *sseStream
	var events *messageEvents
	var exec *messages.Execution
	var err error
	if msg.stream {
		// A direct call's answer, or a rotating arbiter's synthesis, goes out as it is written; any other
		// answer once the consensus has it. Pings keep the stream open meanwhile.
		stream = s.startStreamWith(w, anthropicPing)
		events = &messageEvents{st: stream, id: id, model: msg.model}
		exec, err = s.engine.RouteStreaming(r.Context(), req, events.delta)
	} else {
		exec, err = s.engine.Route(r.Context(), req)
	}
	stream.quiet() // the pings write through w: stop them before w changes
	routed(w, exec)
	exec = s.settle(id, exec, err)
	var answer anthropicMessage
	if exec.StatusCode == http.StatusOK {
		if answer, err = renderMessage(exec, msg.model, req.GetAsk().GetSampling().GetStop()); err != nil {
			exec = &messages.Execution{RequestId: id, StatusCode: http.StatusBadGateway, Error: &messages.Failure{Code: "no_valid_answer", Message: err.Error()}}
		}
	}
	if exec.StatusCode != http.StatusOK {
		if stream.started() {
			events.fail(exec)
			return
		}
		setRetryAfter(w, exec.Error)
		writeAnthropicError(w, int(exec.StatusCode), exec.Error.Code, exec.Error.Message, exec.Error.Details)
		return
	}
	if events == nil {
		writeJSON(w, http.StatusOK, answer)
		return
	}
	if events.complete(exec) {
		events.finish(answer)
	}
}

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

// anthropicUsage is the answer's usage. Prompt caching, server tools, regions and service tiers are no
// part of Conclave: those fields are null, as the API writes what does not apply.
type anthropicUsage struct {
	InputTokens              int32 `json:"input_tokens"`
	OutputTokens             int32 `json:"output_tokens"`
	CacheCreation            any   `json:"cache_creation"`
	CacheCreationInputTokens any   `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     any   `json:"cache_read_input_tokens"`
	InferenceGeo             any   `json:"inference_geo"`
	ServerToolUse            any   `json:"server_tool_use"`
	ServiceTier              any   `json:"service_tier"`
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
		Usage: anthropicUsage{InputTokens: e.GetUsage().GetInputTokens(), OutputTokens: e.GetUsage().GetOutputTokens()}}
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
		m.Content = append(m.Content, anthropicToolUse{Type: "tool_use", ID: providers.ToolUseID(c.Id), Name: c.Name, Input: input, Caller: anthropicCaller{Type: "direct"}})
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
	var b strings.Builder
	b.WriteString(problems.Clip(message, 1024))
	for i, d := range details[:min(len(details), 3)] {
		sep := ": "
		if i > 0 {
			sep = "; "
		}
		b.WriteString(sep + d.Field + " " + d.Message)
	}
	body := anthropicErrorBody{Type: "error", Error: anthropicError{Type: anthropicErrorType(status), Message: b.String()}}
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
			block = m.begin(anthropicToolUse{Type: "tool_use", ID: providers.ToolUseID(c.Id), Name: c.Name, Input: json.RawMessage("{}"),
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
	rest, continues := strings.CutPrefix(e.Answer, m.relayed.String())
	if !continues {
		m.st.named("error", anthropicErrorOf(http.StatusBadGateway, "stream_superseded", "the text streamed so far is not the answer: the consensus "+
			"replaced the arbiter's synthesis; GET /executions/"+e.RequestId+" holds the answer", e.RequestId, nil))
		return false
	}
	for _, piece := range pieces(rest, chunkBytes) {
		m.delta(&messages.Delta{Text: piece})
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
