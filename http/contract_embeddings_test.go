// The fuzzing build (make fuzz, -tags fuzz) leaves this file out, as openai_test.go.

//go:build !fuzz

package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/openai/openai-go/v3"
)

// The embeddings models of the loopback providers: an OpenAI-compatible one, Gemini's, and one
// configured under Anthropic, whose wire format has no embeddings.
const (
	localEmbed     = "emb-small"
	geminiEmbed    = "gemini-embedding-001"
	anthropicEmbed = "claude-embed"
)

// embeddingUpstreams is Conclave over the loopback upstreams with an embeddings model configured for
// each, and the SDK's token.
func embeddingUpstreams(t *testing.T) *upstreams {
	return newUpstreams(t, func(c *config.Config) {
		c.APIToken = secret.String(sdkToken)
		for provider, id := range map[string]string{"local": localEmbed, "gemini": geminiEmbed, "anthropic": anthropicEmbed} {
			p := c.Providers[provider]
			p.Models = append(p.Models, config.ProviderModel{ID: id, Context: 8192, PriceIn: price("0.02"), Capabilities: []string{"embeddings"}})
			c.Providers[provider] = p
		}
	})
}

// sameVector reports whether numbers read from JSON are a server's float32 vector.
func sameVector(got []float64, want []float32) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if float32(got[i]) != want[i] {
			return false
		}
	}
	return true
}

func TestOpenAIGoEmbeddings(t *testing.T) {
	u := embeddingUpstreams(t)
	client := sdkClient(u.testbed, sdkToken)
	ctx := context.Background()

	t.Run("vectors of an OpenAI-compatible provider, recorded and counted", func(t *testing.T) {
		inputs := []string{"The cat sat.", "A dog ran."}
		resp, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: localEmbed, Dimensions: openai.Int(4),
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: inputs}})
		if err != nil {
			t.Fatal(err)
		}
		meetsSpec(t, "/embeddings", http.StatusOK, resp.RawJSON())
		for i, in := range inputs {
			if d := resp.Data[i]; d.Index != int64(i) || !sameVector(d.Embedding, providertest.Vector(in, 4)) {
				t.Fatalf("vector %d: %+v", i, d)
			}
		}
		if resp.Model != localEmbed || resp.Usage.PromptTokens != int64(providertest.EmbeddingTokens(inputs)) {
			t.Fatalf("answer %s", resp.RawJSON())
		}
		last := u.local.Last()
		if body := sent(t, u.local); last.Path != "/v1/embeddings" || last.Header.Get("Authorization") != "Bearer "+localKey ||
			!sameJSON(body, map[string]any{"model": localEmbed, "input": inputs, "dimensions": 4, "encoding_format": "float"}) {
			t.Fatalf("the upstream received %s %s", last.Path, last.Body)
		}
		id, _ := extension(t, resp.RawJSON())["request_id"].(string)
		rec := u.record(id)
		results, _ := rec["results"].([]any)
		if len(results) != 1 || rec["blueprint"].(map[string]any)["name"] != "embeddings" || rec["status_code"] != 200.0 {
			t.Fatalf("record %v", rec)
		}
		call := results[0].(map[string]any)
		if call["model"] != localEmbed || call["provider"] != "local" || call["status"] != "ok" || nanos(t, call, "cost_nanos") <= 0 ||
			call["usage"].(map[string]any)["input_tokens"] != float64(providertest.EmbeddingTokens(inputs)) || nanos(t, rec, "cost_nanos") != nanos(t, call, "cost_nanos") {
			t.Fatalf("the recorded call %v", call)
		}
		if !hasMetric(u, "conclave_model_calls_total{", `model="`+localEmbed+`"`, `outcome="ok"`) {
			t.Fatal("the call is not counted")
		}
	})

	t.Run("Gemini's vectors, its missing user named", func(t *testing.T) {
		resp, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: geminiEmbed, User: openai.String("u-1"),
			Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")}})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Data) != 1 || !sameVector(resp.Data[0].Embedding, providertest.Vector("hello", providertest.DefaultDimensions)) {
			t.Fatalf("answer %s", resp.RawJSON())
		}
		if ext := extension(t, resp.RawJSON()); !sameJSON(ext["dropped_parameters"], []string{"user"}) {
			t.Fatalf("extension %v", ext)
		}
		last := u.gemini.Last()
		if last.Path != "/v1beta/models/"+geminiEmbed+":batchEmbedContents" || last.Header.Get("x-goog-api-key") != geminiKey {
			t.Fatalf("the upstream received %s %v", last.Path, last.Header)
		}
		// Gemini counts no tokens: Conclave counts them as it does for rate limits (4 bytes a token).
		if resp.Usage.PromptTokens != 2 {
			t.Fatalf("usage %+v", resp.Usage)
		}
	})

	t.Run("base64, as the Node SDK asks by default", func(t *testing.T) {
		var out struct {
			Data []struct {
				Embedding string `json:"embedding"`
			} `json:"data"`
		}
		resp, raw := u.do(http.MethodPost, "/v1/embeddings", map[string]any{"model": localEmbed, "input": "hello", "encoding_format": "base64"}, &out)
		if resp.StatusCode != http.StatusOK || len(out.Data) != 1 {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
		b, err := base64.StdEncoding.DecodeString(out.Data[0].Embedding)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(b)/4)
		for i := range got {
			got[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		if !reflect.DeepEqual(got, providertest.Vector("hello", providertest.DefaultDimensions)) {
			t.Fatalf("vector %v", got)
		}
	})

	t.Run("errors in OpenAI's shape", func(t *testing.T) {
		tests := []struct {
			desc   string
			model  string
			fail   *providertest.Response
			status int
			typ    string
			param  string
		}{
			{"a chat model", directModel, nil, 400, "invalid_request_error", "model"},
			{"a model whose provider has no embeddings", anthropicEmbed, nil, 400, "invalid_request_error", "model"},
			{"an unknown model", "text-embedding-9", nil, 404, "not_found_error", "model"},
			{"the provider failing", localEmbed, &providertest.Response{Status: 503, Body: providertest.OpenAIError("overloaded", "server_error", nil)},
				502, "server_error", ""},
		}
		for _, tt := range tests {
			t.Run(tt.desc, func(t *testing.T) {
				if tt.fail != nil {
					u.local.Queue(*tt.fail)
				}
				_, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: tt.model, Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hi")}})
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.status || apiErr.Type != tt.typ || apiErr.Param != tt.param {
					t.Fatalf("error %v", err)
				}
			})
		}
		if len(u.anthropic.Requests()) != 0 {
			t.Fatal("Anthropic was asked for embeddings")
		}
	})
	u.assertNoKey(t)
}

// hasMetric reports whether a line of GET /metrics starts with prefix and holds every label.
func hasMetric(u *upstreams, prefix string, labels ...string) bool {
	_, raw := u.do(http.MethodGet, "/metrics", nil, nil)
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(line, l)
		}
		if all {
			return true
		}
	}
	return false
}

