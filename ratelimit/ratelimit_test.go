package ratelimit

import (
	"testing"
	"time"

	"github.com/conclave-ai/conclave/clock"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestRequestsSlideOutOfTheWindow(t *testing.T) {
	clk := clock.NewFake(epoch)
	w := NewWindow(Limits{RequestsPerMinute: 3}, clk)
	for i := 0; i < 3; i++ {
		if d := w.Reserve(1); !d.Allowed {
			t.Fatalf("call %d refused: %+v", i, d)
		}
		w.Release()
		clk.Advance(10 * time.Second)
	}
	d := w.Reserve(1)
	if d.Allowed || d.Reason != "requests" || d.Use != 1 {
		t.Fatalf("fourth call in a minute: %+v", d)
	}
	// The first call was at 0s; it is now 30s, so room returns in 30s.
	if d.RetryAfter != 30*time.Second {
		t.Fatalf("retry after %v, want 30s", d.RetryAfter)
	}
	clk.Advance(30 * time.Second)
	if d := w.Reserve(1); !d.Allowed {
		t.Fatalf("refused after the oldest call left the window: %+v", d)
	}
}

func TestTokensPerMinute(t *testing.T) {
	clk := clock.NewFake(epoch)
	w := NewWindow(Limits{TokensPerMinute: 1000}, clk)
	w.Reserve(600)
	clk.Advance(20 * time.Second)
	w.Reserve(300)
	if u := w.Use(); u != 0.9 {
		t.Fatalf("use %v, want 0.9", u)
	}
	d := w.Reserve(200)
	if d.Allowed || d.Reason != "tokens" || d.RetryAfter != 40*time.Second {
		t.Fatalf("over the token budget: %+v", d)
	}
	if d := w.Reserve(5000); d.Allowed || d.Reason != "tokens" {
		t.Fatalf("a call larger than the whole budget: %+v", d)
	}
}

func TestConcurrency(t *testing.T) {
	w := NewWindow(Limits{Concurrency: 2}, clock.NewFake(epoch))
	w.Reserve(1)
	w.Reserve(1)
	if d := w.Reserve(1); d.Allowed || d.Reason != "concurrency" {
		t.Fatalf("third concurrent call: %+v", d)
	}
	w.Release()
	if d := w.Reserve(1); !d.Allowed {
		t.Fatalf("refused after a release: %+v", d)
	}
}

func TestUpstreamHeadersBlockUntilReset(t *testing.T) {
	tests := []struct {
		desc string
		up   Upstream
		want time.Duration
	}{
		{"retry-after", Upstream{RetryAfter: 5 * time.Second, RemainingRequests: -1, RemainingTokens: -1}, 5 * time.Second},
		{"requests exhausted", Upstream{RemainingRequests: 0, ResetRequests: 7 * time.Second, RemainingTokens: -1}, 7 * time.Second},
		{"tokens exhausted", Upstream{RemainingRequests: 10, RemainingTokens: 0, ResetTokens: 2 * time.Second}, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			clk := clock.NewFake(epoch)
			w := NewWindow(Limits{}, clk)
			w.Observe(tt.up)
			d := w.Reserve(1)
			if d.Allowed || d.Reason != "upstream" || d.RetryAfter != tt.want || w.Use() != 1 {
				t.Fatalf("%+v, use %v", d, w.Use())
			}
			clk.Advance(tt.want)
			if d := w.Reserve(1); !d.Allowed {
				t.Fatalf("still blocked after the reset: %+v", d)
			}
		})
	}
}

func TestUnlimited(t *testing.T) {
	w := NewWindow(Limits{}, clock.NewFake(epoch))
	for i := 0; i < 10000; i++ {
		if d := w.Reserve(100000); !d.Allowed || d.Use != 0 {
			t.Fatalf("unlimited window refused: %+v", d)
		}
	}
}

func TestWaitSaysWhenTheWindowHasRoom(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := NewWindow(Limits{RequestsPerMinute: 2, TokensPerMinute: 100}, clk)
	if d := w.Wait(); d != 0 {
		t.Fatalf("an empty window waits %v", d)
	}
	w.Reserve(10)
	clk.Advance(10 * time.Second)
	w.Reserve(10)
	if d := w.Wait(); d != 50*time.Second {
		t.Fatalf("two requests of two: wait %v, want the oldest to leave in 50 s", d)
	}
	clk.Advance(51 * time.Second)
	w.Reserve(90) // 100 tokens in the window
	if d := w.Wait(); d != 9*time.Second {
		t.Fatalf("tokens full: wait %v, want 9 s until the 10 oldest tokens leave", d)
	}
	w.Observe(Upstream{RetryAfter: time.Minute, RemainingRequests: -1, RemainingTokens: -1})
	if d := w.Wait(); d != time.Minute {
		t.Fatalf("blocked by the upstream: wait %v", d)
	}
}
