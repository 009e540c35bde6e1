package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/platform/clock"
)

var (
	epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bg    = context.Background()
)

func reserve(t *testing.T, l Limiter, id string, tokens int) Decision {
	t.Helper()
	d, err := l.Reserve(bg, id, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRequestsSlideOutOfTheWindow(t *testing.T) {
	clk := clock.NewFake(epoch)
	w := NewLocal(Limits{RequestsPerMinute: 3}, clk, 0)
	for i := 0; i < 3; i++ {
		if d := reserve(t, w, fmt.Sprint(i), 1); !d.Allowed {
			t.Fatalf("call %d refused: %+v", i, d)
		}
		w.Release(bg, fmt.Sprint(i), -1)
		clk.Advance(10 * time.Second)
	}
	d := reserve(t, w, "3", 1)
	if d.Allowed || d.Reason != ReasonRequests || d.Usage.Use() != 1 {
		t.Fatalf("fourth call in a minute: %+v", d)
	}
	// The first call was at 0s; it is now 30s, so room returns in 30s.
	if d.RetryAfter != 30*time.Second || d.Usage.RoomIn != 30*time.Second {
		t.Fatalf("retry after %v (room in %v), want 30s", d.RetryAfter, d.Usage.RoomIn)
	}
	clk.Advance(30 * time.Second)
	if d := reserve(t, w, "4", 1); !d.Allowed {
		t.Fatalf("refused after the oldest call left the window: %+v", d)
	}
}

func TestTokensAreReconciled(t *testing.T) {
	clk := clock.NewFake(epoch)
	w := NewLocal(Limits{TokensPerMinute: 1000}, clk, 0)
	reserve(t, w, "a", 600)
	clk.Advance(20 * time.Second)
	reserve(t, w, "b", 300)
	if u, _ := w.Usage(bg); u.TokensUse != 0.9 {
		t.Fatalf("use %+v, want 0.9 of the tokens", u)
	}
	if d := reserve(t, w, "c", 200); d.Allowed || d.Reason != ReasonTokens || d.RetryAfter != 40*time.Second {
		t.Fatalf("over the token budget: %+v", d)
	}
	if _, err := w.Reserve(bg, "d", 5000); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a call larger than the whole budget: %v", err)
	}
	// a used 100 tokens, not the 600 it reserved.
	if u, _ := w.Release(bg, "a", 100); u.Tokens != 400 {
		t.Fatalf("after reconciling: %+v", u)
	}
	if d := reserve(t, w, "c", 200); !d.Allowed {
		t.Fatalf("refused after reconciling: %+v", d)
	}
}

func TestConcurrencySlotsAreLeases(t *testing.T) {
	clk := clock.NewFake(epoch)
	w := NewLocal(Limits{Concurrency: 2}, clk, time.Minute)
	reserve(t, w, "a", 1)
	reserve(t, w, "b", 1)
	if d := reserve(t, w, "c", 1); d.Allowed || d.Reason != ReasonConcurrency || d.RetryAfter != 0 {
		t.Fatalf("third concurrent call: %+v", d)
	}
	w.Release(bg, "a", -1)
	w.Release(bg, "a", -1) // twice: nothing more
	if d := reserve(t, w, "c", 1); !d.Allowed || d.Usage.InFlight != 2 {
		t.Fatalf("refused after a release: %+v", d)
	}
	clk.Advance(time.Minute) // b and c never come back: their leases end
	if u, _ := w.Usage(bg); u.InFlight != 0 {
		t.Fatalf("%d slots after their leases", u.InFlight)
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
			w := NewLocal(Limits{}, clk, 0)
			u, _ := w.Observe(bg, tt.up)
			d := reserve(t, w, "a", 1)
			if d.Allowed || d.Reason != ReasonUpstream || d.RetryAfter != tt.want || u.Use() != 1 || u.Blocked != tt.want {
				t.Fatalf("%+v, usage %+v", d, u)
			}
			clk.Advance(tt.want)
			if d := reserve(t, w, "b", 1); !d.Allowed {
				t.Fatalf("still blocked after the reset: %+v", d)
			}
		})
	}
}

