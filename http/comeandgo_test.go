package httpapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"go.uber.org/zap"
)

// TestAnUpstreamThatStartsLaterJoinsWithinSeconds starts Conclave before its upstream: the upstream's
// model listing fails (connection refused, or 503s), is tried again with backoff, and once the upstream
// answers its models join at once, not an hour later at the next interval. The models the configuration
// lists serve meanwhile.
func TestAnUpstreamThatStartsLaterJoinsWithinSeconds(t *testing.T) {
	tests := []struct {
		desc string
		// down makes the upstream unable to list its models until up brings it up.
		down func(t *testing.T, s *providertest.Server) (baseURL string, up func())
		says string // in every failure's error
	}{
		{"connection refused until the upstream starts", func(t *testing.T, s *providertest.Server) (string, func()) {
			addr, err := providertest.RefusingAddr()
			if err != nil {
				t.Fatal(err)
			}
			return "http://" + addr + "/v1", func() {
				if err := s.StartAt(addr); err != nil {
					t.Fatal(err)
				}
			}
		}, "connection_refused"},
		{"503 until the upstream recovers", func(t *testing.T, s *providertest.Server) (string, func()) {
			s.Start()
			for range 100 { // more than the test waits for: up clears them
				s.FailListing(providertest.Response{Status: 503, Body: providertest.OpenAIError("starting", "server_error", nil)})
			}
			return s.URL + "/v1", func() { s.ClearListingFailures() }
		}, "503"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := providertest.NewUnstarted(providertest.OpenAI, judge)
			t.Cleanup(s.Close)
			s.SetModels(providertest.Model{ID: "qwen-a"}, providertest.Model{ID: "qwen-b", Context: 65536})
			base, up := tt.down(t, s)
			hourly := 3600.0
			tb := newTestbed(t, func(c *config.Config) {
				c.Providers = map[string]config.Provider{"local": {Kind: "openai", BaseURL: base, DiscoverySeconds: &hourly,
					Models: []config.ProviderModel{{ID: "qwen-a", Context: 32768}}}}
			}, func(_ *config.Config, o *engine.Options) { o.DiscoveryRetry = 5 * time.Millisecond })
			failed := func() []map[string]any {
				var out []map[string]any
				for _, e := range tb.logs.FilterField(zap.String("event", "discovery_failed")).All() {
					out = append(out, e.ContextMap())
				}
				return out
			}
			// Several readings fail; the configured model serves meanwhile.
			waitFor(t, func() bool { return len(failed()) >= 4 })
			if _, ok := tb.engine.Catalog().Get("qwen-a"); !ok {
				t.Fatal("the configured model is not served while the upstream is down")
			}
			if _, ok := tb.engine.Catalog().Get("qwen-b"); ok {
				t.Fatal("a model joined from a listing that failed")
			}
			for i, f := range failed()[:4] {
				// The first failures are each a new step of the backoff: each is logged, waiting twice as long.
				if f["failures"] != int64(i+1) || !strings.Contains(f["error"].(string), tt.says) {
					t.Fatalf("failure line %d: %v", i, f)
				}
				if wait := f["retry_in_seconds"].(float64); wait < 0.005*float64(int(1)<<i) || wait > 0.005*float64(int(1)<<i)+0.0025 {
					t.Fatalf("failure %d waits %v s", i+1, wait)
				}
			}
			up()
			waitFor(t, func() bool { _, ok := tb.engine.Catalog().Get("qwen-b"); return ok })
			waitFor(t, func() bool { return tb.logs.FilterField(zap.String("event", "discovery_recovered")).Len() == 1 })
			rec := tb.logs.FilterField(zap.String("event", "discovery_recovered")).All()[0].ContextMap()
			if rec["provider"] != "local" || rec["failures"].(int64) < 4 || rec["models"] != int64(2) {
				t.Fatalf("recovery logged as %v", rec)
			}
			// The interval applies again: no further reading within the test.
			n := len(s.Listings())
			time.Sleep(50 * time.Millisecond)
			if len(s.Listings()) != n {
				t.Fatalf("the listing was read again after it succeeded: %d then %d", n, len(s.Listings()))
			}
		})
	}
}

