package engine

import (
	"context"
	"io"
	"testing"

	"github.com/conclave-ai/conclave/config"
	"github.com/conclave-ai/conclave/logging"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/providers"
	"github.com/conclave-ai/conclave/ratelimit"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func BenchmarkZZLines(b *testing.B) {
	cfg := config.Default()
	cfg.Sim.LatencyScale = 0
	cfg.Sim.Faults = providers.Fault{}
	for p := range cfg.RateLimits {
		cfg.RateLimits[p] = ratelimit.Limits{}
	}
	core, logs := observer.New(zap.InfoLevel)
	e, err := New(Options{Config: cfg, Log: zap.New(core)})
	if err != nil {
		b.Fatal(err)
	}
	w, s, m := int32(6), int32(6), "majority"
	exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: "x", Task: "Plan the migration of our billing service from MySQL 5.7 to PostgreSQL 16 over two quarters.", Workers: &w, MinResponses: &s, Strategy: &m})
	if err != nil || exec.StatusCode != 200 {
		b.Fatal(err)
	}
	e.Shutdown(context.Background())
	var entries []observer.LoggedEntry
	for _, le := range logs.All() {
		if le.ContextMap()["request_id"] == "x" {
			entries = append(entries, le)
		}
	}
	b.Logf("%d lines", len(entries))
	log, _ := logging.New("info", "json", logging.Buffer(zapcore.AddSync(io.Discard)))
	c := log.Core()
	b.ResetTimer()
	for b.Loop() {
		for _, le := range entries {
			_ = c.Write(le.Entry, le.Context)
		}
	}
}
