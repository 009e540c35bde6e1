package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
)

// The Responses API's answer: the response object, and the events a stream of it is made of.

// responseObject is the Responses API's response, with Conclave's extension. What the request set
// (instructions, sampling, tools, tool choice, text format, metadata) is echoed, as OpenAI does.
type responseObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	CompletedAt        *int64             `json:"completed_at"`
	Error              *responseError     `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int32             `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []any              `json:"output"`
	OutputText         string             `json:"output_text"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Temperature        *float64           `json:"temperature"`
	TopP               *float64           `json:"top_p"`
	Text               responseText       `json:"text"`
	ToolChoice         any                `json:"tool_choice"`
	Tools              []responseTool     `json:"tools"`
	Truncation         string             `json:"truncation"`
	Usage              *responseUsage     `json:"usage,omitempty"`
	User               *string            `json:"user,omitempty"`
	SafetyIdentifier   *string            `json:"safety_identifier,omitempty"`
	Metadata           map[string]string  `json:"metadata"`
	Conclave           *conclaveExtension `json:"conclave,omitempty"`
}

// responseError is a failed response's error: code is one of the Responses API's codes, message
// says what failed in Conclave's words (its own code first).
type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type responseText struct {
	Format any `json:"format"`
}

type responseTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      bool            `json:"strict"`
}

// responseUsage counts the tokens of every call the answer took. Conclave counts no cached or
// reasoning tokens apart: their details say zero.
type responseUsage struct {
	InputTokens        int32 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens     int32 `json:"cached_tokens"`
		CacheWriteTokens int32 `json:"cache_write_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int32 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int32 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int32 `json:"total_tokens"`
}

// messageItem is an output message: the answer's text.
type messageItem struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

func textPart(text string) outputText {
	return outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
}

