package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"go.uber.org/zap"
)

// Keys of the loopback providers: distinctive, so that a test can grep for them.
const (
	localKey     = "sk-local-KEY-0000-must-never-show"
	anthropicKey = "sk-ant-KEY-1111-must-never-show"
	geminiKey    = "AIza-KEY-2222-must-never-show"
)

var weightedScore = regexp.MustCompile(`\[(\d+)\] \(weighted score`)

// judge answers like a model: a category for a classifying prompt, a verdict for an arbiter's prompt,
// the answer (B) otherwise.
func judge(model, prompt string) string {
	if strings.HasPrefix(prompt, classifyingPrompt) {
		return "Category: translation"
	}
	n := len(weightedScore.FindAllString(prompt, -1))
	if n == 0 {
		return "The answer is (B)."
	}
	scores := make([]string, n)
	for i := range scores {
		scores[i] = `{"relevance": 0.9, "correctness": 0.8, "completeness": 0.7}`
	}
	return fmt.Sprintf(`{"choice": 1, "answer": "The answer is (B).", "scores": [%s], "agreement": ["B is the south aisle"], "disagreement": []}`,
		strings.Join(scores, ", "))
}

// upstreams runs three providers on loopback (one of our own speaking OpenAI's format, Anthropic and
// Gemini) and a testbed whose only providers they are, with keys in a secrets file.
type upstreams struct {
	*testbed
	local, anthropic, gemini *providertest.Server
	secrets                  string
}

func newUpstreams(t *testing.T, change func(*config.Config)) *upstreams {
	t.Helper()
	u := &upstreams{local: providertest.New(providertest.OpenAI, judge), anthropic: providertest.New(providertest.Anthropic, judge),
		gemini: providertest.New(providertest.Gemini, judge)}
	t.Cleanup(func() { u.local.Close(); u.anthropic.Close(); u.gemini.Close() })
	u.secrets = filepath.Join(t.TempDir(), "keys")
	u.writeKeys(t, localKey)
	u.local.SetModels(providertest.Model{ID: "qwen-a"}, providertest.Model{ID: "qwen-b"})
	off := 0.0 // discovery is tested on its own
	u.testbed = newTestbed(t, func(c *config.Config) {
		c.SecretsFile = u.secrets
		c.Providers = map[string]config.Provider{
			"local": {Kind: "openai", BaseURL: u.local.URL + "/v1", APIKeyEnv: "LOCAL_KEY", DiscoverySeconds: &off,
				Models: []config.ProviderModel{{ID: "qwen-a", Context: 32768, PriceIn: price("1"), PriceOut: price("2"), Capabilities: []string{"chat", "vision", "tools"}}, {ID: "qwen-b", Context: 32768, PriceIn: price("1"), PriceOut: price("2")}}},
			"anthropic": {BaseURL: u.anthropic.URL, DiscoverySeconds: &off},
			"gemini":    {BaseURL: u.gemini.URL, DiscoverySeconds: &off},
		}
		if change != nil {
			change(c)
		}
	}, func(_ *config.Config, o *engine.Options) { o.KeyPoll = 20 * time.Millisecond })
	return u
}

