package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
	"github.com/conclave-ai/conclave/messages"
)

// BenchmarkInsert writes executions of six calls each in the recorder's batches of 128 and reports
// executions written per second.
func BenchmarkInsert(b *testing.B) {
	s, err := Open(context.Background(), pgtest.New(b, true), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	base := record("x", "general", t0)
	for len(base.Results) < 6 {
		model, first := fmt.Sprintf("m-%d", len(base.Results)), base.Results[0]
		base.Results = append(base.Results, &messages.WorkerResult{Model: model, Provider: first.Provider, Worker: first.Worker, Status: "ok",
			Text: "The answer is (B): nitrogen makes up about 78% of dry air.", LatencyMs: 200, Usage: first.Usage, CostNanos: first.CostNanos})
		base.BanditUpdates = append(base.BanditUpdates, &messages.BanditUpdate{Model: model, Category: "general", Reward: 1, Reason: "contributed"})
	}
	const batch = 128
	b.ResetTimer()
	start := time.Now()
	n := 0
	for i := 0; i < b.N; i++ {
		recs := make([]*messages.Execution, batch)
		for j := range recs {
			recs[j] = &messages.Execution{RequestId: fmt.Sprintf("b%d-%d", i, j), ReceivedAt: base.ReceivedAt, CompletedAt: base.CompletedAt,
				Task: base.Task, Classification: base.Classification, Blueprint: base.Blueprint, Results: base.Results, Decision: base.Decision,
				Answer: base.Answer, StatusCode: 200, Phases: base.Phases, BanditUpdates: base.BanditUpdates, Usage: base.Usage, CostNanos: base.CostNanos}
		}
		if err := s.Insert(context.Background(), recs); err != nil {
			b.Fatal(err)
		}
		n += batch
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "executions/s")
}
