package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// largeAnswers answers every call with size bytes, after a moment, so that requests overlap.
type largeAnswers struct {
	size int
}

func (b largeAnswers) Complete(ctx context.Context, call providers.Call) (providers.Reply, error) {
	select {
	case <-ctx.Done():
		return providers.Reply{}, ctx.Err()
	case <-time.After(20 * time.Millisecond):
	}
	line := "The answer is (B) says " + call.Model + ". "
	return providers.Reply{Text: strings.Repeat(line, b.size/len(line)+1)[:b.size], Usage: providers.Usage{InputTokens: 10, OutputTokens: 10}}, nil
}

func TestAnswersCountInFlight(t *testing.T) {
	const limit, answer = 8 << 20, 3 << 20
	cfg := config.Default()
	for p := range cfg.RateLimits.Providers {
		cfg.RateLimits.Providers[p] = ratelimit.Limits{RequestsPerMinute: 5000, Concurrency: 128}
	}
	cfg.NodeID, cfg.MaxInflightBytes = "node-a", limit
	e, err := New(Options{Config: cfg, Log: zap.NewNop(), Backend: largeAnswers{size: answer}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	var models []string
	for _, m := range e.Catalog().All() {
		if len(models) < 5 && !m.Unpriced && m.Has("chat") {
			models = append(models, m.ID)
		}
	}
	majority, five, timeout := "majority", int32(5), 30.0
	var wg sync.WaitGroup
	execs := make([]*messages.Execution, 8)
	for i := range execs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			if i == 0 { // a caller that leaves: its account closes with answers still coming
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 10*time.Millisecond)
				defer cancel()
			}
			exec, err := e.Route(ctx, &messages.RouteRequest{RequestId: fmt.Sprint("large-", i), Category: "general", Task: "Write a long essay",
				Models: models, Strategy: &majority, Workers: &five, MinResponses: &five, TimeoutSeconds: &timeout})
			if err != nil {
				t.Error(err)
			}
			execs[i] = exec
		}()
	}
	wg.Wait()
	// The calls still out (the leaving caller's) answer after their request ended: they hold nothing.
	deadline := time.Now().Add(10 * time.Second)
	for busy := true; busy && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		busy = false
		for _, w := range e.deps.Dir.Workers {
			busy = busy || w.Snapshot().InFlight > 0
		}
	}
	in := e.deps.Inflight
	if total := in.Total(); total != 0 {
		t.Fatalf("the requests ended holding %d bytes", total)
	}
	// The bound holds at every moment, not even one answer past it: an answer that would pass it is
	// refused, not held.
	if peak := in.Peak(); peak > limit {
		t.Fatalf("the requests held %d bytes at once, past %d", peak, limit)
	}
	answered, dropped := 0, 0
	for i, exec := range execs[1:] {
		switch {
		case exec.StatusCode == 200:
		case exec.StatusCode == 503 && exec.Error.Code == string(resilience.Overloaded) && exec.Error.RetryAfterSeconds > 0:
		default:
			t.Fatalf("request %d: %d %v", i+1, exec.StatusCode, exec.Error)
		}
		for _, r := range exec.Results {
			switch {
			case r.Status == "ok":
				answered++
			case r.ErrorKind == string(resilience.Overloaded):
				dropped++
				if r.Text != "" {
					t.Fatalf("a dropped answer kept %d bytes in the record", len(r.Text))
				}
			}
		}
		for _, u := range exec.BanditUpdates {
			if u.Reason != "contributed" && u.Reason != "poor" {
				t.Fatalf("request %d: %s learned %q from the bound", i+1, u.Model, u.Reason)
			}
		}
	}
	t.Logf("%d answers kept, %d dropped; at most %d bytes held at once", answered, dropped, in.Peak())
	if answered == 0 || dropped == 0 {
		t.Fatalf("%d answers kept, %d dropped: want some of each", answered, dropped)
	}
	// Nobody is blamed for the bound: no provider, model or host counts a fault.
	for _, p := range e.Providers() {
		if p.Breaker.ErrorsInWindow != 0 || p.Faults24h != 0 || len(p.Models) != 0 {
			t.Fatalf("provider %s was blamed: %+v", p.Name, p)
		}
	}
	for _, w := range e.deps.Dir.Workers {
		if s := w.Snapshot(); s.Breaker.ErrorsInWindow != 0 {
			t.Fatalf("worker %s was blamed: %+v", s.Name, s.Breaker)
		}
	}
}