func (u *upstreams) writeKeys(t *testing.T, local string) {
	t.Helper()
	keys := fmt.Sprintf("LOCAL_KEY=%s\nANTHROPIC_API_KEY=%s\nGEMINI_API_KEY=%s\n", local, anthropicKey, geminiKey)
	if err := os.WriteFile(u.secrets+".new", []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(u.secrets+".new", u.secrets); err != nil {
		t.Fatal(err)
	}
}

// assertNoKey greps everything a run wrote (logs, records, answers, the URLs the providers saw) for the keys.
func (u *upstreams) assertNoKey(t *testing.T, written ...string) {
	t.Helper()
	for _, e := range u.logs.All() {
		raw, _ := json.Marshal(e.ContextMap())
		written = append(written, e.Message, string(raw))
	}
	for _, s := range []*providertest.Server{u.local, u.anthropic, u.gemini} {
		for _, r := range s.Requests() {
			written = append(written, r.Path+"?"+r.Query, string(r.Body))
		}
	}
	for _, w := range written {
		for _, key := range []string{localKey, anthropicKey, geminiKey, "sk-local-NEW"} {
			if strings.Contains(w, key) {
				t.Fatalf("a key was written: %.200s", w)
			}
		}
	}
}

func TestRealAdaptersEndToEnd(t *testing.T) {
	u := newUpstreams(t, nil)
	if _, ok := u.engine.Catalog().Get("llama-3.1-8b-instant"); ok || u.engine.Sim != nil {
		t.Fatal("models of unconfigured providers, or the simulated provider, answer with real providers configured")
	}
	models := []string{"qwen-a", "qwen-b", "claude-3-5-haiku-20241022", "gemini-2.0-flash"}
	resp, raw := u.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "category": "general", "models": models, "min_responses": 3}, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var ok routeResponse
	json.Unmarshal(raw, &ok)
	if ok.Answer != "The answer is (B)." || len(ok.Responses) != 4 || ok.Consensus.Arbiter == "local" || ok.Consensus.ArbiterError != "" {
		t.Fatalf("answer %q, consensus %+v, responses %+v", ok.Answer, ok.Consensus, ok.Responses)
	}
	providersSeen := map[string]bool{}
	for _, r := range ok.Responses {
		if r.Status != "ok" || r.Usage.InputTokens != 12 || r.Usage.OutputTokens != 7 {
			t.Fatalf("response %+v", r)
		}
		providersSeen[r.Provider] = true
	}
	if len(providersSeen) != 3 {
		t.Fatalf("answers from %v", providersSeen)
	}
	rec := u.record(ok.RequestID)
	for _, r := range rec["results"].([]any) {
		r := r.(map[string]any)
		if p, _ := r["provider_latency_ms"].(float64); p <= 0 || p > r["latency_ms"].(float64) || r["finish_reason"] == "" || r["upstream_request_id"] == nil {
			t.Fatalf("recorded result %v", r)
		}
	}
	if ok.Cost <= 0 || nanos(t, rec, "cost_nanos") != ok.Cost || nanos(t, rec["decision"].(map[string]any), "arbiter_cost_nanos") <= 0 {
		t.Fatalf("cost %s, record %v", ok.Cost, rec["cost_nanos"])
	}
	// The keys reached their providers, in headers only.
	if got := u.local.Requests()[0].Header.Get("Authorization"); got != "Bearer "+localKey {
		t.Fatalf("local authorization %q", got)
	}
	if got := u.anthropic.Requests()[0].Header.Get("x-api-key"); got != anthropicKey {
		t.Fatalf("anthropic key %q", got)
	}
	if got := u.gemini.Requests()[0].Header.Get("x-goog-api-key"); got != geminiKey {
		t.Fatalf("gemini key %q", got)
	}
	recRaw, _ := json.Marshal(rec)
	_, providersRaw := u.do(http.MethodGet, "/providers", nil, nil)
	u.assertNoKey(t, string(raw), string(recRaw), string(providersRaw))
}

