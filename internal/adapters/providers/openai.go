package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/secret"
)

// Profile is how one provider speaking a wire format differs from another.
type Profile struct {
	// ResponseFormat is how the provider constrains JSON: json_schema, json_object (a schema is then in
	// the system prompt too), tool (Anthropic: a forced tool whose input is the answer) or none (the
	// schema is in the system prompt only).
	ResponseFormat string
	// MaxTokensField names the output limit in a chat completion: max_tokens or max_completion_tokens.
	MaxTokensField string
	// RateLimitScope and ServerErrorScope say whom a 429 and a 5xx concern when the answer does not say.
	RateLimitScope   resilience.Scope
	ServerErrorScope resilience.Scope
	// PerModelLimits says the rate-limit headers count per model (Groq, Cerebras), not per provider.
	PerModelLimits bool
}

// profiles are the named providers'. OpenRouter serves many upstreams: a model's 429, 502 ("model
// down") and 503 ("no provider available") are that model's. DeepSeek and Anthropic fail as a whole
// (overloaded, one account's limits).
var profiles = map[string]Profile{
	"openrouter": {ResponseFormat: "json_schema", MaxTokensField: "max_tokens", RateLimitScope: resilience.ScopeModel, ServerErrorScope: resilience.ScopeModel},
	"groq":       {ResponseFormat: "json_schema", MaxTokensField: "max_completion_tokens", RateLimitScope: resilience.ScopeModel, PerModelLimits: true},
	"cerebras":   {ResponseFormat: "json_schema", MaxTokensField: "max_completion_tokens", RateLimitScope: resilience.ScopeModel, PerModelLimits: true},
	"deepseek":   {ResponseFormat: "json_object", MaxTokensField: "max_tokens", RateLimitScope: resilience.ScopeProvider, ServerErrorScope: resilience.ScopeProvider},
	"anthropic":  {ResponseFormat: "tool", RateLimitScope: resilience.ScopeProvider, ServerErrorScope: resilience.ScopeProvider},
	"gemini":     {ResponseFormat: "json_schema", RateLimitScope: resilience.ScopeModel},
}

// ProfileOf returns a provider's profile; a provider of a configuration's own (a local server) fails
// as a whole and is asked for JSON schemas.
func ProfileOf(provider string) Profile {
	if p, ok := profiles[provider]; ok {
		return p
	}
	return Profile{ResponseFormat: "json_schema", MaxTokensField: "max_tokens", RateLimitScope: resilience.ScopeProvider, ServerErrorScope: resilience.ScopeProvider}
}

// OpenAI speaks OpenAI's chat completions (POST {base}/chat/completions), which OpenRouter, Groq,
// Cerebras, DeepSeek, vLLM and Ollama serve. The key goes in the Authorization header.
type OpenAI struct {
	Client   *http.Client
	Provider string
	Profile  Profile
	// Now tells time for rate-limit resets; nil means time.Now.
	Now func() time.Time
}

// NewOpenAI returns an adapter for an OpenAI-compatible provider.
func NewOpenAI(client *http.Client, provider string) *OpenAI {
	return &OpenAI{Client: client, Provider: provider, Profile: ProfileOf(provider)}
}

// Wire shapes of a chat completion request.
type (
	chatMessage struct {
		Role string `json:"role"`
		// Content is a string or a list of parts; nil (left out) for an assistant turn of tool calls only.
		Content    any            `json:"content,omitempty"`
		Name       string         `json:"name,omitempty"`
		ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
		ToolCallID string         `json:"tool_call_id,omitempty"`
	}
	chatPart struct {
		Type     string        `json:"type"`
		Text     string        `json:"text,omitempty"`
		ImageURL *chatImageURL `json:"image_url,omitempty"`
	}
	chatImageURL struct {
		URL    string `json:"url"`
		Detail string `json:"detail,omitempty"`
	}
	chatToolCall struct {
		ID       string       `json:"id"`
		Type     string       `json:"type"`
		Function chatFunction `json:"function"`
	}
	chatFunction struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	chatTool struct {
		Type     string          `json:"type"`
		Function chatFunctionDef `json:"function"`
	}
	chatFunctionDef struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      bool            `json:"strict,omitempty"`
	}
)