func TestFewerLeftUpstreamWins(t *testing.T) {
	clk := clock.NewFake(epoch)
	w := NewLocal(Limits{RequestsPerMinute: 30, TokensPerMinute: 10000}, clk, 0)
	reserve(t, w, "a", 100)
	u, _ := w.Observe(bg, Upstream{RemainingRequests: 2, RemainingTokens: 500, ResetRequests: 10 * time.Second, ResetTokens: 20 * time.Second})
	if u.Requests != 29 || u.Tokens != 9500 {
		t.Fatalf("after resync: %+v", u)
	}
	if d := reserve(t, w, "b", 600); d.Allowed || d.Reason != ReasonTokens || d.RetryAfter != 20*time.Second {
		t.Fatalf("more tokens than the provider has: %+v", d)
	}
	clk.Advance(20 * time.Second) // the provider's windows reset
	if u, _ := w.Usage(bg); u.Requests != 1 || u.Tokens != 100 {
		t.Fatalf("after the provider's reset: %+v", u)
	}
}

func TestUnlimited(t *testing.T) {
	w := NewLocal(Limits{}, clock.NewFake(epoch), 0)
	for i := 0; i < 10000; i++ {
		if d := reserve(t, w, fmt.Sprint(i), 100000); !d.Allowed || d.Usage.Use() != 0 {
			t.Fatalf("unlimited window refused: %+v", d)
		}
	}
}

// flaky is a shared limiter that fails while down.
type flaky struct {
	*Local
	down bool
}

var errDown = errors.New("connection refused")

func (f *flaky) Reserve(ctx context.Context, id string, n int) (Decision, error) {
	if f.down {
		return Decision{}, errDown
	}
	return f.Local.Reserve(ctx, id, n)
}

func (f *flaky) Release(ctx context.Context, id string, n int) (Usage, error) {
	if f.down {
		return Usage{}, errDown
	}
	return f.Local.Release(ctx, id, n)
}

func TestFailoverCountsLocallyWhileTheSharedLimiterIsDown(t *testing.T) {
	clk := clock.NewFake(epoch)
	shared := &flaky{Local: NewLocal(Limits{Concurrency: 10}, clk, 0)}
	local := NewLocal(Limits{Concurrency: 10}, clk, 0)
	var changes []string
	f := NewFailover(shared, local, clk, func(s bool, err error) { changes = append(changes, fmt.Sprint(s, err)) })
	reserve(t, f, "a", 1) // shared
	shared.down = true
	reserve(t, f, "b", 1) // fails over at once
	if f.Shared() || changes[0] != "false connection refused" {
		t.Fatalf("after a failure: shared %v, changes %v", f.Shared(), changes)
	}
	shared.down = false
	reserve(t, f, "c", 1) // within the first retry's wait: still local
	if su, _ := shared.Usage(bg); su.InFlight != 1 {
		t.Fatalf("the shared limiter was asked before its retry: %+v", su)
	}
	clk.Advance(Retries[0])
	reserve(t, f, "d", 1) // back to shared
	if !f.Shared() || len(changes) != 2 || changes[1] != "true <nil>" {
		t.Fatalf("after the retry: shared %v, changes %v", f.Shared(), changes)
	}
	// Each call is released where it was reserved.
	for _, id := range []string{"a", "b", "c", "d"} {
		f.Release(bg, id, -1)
	}
	su, _ := shared.Usage(bg)
	lu, _ := local.Usage(bg)
	if su.InFlight != 0 || lu.InFlight != 0 {
		t.Fatalf("slots left: shared %d, local %d", su.InFlight, lu.InFlight)
	}
}

// A call's release corrects the tokens of its own event, even after capacity the provider reported was
// placed before it in the window, and each event leaves the window a minute after its own time.
func TestReleaseCorrectsItsOwnEventAroundPhantoms(t *testing.T) {
	clk := clock.NewFake(epoch)
	w := NewLocal(Limits{TokensPerMinute: 1000}, clk, 0)
	clk.Advance(10 * time.Second)
	reserve(t, w, "a", 100)
	reserve(t, w, "b", 200)
	w.mu.Lock()
	w.phantom(epoch.Add(5*time.Second), 50) // reported spent at 5 s: it goes before a and b
	w.mu.Unlock()
	if _, err := w.Release(bg, "a", 30); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Release(bg, "b", 20); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		after  time.Duration
		tokens int
	}{{0, 100}, {56 * time.Second, 50}, {5 * time.Second, 0}} { // at 10 s, 66 s and 71 s
		clk.Advance(step.after)
		if u, _ := w.Usage(bg); u.Tokens != step.tokens {
			t.Fatalf("at %v: %d tokens in the window, want %d", clk.Now().Sub(epoch), u.Tokens, step.tokens)
		}
	}
}
