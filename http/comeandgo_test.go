package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/config"
	"github.com/conclave-ai/conclave/engine"
	"github.com/conclave-ai/conclave/providers/providertest"
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
		}, "connection refused"},
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
