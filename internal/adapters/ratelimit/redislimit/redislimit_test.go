package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
	"github.com/redis/go-redis/v9"
)

func limiter(t *testing.T, l ratelimit.Limits, o Options) (*Limiter, *redis.Client) {
	t.Helper()
	c, prefix := redistest.New(t)
	o.Prefix = prefix
	return New(c, "groq", l, o), c
}

func TestRequestsSlideOutOfTheWindow(t *testing.T) {
	r, _ := limiter(t, ratelimit.Limits{RequestsPerMinute: 3}, Options{Window: time.Second})
	ctx := context.Background()
	for i := range 3 {
		if d, err := r.Reserve(ctx, fmt.Sprint("a", i), 1); err != nil || !d.Allowed {
			t.Fatalf("call %d: %+v %v", i, d, err)
		}
	}
	d, err := r.Reserve(ctx, "a3", 1)
	if err != nil || d.Allowed || d.Reason != ratelimit.ReasonRequests || d.RetryAfter <= 0 || d.RetryAfter > time.Second || d.Usage.Use() != 1 {
		t.Fatalf("a fourth call in the window: %+v %v", d, err)
	}
	time.Sleep(d.RetryAfter + 10*time.Millisecond) // the Redis server's clock: no fake clock reaches it
	if d, err := r.Reserve(ctx, "a4", 1); err != nil || !d.Allowed {
		t.Fatalf("after the oldest call left the window: %+v %v", d, err)
	}
}

func TestTokensAreReconciledWithWhatWasUsed(t *testing.T) {
	r, _ := limiter(t, ratelimit.Limits{TokensPerMinute: 1000}, Options{})
	ctx := context.Background()
	r.Reserve(ctx, "a", 800)
	if d, _ := r.Reserve(ctx, "b", 300); d.Allowed || d.Reason != ratelimit.ReasonTokens {
		t.Fatalf("over the tokens: %+v", d)
	}
	u, err := r.Release(ctx, "a", 150) // the call used far less than its estimate
	if err != nil || u.Tokens != 150 || u.InFlight != 0 {
		t.Fatalf("after release: %+v %v", u, err)
	}
	if d, _ := r.Reserve(ctx, "b", 300); !d.Allowed || d.Usage.Tokens != 450 {
		t.Fatalf("after reconciling: %+v", d)
	}
	if _, err := r.Reserve(ctx, "c", 5000); !errors.Is(err, ratelimit.ErrTooLarge) {
		t.Fatalf("a call larger than the limit: %v", err)
	}
}

func TestSlotsAreLeases(t *testing.T) {
	r, _ := limiter(t, ratelimit.Limits{Concurrency: 2}, Options{Lease: 300 * time.Millisecond})
	ctx := context.Background()
	r.Reserve(ctx, "a", 1)
	r.Reserve(ctx, "b", 1)
	d, _ := r.Reserve(ctx, "c", 1)
	if d.Allowed || d.Reason != ratelimit.ReasonConcurrency || d.RetryAfter > ConcurrencyRecheck {
		t.Fatalf("a third concurrent call: %+v", d)
	}
	if d, _ := r.Reserve(ctx, "a", 1); !d.Allowed || d.Usage.InFlight != 2 {
		t.Fatalf("asking again for a held slot: %+v", d)
	}
	r.Release(ctx, "a", -1)
	if d, _ := r.Reserve(ctx, "c", 1); !d.Allowed {
		t.Fatalf("after a release: %+v", d)
	}
	// Nobody releases b and c (their controller died): their leases end.
	time.Sleep(350 * time.Millisecond)
	if u, _ := r.Usage(ctx); u.InFlight != 0 {
		t.Fatalf("%d slots held after their leases", u.InFlight)
	}
}

func TestTheProvidersHeadersWin(t *testing.T) {
	r, _ := limiter(t, ratelimit.Limits{RequestsPerMinute: 30, TokensPerMinute: 10000}, Options{})
	ctx := context.Background()
	r.Reserve(ctx, "a", 100)
	// The provider says 2 requests and 500 tokens remain until its reset in 30 s; Conclave counted 29 and 9900.
	u, err := r.Observe(ctx, ratelimit.Upstream{RemainingRequests: 2, RemainingTokens: 500, ResetRequests: 30 * time.Second, ResetTokens: 30 * time.Second})
	if err != nil || u.Requests != 29 || u.Tokens != 9500 {
		t.Fatalf("after resync: %+v %v", u, err)
	}
	if d, _ := r.Reserve(ctx, "b", 600); d.Allowed || d.Reason != ratelimit.ReasonTokens || d.RetryAfter > 31*time.Second {
		t.Fatalf("a call the provider has no tokens for: %+v", d)
	}
	// More left than counted changes nothing; a Retry-After blocks every call.
	u, _ = r.Observe(ctx, ratelimit.Upstream{RemainingRequests: 1000, RemainingTokens: -1, RetryAfter: 20 * time.Second})
	if u.Requests != 29 || u.Blocked < 19*time.Second || u.Use() != 1 {
		t.Fatalf("after a Retry-After: %+v", u)
	}
	if d, _ := r.Reserve(ctx, "c", 1); d.Allowed || d.Reason != ratelimit.ReasonUpstream {
		t.Fatalf("while blocked: %+v", d)
	}
}

func TestAForgottenScriptIsCountedOnce(t *testing.T) {
	r, c := limiter(t, ratelimit.Limits{RequestsPerMinute: 100}, Options{})
	ctx := context.Background()
	for i := range 3 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Reserve(ctx, fmt.Sprint(i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if u, _ := r.Usage(ctx); u.Requests != 3 {
		t.Fatalf("%d requests counted for 3 reservations", u.Requests)
	}
}

func TestManyCallersNeverAdmitMoreThanTheLimit(t *testing.T) {
	const limit, window = 20, 500 * time.Millisecond
	c, prefix := redistest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var mu sync.Mutex
	var admitted []time.Time
	var wg sync.WaitGroup
	for g := range 16 {
		// Two limiters on one Redis, as two controllers.
		r := New(c, "groq", ratelimit.Limits{RequestsPerMinute: limit}, Options{Prefix: prefix, Window: window})
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				d, err := r.Reserve(ctx, fmt.Sprintf("g%d-%d", g, i), 1)
				if err != nil {
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted = append(admitted, d.At)
					mu.Unlock()
				} else {
					time.Sleep(min(d.RetryAfter, 20*time.Millisecond))
				}
			}
		})
	}
	wg.Wait()
	if err := CheckWindows(admitted, limit, window); err != nil {
		t.Fatal(err)
	}
	if len(admitted) < 2*limit {
		t.Fatalf("only %d admissions in 2 s", len(admitted))
	}
}
