package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit/redislimit"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

const groqModel = "llama-3.1-8b-instant"

// withRedis points a testbed's limiters at Redis under the test's own prefix, with groq's limits.
func withRedis(url, prefix string, groq ratelimit.Limits) func(*config.Config) {
	return func(c *config.Config) {
		c.RedisURL, c.RedisPrefix = secret.String(url), prefix
		c.RateLimits.Providers["groq"] = groq
	}
}

// groqUsage reads groq's counts in Redis as every controller sees them.
func groqUsage(t *testing.T, c *redis.Client, prefix string, l ratelimit.Limits) ratelimit.Usage {
	t.Helper()
	u, err := redislimit.New(c, "groq", l, redislimit.Options{Prefix: prefix}).Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// oneCall asks one groq model, with a short wait for a permit.
var oneCall = map[string]any{"task": mcq, "category": "general", "models": []string{groqModel}, "workers": 1, "min_responses": 1, "timeout": 0.5}

func TestTwoControllersShareOneLimit(t *testing.T) {
	c, prefix := redistest.New(t)
	limits := ratelimit.Limits{RequestsPerMinute: 10, Concurrency: 50}
	a := newTestbed(t, withRedis(redistest.URL(), prefix, limits))
	b := newTestbed(t, withRedis(redistest.URL(), prefix, limits))
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 30 {
		tb := []*testbed{a, b}[i%2]
		wg.Go(func() {
			var bad errorResponse
			resp, _ := tb.do(http.MethodPost, "/route-thompson", oneCall, &bad)
			mu.Lock()
			defer mu.Unlock()
			statuses[resp.StatusCode]++
			if resp.StatusCode != http.StatusOK && (bad.Error.Code != "rate_limited" || resp.Header.Get("Retry-After") == "") {
				t.Errorf("refused with %d %s, Retry-After %q", resp.StatusCode, bad.Error.Code, resp.Header.Get("Retry-After"))
			}
		})
	}
	wg.Wait()
	if statuses[http.StatusOK] != 10 || statuses[http.StatusServiceUnavailable] != 20 {
		t.Fatalf("answers %v: two controllers must admit 10 calls between them", statuses)
	}
	// A call's concurrency slot is given back when its permit settles, which may follow its answer.
	var u ratelimit.Usage
	waitFor(t, func() bool { u = groqUsage(t, c, prefix, limits); return u.InFlight == 0 })
	if u.Requests != 10 {
		t.Fatalf("Redis counts %+v", u)
	}
	var view struct {
		Providers []struct {
			Name         string             `json:"name"`
			LimitUse     map[string]float64 `json:"limit_use"`
			SharedLimits bool               `json:"shared_limits"`
		} `json:"providers"`
	}
	waitFor(t, func() bool {
		a.do(http.MethodGet, "/providers", nil, &view)
		for _, p := range view.Providers {
			if p.Name == "groq" {
				return p.SharedLimits && p.LimitUse["requests"] == 1
			}
		}
		return false
	})
}

func TestSlotsComeBackAfterSuccessErrorAndTimeout(t *testing.T) {
	c, prefix := redistest.New(t)
	limits := ratelimit.Limits{RequestsPerMinute: 1000, Concurrency: 3}
	backend := &failing{Backend: &slowModels{Backend: simBackend(t), delay: time.Minute, models: map[string]bool{"gemma2-9b-it": true}}}
	backend.set("llama-3.1-70b-versatile", serverError("llama-3.1-70b-versatile"))
	tb := newTestbed(t, withRedis(redistest.URL(), prefix, limits), withBackend(backend))
	for _, model := range []string{groqModel, "llama-3.1-70b-versatile", "gemma2-9b-it"} { // success, error, timeout
		body := map[string]any{"task": mcq, "category": "general", "models": []string{model}, "workers": 1, "min_responses": 1, "timeout": 0.5}
		tb.do(http.MethodPost, "/route-thompson", body, nil)
	}
	waitFor(t, func() bool { return groqUsage(t, c, prefix, limits).InFlight == 0 })
	if u := groqUsage(t, c, prefix, limits); u.Requests < 3 {
		t.Fatalf("Redis counts %+v", u)
	}
}

func TestLosingRedisFallsBackToLocalLimitsAndComesBack(t *testing.T) {
	c, prefix := redistest.New(t)
	proxy, through := redistest.NewProxy(t)
	limits := ratelimit.Limits{RequestsPerMinute: 1000, Concurrency: 50}
	tb := newTestbed(t, withRedis(through, prefix, limits))
	for range 3 {
		if status, _, e := tb.route(oneCall); status != http.StatusOK {
			t.Fatalf("status %d: %+v", status, e)
		}
	}
	proxy.Cut()
	for range 3 { // served while Redis is away
		if status, _, e := tb.route(oneCall); status != http.StatusOK {
			t.Fatalf("status %d without Redis: %+v", status, e)
		}
	}
	if tb.logs.FilterField(zap.String("event", "limiter_fallback")).Len() == 0 {
		t.Fatal("the fallback was not logged")
	}
	proxy.Restore()
	// Counting goes back to Redis once a retry finds it (1 s, then 2 s after the failure). Each
	// provider's limiter finds it on its own: groq's is the one these calls count on.
	waitFor(t, func() bool {
		tb.route(oneCall)
		return tb.logs.FilterField(zap.String("event", "limiter_shared")).FilterField(zap.String("provider", "groq")).Len() > 0
	})
	before := groqUsage(t, c, prefix, limits).Requests
	tb.route(oneCall)
	if after := groqUsage(t, c, prefix, limits).Requests; after != before+1 {
		t.Fatalf("Redis counted %d then %d: shared counting did not resume", before, after)
	}
}

func TestACallLargerThanTheTokenLimitIs413(t *testing.T) {
	_, prefix := redistest.New(t)
	tb := newTestbed(t, withRedis(redistest.URL(), prefix, ratelimit.Limits{RequestsPerMinute: 100, TokensPerMinute: 2000}))
	body := map[string]any{"task": strings.Repeat("Summarize this paragraph about warehouses. ", 400), "category": "general",
		"models": []string{groqModel}, "workers": 1, "min_responses": 1}
	var bad errorResponse
	resp, raw := tb.do(http.MethodPost, "/route-thompson", body, &bad)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
}

// TestAProviderAtItsLimitShedsAtOnce: every model the request may ask is groq's, groq takes one call at
// a time, and its first call is answered 429 for the whole provider with a ten-minute Retry-After. The
// two calls waiting for groq's slot are refused at once (the window frees long after the request's
// max_queue_seconds), so the request gets 503 rate_limited with Retry-After without waiting: held for
// the window instead, it would outlast the test's 30 s. A rate limit blames nobody.
func TestAProviderAtItsLimitShedsAtOnce(t *testing.T) {
	limited := simBackend(t)
	limited.SetFault("groq", providers.Fault{RateLimitRate: 1, RetryAfter: 10 * time.Minute, ProviderWide: true})
	tb := newTestbed(t, func(c *config.Config) {
		c.RateLimits.Providers["groq"] = ratelimit.Limits{RequestsPerMinute: 100, Concurrency: 1}
	},
		withBackend(limited))
	type answer struct {
		resp *http.Response
		bad  errorResponse
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		// The caller would wait 15 minutes: only the queue bound can make the answer quick.
		a.resp, _ = tb.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "category": "general", "models": groqModels,
			"workers": len(groqModels), "min_responses": 1, "timeout": 900}, &a.bad)
		done <- a
	}()
	var a answer
	select {
	case a = <-done:
	case <-time.After(30 * time.Second):
		tb.srv.CloseClientConnections() // the caller leaves, which stops the request
		t.Fatal("no answer within 30 s: the request waits for a window that frees in ten minutes")
	}
	if a.resp.StatusCode != http.StatusServiceUnavailable || a.bad.Error.Code != "rate_limited" {
		t.Fatalf("answer %d %+v, want 503 rate_limited", a.resp.StatusCode, a.bad.Error)
	}
	if ra, _ := strconv.Atoi(a.resp.Header.Get("Retry-After")); ra < 590 || ra > 600 {
		t.Fatalf("Retry-After %q, want the ten minutes until groq's window frees", a.resp.Header.Get("Retry-After"))
	}
	rec := tb.record(a.resp.Header.Get("X-Request-ID"))
	if rec["status_code"] != 503.0 {
		t.Fatalf("record status %v", rec["status_code"])
	}
	statuses := map[string]int{}
	for _, r := range tb.results(a.resp.Header.Get("X-Request-ID")) {
		statuses[fmt.Sprint(r["status"], " ", r["error_kind"])]++
	}
	// The first call met the 429; the calls that waited for its slot, and any quorum round's, were
	// refused for the rate limit: nothing else happened to them (how many there are follows timing).
	if statuses["error rate_limited"] != 1 || statuses["not_sent permit_rate_limited"] < 1 || len(statuses) != 2 {
		t.Fatalf("calls %v", statuses)
	}
	skipped := 0
	for _, r := range a.bad.Error.Retries {
		if r.Outcome == "skipped: max_queue_seconds" {
			skipped++
		}
	}
	if skipped == 0 {
		t.Fatalf("retries %+v: no retry was skipped for the queue bound", a.bad.Error.Retries)
	}
	tb.assertNoBreakerMoved()
	tb.assertNoArmLearned()
	tb.waitIdle("groq")
}