// An embeddings call takes its provider's permit like any call: a provider failing trips its breaker,
// and the next call is refused without reaching it, the refusal recorded.
func TestEmbeddingsGoThroughTheProvidersBreaker(t *testing.T) {
	u := newUpstreams(t, func(c *config.Config) {
		p := c.Providers["local"]
		p.Models = append(p.Models, config.ProviderModel{ID: localEmbed, Context: 8192, Capabilities: []string{"embeddings"}})
		p.Breaker = &config.Breaker{Threshold: 1, OpenSeconds: 600}
		c.Providers["local"] = p
	})
	body := map[string]any{"model": localEmbed, "input": "hello"}
	u.local.Queue(providertest.Response{Status: 503, Body: providertest.OpenAIError("overloaded", "server_error", nil)})
	if resp, raw := u.do(http.MethodPost, "/v1/embeddings", body, nil); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("the failing call: %d %s", resp.StatusCode, raw)
	}
	var refused struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	resp, raw := u.do(http.MethodPost, "/v1/embeddings", body, &refused)
	if resp.StatusCode != http.StatusServiceUnavailable || refused.Error.Code != "all_providers_down" || resp.Header.Get("Retry-After") == "" ||
		len(u.local.Requests()) != 1 {
		t.Fatalf("behind an open breaker: %d %s after %d calls", resp.StatusCode, raw, len(u.local.Requests()))
	}
	rec := u.record(resp.Header.Get("X-Request-ID"))
	if call := rec["results"].([]any)[0].(map[string]any); call["status"] != "not_sent" || call["error_kind"] != "permit_breaker_open" {
		t.Fatalf("the refused call's record %v", call)
	}
}
