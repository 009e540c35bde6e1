package engine

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/logging"
	"github.com/conclave-ai/conclave/internal/platform/tracing"
	"github.com/conclave-ai/conclave/internal/testenv/otlptest"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// BenchmarkRoute is the whole pipeline through the actors for one request, on the zero-latency sim,
// without HTTP and without logging: the control plane's own cost.
func BenchmarkRoute(b *testing.B) { benchmarkRoute(b, zap.NewNop()) }

// BenchmarkRouteLogged adds the JSON logging of every decision at info level.
func BenchmarkRouteLogged(b *testing.B) {
	log, err := logging.New("info", "json", io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	benchmarkRoute(b, log)
}

// BenchmarkRouteMajority6 is the load run's request (six models, all six awaited, majority vote)
// through the actors, logged at info, without HTTP.
func BenchmarkRouteMajority6(b *testing.B) { benchmarkMajority(b, 6) }

// BenchmarkRouteMajority1 is the same request with one model: beside BenchmarkRouteMajority6, what
// each model beyond the first costs.
func BenchmarkRouteMajority1(b *testing.B) { benchmarkMajority(b, 1) }

// BenchmarkRouteMajority6Traced is BenchmarkRouteMajority6 with traces on, exported over OTLP/HTTP to
// a receiver on loopback (in this process, which reads each export and keeps nothing): the request's
// span, its four phases' and its six calls'.
// Beside BenchmarkRouteMajority6 (traces off), what tracing costs a request.
func BenchmarkRouteMajority6Traced(b *testing.B) {
	rcv := otlptest.StartDiscarding(b)
	otlptest.Env(b, rcv.Endpoint())
	tr, err := tracing.New(context.Background(), tracing.Options{})
	if err != nil || tr == nil {
		b.Fatal(tr, err)
	}
	defer tr.Shutdown(context.Background())
	benchmarkMajorityWith(b, 6, tr)
	if err := tr.ForceFlush(context.Background()); err != nil || rcv.Requests() == 0 {
		b.Fatalf("%d exports: %v", rcv.Requests(), err)
	}
}

func benchmarkMajority(b *testing.B, models int32) { benchmarkMajorityWith(b, models, nil) }

func benchmarkMajorityWith(b *testing.B, models int32, tr *tracing.Tracing) {
	log, err := logging.New("info", "json", io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	strategy := "majority"
	benchmarkRouteWith(b, log, tr, func(r *messages.RouteRequest) { r.Workers, r.MinResponses, r.Strategy = &models, &models, &strategy })
}

func benchmarkRoute(b *testing.B, log *zap.Logger, shape ...func(*messages.RouteRequest)) {
	benchmarkRouteWith(b, log, nil, shape...)
}

func benchmarkRouteWith(b *testing.B, log *zap.Logger, tr *tracing.Tracing, shape ...func(*messages.RouteRequest)) {
	cfg := config.Default()
	cfg.Sim.LatencyScale = 0
	cfg.Sim.Faults = providers.Fault{}
	for p := range cfg.RateLimits.Providers {
		cfg.RateLimits.Providers[p] = ratelimit.Limits{}
	}
	e, err := New(Options{Config: cfg, Log: log, Tracing: tr})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	tasks := []string{
		"Which gas makes up most of Earth's atmosphere?\nA) Oxygen\nB) Nitrogen\nC) Argon\nD) Carbon dioxide",
		"Review this Go handler before I merge it: func h(w http.ResponseWriter, r *http.Request) { u, _ := db.User(r.URL.Query().Get(\"id\")); json.NewEncoder(w).Encode(u) }",
		"Plan the migration of our billing service from MySQL 5.7 to PostgreSQL 16 over two quarters.",
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req := &messages.RouteRequest{RequestId: fmt.Sprint("b", i), Task: tasks[i%len(tasks)]}
		for _, s := range shape {
			s(req)
		}
		exec, err := e.Route(context.Background(), req)
		if err != nil || exec.StatusCode != 200 {
			b.Fatal(err, exec.GetError())
		}
		i++
	}
}
