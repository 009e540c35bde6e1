package providers

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/secret"
)

// EmbedCall is one embeddings request to one model: each input becomes a vector.
type EmbedCall struct {
	RequestID string
	Provider  string
	// Model is the catalog's id; UpstreamModel the id as the provider names it (empty: Model).
	Model         string
	UpstreamModel string
	Inputs        []string
	// Dimensions, when positive, asks for vectors of that length (of a model that can shorten its own).
	Dimensions int
	// User is the caller's end user, for the provider's abuse checks.
	User string
	// Key and BaseURL are the provider's, set by the registry from configuration.
	Key     secret.String
	BaseURL string
}

// Upstream is the model id to send.
func (c EmbedCall) Upstream() string {
	if c.UpstreamModel != "" {
		return c.UpstreamModel
	}
	return c.Model
}

// Embeddings is a model's answer to an EmbedCall: one vector per input, in the inputs' order.
type Embeddings struct {
	Vectors [][]float32
	// Usage counts the input tokens the provider reports (zero when it reports none).
	Usage Usage
	// Dropped names the call's parameters the provider's wire format cannot carry (Gemini's has no user).
	Dropped           []string
	ServedModel       string
	UpstreamRequestID string
	RateLimit         *ratelimit.Upstream
	// Latency is the provider's own round trip, as the registry measured it.
	Latency time.Duration
}

// Embedder turns text into vectors. Implementations are safe for concurrent use and honour ctx's
// deadline.
type Embedder interface {
	Embed(ctx context.Context, call EmbedCall) (Embeddings, error)
}

// Embeds reports whether a provider's calls go to an adapter that has embeddings: an OpenAI-compatible
// or a Gemini upstream. The simulated and replayed providers have none.
func (r *Registry) Embeds(provider string) bool {
	u := r.upstreams[provider]
	if u == nil {
		return false
	}
	_, ok := u.Backend.(Embedder)
	return ok
}

// Embed routes an embeddings call to its provider's upstream with its key and base URL, and measures
// the round trip. Pricing is the caller's: a provider that counts no tokens leaves them to estimate.
func (r *Registry) Embed(ctx context.Context, call EmbedCall) (Embeddings, error) {
	u := r.upstreams[call.Provider]
	var e Embedder
	if u != nil {
		e, _ = u.Backend.(Embedder)
	}
	if e == nil {
		return Embeddings{}, &resilience.Error{Kind: resilience.MalformedRequest, Provider: call.Provider, Model: call.Model,
			Err: fmt.Errorf("provider %q has no embeddings", call.Provider)}
	}
	call.BaseURL, call.Key = u.BaseURL, u.Key()
	began := time.Now()
	out, err := e.Embed(ctx, call)
	out.Latency = time.Since(began)
	return out, err
}

// Embed implements Embedder: POST {base}/embeddings with the inputs as a list, vectors asked as
// floats (a server that sends base64 anyway is read all the same).
func (o *OpenAI) Embed(ctx context.Context, call EmbedCall) (Embeddings, error) {
	body := map[string]any{"model": call.Upstream(), "input": call.Inputs, "encoding_format": "float"}
	if call.Dimensions > 0 {
		body["dimensions"] = call.Dimensions
	}
	if call.User != "" {
		body["user"] = call.User
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return Embeddings{}, &resilience.Error{Kind: resilience.Internal, Provider: o.Provider, Model: call.Model, Err: err}
	}
	x, err := post(ctx, o.Client, strings.TrimRight(call.BaseURL, "/")+"/embeddings", o.keyHeader(call.Key), raw, o.Provider, call.Model)
	if err != nil {
		return Embeddings{}, err
	}
	out, err := o.ParseEmbeddings(call.Model, len(call.Inputs), x.status, x.header, x.body)
	return out, withoutKeyErr(call.Key, err)
}