// deadUpstream is a testbed whose provider "local" (qwen-a, qwen-b) is a loopback port nothing listens
// on, with the retry table and quorum rounds of the default configuration: before connection_refused
// was its own kind, a request to it waited 11 s for backoffs. alt, when set, is a live provider beside
// it (alt-a, alt-b).
func deadUpstream(t *testing.T, alt bool) (*testbed, string) {
	t.Helper()
	addr, err := providertest.RefusingAddr()
	if err != nil {
		t.Fatal(err)
	}
	off := 0.0
	tb := newTestbed(t, func(c *config.Config) {
		c.Retry = config.Default().Retry
		c.Providers = map[string]config.Provider{"local": {Kind: "openai", BaseURL: "http://" + addr + "/v1", DiscoverySeconds: &off,
			Models: []config.ProviderModel{{ID: "qwen-a", Context: 32768}, {ID: "qwen-b", Context: 32768}}}}
		if alt {
			s := providertest.New(providertest.OpenAI, judge)
			t.Cleanup(s.Close)
			c.Providers["alt"] = config.Provider{Kind: "openai", BaseURL: s.URL + "/v1", DiscoverySeconds: &off,
				Models: []config.ProviderModel{{ID: "alt-a", Context: 32768}, {ID: "alt-b", Context: 32768}}}
		}
	})
	return tb, addr
}

// TestADeadUpstreamAnswers503AtOnceNamingItsCause asks models whose upstream refuses connections: the
// answer is 503 all_providers_down at once (one call per model, no backoff), its details name each
// model's cause and the upstream's host, and the provider is blamed, never the models. Once its breaker
// is open, the answer still names the fault that opened it.
func TestADeadUpstreamAnswers503AtOnceNamingItsCause(t *testing.T) {
	tb, addr := deadUpstream(t, false)
	refused := "connection_refused: " + addr
	tests := []struct {
		desc, path string
		body       map[string]any
		models     []string
	}{
		{"a direct call", "/v1/chat/completions", map[string]any{"model": "qwen-a", "messages": []map[string]any{{"role": "user", "content": mcq}}},
			[]string{"qwen-a"}},
		{"a panel", "/route-thompson", map[string]any{"task": mcq, "category": "general", "models": []string{"qwen-a", "qwen-b"}, "workers": 2},
			[]string{"qwen-a", "qwen-b"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var bad errorResponse
			resp, raw := tb.do(http.MethodPost, tt.path, tt.body, &bad)
			if resp.StatusCode != http.StatusServiceUnavailable || bad.Error.Code != "all_providers_down" || len(bad.Error.Details) != len(tt.models) {
				t.Fatalf("status %d: %s", resp.StatusCode, raw)
			}
			for _, d := range bad.Error.Details {
				if !slices.Contains(tt.models, d.Field) || d.Message != refused {
					t.Fatalf("detail %+v: want each model's %q", d, refused)
				}
			}
			if strings.Contains(string(raw), "/v1") {
				t.Fatalf("the answer quotes the upstream's URL: %s", raw)
			}
			rec := tb.record(resp.Header.Get("X-Request-ID"))
			if n := len(rec["results"].([]any)); n != len(tt.models) {
				t.Fatalf("%d calls: want one per model, none retried", n)
			}
			for _, r := range rec["retries"].([]any) {
				if r := r.(map[string]any); r["outcome"] == "scheduled" || r["delay_ms"].(float64) != 0 {
					t.Fatalf("retry %v: a refused connection is not retried, nor waited for", r)
				}
			}
			for _, r := range tb.results(resp.Header.Get("X-Request-ID")) {
				if r["error_kind"] != "connection_refused" || r["error_scope"] != "provider" {
					t.Fatalf("result %v", r)
				}
			}
		})
	}
	// The provider is blamed; no model is: no arm learned, no model ejected.
	waitFor(t, func() bool {
		for _, p := range tb.engine.Providers() {
			if p.Name == "local" {
				return p.Faults24h == 3 && p.LastFault == refused
			}
		}
		return false
	})
	tb.assertNoArmLearned()
	for _, p := range tb.engine.Providers() {
		if len(p.Models) != 0 {
			t.Fatalf("models of %s out of the pool: %v", p.Name, p.Models)
		}
	}
	// Two more refusals open the provider's breaker (5 faults): the answer names the fault behind it.
	tb.do(http.MethodPost, "/route-thompson", tests[1].body, nil)
	if state := tb.settledState("local", "open"); state != "open" {
		t.Fatalf("breaker %s after five refused calls", state)
	}
	var bad errorResponse
	resp, raw := tb.do(http.MethodPost, "/route-thompson", tests[1].body, &bad)
	if resp.StatusCode != http.StatusServiceUnavailable || bad.Error.Code != "all_providers_down" || len(bad.Error.Details) != 2 ||
		bad.Error.Details[0].Message != "provider_breaker_open after "+refused {
		t.Fatalf("status %d with the breaker open: %s", resp.StatusCode, raw)
	}
}