func TestARefusedKeyDisablesTheProviderUntilItChanges(t *testing.T) {
	u := newUpstreams(t, nil)
	u.local.Queue(providertest.Response{Status: 401, Body: providertest.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key")})
	body := map[string]any{"task": mcq, "category": "general", "models": []string{"qwen-a"}}
	var bad errorResponse
	resp, raw := u.do(http.MethodPost, "/route-thompson", body, &bad)
	if resp.StatusCode != http.StatusUnauthorized || bad.Error.Code != "invalid_api_key" || len(u.local.Requests()) != 1 {
		t.Fatalf("status %d after %d calls: %s", resp.StatusCode, len(u.local.Requests()), raw)
	}
	if u.logs.FilterField(zap.String("event", "provider_disabled")).Len() != 1 {
		t.Fatal("no alert when the provider was disabled")
	}
	// Disabled: nothing more is sent to it, and the caller is told why.
	resp, raw = u.do(http.MethodPost, "/route-thompson", body, &bad)
	if resp.StatusCode != http.StatusUnauthorized || len(u.local.Requests()) != 1 {
		t.Fatalf("status %d after disabling, %d calls: %s", resp.StatusCode, len(u.local.Requests()), raw)
	}
	// A new key in the secrets file enables it again.
	u.writeKeys(t, "sk-local-NEW-3333")
	waitFor(t, func() bool { return u.logs.FilterField(zap.String("event", "provider_enabled")).Len() == 1 })
	status, _, e := u.route(body)
	if status != http.StatusOK || u.local.Last().Header.Get("Authorization") != "Bearer sk-local-NEW-3333" {
		t.Fatalf("status %d after the key changed: %+v", status, e)
	}
	u.assertNoKey(t)
}

func TestAnInvalidVerdictFallsBackToTheLocalArbiter(t *testing.T) {
	u := newUpstreams(t, nil)
	models := []string{"qwen-a", "qwen-b"}
	// Both answers, then the arbiter's reply, which is no verdict at all.
	u.local.Queue(providertest.Response{Body: providertest.ChatCompletion("qwen-a", "The answer is (B).", 10, 2)},
		providertest.Response{Body: providertest.ChatCompletion("qwen-b", "The answer is (B).", 10, 2)},
		providertest.Response{Body: providertest.ChatCompletion("qwen-a", "I cannot decide.", 10, 4)})
	status, ok, e := u.route(map[string]any{"task": mcq, "category": "general", "models": models, "min_responses": 2})
	if status != http.StatusOK || ok.Consensus.Arbiter != "local" || ok.Consensus.ArbiterError == "" {
		t.Fatalf("status %d, consensus %+v: %+v", status, ok.Consensus, e)
	}
	if u.logs.FilterField(zap.String("event", "arbiter")).Len() == 0 {
		t.Fatal("the fallback was not logged")
	}
}

func TestARequestTooLargeSaysWhatToDo(t *testing.T) {
	u := newUpstreams(t, nil)
	for i := 0; i < 4; i++ {
		u.local.Queue(providertest.Response{Status: 400, Body: providertest.OpenAIError("This model's maximum context length is 32768 tokens.", "invalid_request_error", "context_length_exceeded")})
	}
	var bad errorResponse
	resp, raw := u.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "category": "general", "models": []string{"qwen-a"}}, &bad)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(bad.Error.Message, "chunks") || !strings.Contains(bad.Error.Message, "context window") {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
}

func TestDiscoveryKeepsThePoolToWhatTheProviderLists(t *testing.T) {
	hourly := 3600.0
	u := newUpstreams(t, func(c *config.Config) {
		p := c.Providers["local"]
		p.DiscoverySeconds = &hourly
		c.Providers["local"] = p
	})
	// The reading at start finds what the configuration says.
	waitFor(t, func() bool { return u.logs.FilterField(zap.String("event", "discovery")).Len() == 1 })
	if len(u.local.Listings()) != 1 || u.local.Listings()[0].Header.Get("Authorization") != "Bearer "+localKey {
		t.Fatalf("listings %+v", u.local.Listings())
	}
	if m, _ := u.engine.Catalog().Get("qwen-a"); m.ContextWindow != 32768 || m.InputPricePerMTok != money.PerMillionDollar {
		t.Fatalf("the configured model became %+v", m)
	}
	// qwen-b is gone, qwen-c is new.
	u.local.SetModels(providertest.Model{ID: "qwen-a"}, providertest.Model{ID: "qwen-c", Context: 65536}, providertest.Model{ID: "nomic-embed-text"})
	ch, err := u.engine.Discover(t.Context(), "local")
	if err != nil || strings.Join(ch.Joined, ",") != "qwen-c" || strings.Join(ch.Left, ",") != "qwen-b" {
		t.Fatalf("change %+v, %v", ch, err)
	}
	// The listing's date of a model is the model's created.
	var listed struct {
		Created int64 `json:"created"`
	}
	if resp, raw := u.do(http.MethodGet, "/v1/models/qwen-c", nil, &listed); resp.StatusCode != http.StatusOK || listed.Created != 1767225600 {
		t.Fatalf("GET /v1/models/qwen-c: %d %s", resp.StatusCode, raw)
	}
	status, ok, e := u.route(map[string]any{"task": mcq, "category": "general", "models": []string{"qwen-c"}})
	if status != http.StatusOK || ok.Responses[0].Model != "qwen-c" || ok.Cost != 0 {
		t.Fatalf("status %d for the new model: %+v %+v", status, ok, e)
	}
	var bad errorResponse
	resp, raw := u.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "models": []string{"qwen-b"}}, &bad)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(raw), "qwen-b") {
		t.Fatalf("status %d for the model that left: %s", resp.StatusCode, raw)
	}
	_, modelsRaw := u.do(http.MethodGet, "/models", nil, nil)
	if !strings.Contains(string(modelsRaw), "qwen-c") || strings.Contains(string(modelsRaw), "qwen-b") || strings.Contains(string(modelsRaw), "nomic") {
		t.Fatalf("/models: %.300s", modelsRaw)
	}
	// A listing of embeddings models only (an embeddings provider's) is read without a failure, and
	// changes nothing.
	u.local.SetModels(providertest.Model{ID: "nomic-embed-text"})
	if ch, err := u.engine.Discover(t.Context(), "local"); err != nil || len(ch.Joined)+len(ch.Left) != 0 {
		t.Fatalf("an embeddings-only listing: change %+v, %v", ch, err)
	}
	if _, ok := u.engine.Catalog().Get("qwen-c"); !ok || u.logs.FilterField(zap.String("event", "discovery_failed")).Len() != 0 {
		t.Fatal("an embeddings-only listing changed the pool, or was logged as a failure")
	}
	u.local.SetModels(providertest.Model{ID: "qwen-a"}, providertest.Model{ID: "qwen-c", Context: 65536}, providertest.Model{ID: "nomic-embed-text"})
	// A listing that fails changes nothing.
	u.local.FailListing(providertest.Response{Status: 503, Body: providertest.OpenAIError("overloaded", "server_error", nil)})
	if _, err := u.engine.Discover(t.Context(), "local"); err == nil {
		t.Fatal("a failed listing was read")
	}
	if _, ok := u.engine.Catalog().Get("qwen-c"); !ok || u.logs.FilterField(zap.String("event", "discovery_failed")).Len() != 1 {
		t.Fatal("a failed listing changed the pool, or was not logged")
	}
	u.assertNoKey(t)
}

