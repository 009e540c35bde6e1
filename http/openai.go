package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/validation"
	"github.com/google/uuid"
	"github.com/julienschmidt/httprouter"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The OpenAI-compatible surface: POST /v1/chat/completions and GET /v1/models. A client written for
// OpenAI's API points its base URL at Conclave and names a model:
//   - conclave/auto: classification picks the blueprint, then the whole pipeline;
//   - conclave/<blueprint>: that blueprint;
//   - a catalog model id: that model alone, through breakers, limits and records (a plain gateway call).

// Model id prefixes and names of the OpenAI surface.
const (
	modelPrefix = "conclave/"
	autoModel   = modelPrefix + "auto"
)

// chatFields are the request fields of OpenAI's chat completions that Conclave takes. Sampling
// parameters are accepted and left to the blueprint; anything else is an unknown field, as OpenAI
// itself answers.
var chatFields = map[string]bool{
	"model": true, "messages": true, "stream": true, "stream_options": true, "n": true, "user": true,
	"temperature": true, "top_p": true, "max_tokens": true, "max_completion_tokens": true, "stop": true,
	"presence_penalty": true, "frequency_penalty": true, "seed": true, "metadata": true, "store": true,
	"timeout": true, // Conclave's: the caller's wait in seconds
}

// chatRoles are the message roles a conversation may hold.
var chatRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true}

// maxChatMessages bounds a conversation's length.
const maxChatMessages = 256

// chatRequest is what the OpenAI surface needs of a parsed request.
type chatRequest struct {
	model         string
	stream        bool
	includeUsage  bool
	route         *messages.RouteRequest
	passthroughTo string // the catalog model of a plain gateway call
}

// chatMessage is one message of OpenAI's request: content is a string or a list of parts.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    string          `json:"name,omitempty"`
}

// text returns a message's text: the string, or the text parts joined. Other parts (images, audio)
// are problems: no blueprint takes them.
func (m chatMessage) text() (string, string) {
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, ""
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", "must be a string or a list of content parts"
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Sprintf("content parts of type %q are not supported (only text)", validation.Clip(p.Type, 32))
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n"), ""
}

// renderTask turns a conversation into the task the pipeline sends: one user message is the task
// itself; anything longer is a transcript, each message under its role, so every model sees the
// whole conversation.
func renderTask(roles, texts []string) string {
	if len(texts) == 1 && roles[0] == "user" {
		return texts[0]
	}
	var b strings.Builder
	for i, t := range texts {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(strings.ToUpper(roles[i][:1]) + roles[i][1:] + ": ")
		b.WriteString(t)
	}
	return b.String()
}