// ChatRequest builds the body of a chat completion for a call.
func (o *OpenAI) ChatRequest(call Call) ([]byte, error) { return o.chatRequest(call, false) }

// chatRequest builds the body of a chat completion, streamed or not. OpenAI's format carries every
// parameter; a provider that cannot constrain its output to a schema gets it in the system prompt.
func (o *OpenAI) chatRequest(call Call, stream bool) ([]byte, error) {
	msgs := call.Messages
	if note := o.formatNote(call.ResponseFormat); note != "" {
		msgs = withSystemNote(msgs, note)
	}
	body := map[string]any{"model": call.Upstream(), "messages": chatMessages(msgs), "stream": stream}
	if stream {
		// Usage comes in a last chunk of its own only when asked for.
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	if call.MaxTokens > 0 {
		body[o.maxTokensField()] = call.MaxTokens
	}
	chatParams(body, call.Params)
	if len(call.Tools) > 0 {
		body["tools"] = chatTools(call.Tools)
		// OpenAI refuses parallel_tool_calls without tools; without tools it says nothing anyway.
		if p := call.Params.ParallelToolCalls; p != nil {
			body["parallel_tool_calls"] = *p
		}
	}
	if c := call.ToolChoice; c != nil && c.Mode != "" {
		body["tool_choice"] = chatToolChoice(c)
	}
	if f := call.ResponseFormat; f != nil {
		if format := o.responseFormat(f); format != nil {
			body["response_format"] = format
		}
	}
	return json.Marshal(body)
}

// maxTokensField names the output limit as the provider takes it.
func (o *OpenAI) maxTokensField() string {
	if o.Profile.MaxTokensField == "" {
		return "max_tokens"
	}
	return o.Profile.MaxTokensField
}

// chatParams sets the sampling parameters the caller gave (all but parallel_tool_calls, which goes
// with the tools).
func chatParams(body map[string]any, p Params) {
	if p.Temperature != nil {
		body["temperature"] = *p.Temperature
	}
	if p.TopP != nil {
		body["top_p"] = *p.TopP
	}
	if len(p.Stop) > 0 {
		body["stop"] = p.Stop
	}
	if p.Seed != nil {
		body["seed"] = *p.Seed
	}
	if p.PresencePenalty != nil {
		body["presence_penalty"] = *p.PresencePenalty
	}
	if p.FrequencyPenalty != nil {
		body["frequency_penalty"] = *p.FrequencyPenalty
	}
	if len(p.LogitBias) > 0 {
		body["logit_bias"] = p.LogitBias
	}
	if p.User != "" {
		body["user"] = p.User
	}
	if p.Logprobs != nil && *p.Logprobs {
		body["logprobs"] = true
	}
	if p.TopLogprobs != nil {
		body["top_logprobs"] = *p.TopLogprobs
	}
}

// chatTools writes the tools as functions.
func chatTools(tools []Tool) []chatTool {
	out := make([]chatTool, len(tools))
	for i, t := range tools {
		out[i] = chatTool{Type: "function", Function: chatFunctionDef{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}}
	}
	return out
}

// chatToolChoice writes a tool choice: a mode by name, or the function the model must call.
func chatToolChoice(c *ToolChoice) any {
	if c.Mode == ToolChoiceFunction {
		return map[string]any{"type": "function", "function": map[string]any{"name": c.Name}}
	}
	return c.Mode
}

// responseFormat is the response_format the provider can take for f: a JSON schema, or any JSON object
// (the schema is then in the system prompt), or nil when it takes none.
func (o *OpenAI) responseFormat(f *ResponseFormat) map[string]any {
	switch {
	case o.Profile.ResponseFormat == "json_schema" && f.Type != FormatJSONObject && len(f.Schema) > 0:
		name := f.Name
		if name == "" {
			name = "response"
		}
		return map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": name, "schema": f.Schema, "strict": f.Strict}}
	case o.Profile.ResponseFormat == "json_schema" || o.Profile.ResponseFormat == "json_object":
		return map[string]any{"type": "json_object"}
	}
	return nil
}

// formatNote is what the system prompt must say of a response format the provider cannot constrain:
// the schema, for a provider that only does json_object, and the JSON wanted, for one that does neither.
func (o *OpenAI) formatNote(f *ResponseFormat) string {
	if f == nil {
		return ""
	}
	hasSchema := f.Type != FormatJSONObject && len(f.Schema) > 0
	switch o.Profile.ResponseFormat {
	case "json_schema":
		return ""
	case "json_object":
		if !hasSchema {
			return ""
		}
	}
	return schemaNote(f)
}

// schemaNote asks in words for the JSON a response format wants.
func schemaNote(f *ResponseFormat) string {
	if f.Type != FormatJSONObject && len(f.Schema) > 0 {
		return "Reply with one JSON object that satisfies this JSON schema, and nothing else:\n" + string(f.Schema)
	}
	return "Reply with one JSON object, and nothing else."
}

// withSystemNote adds a note to the first system message, or puts one first.
func withSystemNote(msgs []Message, note string) []Message {
	out := make([]Message, 0, len(msgs)+1)
	if len(msgs) > 0 && msgs[0].Role == "system" {
		first := msgs[0]
		if first.Parts != nil {
			first.Parts = append(append([]Part(nil), first.Parts...), Part{Type: PartText, Text: note})
		} else {
			first.Content += "\n\n" + note
		}
		return append(append(out, first), msgs[1:]...)
	}
	return append(append(out, Message{Role: "system", Content: note}), msgs...)
}

// chatMessages writes the turns in OpenAI's shapes.
func chatMessages(msgs []Message) []chatMessage {
	out := make([]chatMessage, len(msgs))
	for i, m := range msgs {
		cm := chatMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		if m.Role != "tool" {
			cm.Name = m.Name
		}
		if m.Parts != nil {
			parts := make([]chatPart, 0, len(m.Parts))
			for _, p := range m.Parts {
				if p.Type == PartImage {
					parts = append(parts, chatPart{Type: PartImage, ImageURL: &chatImageURL{URL: p.ImageURL, Detail: p.Detail}})
				} else {
					parts = append(parts, chatPart{Type: PartText, Text: p.Text})
				}
			}
			cm.Content = parts
		}
		for _, c := range m.ToolCalls {
			cm.ToolCalls = append(cm.ToolCalls, chatToolCall{ID: c.ID, Type: "function", Function: chatFunction{Name: c.Name, Arguments: c.Arguments}})
		}
		if len(cm.ToolCalls) > 0 && m.Parts == nil && m.Content == "" {
			cm.Content = nil
		}
		out[i] = cm
	}
	return out
}

// Complete implements Backend.
func (o *OpenAI) Complete(ctx context.Context, call Call) (Reply, error) {
	dropped := Dropped(KindOpenAI, call.Params)
	reply, err := o.complete(ctx, call)
	reply.Dropped = dropped
	return reply, err
}

func (o *OpenAI) complete(ctx context.Context, call Call) (Reply, error) {
	body, err := o.chatRequest(call, false)
	if err != nil {
		return Reply{}, &resilience.Error{Kind: resilience.Internal, Provider: o.Provider, Model: call.Model, Err: err}
	}
	x, err := post(ctx, o.Client, o.url(call), o.header(call), body, o.Provider, call.Model)
	if err != nil {
		return Reply{}, err
	}
	return withoutKey(call.Key)(o.ParseChat(call.Model, x.status, x.header, x.body))
}

func (o *OpenAI) url(call Call) string {
	return strings.TrimRight(call.BaseURL, "/") + "/chat/completions"
}

func (o *OpenAI) header(call Call) http.Header { return o.keyHeader(call.Key) }

// keyHeader carries the key as a bearer token.
func (o *OpenAI) keyHeader(key secret.String) http.Header {
	h := http.Header{}
	if key.Set() {
		h.Set("Authorization", "Bearer "+key.Reveal())
	}
	return h
}

// apiError is the error object of the OpenAI format; OpenRouter puts a number in code.
type apiError struct {
	Code    json.RawMessage `json:"code"`
	Message string          `json:"message"`
	Type    string          `json:"type"`
}

// wireToolCall is a tool call in an answer. Arguments are JSON text in OpenAI's format; a server that
// sends them as an object is read all the same.
type wireToolCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// arguments returns the call's arguments as JSON text.
func (c wireToolCall) arguments() string {
	raw := c.Function.Arguments
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	return string(raw)
}

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// usage is the usage a chat completion reports: its prompt tokens count the cached ones among them.
func (u chatUsage) usage() Usage {
	out := Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if d := u.PromptTokensDetails; d != nil {
		out.CacheReadTokens = max(d.CachedTokens, 0)
	}
	return out
}

type chatResponse struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content   *string        `json:"content"`
			ToolCalls []wireToolCall `json:"tool_calls"`
		} `json:"message"`
		Delta struct {
			Content   *string        `json:"content"`
			ToolCalls []wireToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string         `json:"finish_reason"`
		Logprobs     json.RawMessage `json:"logprobs"`
		Error        *apiError       `json:"error"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
	// Groq reports a stream's usage here.
	XGroq *struct {
		Usage *chatUsage `json:"usage"`
	} `json:"x_groq"`
	Error *apiError `json:"error"`
}

// ParseChat reads a chat completion's answer: the reply, or the failure it describes. An error object
// inside an HTTP 200 (OpenRouter's failures during generation) is a failure like any other.
func (o *OpenAI) ParseChat(model string, status int, header http.Header, raw []byte) (Reply, error) {
	limits := o.limits(header)
	var resp chatResponse
	decodeErr := json.Unmarshal(skipKeepAlive(raw), &resp)
	if status/100 != 2 {
		var e apiError
		if resp.Error != nil {
			e = *resp.Error
		} else if decodeErr != nil {
			e.Message = string(raw) // not the format: a gateway's page
		}
		return Reply{RateLimit: limits}, o.classify(model, status, e, limits)
	}
	if decodeErr != nil {
		return Reply{RateLimit: limits}, failure(o.Provider, model, status, resilience.ProviderUnavailable, o.Profile.ServerErrorScope, nil,
			"the answer is not a chat completion: "+decodeErr.Error())
	}
	if resp.Error != nil {
		return Reply{RateLimit: limits}, o.classify(model, codeStatus(resp.Error.Code, http.StatusBadGateway), *resp.Error, limits)
	}
	reply := Reply{ServedModel: resp.Model, UpstreamRequestID: header.Get("x-request-id"), RateLimit: limits}
	if reply.UpstreamRequestID == "" {
		reply.UpstreamRequestID = resp.ID
	}
	if resp.Usage != nil {
		reply.Usage = resp.Usage.usage()
	}
	if len(resp.Choices) > 0 {
		c := resp.Choices[0]
		if c.Error != nil {
			return reply, o.classify(model, codeStatus(c.Error.Code, http.StatusBadGateway), *c.Error, limits)
		}
		if c.Message.Content != nil {
			reply.Text = *c.Message.Content
		}
		if len(c.Logprobs) > 0 && string(c.Logprobs) != "null" {
			reply.Logprobs = c.Logprobs
		}
		for i, tc := range c.Message.ToolCalls {
			if i == maxToolCalls {
				break
			}
			id := tc.ID
			if id == "" {
				id = syntheticCallID(resp.ID, strconv.Itoa(i))
			}
			reply.ToolCalls = append(reply.ToolCalls, ToolCall{ID: id, Name: tc.Function.Name, Arguments: tc.arguments()})
		}
		if c.FinishReason != nil {
			reply.FinishReason = *c.FinishReason
		}
	}
	return reply, nil
}

func (o *OpenAI) limits(header http.Header) *ratelimit.Upstream {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	limits := limitHeaders(header, now())
	if limits != nil {
		limits.PerModel = o.Profile.PerModelLimits
	}
	return limits
}

// Stream implements Streamer: the chat completion with stream: true, its usage in a last chunk of its
// own (stream_options.include_usage), until data: [DONE].
func (o *OpenAI) Stream(ctx context.Context, call Call, onDelta func(Delta)) (Reply, error) {
	dropped := Dropped(KindOpenAI, call.Params)
	reply, err := o.stream(ctx, call, strikeKey(call.Key, onDelta))
	reply.Dropped = dropped
	return withoutKey(call.Key)(reply, err)
}

func (o *OpenAI) stream(ctx context.Context, call Call, onDelta func(Delta)) (Reply, error) {
	body, err := o.chatRequest(call, true)
	if err != nil {
		return Reply{}, &resilience.Error{Kind: resilience.Internal, Provider: o.Provider, Model: call.Model, Err: err}
	}
	return streamed(ctx, o.Client, o.url(call), o.header(call), body, o.Provider, call.Model,
		func(status int, header http.Header, b []byte) (Reply, error) {
			return o.ParseChat(call.Model, status, header, b)
		},
		func(status int, header http.Header, r io.Reader) (Reply, error) {
			return o.ReadChatStream(ctx, call.Model, status, header, r, onDelta)
		}, onDelta)
}

// ReadChatStream reads a streamed chat completion: each chunk's text and tool-call pieces go to onDelta
// as they come; an error chunk (OpenRouter's failures during generation) is classified as ParseChat
// classifies it; a stream that ends before [DONE] or a finish reason was cut off.
func (o *OpenAI) ReadChatStream(ctx context.Context, model string, status int, header http.Header, body io.Reader, onDelta func(Delta)) (Reply, error) {
	s := &chatStream{o: o, model: model, status: status, onDelta: onDelta,
		reply: Reply{UpstreamRequestID: header.Get("x-request-id"), RateLimit: o.limits(header)}}
	if err := readStream(ctx, body, s, o.Provider, model, status); err != nil {
		return s.reply, err
	}
	s.reply.Text, s.reply.ToolCalls = s.text.String(), s.calls.done()
	return s.reply, nil
}

// chatStream is what a streamed chat completion has said so far. The reply's text and tool calls are
// set once the stream is whole.
type chatStream struct {
	o       *OpenAI
	model   string
	status  int
	onDelta func(Delta)
	reply   Reply
	text    strings.Builder
	calls   toolCalls
}

// whole reports whether a chunk has given a finish reason: the stream may then end without [DONE].
func (s *chatStream) whole() bool { return s.reply.FinishReason != "" }

// event reads one chunk: [DONE] ends the stream, an error object fails it, and any other chunk adds
// its ids, usage and first choice to the reply.
func (s *chatStream) event(ev sseEvent) (bool, error) {
	data := bytes.TrimSpace(ev.data)
	if string(data) == "[DONE]" {
		return true, nil
	}
	var chunk chatResponse
	if err := json.Unmarshal(data, &chunk); err != nil {
		return false, s.malformed("a chunk of the stream is not JSON: " + err.Error())
	}
	if chunk.Error != nil {
		return false, s.failed(chunk.Error)
	}
	s.readHead(&chunk)
	if len(chunk.Choices) == 0 {
		return false, nil
	}
	if e := chunk.Choices[0].Error; e != nil {
		return false, s.failed(e)
	}
	return false, s.readChoice(&chunk)
}

// readHead keeps the served model and the request id the first chunk names, and the usage of the
// latest chunk that has one (Groq's in x_groq).
func (s *chatStream) readHead(chunk *chatResponse) {
	if s.reply.ServedModel == "" {
		s.reply.ServedModel = chunk.Model
	}
	if s.reply.UpstreamRequestID == "" {
		s.reply.UpstreamRequestID = chunk.ID
	}
	if u := chunk.Usage; u != nil {
		s.reply.Usage = u.usage()
	} else if g := chunk.XGroq; g != nil && g.Usage != nil {
		s.reply.Usage = g.Usage.usage()
	}
}

// readChoice reads the delta of a chunk's first choice, its text and its pieces of tool calls, and
// passes it on; a finish reason finishes the stream.
func (s *chatStream) readChoice(chunk *chatResponse) error {
	c := &chunk.Choices[0]
	var d Delta
	if c.Delta.Content != nil {
		d.Text = *c.Delta.Content
		s.text.WriteString(d.Text)
	}
	for i, tc := range c.Delta.ToolCalls {
		piece, err := s.toolCallPiece(chunk.ID, i, tc)
		if err != nil {
			return err
		}
		d.ToolCalls = append(d.ToolCalls, piece)
	}
	if c.FinishReason != nil && *c.FinishReason != "" {
		s.reply.FinishReason = *c.FinishReason
	}
	relay(d, s.onDelta)
	return nil
}

// toolCallPiece adds the piece of a tool call at place i of a delta to the calls. A piece without an
// index is the call at its place; a call's id comes once, with its first piece, and is made up when
// the provider sent none.
func (s *chatStream) toolCallPiece(chunkID string, i int, tc wireToolCall) (ToolCallDelta, error) {
	index := i
	if tc.Index != nil {
		index = *tc.Index
	}
	piece := ToolCallDelta{Index: index, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.arguments()}
	if s.calls.hasID(index) {
		piece.ID = ""
	} else if piece.ID == "" {
		piece.ID = syntheticCallID(chunkID, strconv.Itoa(index))
	}
	if err := s.calls.add(piece); err != nil {
		return ToolCallDelta{}, s.malformed(err.Error())
	}
	return piece, nil
}

// failed classifies an error object of the stream as ParseChat classifies one behind a 200.
func (s *chatStream) failed(e *apiError) error {
	return s.o.classify(s.model, codeStatus(e.Code, http.StatusBadGateway), *e, s.reply.RateLimit)
}

// malformed is the failure of a stream that breaks the format.
func (s *chatStream) malformed(msg string) error {
	return failure(s.o.Provider, s.model, s.status, resilience.ProviderUnavailable, s.o.Profile.ServerErrorScope, nil, msg)
}

// codeStatus reads an HTTP-like status from an error code, or returns def.
func codeStatus(code json.RawMessage, def int) int {
	if n, err := strconv.Atoi(strings.Trim(string(code), `"`)); err == nil && n >= 400 && n < 600 {
		return n
	}
	return def
}

