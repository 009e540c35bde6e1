package providers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/ratelimit"
	"github.com/conclave-ai/conclave/resilience"
)

// Gemini speaks generateContent (POST {base}/v1beta/models/{model}:generateContent) with the key in the
// x-goog-api-key header, never in the URL: URLs end up in logs.
type Gemini struct {
	Client   *http.Client
	Provider string
	Now      func() time.Time
}

// NewGemini returns an adapter for generateContent.
func NewGemini(client *http.Client, provider string) *Gemini {
	return &Gemini{Client: client, Provider: provider}
}

type geminiPart struct {
	Text string `json:"text"`
}

type geminiContent struct {
	Role  string       `json:"role,omitempty"`
	Parts []geminiPart `json:"parts"`
}

// GenerateRequest builds the body of a generateContent call.
func (g *Gemini) GenerateRequest(call Call) ([]byte, error) {
	var system []geminiPart
	var contents []geminiContent
	for _, m := range call.Messages {
		switch m.Role {
		case "system":
			system = append(system, geminiPart{Text: m.Content})
		case "assistant":
			contents = append(contents, geminiContent{Role: "model", Parts: []geminiPart{{Text: m.Content}}})
		default:
			contents = append(contents, geminiContent{Role: "user", Parts: []geminiPart{{Text: m.Content}}})
		}
	}
	body := map[string]any{"contents": contents}
	if len(system) > 0 {
		body["systemInstruction"] = geminiContent{Parts: system}
	}
	cfg := map[string]any{}
	if call.MaxTokens > 0 {
		cfg["maxOutputTokens"] = call.MaxTokens
	}
	if call.Params.Temperature != nil {
		cfg["temperature"] = *call.Params.Temperature
	}
	if f := call.ResponseFormat; f != nil {
		cfg["responseMimeType"] = "application/json"
		cfg["responseJsonSchema"] = f.Schema
	}
	if len(cfg) > 0 {
		body["generationConfig"] = cfg
	}
	return json.Marshal(body)
}

// Complete implements Backend.
func (g *Gemini) Complete(ctx context.Context, call Call) (Reply, error) {
	body, err := g.GenerateRequest(call)
	if err != nil {
		return Reply{}, &resilience.Error{Kind: resilience.Internal, Provider: g.Provider, Model: call.Model, Err: err}
	}
	h := http.Header{}
	if call.Key.Set() {
		h.Set("x-goog-api-key", call.Key.Reveal())
	}
	u := strings.TrimRight(call.BaseURL, "/") + "/v1beta/models/" + url.PathEscape(strings.TrimPrefix(call.Upstream(), "models/")) + ":generateContent"
	x, err := post(ctx, g.Client, u, h, body, g.Provider, call.Model)
	if err != nil {
		return Reply{}, err
	}
	return withoutKey(call.Key)(g.ParseGenerate(call.Model, x.status, x.header, x.body))
}

type geminiResponse struct {
	Candidates []struct {
		Content      geminiContent `json:"content"`
		FinishReason string        `json:"finishReason"`
	} `json:"candidates"`
	UsageMetadata struct {
		PromptTokenCount     int `json:"promptTokenCount"`
		CandidatesTokenCount int `json:"candidatesTokenCount"`
	} `json:"usageMetadata"`
	ModelVersion   string `json:"modelVersion"`
	ResponseID     string `json:"responseId"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []struct {
			Type       string `json:"@type"`
			Reason     string `json:"reason"`
			RetryDelay string `json:"retryDelay"`
		} `json:"details"`
	} `json:"error"`
}

// ParseGenerate reads a generateContent answer, or the failure it describes: the Google error object
// with a status (RESOURCE_EXHAUSTED, UNAVAILABLE, ...) and details (RetryInfo's retryDelay, ErrorInfo's
// API_KEY_INVALID).
func (g *Gemini) ParseGenerate(model string, status int, header http.Header, raw []byte) (Reply, error) {
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	limits := limitHeaders(header, now())
	var resp geminiResponse
	decodeErr := json.Unmarshal(raw, &resp)
	if status/100 != 2 {
		msg, text := string(raw), ""
		if e := resp.Error; e != nil {
			msg, text = e.Message, e.Status
			for _, d := range e.Details {
				text += " " + d.Reason
				if d.Reason == "API_KEY_INVALID" {
					status = http.StatusUnauthorized
				}
				if d.RetryDelay != "" {
					if wait, ok := parseReset(d.RetryDelay, now()); ok {
						if limits == nil {
							limits = &ratelimit.Upstream{RemainingRequests: -1, RemainingTokens: -1}
						}
						limits.RetryAfter = max(limits.RetryAfter, wait)
					}
				}
			}
		}
		return Reply{RateLimit: limits}, classifyStatus(g.Provider, model, status, msg+" "+text, msg, ProfileOf(g.Provider), limits)
	}
	if decodeErr != nil {
		return Reply{RateLimit: limits}, failure(g.Provider, model, status, resilience.ProviderUnavailable, resilience.ScopeUnknown, nil,
			"the answer is not a generateContent response: "+decodeErr.Error())
	}
	reply := Reply{ServedModel: resp.ModelVersion, UpstreamRequestID: resp.ResponseID, RateLimit: limits,
		Usage: Usage{InputTokens: resp.UsageMetadata.PromptTokenCount, OutputTokens: resp.UsageMetadata.CandidatesTokenCount}}
	if len(resp.Candidates) > 0 {
		c := resp.Candidates[0]
		reply.FinishReason = c.FinishReason
		var text strings.Builder
		for _, p := range c.Content.Parts {
			text.WriteString(p.Text)
		}
		reply.Text = text.String()
	} else if resp.PromptFeedback != nil && resp.PromptFeedback.BlockReason != "" {
		reply.FinishReason = resp.PromptFeedback.BlockReason // no answer: an empty one, judged as such
	}
	return reply, nil
}
