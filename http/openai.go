package httpapi

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/exactcache"
	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
	"github.com/julienschmidt/httprouter"
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

// chatFields are the request fields of OpenAI's chat completions that Conclave takes, beside its own
// (timeout, strict_parameters, fallbacks). metadata and store are OpenAI's own bookkeeping, which
// Conclave's record replaces. Anything else is an unknown field, as OpenAI itself answers.
var chatFields = map[string]bool{
	"model": true, "messages": true, "stream": true, "stream_options": true, "n": true, "metadata": true, "store": true,
	"tools": true, "tool_choice": true, "parallel_tool_calls": true, "response_format": true,
	"timeout": true, "strict_parameters": true, "fallbacks": true, "cache": true,
}

func init() {
	for name := range samplingFields {
		chatFields[name] = true
	}
}

// maxChatMessages bounds a conversation's length.
const maxChatMessages = 256

// chatRequest is what a chat door needs of a decoded request: the route request, the canonical request
// every door builds, and what its answer says of the request.
type chatRequest struct {
	model        string
	stream       bool
	includeUsage bool
	route        *messages.RouteRequest
}

// asks is the chat request a decoded request holds (decodeAsk).
func (c *chatRequest) asks() *chatRequest { return c }

// parseChat is chat completions' decoder: it decodes a body and has intake judge the request, collecting
// every problem. The status is 0 when the request is valid, 400 for malformed input and 404 when the
// model is unknown.
func (s *Server) parseChat(body []byte) (*chatRequest, int, []*messages.Problem) {
	return decodeAsk(s, body, chatFields, s.readChat)
}

// readChat reads chat completions' own members: the model, the conversation, the tools, the tool
// choice, the output format, the sampling parameters and the stream's.
func (s *Server) readChat(fields map[string]json.RawMessage, bad *report) *chatRequest {
	out := s.readModel(fields, bad)
	ask := &messages.Ask{}
	bad.visit("messages")
	if raw, ok := fields["messages"]; !ok {
		bad.Add("messages", "is required")
	} else if conv := readMessages(raw, bad); conv != nil {
		conv.into(out.route, ask)
	}
	bad.alias("task", "messages")
	bad.visit("tools")
	ask.Tools = readGiven(fields, "tools", readTools, bad)
	ask.ToolChoice = readGiven(fields, "tool_choice", readToolChoice, bad)
	ask.ResponseFormat = readGiven(fields, "response_format", readResponseFormat, bad)
	ask.Sampling = chatSampling.read(fields, "", bad)
	out.route.Ask = ask
	readChatStream(fields, out, bad)
	return out
}

// readChatStream reads whether the caller streams the answer, with its usage at the end, and n, the
// choices it asks for: one, the consensus's.
func readChatStream(fields map[string]json.RawMessage, out *chatRequest, bad *report) {
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
}

// readModel reads the model of a /v1 request, as every door resolves it: conclave/auto, a blueprint
// (conclave/<name>), or any other id, a catalog model called alone (a direct call), which intake holds
// to be one: an unknown model answers 404 when nothing else is wrong.
func (s *Server) readModel(fields map[string]json.RawMessage, bad *report) *chatRequest {
	out := &chatRequest{route: &messages.RouteRequest{}}
	bad.visit("model")
	if raw, ok := fields["model"]; !ok {
		bad.Add("model", "is required: conclave/auto, conclave/<blueprint> or a model id (GET /v1/models lists them)")
	} else if err := json.Unmarshal(raw, &out.model); err != nil || out.model == "" {
		bad.Add("model", "must be a non-empty string")
	} else if name, ours := strings.CutPrefix(out.model, modelPrefix); ours && s.engine.Blueprints().Has(name) {
		out.route.Category = name
	} else if out.model != autoModel {
		out.route.Models, out.route.Direct = []string{out.model}, true
		bad.alias("models", "model")
		bad.alias("models[0]", "model")
	}
	return out
}

