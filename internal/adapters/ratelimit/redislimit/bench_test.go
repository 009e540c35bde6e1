package redislimit

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
)

// BenchmarkCheck reserves and releases one call at a time against the local Redis, at realistic
// limits (the window holds up to a few thousand calls), and reports checks per second and the p50 and
// p99 of one reservation.
func BenchmarkCheck(b *testing.B) {
	c, prefix := redistest.New(b)
	r := New(c, "groq", ratelimit.Limits{RequestsPerMinute: 1 << 30, TokensPerMinute: 1 << 40, Concurrency: 1000},
		Options{Prefix: prefix, Window: 2 * time.Second})
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprint(i)
		t := time.Now()
		if _, err := r.Reserve(ctx, id, 500); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
		if _, err := r.Release(ctx, id, 300); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkCheckParallel reserves from every core at once.
func BenchmarkCheckParallel(b *testing.B) {
	c, prefix := redistest.New(b)
	r := New(c, "groq", ratelimit.Limits{RequestsPerMinute: 1 << 30, TokensPerMinute: 1 << 40, Concurrency: 1 << 20},
		Options{Prefix: prefix, Window: 2 * time.Second})
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			id := fmt.Sprintf("%p-%d", pb, i)
			if _, err := r.Reserve(ctx, id, 500); err != nil {
				b.Error(err)
				return
			}
			r.Release(ctx, id, 300)
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "checks/s")
}
