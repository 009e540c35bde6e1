package providers

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// embedders are the adapters that have embeddings, each with its loopback server's format.
func embedders() []adapterCase {
	client := NewHTTPClient()
	return []adapterCase{{"local", providertest.OpenAI, NewOpenAI(client, "local")}, {"gemini", providertest.Gemini, NewGemini(client, "gemini")}}
}

func embedCall(s *providertest.Server, provider string) EmbedCall {
	return EmbedCall{Provider: provider, Model: "emb-1", UpstreamModel: "vendor/emb-1", Key: testKey, BaseURL: s.URL,
		Inputs: []string{"The cat sat.", "A dog ran."}}
}

func TestEmbeddingsInEachWireFormat(t *testing.T) {
	tests := []struct {
		desc   string
		change func(*EmbedCall)
		// dims is the vectors' length; dropped the parameters the format cannot carry.
		dims    int
		dropped map[string][]string
	}{
		{"two inputs, the model's own length", func(*EmbedCall) {}, providertest.DefaultDimensions, nil},
		{"shortened vectors and an end user", func(c *EmbedCall) { c.Dimensions, c.User = 3, "u-42" }, 3,
			map[string][]string{providertest.Gemini: {ParamUser}}},
	}
	for _, a := range embedders() {
		for _, tt := range tests {
			t.Run(a.provider+"/"+tt.desc, func(t *testing.T) {
				s := providertest.New(a.format, nil)
				defer s.Close()
				call := embedCall(s, a.provider)
				tt.change(&call)
				out, err := a.backend.(Embedder).Embed(t.Context(), call)
				if err != nil {
					t.Fatal(err)
				}
				for i, in := range call.Inputs {
					if !reflect.DeepEqual(out.Vectors[i], providertest.Vector(in, tt.dims)) {
						t.Fatalf("vector %d is %v", i, out.Vectors[i])
					}
				}
				if !slices.Equal(out.Dropped, tt.dropped[a.format]) {
					t.Fatalf("dropped %v", out.Dropped)
				}
				req := s.Last()
				if strings.Contains(req.Path+req.Query, testKey.Reveal()) {
					t.Fatalf("the key is in the URL %s?%s", req.Path, req.Query)
				}
				var body map[string]any
				if err := json.Unmarshal(req.Body, &body); err != nil {
					t.Fatal(err)
				}
				switch a.format {
				case providertest.OpenAI:
					want := map[string]any{"model": "vendor/emb-1", "input": []any{"The cat sat.", "A dog ran."}, "encoding_format": "float"}
					if call.Dimensions > 0 {
						want["dimensions"], want["user"] = float64(call.Dimensions), call.User
					}
					if req.Path != "/embeddings" || req.Header.Get("Authorization") != "Bearer "+testKey.Reveal() || !reflect.DeepEqual(body, want) {
						t.Fatalf("request %s %v %s", req.Path, req.Header, req.Body)
					}
					if out.Usage.InputTokens != providertest.EmbeddingTokens(call.Inputs) || out.ServedModel != "vendor/emb-1" || out.UpstreamRequestID == "" {
						t.Fatalf("answer %+v", out)
					}
				case providertest.Gemini:
					reqs, _ := body["requests"].([]any)
					if req.Path != "/v1beta/models/vendor/emb-1:batchEmbedContents" || req.Header.Get("x-goog-api-key") != testKey.Reveal() || len(reqs) != 2 {
						t.Fatalf("request %s %v %s", req.Path, req.Header, req.Body)
					}
					if out.Usage.InputTokens != 0 {
						t.Fatalf("Gemini counted %d tokens: it reports none", out.Usage.InputTokens)
					}
				}
			})
		}
	}
}