// ParseEmbeddings reads an embeddings answer of n vectors, or the failure it describes (classified as a
// chat completion's).
func (o *OpenAI) ParseEmbeddings(model string, n, status int, header http.Header, raw []byte) (Embeddings, error) {
	limits := o.limits(header)
	var resp struct {
		Data []struct {
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
		Model string `json:"model"`
		Usage *struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
		Error *apiError `json:"error"`
	}
	decodeErr := json.Unmarshal(skipKeepAlive(raw), &resp)
	if status/100 != 2 || resp.Error != nil {
		var e apiError
		if resp.Error != nil {
			e = *resp.Error
		} else if decodeErr != nil {
			e.Message = string(raw)
		}
		if status/100 == 2 {
			status = codeStatus(e.Code, http.StatusBadGateway)
		}
		return Embeddings{RateLimit: limits}, o.classify(model, status, e, limits)
	}
	out := Embeddings{ServedModel: resp.Model, UpstreamRequestID: header.Get("x-request-id"), RateLimit: limits}
	if decodeErr != nil {
		return out, failure(o.Provider, model, status, resilience.ProviderUnavailable, o.Profile.ServerErrorScope, nil,
			"the answer is not a list of embeddings: "+decodeErr.Error())
	}
	if resp.Usage != nil {
		out.Usage.InputTokens = resp.Usage.PromptTokens
	}
	out.Vectors = make([][]float32, n)
	for _, d := range resp.Data {
		if d.Index < 0 || d.Index >= n || out.Vectors[d.Index] != nil {
			return out, failure(o.Provider, model, status, resilience.ProviderUnavailable, o.Profile.ServerErrorScope, nil,
				fmt.Sprintf("the answer's vector index %d does not match the %d inputs", d.Index, n))
		}
		v, err := vectorOf(d.Embedding)
		if err != nil {
			return out, failure(o.Provider, model, status, resilience.ProviderUnavailable, o.Profile.ServerErrorScope, nil, err.Error())
		}
		out.Vectors[d.Index] = v
	}
	if err := whole(out.Vectors); err != nil {
		return out, failure(o.Provider, model, status, resilience.ProviderUnavailable, o.Profile.ServerErrorScope, nil, err.Error())
	}
	return out, nil
}

// vectorOf reads a vector as a list of numbers, or as base64 of little-endian float32s.
func vectorOf(raw json.RawMessage) ([]float32, error) {
	var b64 string
	if json.Unmarshal(raw, &b64) == nil {
		data, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(data)%4 != 0 {
			return nil, errors.New("a vector is neither numbers nor base64 of float32s")
		}
		v := make([]float32, len(data)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		return v, nil
	}
	var v []float32
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("a vector is not a list of numbers: %w", err)
	}
	return v, nil
}

// whole checks that an answer gave every input a vector, none of them empty.
func whole(vectors [][]float32) error {
	for i, v := range vectors {
		if len(v) == 0 {
			return fmt.Errorf("the answer has no vector for input %d", i)
		}
	}
	return nil
}

// Wire shapes of Gemini's batchEmbedContents.
type (
	geminiEmbedRequest struct {
		Model                string        `json:"model"`
		Content              geminiContent `json:"content"`
		OutputDimensionality int           `json:"outputDimensionality,omitempty"`
	}
	geminiEmbedResponse struct {
		Embeddings []struct {
			Values []float32 `json:"values"`
		} `json:"embeddings"`
		// UsageMetadata is read where Gemini counts the tokens; it usually does not.
		UsageMetadata *struct {
			PromptTokenCount int `json:"promptTokenCount"`
		} `json:"usageMetadata"`
	}
)

// Embed implements Embedder: POST {base}/v1beta/models/{model}:batchEmbedContents, one request per
// input, the key in a header. Gemini's format has no end-user field: user is left out and named.
func (g *Gemini) Embed(ctx context.Context, call EmbedCall) (Embeddings, error) {
	model := "models/" + strings.TrimPrefix(call.Upstream(), "models/")
	reqs := make([]geminiEmbedRequest, len(call.Inputs))
	for i, in := range call.Inputs {
		reqs[i] = geminiEmbedRequest{Model: model, Content: geminiContent{Parts: []geminiPart{{Text: in}}}, OutputDimensionality: call.Dimensions}
	}
	raw, err := json.Marshal(map[string]any{"requests": reqs})
	if err != nil {
		return Embeddings{}, &resilience.Error{Kind: resilience.Internal, Provider: g.Provider, Model: call.Model, Err: err}
	}
	var dropped []string
	if call.User != "" {
		dropped = []string{ParamUser}
	}
	x, err := post(ctx, g.Client, g.modelURL(call.BaseURL, call.Upstream(), "batchEmbedContents"), g.keyHeader(call.Key), raw, g.Provider, call.Model)
	if err != nil {
		return Embeddings{Dropped: dropped}, err
	}
	out, err := g.ParseEmbeddings(call.Model, len(call.Inputs), x.status, x.header, x.body)
	out.Dropped = dropped
	return out, withoutKeyErr(call.Key, err)
}

// ParseEmbeddings reads a batchEmbedContents answer of n vectors, or the failure it describes.
func (g *Gemini) ParseEmbeddings(model string, n, status int, header http.Header, raw []byte) (Embeddings, error) {
	limits := g.limits(header)
	var resp geminiEmbedResponse
	decodeErr := json.Unmarshal(raw, &resp)
	var e geminiResponse // its error object, if any
	_ = json.Unmarshal(raw, &e)
	if status/100 != 2 || e.Error != nil {
		return Embeddings{RateLimit: limits}, g.classify(model, status, &e, raw, limits)
	}
	out := Embeddings{RateLimit: limits}
	if decodeErr != nil {
		return out, failure(g.Provider, model, status, resilience.ProviderUnavailable, resilience.ScopeUnknown, nil,
			"the answer is not a batchEmbedContents response: "+decodeErr.Error())
	}
	if len(resp.Embeddings) != n {
		return out, failure(g.Provider, model, status, resilience.ProviderUnavailable, resilience.ScopeUnknown, nil,
			fmt.Sprintf("the answer has %d vectors for %d inputs", len(resp.Embeddings), n))
	}
	if u := resp.UsageMetadata; u != nil {
		out.Usage.InputTokens = u.PromptTokenCount
	}
	out.Vectors = make([][]float32, n)
	for i, e := range resp.Embeddings {
		out.Vectors[i] = e.Values
	}
	if err := whole(out.Vectors); err != nil {
		return out, failure(g.Provider, model, status, resilience.ProviderUnavailable, resilience.ScopeUnknown, nil, err.Error())
	}
	return out, nil
}
