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
		field := o.Profile.MaxTokensField
		if field == "" {
			field = "max_tokens"
		}
		body[field] = call.MaxTokens
	}
	p := call.Params
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
	if len(call.Tools) > 0 {
		tools := make([]chatTool, len(call.Tools))
		for i, t := range call.Tools {
			tools[i] = chatTool{Type: "function", Function: chatFunctionDef{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}}
		}
		body["tools"] = tools
		// OpenAI refuses parallel_tool_calls without tools; without tools it says nothing anyway.
		if p.ParallelToolCalls != nil {
			body["parallel_tool_calls"] = *p.ParallelToolCalls
		}
	}
	if c := call.ToolChoice; c != nil && c.Mode != "" {
		if c.Mode == ToolChoiceFunction {
			body["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": c.Name}}
		} else {
			body["tool_choice"] = c.Mode
		}
	}
	if f := call.ResponseFormat; f != nil {
		switch {
		case o.Profile.ResponseFormat == "json_schema" && f.Type != FormatJSONObject && len(f.Schema) > 0:
			name := f.Name
			if name == "" {
				name = "response"
			}
			body["response_format"] = map[string]any{"type": "json_schema",
				"json_schema": map[string]any{"name": name, "schema": f.Schema, "strict": f.Strict}}
		case o.Profile.ResponseFormat == "json_schema" || o.Profile.ResponseFormat == "json_object":
			body["response_format"] = map[string]any{"type": "json_object"}
		}
	}
	return json.Marshal(body)
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
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
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
		FinishReason *string   `json:"finish_reason"`
		Error        *apiError `json:"error"`
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
		reply.Usage = Usage{InputTokens: resp.Usage.PromptTokens, OutputTokens: resp.Usage.CompletionTokens}
	}
	if len(resp.Choices) > 0 {
		c := resp.Choices[0]
		if c.Error != nil {
			return reply, o.classify(model, codeStatus(c.Error.Code, http.StatusBadGateway), *c.Error, limits)
		}
		if c.Message.Content != nil {
			reply.Text = *c.Message.Content
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
	reply := Reply{UpstreamRequestID: header.Get("x-request-id"), RateLimit: o.limits(header)}
	var text strings.Builder
	var calls toolCalls
	finished := false
	events := newSSEReader(body)
	for {
		ev, err := events.next()
		if err == io.EOF && finished {
			break
		}
		if err != nil {
			return reply, streamFailure(ctx, err, o.Provider, model, status)
		}
		data := bytes.TrimSpace(ev.data)
		if string(data) == "[DONE]" {
			break
		}
		if len(data) == 0 {
			continue
		}
		var chunk chatResponse
		if err := json.Unmarshal(data, &chunk); err != nil {
			return reply, failure(o.Provider, model, status, resilience.ProviderUnavailable, o.Profile.ServerErrorScope, nil,
				"a chunk of the stream is not JSON: "+err.Error())
		}
		if chunk.Error != nil {
			return reply, o.classify(model, codeStatus(chunk.Error.Code, http.StatusBadGateway), *chunk.Error, reply.RateLimit)
		}
		if reply.ServedModel == "" {
			reply.ServedModel = chunk.Model
		}
		if reply.UpstreamRequestID == "" {
			reply.UpstreamRequestID = chunk.ID
		}
		if u := chunk.Usage; u != nil {
			reply.Usage = Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
		} else if g := chunk.XGroq; g != nil && g.Usage != nil {
			reply.Usage = Usage{InputTokens: g.Usage.PromptTokens, OutputTokens: g.Usage.CompletionTokens}
		}
		if len(chunk.Choices) == 0 {
			continue
		}
		c := chunk.Choices[0]
		if c.Error != nil {
			return reply, o.classify(model, codeStatus(c.Error.Code, http.StatusBadGateway), *c.Error, reply.RateLimit)
		}
		var d Delta
		if c.Delta.Content != nil {
			d.Text = *c.Delta.Content
			text.WriteString(d.Text)
		}
		for i, tc := range c.Delta.ToolCalls {
			index := i
			if tc.Index != nil {
				index = *tc.Index
			}
			piece := ToolCallDelta{Index: index, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.arguments()}
			if index < len(calls.calls) && calls.calls[index].ID != "" {
				piece.ID = "" // the id comes once, with the call's first piece
			} else if piece.ID == "" {
				piece.ID = syntheticCallID(chunk.ID, strconv.Itoa(index))
			}
			if err := calls.add(piece); err != nil {
				return reply, failure(o.Provider, model, status, resilience.ProviderUnavailable, o.Profile.ServerErrorScope, nil, err.Error())
			}
			d.ToolCalls = append(d.ToolCalls, piece)
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			reply.FinishReason, finished = *c.FinishReason, true
		}
		if d.Text != "" || len(d.ToolCalls) > 0 {
			onDelta(d)
		}
	}
	reply.Text, reply.ToolCalls = text.String(), calls.done()
	return reply, nil
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
