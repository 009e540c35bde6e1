package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	httpapi "github.com/conclave-ai/conclave/http"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/logging"
)

// BenchmarkHTTPRoute is one request through the real HTTP server, the engine and the zero-latency sim,
// with info-level JSON logs: what the load run measures, in process.
func BenchmarkHTTPRoute(b *testing.B) {
	cfg := config.Default()
	cfg.Sim.LatencyScale = 0
	cfg.Sim.Faults = providers.Fault{}
	for p := range cfg.RateLimits.Providers {
		cfg.RateLimits.Providers[p] = ratelimit.Limits{}
	}
	log, _ := logging.New("info", "json", io.Discard)
	e, err := engine.New(engine.Options{Config: cfg, Log: log})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	srv := httptest.NewServer(httpapi.New(e, httpapi.Options{Log: log}))
	defer srv.Close()
	body := []byte(`{"task": "Review this Go handler before I merge it: func h(w http.ResponseWriter, r *http.Request) { u, _ := db.User(r.URL.Query().Get(\"id\")); json.NewEncoder(w).Encode(u) }"}`)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.Post(srv.URL+"/route-thompson", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatal(resp.StatusCode)
		}
	}
}