func TestTheProvidersRateLimitHeadersResyncTheCounts(t *testing.T) {
	u := newUpstreams(t, func(c *config.Config) {
		p := c.Providers["local"]
		p.RateLimit = &ratelimit.Limits{RequestsPerMinute: 60, TokensPerMinute: 100000}
		c.Providers["local"] = p
	})
	// The provider says 3 requests and 1,000 tokens remain: others spend the same key.
	u.local.Queue(providertest.Response{Body: providertest.ChatCompletion("qwen-a", "The answer is (B).", 12, 7), Header: map[string]string{
		"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "30s",
		"x-ratelimit-limit-tokens": "100000", "x-ratelimit-remaining-tokens": "1000", "x-ratelimit-reset-tokens": "30s"}})
	if status, _, e := u.route(map[string]any{"task": mcq, "category": "general", "models": []string{"qwen-a"}, "workers": 1, "min_responses": 1}); status != http.StatusOK {
		t.Fatalf("status %d: %+v", status, e)
	}
	var view struct {
		Providers []struct {
			Name     string `json:"name"`
			Requests int    `json:"requests_last_minute"`
			Tokens   int    `json:"tokens_last_minute"`
		} `json:"providers"`
	}
	waitFor(t, func() bool {
		u.do(http.MethodGet, "/providers", nil, &view)
		for _, p := range view.Providers {
			if p.Name == "local" { // the call, 56 requests and 99,000 tokens the provider says are spent, and the tokens' entry
				return p.Requests == 58 && p.Tokens == 99000
			}
		}
		return false
	})
}
