package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/platform/secret"
)

// Lister lists the models a provider serves, from its model-listing endpoint.
type Lister interface {
	ListModels(ctx context.Context, baseURL string, key secret.String) (Listing, error)
}

// Listing is what a provider listed: the models that can answer a chat, and how many it listed that
// cannot, by reason.
type Listing struct {
	Models   []catalog.Model
	Rejected map[string]int
}

// Why a listed model is not a candidate.
const (
	NotChat      = "not_a_chat_model" // embeddings, speech, images, moderation, guard classifiers
	NoTextOutput = "no_text_output"
	Inactive     = "inactive"
	NoGenerate   = "no_generate_content"
)

// Listing bounds: a provider cannot make discovery read without end.
const (
	maxListedPages  = 20
	maxListedModels = 5000
)

// notChat matches the ids of models that serve no chat: providers list them beside the chat models.
var notChat = regexp.MustCompile(`(?i)(embed|whisper|tts|dall-e|moderation|transcribe|rerank|guard|image|audio|realtime|speech|vision-preview$)`)

func (l *Listing) reject(reason string) {
	if l.Rejected == nil {
		l.Rejected = map[string]int{}
	}
	l.Rejected[reason]++
}

func (l *Listing) add(m catalog.Model) bool {
	if len(l.Models) >= maxListedModels {
		return false
	}
	if notChat.MatchString(m.ID) {
		l.reject(NotChat)
		return true
	}
	l.Models = append(l.Models, m)
	return true
}

// get fetches one page of a listing; a failure is classified as a call's would be.
func get(ctx context.Context, client *http.Client, u string, header http.Header, provider string, parse func(int, http.Header, []byte) error) ([]byte, error) {
	x, err := roundTrip(ctx, client, http.MethodGet, u, header, nil, provider, "")
	if err != nil {
		return nil, err
	}
	if x.status/100 != 2 {
		return nil, parse(x.status, x.header, x.body)
	}
	return skipKeepAlive(x.body), nil
}

// perToken reads OpenRouter's price of one token, a decimal string, as US dollars per million tokens.
func perToken(s string) (money.Price, bool) {
	p, err := money.ParsePerToken(s)
	return p, err == nil && p >= 0
}

type openAIModels struct {
	Data []openAIModel `json:"data"`
}

// openAIModel is one model of an OpenAI-format listing, with the fields the richer listings add. It is
// an alias of an unnamed struct type: errors decoding a listing quote the shape of the data, not a name
// of ours.
type openAIModel = struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
	// OpenRouter
	ContextLength int `json:"context_length"`
	Pricing       *struct {
		Prompt     string `json:"prompt"`
		Completion string `json:"completion"`
	} `json:"pricing"`
	Architecture *struct {
		OutputModalities []string `json:"output_modalities"`
	} `json:"architecture"`
	TopProvider *struct {
		MaxCompletionTokens int `json:"max_completion_tokens"`
	} `json:"top_provider"`
	// Groq
	ContextWindow       int   `json:"context_window"`
	MaxCompletionTokens int   `json:"max_completion_tokens"`
	Active              *bool `json:"active"`
	// vLLM
	MaxModelLen int `json:"max_model_len"`
}

// ListModels implements Lister: GET {base}/models, as OpenAI, OpenRouter, Groq, Cerebras, DeepSeek,
// vLLM and Ollama serve it, reading the context windows, prices and modalities the richer ones add.
func (o *OpenAI) ListModels(ctx context.Context, baseURL string, key secret.String) (Listing, error) {
	h := http.Header{}
	if key.Set() {
		h.Set("Authorization", "Bearer "+key.Reveal())
	}
	raw, err := get(ctx, o.Client, strings.TrimRight(baseURL, "/")+"/models", h, o.Provider, func(status int, header http.Header, body []byte) error {
		_, err := o.ParseChat("", status, header, body)
		return err
	})
	if err != nil {
		return Listing{}, withoutKeyErr(key, err)
	}
	var page openAIModels
	if err := json.Unmarshal(raw, &page); err != nil {
		return Listing{}, fmt.Errorf("%s: the model list is not a list: %w", o.Provider, err)
	}
	var l Listing
	for i := range page.Data {
		m, rejected := listedModel(&page.Data[i])
		if rejected != "" {
			l.reject(rejected)
			continue
		}
		if !l.add(m) {
			break
		}
	}
	return l, nil
}