// parseChat decodes and validates a chat completions body, collecting every problem. The status is 0
// when the request is valid, 400 for malformed input and 404 when the model is unknown.
func (s *Server) parseChat(body []byte) (*chatRequest, int, []*messages.Problem) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, http.StatusBadRequest, []*messages.Problem{{Field: "body", Message: "the body must be a JSON object"}}
	}
	var bad, unknown validation.Errors
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !chatFields[name] {
			bad.Add(name, "unknown field")
		}
	}
	out := &chatRequest{route: &messages.RouteRequest{}}
	if raw, ok := fields["model"]; !ok {
		bad.Add("model", "is required: conclave/auto, conclave/<blueprint> or a model id (GET /v1/models lists them)")
	} else if err := json.Unmarshal(raw, &out.model); err != nil || out.model == "" {
		bad.Add("model", "must be a non-empty string")
	} else if name, ours := strings.CutPrefix(out.model, modelPrefix); ours && s.engine.Blueprints().Has(name) {
		out.route.Category = name
	} else if out.model != autoModel {
		if _, known := s.engine.Catalog().Get(out.model); known {
			out.passthroughTo = out.model
		} else {
			unknown.Add("model", fmt.Sprintf("unknown model %q (GET /v1/models lists them)", validation.Clip(out.model, 128)))
		}
	}
	if out.passthroughTo != "" {
		out.route.Models, out.route.Direct = []string{out.passthroughTo}, true
	}

	var msgs []chatMessage
	if raw, ok := fields["messages"]; !ok {
		bad.Add("messages", "is required")
	} else if err := json.Unmarshal(raw, &msgs); err != nil {
		bad.Add("messages", "must be a list of messages with role and content")
	} else if len(msgs) == 0 || len(msgs) > maxChatMessages {
		bad.Add("messages", fmt.Sprintf("must hold between 1 and %d messages", maxChatMessages))
	} else {
		roles, texts := make([]string, 0, len(msgs)), make([]string, 0, len(msgs))
		users := 0
		for i, m := range msgs {
			field := fmt.Sprintf("messages[%d]", i)
			if !chatRoles[m.Role] {
				bad.Add(field+".role", fmt.Sprintf("unknown role %q (want system, developer, user or assistant)", validation.Clip(m.Role, 32)))
				continue
			}
			t, problem := m.text()
			if problem != "" {
				bad.Add(field+".content", problem)
				continue
			}
			if m.Role == "user" {
				users++
			}
			roles, texts = append(roles, m.Role), append(texts, t)
		}
		if users == 0 {
			bad.Add("messages", "must hold at least one user message")
		}
		if len(roles) == len(msgs) {
			out.route.Task = renderTask(roles, texts)
			if !validation.Visible(out.route.Task) {
				bad.Add("messages", "must have at least one visible character")
			}
		}
	}
	if raw, ok := fields["stream"]; ok && json.Unmarshal(raw, &out.stream) != nil {
		bad.Add("stream", "must be a boolean")
	}
	if raw, ok := fields["stream_options"]; ok {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if json.Unmarshal(raw, &so) != nil {
			bad.Add("stream_options", "must be an object")
		}
		out.includeUsage = so.IncludeUsage
	}
	if raw, ok := fields["n"]; ok {
		var n int
		if json.Unmarshal(raw, &n) != nil || n != 1 {
			bad.Add("n", "must be 1: Conclave answers with one consensus choice")
		}
	}
	out.route.TimeoutSeconds = number(fields, "timeout", &bad, validation.Timeout)
	switch {
	case len(bad) > 0:
		return nil, http.StatusBadRequest, problems(append(bad, unknown...).Capped())
	case len(unknown) > 0:
		return nil, http.StatusNotFound, problems(unknown.Capped())
	}
	return out, 0, nil
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	received := time.Now()
	id := uuid.NewString()
	w.Header().Set("X-Request-ID", id)
	body, ok := s.readJSONWith(w, r, writeOpenAIError)
	if !ok {
		return
	}
	chat, status, problems := s.parseChat(body)
	if status != 0 {
		s.log.Info("request rejected", zap.String("event", "request_rejected"), zap.String("request_id", id), zap.Int("status", status),
			zap.String("endpoint", "chat_completions"), zap.Array("problems", problemsField(problems)))
		msg := "the request is invalid"
		if status == http.StatusNotFound {
			msg = "the model does not exist"
		}
		writeOpenAIError(w, status, "", msg, problems)
		return
	}
	req := chat.route
	req.RequestId, req.ReceivedAt = id, timestamppb.New(received)
	if c := r.Header.Get("X-Request-ID"); validClientID(c) {
		req.ClientRequestId = c
	}
	s.log.Info("request received", zap.String("event", "request_received"), zap.String("request_id", id), zap.String("endpoint", "chat_completions"),
		zap.String("model", validation.Clip(chat.model, 128)), zap.Int("task_bytes", len(req.Task)), zap.Bool("stream", chat.stream), zap.String("remote", r.RemoteAddr))

	routing(w) // before the keep-alives, which read it
	var stream *sseStream
	if chat.stream {
		stream = s.startStream(w)
	}
	exec, err := s.engine.Route(r.Context(), req)
	stream.quiet() // the keep-alives write through w: stop them before w changes
	routed(w, exec)
	if exec = s.settle(id, exec, err); exec.StatusCode != http.StatusOK {
		if stream.started() {
			stream.fail(exec)
			return
		}
		setRetryAfter(w, exec.Error)
		writeOpenAIError(w, int(exec.StatusCode), exec.Error.Code, exec.Error.Message, exec.Error.Details)
		return
	}
	completion := renderCompletion(exec, chat.model)
	if chat.stream {
		stream.completion(completion, chat.includeUsage)
		return
	}
	writeJSON(w, http.StatusOK, completion)
}

// completion is OpenAI's chat completion object with Conclave's extension.
type completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []completionChoice `json:"choices"`
	Usage             completionUsage    `json:"usage"`
	SystemFingerprint string             `json:"system_fingerprint,omitempty"`
	Conclave          conclaveExtension  `json:"conclave"`
}

type completionChoice struct {
	Index        int               `json:"index"`
	Message      completionMessage `json:"message"`
	FinishReason string            `json:"finish_reason"`
}

type completionMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type completionUsage struct {
	PromptTokens     int32 `json:"prompt_tokens"`
	CompletionTokens int32 `json:"completion_tokens"`
	TotalTokens      int32 `json:"total_tokens"`
}

// conclaveExtension says what the pipeline did for the answer.
type conclaveExtension struct {
	RequestID string `json:"request_id"`
	Category  string `json:"category"`
	Blueprint string `json:"blueprint"`
	Strategy  string `json:"strategy"`
	// ModelsAsked are the models called, in selection order; Answered how many answered.
	ModelsAsked []string `json:"models_asked"`
	Answered    int      `json:"answered"`
	ChosenModel string   `json:"chosen_model,omitempty"`
	// Agreement is the share of the answers that agree with the one returned.
	Agreement float64 `json:"agreement"`
	Degraded  bool    `json:"degraded"`
	CostUSD   float64 `json:"cost_usd"`
}

func renderCompletion(e *messages.Execution, model string) completion {
	c := completion{
		ID: e.RequestId, Object: "chat.completion", Created: e.GetReceivedAt().AsTime().Unix(), Model: model,
		Choices: []completionChoice{{Message: completionMessage{Role: "assistant", Content: e.Answer}, FinishReason: "stop"}},
		Usage: completionUsage{PromptTokens: e.GetUsage().GetInputTokens(), CompletionTokens: e.GetUsage().GetOutputTokens(),
			TotalTokens: e.GetUsage().GetInputTokens() + e.GetUsage().GetOutputTokens()},
		Conclave: conclaveExtension{RequestID: e.RequestId, Category: e.GetClassification().GetCategory(), Blueprint: e.GetBlueprint().GetName(),
			Strategy: e.GetDecision().GetStrategy(), ChosenModel: e.GetDecision().GetChosenModel(), Degraded: e.Degraded, CostUSD: e.Cost,
			ModelsAsked: []string{}},
	}
	asked := map[string]bool{}
	contributed := 0
	for _, r := range e.Results {
		if !asked[r.Model] {
			asked[r.Model] = true
			c.Conclave.ModelsAsked = append(c.Conclave.ModelsAsked, r.Model)
		}
		if r.Status == "ok" {
			c.Conclave.Answered++
			if r.Contributed {
				contributed++
			}
		}
	}
	if c.Conclave.Answered > 0 {
		c.Conclave.Agreement = float64(contributed) / float64(c.Conclave.Answered)
	}
	return c
}

// openAIErrorBody is OpenAI's error shape, with the problems Conclave found listed under details.
type openAIErrorBody struct {
	Error openAIError `json:"error"`
}

type openAIError struct {
	Message string              `json:"message"`
	Type    string              `json:"type"`
	Param   *string             `json:"param"`
	Code    *string             `json:"code"`
	Details []*messages.Problem `json:"details,omitempty"`
}

// openAIErrorType is the error type OpenAI's clients expect for a status.
func openAIErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status < 500:
		return "invalid_request_error"
	case status == http.StatusServiceUnavailable:
		return "service_unavailable_error"
	}
	return "server_error"
}

func openAIErrorOf(status int, code, message string, details []*messages.Problem) openAIErrorBody {
	details = clipProblems(details)
	e := openAIError{Message: validation.Clip(message, 1024), Type: openAIErrorType(status), Details: details}
	if len(details) > 0 {
		// OpenAI names one offending parameter; the details list every problem.
		param := details[0].Field
		e.Param = &param
		var b strings.Builder
		b.WriteString(e.Message)
		for i, d := range details[:min(len(details), 3)] {
			sep := ": "
			if i > 0 {
				sep = "; "
			}
			b.WriteString(sep + d.Field + " " + d.Message)
		}
		e.Message = b.String()
	}
	if code != "" {
		e.Code = &code
	}
	return openAIErrorBody{Error: e}
}

func writeOpenAIError(w http.ResponseWriter, status int, code, message string, details []*messages.Problem) {
	writeJSON(w, status, openAIErrorOf(status, code, message, details))
}

// modelObject is an entry of GET /v1/models.
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *Server) v1Models(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	data := []modelObject{{ID: autoModel, Object: "model", OwnedBy: "conclave"}}
	for _, name := range s.engine.Blueprints().Names() {
		data = append(data, modelObject{ID: modelPrefix + name, Object: "model", OwnedBy: "conclave"})
	}
	for _, m := range s.engine.Catalog().All() {
		data = append(data, modelObject{ID: m.ID, Object: "model", OwnedBy: m.Provider})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}