// readOwn reads Conclave's own members of a /v1 request: strict_parameters, fallbacks and timeout.
func readOwn(fields map[string]json.RawMessage, out *chatRequest, bad *report) {
	out.route.StrictParameters = flag(fields, "strict_parameters", bad)
	bad.visit("fallbacks")
	out.route.Fallbacks = readGiven(fields, "fallbacks", readFallbacks, bad)
	out.route.TimeoutSeconds = number(fields, "timeout", bad)
	out.route.Cache = readGiven(fields, "cache", readCacheChoice, bad)
}

// readCacheChoice reads the caller's choice of the exact answer cache, as LiteLLM takes it:
// {"ttl": seconds} to read it and keep the answer that long, {"no-cache": true} (or "no-cache") to do
// neither.
func readCacheChoice(raw json.RawMessage, bad *report) *messages.CacheChoice {
	const why = `must be {"ttl": seconds} or {"no-cache": true}`
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s != "no-cache" {
			bad.Add("cache", why)
			return nil
		}
		return &messages.CacheChoice{NoCache: true}
	}
	var c struct {
		TTL     *float64 `json:"ttl"`
		NoCache *bool    `json:"no-cache"`
	}
	keys, ok := object(raw, &c)
	if !ok {
		bad.Add("cache", why)
		return nil
	}
	bad.unknown("cache", keys, only("ttl", "no-cache"))
	out := &messages.CacheChoice{NoCache: c.NoCache != nil && *c.NoCache}
	if t := c.TTL; t != nil && !out.NoCache {
		if *t != math.Trunc(*t) || *t < 1 || *t > exactcache.MaxTTL.Seconds() {
			bad.Add("cache.ttl", fmt.Sprintf("must be a whole number of seconds from 1 to %.0f", exactcache.MaxTTL.Seconds()))
			return nil
		}
		out.TtlSeconds = int32(*t)
	}
	return out
}

// completionEncoder is chat completions' encoder: a chat completion, or its chunks.
type completionEncoder struct {
	chat *chatRequest
	live *relay // the stream's writer, once it began
}

func (e *completionEncoder) stream(x exchange, st *sseStream) func(*messages.Delta) {
	e.live = &relay{st: st, base: chunk{ID: x.id, Object: "chat.completion.chunk", Created: x.received.Unix(), Model: e.chat.model}}
	return e.live.delta
}

func (e *completionEncoder) render(_ exchange, exec *messages.Execution) (completion, *messages.Execution) {
	return renderCompletion(exec, e.chat.model), exec
}

// finish continues what the relay wrote, or streams the whole completion when it wrote nothing (a
// panel's answer).
func (e *completionEncoder) finish(_ *messages.Execution, c completion) {
	if e.live.started {
		e.live.finish(c, e.chat.includeUsage)
		return
	}
	e.live.st.completion(c, e.chat.includeUsage)
}

func (e *completionEncoder) fail(exec *messages.Execution) { e.live.st.fail(exec) }

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
	Index   int               `json:"index"`
	Message completionMessage `json:"message"`
	// Logprobs are the chosen answer's log probabilities when they were asked for (OpenAI's shape, as its
	// model's provider wrote them), else null: the specification requires the field.
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

// noLogprobs is a streamed chunk's log probabilities, which Conclave does not relay: null.
type noLogprobs struct{}

// chosenLogprobs are the log probabilities of the answer returned: those of its model's call, when it
// asked for them.
func chosenLogprobs(e *messages.Execution) json.RawMessage {
	chosen := e.GetDecision().GetChosenModel()
	for _, r := range e.Results {
		if r.Status == "ok" && r.Logprobs != "" && (chosen == "" || r.Model == chosen) {
			return json.RawMessage(r.Logprobs)
		}
	}
	return nil
}