// listedModel reads a listed model, or why it is not a candidate: an inactive model, or one that
// writes no text.
func listedModel(d *openAIModel) (catalog.Model, string) {
	switch {
	case d.Active != nil && !*d.Active:
		return catalog.Model{}, Inactive
	case d.Architecture != nil && len(d.Architecture.OutputModalities) > 0 && !slices.Contains(d.Architecture.OutputModalities, "text"):
		return catalog.Model{}, NoTextOutput
	}
	m := catalog.Model{ID: d.ID, ContextWindow: max(d.ContextLength, d.ContextWindow, d.MaxModelLen), MaxOutputTokens: d.MaxCompletionTokens,
		Created: max(d.Created, 0)}
	// A listing without prices (or with a provider's "-1", variable) leaves the model unpriced.
	m.Unpriced = true
	if d.Pricing != nil {
		in, okIn := perToken(d.Pricing.Prompt)
		out, okOut := perToken(d.Pricing.Completion)
		if okIn && okOut {
			m.InputPricePerMTok, m.OutputPricePerMTok, m.Unpriced = in, out, false
		}
	}
	if d.TopProvider != nil && d.TopProvider.MaxCompletionTokens > 0 {
		m.MaxOutputTokens = d.TopProvider.MaxCompletionTokens
	}
	return m, ""
}

type anthropicModels struct {
	Data []struct {
		ID             string    `json:"id"`
		CreatedAt      time.Time `json:"created_at"`
		MaxInputTokens int       `json:"max_input_tokens"`
		MaxTokens      int       `json:"max_tokens"`
	} `json:"data"`
	HasMore bool   `json:"has_more"`
	LastID  string `json:"last_id"`
}

// ListModels implements Lister: GET {base}/v1/models, page by page.
func (a *Anthropic) ListModels(ctx context.Context, baseURL string, key secret.String) (Listing, error) {
	h := http.Header{}
	if key.Set() {
		h.Set("x-api-key", key.Reveal())
	}
	h.Set("anthropic-version", AnthropicVersion)
	var l Listing
	after := ""
	for range maxListedPages {
		q := url.Values{"limit": {"1000"}}
		if after != "" {
			q.Set("after_id", after)
		}
		raw, err := get(ctx, a.Client, strings.TrimRight(baseURL, "/")+"/v1/models?"+q.Encode(), h.Clone(), a.Provider, func(status int, header http.Header, body []byte) error {
			_, err := a.ParseMessage("", status, header, body)
			return err
		})
		if err != nil {
			return Listing{}, withoutKeyErr(key, err)
		}
		var page anthropicModels
		if err := json.Unmarshal(raw, &page); err != nil {
			return Listing{}, fmt.Errorf("%s: the model list is not a list: %w", a.Provider, err)
		}
		for _, d := range page.Data {
			m := catalog.Model{ID: d.ID, ContextWindow: d.MaxInputTokens, MaxOutputTokens: d.MaxTokens}
			if !d.CreatedAt.IsZero() {
				m.Created = max(d.CreatedAt.Unix(), 0)
			}
			if !l.add(m) {
				return l, nil
			}
		}
		if !page.HasMore || page.LastID == "" || page.LastID == after {
			break
		}
		after = page.LastID
	}
	return l, nil
}

type geminiModels struct {
	Models []struct {
		Name                       string   `json:"name"`
		InputTokenLimit            int      `json:"inputTokenLimit"`
		OutputTokenLimit           int      `json:"outputTokenLimit"`
		SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
	} `json:"models"`
	NextPageToken string `json:"nextPageToken"`
}

// ListModels implements Lister: GET {base}/v1beta/models, page by page, keeping the models that serve
// generateContent.
func (g *Gemini) ListModels(ctx context.Context, baseURL string, key secret.String) (Listing, error) {
	h := http.Header{}
	if key.Set() {
		h.Set("x-goog-api-key", key.Reveal())
	}
	var l Listing
	token := ""
	for range maxListedPages {
		q := url.Values{"pageSize": {"1000"}}
		if token != "" {
			q.Set("pageToken", token)
		}
		raw, err := get(ctx, g.Client, strings.TrimRight(baseURL, "/")+"/v1beta/models?"+q.Encode(), h.Clone(), g.Provider, func(status int, header http.Header, body []byte) error {
			_, err := g.ParseGenerate("", status, header, body)
			return err
		})
		if err != nil {
			return Listing{}, withoutKeyErr(key, err)
		}
		var page geminiModels
		if err := json.Unmarshal(raw, &page); err != nil {
			return Listing{}, fmt.Errorf("%s: the model list is not a list: %w", g.Provider, err)
		}
		for _, d := range page.Models {
			if !slices.Contains(d.SupportedGenerationMethods, "generateContent") {
				l.reject(NoGenerate)
				continue
			}
			if !l.add(catalog.Model{ID: strings.TrimPrefix(d.Name, "models/"), ContextWindow: d.InputTokenLimit, MaxOutputTokens: d.OutputTokenLimit}) {
				return l, nil
			}
		}
		if page.NextPageToken == "" || page.NextPageToken == token {
			break
		}
		token = page.NextPageToken
	}
	return l, nil
}