// classify maps a failed chat completion onto the error table.
func (o *OpenAI) classify(model string, status int, e apiError, limits *ratelimit.Upstream) error {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(status)
	}
	code := strings.Trim(string(e.Code), `"`)
	return classifyStatus(o.Provider, model, status, msg+" "+code+" "+e.Type, msg, o.Profile, limits)
}

// classifyStatus maps an HTTP failure onto the error table: 401 and 403 are the key's, 402 the
// account's, 404 the model's (it leaves the pool), 413 or a context error is a request too large, 429
// a rate limit, 5xx and 529 a server error; any other 4xx is a request the provider refused. text is
// searched for the kind of a 400; msg is what the error says.
func classifyStatus(provider, model string, status int, text, msg string, p Profile, limits *ratelimit.Upstream) error {
	kind, scope := resilience.KindForStatus(status), resilience.ScopeUnknown
	switch {
	case status == http.StatusPaymentRequired:
		kind, scope = resilience.PaymentRequired, resilience.ScopeProvider
	case kind == resilience.InvalidAPIKey:
		scope = resilience.ScopeProvider
	case kind == resilience.ModelNotFound:
		scope = resilience.ScopeModel
	case kind == resilience.RateLimited:
		scope = p.RateLimitScope
	case kind == resilience.ProviderUnavailable:
		scope = p.ServerErrorScope
	case status == http.StatusBadRequest && tooLarge(text):
		kind = resilience.RequestTooLarge
	}
	return failure(provider, model, status, kind, scope, limits, fmt.Sprintf("%d: %s", status, msg))
}