// TestARefusedUpstreamFailsOverToAnother asks a panel over a dead upstream and a live one: a model whose
// upstream refuses is replaced at once by a model of the live one, and the request answers.
func TestARefusedUpstreamFailsOverToAnother(t *testing.T) {
	tb, _ := deadUpstream(t, true)
	body := map[string]any{"task": mcq, "category": "general", "models": []string{"qwen-a", "alt-a", "alt-b"}, "workers": 2, "min_responses": 2}
	failedOver := 0
	for range 8 { // selection is random: enough requests to ask the dead model, and to open its breaker
		status, ok, e := tb.route(body)
		if status != http.StatusOK || len(ok.Responses) < 2 {
			t.Fatalf("status %d: %+v %+v", status, ok, e)
		}
		rec := tb.record(ok.RequestID)
		for _, r := range tb.results(ok.RequestID) {
			if r["model"] == "qwen-a" && r["error_kind"] != "connection_refused" {
				t.Fatalf("the dead model's call: %v", r)
			}
		}
		for _, r := range rec["retries"].([]any) {
			r := r.(map[string]any)
			if r["outcome"] == "scheduled" || r["delay_ms"].(float64) != 0 {
				t.Fatalf("retry %v: the refused model is replaced at once", r)
			}
			if r["outcome"] == "quorum round 1" {
				failedOver++
			}
		}
		for _, u := range rec["bandit_updates"].([]any) {
			if u := u.(map[string]any); u["model"] == "qwen-a" {
				t.Fatalf("the model was blamed for its provider's refusal: %v", u)
			}
		}
	}
	if failedOver == 0 {
		t.Fatal("the dead model was never asked: the test tests nothing")
	}
}

// TestADirectCallMovesFromARefusedUpstreamToItsFallback calls a model whose upstream refuses, with a
// fallback on a live one: the fallback answers, at once, and the refused model is not blamed.
func TestADirectCallMovesFromARefusedUpstreamToItsFallback(t *testing.T) {
	tb, addr := deadUpstream(t, true)
	resp, raw := tb.do(http.MethodPost, "/v1/chat/completions", map[string]any{"model": "qwen-a", "fallbacks": []string{"qwen-b", "alt-a"},
		"messages": []map[string]any{{"role": "user", "content": mcq}}}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"chosen_model":"alt-a"`) {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	rec := tb.record(resp.Header.Get("X-Request-ID"))
	var asked []string
	for _, r := range tb.results(resp.Header.Get("X-Request-ID")) {
		asked = append(asked, r["model"].(string))
		if r["model"] == "qwen-a" && (r["error_kind"] != "connection_refused" || r["error_message"] != "connection_refused provider=local model=qwen-a: "+addr) {
			t.Fatalf("the refused call: %v", r)
		}
	}
	// qwen-b is of the provider that refused: it is passed over, not asked.
	if !slices.Equal(asked, []string{"qwen-a", "alt-a"}) {
		t.Fatalf("asked %v: want qwen-a, then alt-a", asked)
	}
	for _, r := range rec["retries"].([]any) {
		if r := r.(map[string]any); r["delay_ms"].(float64) != 0 {
			t.Fatalf("retry %v: the fallback is asked at once", r)
		}
	}
	for _, u := range rec["bandit_updates"].([]any) {
		if u := u.(map[string]any); u["model"] == "qwen-a" {
			t.Fatalf("the model was blamed for its provider's refusal: %v", u)
		}
	}
}
