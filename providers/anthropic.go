package providers

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/resilience"
)

// AnthropicVersion is the pinned version of the Messages API.
const AnthropicVersion = "2023-06-01"

// DefaultMaxTokens is the output limit sent when a call sets none: the Messages API requires one.
const DefaultMaxTokens = 1024

// Anthropic speaks the Messages API (POST {base}/v1/messages) with the key in x-api-key and a pinned
// anthropic-version. It has no response format: an arbiter's schema is in its prompt.
type Anthropic struct {
	Client   *http.Client
	Provider string
	Now      func() time.Time
}

// NewAnthropic returns an adapter for the Messages API.
func NewAnthropic(client *http.Client, provider string) *Anthropic {
	return &Anthropic{Client: client, Provider: provider}
}

// MessagesRequest builds the body of a Messages call.
func (a *Anthropic) MessagesRequest(call Call) ([]byte, error) {
	body := map[string]any{"model": call.Upstream(), "max_tokens": DefaultMaxTokens}
	if call.MaxTokens > 0 {
		body["max_tokens"] = call.MaxTokens
	}
	var system []string
	var msgs []Message
	for _, m := range call.Messages {
		if m.Role == "system" {
			system = append(system, m.Content)
		} else {
			msgs = append(msgs, m)
		}
	}
	body["messages"] = msgs
	if len(system) > 0 {
		body["system"] = strings.Join(system, "\n\n")
	}
	if call.Params.Temperature != nil {
		body["temperature"] = *call.Params.Temperature
	}
	return json.Marshal(body)
}

// Complete implements Backend.
func (a *Anthropic) Complete(ctx context.Context, call Call) (Reply, error) {
	body, err := a.MessagesRequest(call)
	if err != nil {
		return Reply{}, &resilience.Error{Kind: resilience.Internal, Provider: a.Provider, Model: call.Model, Err: err}
	}
	h := http.Header{}
	h.Set("anthropic-version", AnthropicVersion)
	if call.Key.Set() {
		h.Set("x-api-key", call.Key.Reveal())
	}
	x, err := post(ctx, a.Client, strings.TrimRight(call.BaseURL, "/")+"/v1/messages", h, body, a.Provider, call.Model)
	if err != nil {
		return Reply{}, err
	}
	return withoutKey(call.Key)(a.ParseMessage(call.Model, x.status, x.header, x.body))
}

type anthropicResponse struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Model   string `json:"model"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason string `json:"stop_reason"`
	Usage      struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// ParseMessage reads a Messages answer, or the failure it describes: {"type": "error", "error": {"type",
// "message"}}, 529 overloaded_error among them.
func (a *Anthropic) ParseMessage(model string, status int, header http.Header, raw []byte) (Reply, error) {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	limits := limitHeaders(header, now())
	var resp anthropicResponse
	decodeErr := json.Unmarshal(raw, &resp)
	if status/100 != 2 || resp.Type == "error" {
		msg, kind := string(raw), ""
		if resp.Error != nil {
			msg, kind = resp.Error.Message, resp.Error.Type
		}
		if status/100 == 2 {
			status = http.StatusBadGateway
		}
		return Reply{RateLimit: limits}, classifyStatus(a.Provider, model, status, msg+" "+kind, msg, ProfileOf(a.Provider), limits)
	}
	if decodeErr != nil {
		return Reply{RateLimit: limits}, failure(a.Provider, model, status, resilience.ProviderUnavailable, resilience.ScopeProvider, nil,
			"the answer is not a message: "+decodeErr.Error())
	}
	reply := Reply{ServedModel: resp.Model, FinishReason: resp.StopReason, UpstreamRequestID: header.Get("request-id"), RateLimit: limits,
		Usage: Usage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens}}
	if reply.UpstreamRequestID == "" {
		reply.UpstreamRequestID = resp.ID
	}
	var text strings.Builder
	for _, c := range resp.Content {
		if c.Type == "text" {
			text.WriteString(c.Text)
		}
	}
	reply.Text = text.String()
	return reply, nil
}
