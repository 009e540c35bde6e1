package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/ratelimit"
	"github.com/conclave-ai/conclave/resilience"
)

// Profile is how one provider speaking a wire format differs from another.
type Profile struct {
	// ResponseFormat is how the provider constrains JSON: json_schema, json_object or none (the schema
	// is then in the prompt only).
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
	"anthropic":  {ResponseFormat: "none", RateLimitScope: resilience.ScopeProvider, ServerErrorScope: resilience.ScopeProvider},
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

// ChatRequest builds the body of a chat completion for a call.
func (o *OpenAI) ChatRequest(call Call) ([]byte, error) {
	body := map[string]any{"model": call.Upstream(), "messages": call.Messages, "stream": false}
	if call.MaxTokens > 0 {
		body[o.Profile.MaxTokensField] = call.MaxTokens
	}
	if call.Params.Temperature != nil {
		body["temperature"] = *call.Params.Temperature
	}
	if f := call.ResponseFormat; f != nil {
		switch o.Profile.ResponseFormat {
		case "json_schema":
			body["response_format"] = map[string]any{"type": "json_schema",
				"json_schema": map[string]any{"name": f.Name, "schema": f.Schema, "strict": true}}
		case "json_object":
			body["response_format"] = map[string]any{"type": "json_object"}
		}
	}
	return json.Marshal(body)
}

// Complete implements Backend.
func (o *OpenAI) Complete(ctx context.Context, call Call) (Reply, error) {
	body, err := o.ChatRequest(call)
	if err != nil {
		return Reply{}, &resilience.Error{Kind: resilience.Internal, Provider: o.Provider, Model: call.Model, Err: err}
	}
	h := http.Header{}
	if call.Key.Set() {
		h.Set("Authorization", "Bearer "+call.Key.Reveal())
	}
	x, err := post(ctx, o.Client, strings.TrimRight(call.BaseURL, "/")+"/chat/completions", h, body, o.Provider, call.Model)
	if err != nil {
		return Reply{}, err
	}
	return withoutKey(call.Key)(o.ParseChat(call.Model, x.status, x.header, x.body))
}

// apiError is the error object of the OpenAI format; OpenRouter puts a number in code.
type apiError struct {
	Code    json.RawMessage `json:"code"`
	Message string          `json:"message"`
	Type    string          `json:"type"`
}

type chatResponse struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
		} `json:"message"`
		FinishReason string    `json:"finish_reason"`
		Error        *apiError `json:"error"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *apiError `json:"error"`
}

// ParseChat reads a chat completion's answer: the reply, or the failure it describes. An error object
// inside an HTTP 200 (OpenRouter's failures during generation) is a failure like any other.
func (o *OpenAI) ParseChat(model string, status int, header http.Header, raw []byte) (Reply, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	limits := limitHeaders(header, now())
	if limits != nil {
		limits.PerModel = o.Profile.PerModelLimits
	}
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
		reply.FinishReason = c.FinishReason
	}
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