// functionCallItem is a call of a function tool the answer makes.
type functionCallItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	Status    string `json:"status"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// The ids of a response's output items: the item's kind and the request id, so that a stream and the
// response it ends with name each item alike.
func messageID(requestID string) string         { return "msg_" + requestID }
func callItemID(requestID string, i int) string { return fmt.Sprintf("fc_%s_%d", requestID, i) }

// responseEncoder is the Responses API's encoder: the response, or its stream of events.
type responseEncoder struct {
	rr     *responsesRequest
	events *responseEvents // the stream's writer, once it began
}

func (e *responseEncoder) stream(x exchange, st *sseStream) func(*messages.Delta) {
	e.events = newResponseEvents(st, shellOf(e.rr, x.id, x.received))
	return e.events.delta
}

func (e *responseEncoder) render(_ exchange, exec *messages.Execution) (responseObject, *messages.Execution) {
	return renderResponse(exec, e.rr), exec
}

func (e *responseEncoder) finish(exec *messages.Execution, resp responseObject) {
	e.events.finish(exec, resp)
}

func (e *responseEncoder) fail(exec *messages.Execution) { e.events.fail(exec) }

// shellOf is the response of a request before its answer: in progress, no output, what the request
// set echoed.
func shellOf(rr *responsesRequest, requestID string, at time.Time) responseObject {
	ask := rr.route.GetAsk()
	r := responseObject{ID: responseID(requestID), Object: "response", CreatedAt: at.Unix(), Status: "in_progress", Instructions: rr.instructions,
		MaxOutputTokens: rr.maxOutputTokens, Model: rr.model, Output: []any{}, ParallelToolCalls: rr.parallelToolCall,
		Text: responseText{Format: formatOf(ask.GetResponseFormat())}, ToolChoice: toolChoiceOf(ask.GetToolChoice()), Tools: []responseTool{},
		Truncation: "disabled", User: rr.user, SafetyIdentifier: rr.safetyID, Metadata: rr.metadata}
	if s := ask.GetSampling(); s != nil {
		r.Temperature, r.TopP = s.Temperature, s.TopP
	}
	for _, t := range ask.GetTools() {
		tool := responseTool{Type: "function", Name: t.Name, Strict: t.Strict}
		if t.Description != "" {
			tool.Description = &t.Description
		}
		if t.Parameters != "" {
			tool.Parameters = json.RawMessage(t.Parameters)
		}
		r.Tools = append(r.Tools, tool)
	}
	if r.Metadata == nil {
		r.Metadata = map[string]string{}
	}
	return r
}

// formatOf is an output format as text.format names it.
func formatOf(f *messages.OutputFormat) any {
	switch f.GetType() {
	case "json_object":
		return map[string]any{"type": "json_object"}
	case "json_schema":
		return map[string]any{"type": "json_schema", "name": f.Name, "schema": json.RawMessage(f.Schema), "strict": f.Strict}
	}
	return map[string]any{"type": "text"}
}

// toolChoiceOf is a tool choice as the Responses API names it; auto when the request set none.
func toolChoiceOf(c *messages.ToolChoice) any {
	switch {
	case c == nil:
		return "auto"
	case c.Mode == "function":
		return map[string]any{"type": "function", "name": c.Name}
	}
	return c.Mode
}

// renderResponse is a request's answer as the Responses API returns it.
func renderResponse(e *messages.Execution, rr *responsesRequest) responseObject {
	r := shellOf(rr, e.RequestId, e.GetReceivedAt().AsTime())
	r.Status, r.IncompleteDetails = statusOf(e)
	if r.Status == "completed" {
		done := e.GetCompletedAt().AsTime().Unix()
		r.CompletedAt = &done
	}
	itemStatus := "completed"
	if r.Status == "incomplete" {
		itemStatus = "incomplete"
	}
	if e.Answer != "" || len(e.ToolCalls) == 0 {
		r.Output = append(r.Output, messageItem{Type: "message", ID: messageID(e.RequestId), Status: itemStatus, Role: "assistant",
			Content: []outputText{textPart(e.Answer)}})
		r.OutputText = e.Answer
	}
	for i, c := range e.ToolCalls {
		r.Output = append(r.Output, functionCallItem{Type: "function_call", ID: callItemID(e.RequestId, i), Status: itemStatus, CallID: c.Id,
			Name: c.Name, Arguments: c.Arguments})
	}
	u := &responseUsage{InputTokens: e.GetUsage().GetInputTokens(), OutputTokens: e.GetUsage().GetOutputTokens()}
	u.InputTokensDetails.CachedTokens, u.InputTokensDetails.CacheWriteTokens = e.GetUsage().GetCacheReadTokens(), e.GetUsage().GetCacheWriteTokens()
	u.TotalTokens = u.InputTokens + u.OutputTokens
	r.Usage = u
	x := extensionOf(e)
	r.Conclave = &x
	return r
}

// statusOf is an answer's status: incomplete when its model ran out of tokens or a filter stopped it
// (as OpenAI's finish reasons say, whichever wire format it answered in), completed otherwise.
func statusOf(e *messages.Execution) (string, *incompleteDetails) {
	switch finishReason(e) {
	case "length":
		return "incomplete", &incompleteDetails{Reason: "max_output_tokens"}
	case "content_filter":
		return "incomplete", &incompleteDetails{Reason: "content_filter"}
	}
	return "completed", nil
}

// responseEvents writes a response as the Responses API's stream of events: response.created and
// response.in_progress before the first output, each output item added, its text or arguments in
// deltas, done, and the response completed (or incomplete) with the items as they were streamed. A
// direct call's pieces go out as its model writes them (delta); a panel's answer goes out after
// consensus (finish with nothing streamed). Nothing is written before the first output, so a request
// that fails early still answers with its own status. delta runs on the engine's listener, finish and
// fail after it, one at a time.
type responseEvents struct {
	st    *sseStream
	seq   int
	shell responseObject
	began bool
	text  *streamedText
	calls map[int32]*streamedCall
	items []any // *streamedText and *streamedCall, in output order
}

type streamedText struct {
	index int
	id    string
	text  strings.Builder
}

type streamedCall struct {
	index            int
	id, callID, name string
	arguments        strings.Builder
}

func newResponseEvents(st *sseStream, shell responseObject) *responseEvents {
	return &responseEvents{st: st, shell: shell, calls: map[int32]*streamedCall{}}
}

// emit writes one event, numbered.
func (e *responseEvents) emit(typ string, fields map[string]any) {
	fields["type"], fields["sequence_number"] = typ, e.seq
	e.seq++
	e.st.named(typ, fields)
}

// begin announces the response, once, before its first output.
func (e *responseEvents) begin() {
	if e.began {
		return
	}
	e.began = true
	e.emit("response.created", map[string]any{"response": e.shell})
	e.emit("response.in_progress", map[string]any{"response": e.shell})
}

// requestID is the request id the response's id carries.
func (e *responseEvents) requestID() string { return strings.TrimPrefix(e.shell.ID, "resp_") }

// delta relays a piece of a direct call's answer.
func (e *responseEvents) delta(d *messages.Delta) {
	if d.Text != "" {
		e.openText()
		e.addText(d.Text)
	}
	for _, c := range d.ToolCalls {
		e.addCall(c.Index, c.Id, c.Name, c.Arguments)
	}
}

// openText adds the message item, once.
func (e *responseEvents) openText() {
	if e.text != nil {
		return
	}
	e.begin()
	e.text = &streamedText{index: len(e.items), id: messageID(e.requestID())}
	e.items = append(e.items, e.text)
	e.emit("response.output_item.added", map[string]any{"output_index": e.text.index,
		"item": messageItem{Type: "message", ID: e.text.id, Status: "in_progress", Role: "assistant", Content: []outputText{}}})
	e.emit("response.content_part.added", map[string]any{"item_id": e.text.id, "output_index": e.text.index, "content_index": 0, "part": textPart("")})
}

func (e *responseEvents) addText(piece string) {
	e.text.text.WriteString(piece)
	e.emit("response.output_text.delta", map[string]any{"item_id": e.text.id, "output_index": e.text.index, "content_index": 0,
		"delta": piece, "logprobs": []any{}})
}

// addCall relays a piece of a function call: its first piece adds the item (with its call id and
// name), each adds to its arguments.
func (e *responseEvents) addCall(index int32, callID, name, arguments string) {
	c := e.calls[index]
	if c == nil {
		e.begin()
		c = &streamedCall{index: len(e.items), id: callItemID(e.requestID(), len(e.calls)), callID: callID, name: name}
		e.calls[index] = c
		e.items = append(e.items, c)
		e.emit("response.output_item.added", map[string]any{"output_index": c.index, "item": functionCallItem{Type: "function_call", ID: c.id,
			Status: "in_progress", CallID: c.callID, Name: c.name}})
	}
	if arguments == "" {
		return
	}
	c.arguments.WriteString(arguments)
	e.emit("response.function_call_arguments.delta", map[string]any{"item_id": c.id, "output_index": c.index, "delta": arguments})
}

// finish ends the stream with the answer: streamed whole first when none of it went out yet (a panel's,
// or a direct call whose model streamed nothing), then each item done, then the response with the items
// as they were streamed.
func (e *responseEvents) finish(exec *messages.Execution, resp responseObject) {
	if !e.complete(exec) {
		return
	}
	status := "completed"
	if resp.Status == "incomplete" {
		status = "incomplete"
	}
	resp.Output, resp.OutputText = make([]any, 0, len(e.items)), ""
	for _, item := range e.items {
		switch it := item.(type) {
		case *streamedText:
			text := it.text.String()
			part := textPart(text)
			e.emit("response.output_text.done", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "text": text, "logprobs": []any{}})
			e.emit("response.content_part.done", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "part": part})
			done := messageItem{Type: "message", ID: it.id, Status: status, Role: "assistant", Content: []outputText{part}}
			e.emit("response.output_item.done", map[string]any{"output_index": it.index, "item": done})
			resp.Output, resp.OutputText = append(resp.Output, done), text
		case *streamedCall:
			args := it.arguments.String()
			e.emit("response.function_call_arguments.done", map[string]any{"item_id": it.id, "output_index": it.index, "name": it.name, "arguments": args})
			done := functionCallItem{Type: "function_call", ID: it.id, Status: status, CallID: it.callID, Name: it.name, Arguments: args}
			e.emit("response.output_item.done", map[string]any{"output_index": it.index, "item": done})
			resp.Output = append(resp.Output, done)
		}
	}
	e.emit("response."+resp.Status, map[string]any{"response": resp})
}

// complete streams what the stream has not yet said of the answer: the rest of a text the answer
// continues (a synthesis the consensus completed), or all of it when nothing went out. An answer that
// replaced the text streamed (the arbiter's verdict could not be used) fails the stream instead, and
// complete reports false: the caller has read text that is not the answer, and only an error can say so.
func (e *responseEvents) complete(exec *messages.Execution) bool {
	if e.text != nil && !continueAnswer(exec.Answer, e.text.text.String(), e.addText, func() { e.fail(superseded(e.requestID())) }) {
		return false
	}
	if len(e.items) > 0 {
		return true
	}
	if exec.Answer != "" || len(exec.ToolCalls) == 0 {
		e.openText()
		for _, piece := range pieces(exec.Answer, chunkBytes) {
			e.addText(piece)
		}
	}
	for i, c := range exec.ToolCalls {
		e.addCall(int32(i), c.Id, c.Name, c.Arguments)
	}
	return true
}

// fail ends a begun stream with the failure: response.failed once the response was announced, an error
// event before (only keep-alives went out). Clients see an error, never an empty answer.
func (e *responseEvents) fail(exec *messages.Execution) {
	f := exec.Error
	if !e.began {
		var param any
		if len(f.GetDetails()) > 0 {
			param = problems.Clip(f.Details[0].Field, problems.MaxFieldBytes)
		}
		body := openAIErrorOf(int(exec.StatusCode), f.GetCode(), f.GetMessage(), f.GetDetails()).Error
		e.emit("error", map[string]any{"code": f.GetCode(), "message": body.Message, "param": param})
		return
	}
	resp := e.shell
	resp.Status = "failed"
	resp.Error = &responseError{Code: responseErrorCode(int(exec.StatusCode)), Message: problems.Clip(f.GetCode()+": "+f.GetMessage(), 1024)}
	x := extensionOf(exec)
	resp.Conclave = &x
	e.emit("response.failed", map[string]any{"response": resp})
}

// responseErrorCode is the Responses API's error code nearest a failure's status: its codes name
// OpenAI's own failures, and a response's message carries Conclave's.
func responseErrorCode(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case status >= 400 && status < 500:
		return "invalid_prompt"
	}
	return "server_error"
}