func TestEmbeddingsFailuresAreClassified(t *testing.T) {
	tests := []struct {
		desc   string
		format string
		resp   providertest.Response
		kind   resilience.Kind
	}{
		{"a refused key", providertest.OpenAI, providertest.Response{Status: 401, Body: providertest.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key")},
			resilience.InvalidAPIKey},
		{"a rate limit", providertest.OpenAI, providertest.Response{Status: 429, Body: providertest.OpenAIError("Rate limit reached", "requests", "rate_limit_exceeded"),
			Header: map[string]string{"Retry-After": "2"}}, resilience.RateLimited},
		{"an unknown model", providertest.OpenAI, providertest.Response{Status: 404, Body: providertest.OpenAIError("The model does not exist", "invalid_request_error", "model_not_found")},
			resilience.ModelNotFound},
		{"fewer vectors than inputs", providertest.OpenAI, providertest.Response{Body: `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"model":"m","usage":{"prompt_tokens":1,"total_tokens":1}}`},
			resilience.ProviderUnavailable},
		{"Gemini overloaded", providertest.Gemini, providertest.Response{Status: 503, Body: providertest.GeminiError(503, "UNAVAILABLE", "The model is overloaded.")},
			resilience.ProviderUnavailable},
		{"Gemini's refused key", providertest.Gemini, providertest.Response{Status: 400, Body: providertest.GeminiError(400, "INVALID_ARGUMENT", "API key not valid.",
			`{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}`)}, resilience.InvalidAPIKey},
		{"Gemini with one vector for two inputs", providertest.Gemini, providertest.Response{Body: `{"embeddings":[{"values":[0.5]}]}`}, resilience.ProviderUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var a adapterCase
			for _, e := range embedders() {
				if e.format == tt.format {
					a = e
				}
			}
			s := providertest.New(a.format, nil)
			defer s.Close()
			s.Queue(tt.resp)
			_, err := a.backend.(Embedder).Embed(t.Context(), embedCall(s, a.provider))
			var re *resilience.Error
			if !errors.As(err, &re) || re.Kind != tt.kind || strings.Contains(err.Error(), testKey.Reveal()) {
				t.Fatalf("error %v, want %s", err, tt.kind)
			}
		})
	}
}

// A vector sent as base64 of float32s, as some servers answer whatever was asked, reads as numbers.
func TestEmbeddingsReadBase64Vectors(t *testing.T) {
	s := providertest.New(providertest.OpenAI, nil)
	defer s.Close()
	// 1.0 and -0.5 as little-endian float32s.
	s.Queue(providertest.Response{Body: `{"object":"list","data":[{"object":"embedding","index":1,"embedding":"AACAPwAAAL8="},` +
		`{"object":"embedding","index":0,"embedding":[0.25]}],"model":"m","usage":{"prompt_tokens":4,"total_tokens":4}}`})
	out, err := NewOpenAI(NewHTTPClient(), "local").Embed(t.Context(), embedCall(s, "local"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out.Vectors, [][]float32{{0.25}, {1, -0.5}}) {
		t.Fatalf("vectors %v", out.Vectors)
	}
}

// The registry routes an embeddings call to its provider's upstream with its key; a provider whose
// adapter has no embeddings is refused before any call.
func TestRegistryRoutesEmbeddings(t *testing.T) {
	s := providertest.New(providertest.OpenAI, nil)
	defer s.Close()
	a := providertest.New(providertest.Anthropic, nil)
	defer a.Close()
	client := NewHTTPClient()
	r := NewRegistry(nil, nil, NewUpstream("local", KindOpenAI, s.URL, NewOpenAI(client, "local"), testKey),
		NewUpstream("anthropic", KindAnthropic, a.URL, NewAnthropic(client, "anthropic"), testKey))
	if !r.Embeds("local") || r.Embeds("anthropic") || r.Embeds("nowhere") {
		t.Fatal("Embeds says otherwise")
	}
	out, err := r.Embed(t.Context(), EmbedCall{Provider: "local", Model: "emb-1", Inputs: []string{"hello"}})
	if err != nil || len(out.Vectors) != 1 || out.Latency <= 0 {
		t.Fatalf("%+v, %v", out, err)
	}
	if got := s.Last().Header.Get("Authorization"); got != "Bearer "+testKey.Reveal() {
		t.Fatalf("authorization %q", got)
	}
	if _, err := r.Embed(t.Context(), EmbedCall{Provider: "anthropic", Model: "claude", Inputs: []string{"hello"}}); resilience.KindOf(err) != resilience.MalformedRequest ||
		len(a.Requests()) != 0 {
		t.Fatalf("anthropic: %v after %d calls", err, len(a.Requests()))
	}
}