// completionMessage is the answer's message: its content is null when the answer is only tool calls,
// as OpenAI writes it; refusal is always null (a refusal is a model's text like any other here).
type completionMessage struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"`
	Refusal   *string        `json:"refusal"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
}

type completionUsage struct {
	PromptTokens     int32 `json:"prompt_tokens"`
	CompletionTokens int32 `json:"completion_tokens"`
	TotalTokens      int32 `json:"total_tokens"`
	// PromptTokensDetails counts the prompt tokens read from a provider's prompt cache, as OpenAI
	// does, when some were.
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

type promptTokensDetails struct {
	CachedTokens int32 `json:"cached_tokens"`
}

// completionUsageOf is a record's usage as a chat completion reports it.
func completionUsageOf(u *messages.Usage) completionUsage {
	out := completionUsage{PromptTokens: u.GetInputTokens(), CompletionTokens: u.GetOutputTokens(), TotalTokens: u.GetInputTokens() + u.GetOutputTokens()}
	if n := u.GetCacheReadTokens(); n > 0 {
		out.PromptTokensDetails = &promptTokensDetails{CachedTokens: n}
	}
	return out
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
	Agreement float64   `json:"agreement"`
	Degraded  bool      `json:"degraded"`
	CostUSD   money.USD `json:"cost_usd"`
	// DroppedParameters names the caller's parameters that a called model's provider could not carry,
	// left out of that call.
	DroppedParameters []string `json:"dropped_parameters"`
	// CachedFrom names the request whose answer the exact answer cache gave (no model was called).
	CachedFrom string `json:"cached_from,omitempty"`
}

func renderCompletion(e *messages.Execution, model string) completion {
	return completion{
		ID: e.RequestId, Object: "chat.completion", Created: e.GetReceivedAt().AsTime().Unix(), Model: model,
		Choices:  []completionChoice{{Message: answerMessage(e), Logprobs: chosenLogprobs(e), FinishReason: finishReason(e)}},
		Usage:    completionUsageOf(e.GetUsage()),
		Conclave: extensionOf(e),
	}
}

// extensionOf is Conclave's extension of an answer, from its record.
func extensionOf(e *messages.Execution) conclaveExtension {
	x := conclaveExtension{RequestID: e.RequestId, Category: e.GetClassification().GetCategory(), Blueprint: e.GetBlueprint().GetName(),
		Strategy: e.GetDecision().GetStrategy(), ChosenModel: e.GetDecision().GetChosenModel(), Degraded: e.Degraded, CostUSD: money.USD(e.CostNanos),
		ModelsAsked: []string{}, DroppedParameters: e.DroppedParameters, CachedFrom: e.CachedFrom}
	if x.DroppedParameters == nil {
		x.DroppedParameters = []string{}
	}
	asked := map[string]bool{}
	contributed := 0
	for _, r := range e.Results {
		if !asked[r.Model] {
			asked[r.Model] = true
			x.ModelsAsked = append(x.ModelsAsked, r.Model)
		}
		if r.Status == "ok" {
			x.Answered++
			if r.Contributed {
				contributed++
			}
		}
	}
	if x.Answered > 0 {
		x.Agreement = float64(contributed) / float64(x.Answered)
	}
	return x
}

// answerMessage is the answer in OpenAI's shape: its text, its tool calls, or both.
func answerMessage(e *messages.Execution) completionMessage {
	m := completionMessage{Role: "assistant"}
	if e.Answer != "" || len(e.ToolCalls) == 0 {
		answer := e.Answer
		m.Content = &answer
	}
	for _, c := range e.ToolCalls {
		m.ToolCalls = append(m.ToolCalls, wireToolCall{ID: c.Id, Type: "function", Function: wireFunction{Name: c.Name, Arguments: c.Arguments}})
	}
	return m
}

// finishReason is the answer's finish reason as OpenAI names it, whatever wire format the chosen
// model answered in: tool_calls when it calls tools, length when it ran out of tokens, content_filter
// when a filter stopped it, stop otherwise.
func finishReason(e *messages.Execution) string {
	if len(e.ToolCalls) > 0 {
		return "tool_calls"
	}
	switch strings.ToLower(e.FinishReason) {
	case "length", "max_tokens", "model_context_window_exceeded":
		return "length"
	case "content_filter", "safety", "recitation", "blocklist", "prohibited_content", "spii", "refusal":
		return "content_filter"
	}
	return "stop"
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
	e := openAIError{Message: problemSummary(message, details), Type: openAIErrorType(status), Details: details}
	if code == string(resilience.BudgetExceeded) {
		e.Type = "insufficient_quota" // as OpenAI names a spent quota, which its clients tell from a rate limit
	}
	if len(details) > 0 {
		// OpenAI names one offending parameter; the details list every problem.
		param := details[0].Field
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return openAIErrorBody{Error: e}
}

func writeOpenAIError(w http.ResponseWriter, status int, code, message string, details []*messages.Problem) {
	writeJSON(w, status, openAIErrorOf(status, code, message, details))
}

// modelObject is an entry of GET /v1/models: OpenAI's fields, and for a catalog model its context
// window, its prices (OpenRouter's shape: US dollars per token, as decimal strings; none when nobody
// priced it) and its capabilities. created is the provider's date of the model where it says one.
type modelObject struct {
	ID            string        `json:"id"`
	Object        string        `json:"object"`
	Created       int64         `json:"created"`
	OwnedBy       string        `json:"owned_by"`
	ContextLength int           `json:"context_length,omitempty"`
	Pricing       *modelPricing `json:"pricing,omitempty"`
	Capabilities  []string      `json:"capabilities,omitempty"`
}

type modelPricing struct {
	Prompt     string `json:"prompt"`
	Completion string `json:"completion"`
}

// catalogModelObject is a catalog model as GET /v1/models lists it.
func catalogModelObject(m catalog.Model) modelObject {
	o := modelObject{ID: m.ID, Object: "model", Created: m.Created, OwnedBy: m.Provider, ContextLength: m.ContextWindow, Capabilities: m.Capabilities}
	if !m.Unpriced {
		o.Pricing = &modelPricing{Prompt: m.InputPricePerMTok.PerToken(), Completion: m.OutputPricePerMTok.PerToken()}
	}
	return o
}

// v1Models answers GET /v1/models: the models the caller may call (all of them for the admin token,
// those a key's globs allow for a key).
func (s *Server) v1Models(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	data := []modelObject{}
	may := s.callerMay(r)
	ids := append([]string{autoModel}, s.engine.Blueprints().Names()...)
	for i, id := range ids {
		if i > 0 {
			id = modelPrefix + id
		}
		if m, ok := s.modelObject(may, id); ok {
			data = append(data, m)
		}
	}
	for _, m := range s.engine.Catalog().All() {
		if may(m.ID) {
			data = append(data, catalogModelObject(m))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// callerMay says whether the request's caller may call a model: a key, by its globs and its team's.
func (s *Server) callerMay(r *http.Request) func(model string) bool {
	k, ok := keys.CallerOf(r.Context())
	if !ok {
		return func(string) bool { return true }
	}
	var team *keys.Team
	if k.TeamID != "" {
		t, ok := s.keys.Team(k.TeamID)
		if !ok {
			return func(string) bool { return false }
		}
		team = &t
	}
	holders := keys.Holders(k, team)
	return func(model string) bool {
		for _, h := range holders {
			if !h.Allows(model) {
				return false
			}
		}
		return true
	}
}

// v1Model answers GET /v1/models/{id}: one entry of the list, or 404 in OpenAI's shape (a model the
// caller's key may not call is one it cannot see).
func (s *Server) v1Model(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	id := strings.TrimPrefix(p.ByName("id"), "/")
	if m, ok := s.modelObject(s.callerMay(r), id); ok {
		writeJSON(w, http.StatusOK, m)
		return
	}
	writeOpenAIError(w, http.StatusNotFound, "model_not_found", "no such model",
		[]*messages.Problem{{Field: "model", Message: fmt.Sprintf("%q does not exist (GET /v1/models lists them)", problems.Clip(id, 128))}})
}

// modelObject is the model of an id, as GET /v1/models lists it, when its caller may call it.
func (s *Server) modelObject(may func(string) bool, id string) (modelObject, bool) {
	if !may(id) {
		return modelObject{}, false
	}
	if id == autoModel {
		return modelObject{ID: id, Object: "model", OwnedBy: "conclave"}, true
	}
	if name, ours := strings.CutPrefix(id, modelPrefix); ours && s.engine.Blueprints().Has(name) {
		return modelObject{ID: id, Object: "model", OwnedBy: "conclave"}, true
	}
	if m, ok := s.engine.Catalog().Get(id); ok {
		return catalogModelObject(m), true
	}
	return modelObject{}, false
}
