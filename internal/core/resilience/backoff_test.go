package resilience

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

func TestBackoffRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		desc     string
		base     time.Duration
		attempt  int
		min, max time.Duration
	}{
		{"attempt 0, base 1s", time.Second, 0, time.Second, 1500 * time.Millisecond},
		{"attempt 1, base 1s", time.Second, 1, 2 * time.Second, 2500 * time.Millisecond},
		{"attempt 2, base 1s", time.Second, 2, 4 * time.Second, 4500 * time.Millisecond},
		{"attempt 2, base 2s", 2 * time.Second, 2, 8 * time.Second, 9 * time.Second},
		{"zero base means no wait", 0, 3, 0, 0},
		{"huge attempt is capped", time.Second, 60, maxBackoff, maxBackoff},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			for i := 0; i < 1000; i++ {
				d := Backoff(tt.base, tt.attempt, rng)
				if d < tt.min || d > tt.max {
					t.Fatalf("backoff %v outside [%v, %v]", d, tt.min, tt.max)
				}
			}
		})
	}
}

func TestBackoffJitterSpreadsAndIsSeeded(t *testing.T) {
	a, b := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	seen := map[time.Duration]bool{}
	for i := 0; i < 100; i++ {
		x, y := Backoff(time.Second, 0, a), Backoff(time.Second, 0, b)
		if x != y {
			t.Fatal("same seed, different schedule")
		}
		seen[x] = true
	}
	if len(seen) < 90 {
		t.Fatalf("jitter produced only %d distinct waits in 100", len(seen))
	}
}

func TestRetryTable(t *testing.T) {
	tests := []struct {
		kind        Kind
		recoverable bool
		target      Target
		retries     int
		base        time.Duration
		status      int
	}{
		{UpstreamTimeout, true, OtherWorker, 3, time.Second, 504},
		{HostTimeout, true, OtherWorker, 3, 2 * time.Second, 504},
		{RateLimited, true, AfterReset, 3, time.Second, 503},
		{ProviderUnavailable, true, SameProvider, 2, time.Second, 502},
		{SSHRefused, true, OtherWorker, 3, time.Second, 503},
		{ProviderUnreachable, true, SameProvider, 2, time.Second, 502},
		{WorkerUnavailable, true, OtherWorker, 3, time.Second, 503},
		{Internal, true, OtherWorker, 1, time.Second, 500},
		{RedisLost, true, LocalFallback, 2, time.Second, 503},
		{BlueprintDirUnavailable, true, EmbeddedSet, 1, 0, 500},
		{InvalidAPIKey, false, "", 0, 0, 401},
		{ModelNotFound, false, "", 0, 0, 404},
		{ConnectionRefused, false, "", 0, 0, 503},
		{RequestTooLarge, false, "", 0, 0, 413},
		{AllWorkersOffline, false, "", 0, 0, 503},
		{AllProvidersDown, false, "", 0, 0, 503},
		{DatabaseUnreachable, false, "", 0, 0, 500},
		{MalformedRequest, false, "", 0, 0, 400},
		{NoResponses, false, "", 0, 0, 503},
		{ClientClosed, false, "", 0, 0, 499},
		{Kind("never heard of it"), true, OtherWorker, 1, time.Second, 500},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			p := PolicyFor(tt.kind)
			if p.Recoverable != tt.recoverable || p.Target != tt.target || p.MaxRetries != tt.retries || p.Base != tt.base || p.Status != tt.status {
				t.Fatalf("policy %+v", p)
			}
			if p.ShouldRetry(tt.retries) {
				t.Fatal("retry allowed past the limit")
			}
			if tt.retries > 0 && !p.ShouldRetry(tt.retries-1) {
				t.Fatal("last retry refused")
			}
		})
	}
}

func TestSchedulesOfTheSpecification(t *testing.T) {
	// The jitter-free part of each schedule: worker (upstream) timeout 1s/2s/4s, 5xx 1s/2s, network (host)
	// timeout 2s/4s/8s, Redis 1s/2s.
	tests := []struct {
		kind Kind
		want []time.Duration
	}{
		{UpstreamTimeout, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{ProviderUnavailable, []time.Duration{time.Second, 2 * time.Second}},
		{SSHRefused, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{HostTimeout, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}},
		{RedisLost, []time.Duration{time.Second, 2 * time.Second}},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tt := range tests {
		p := PolicyFor(tt.kind)
		for attempt := 0; p.ShouldRetry(attempt); attempt++ {
			d := p.Delay(attempt, 0, rng)
			if d < tt.want[attempt] || d > tt.want[attempt]+p.Base/2 {
				t.Errorf("%s retry %d waits %v, want %v plus up to %v", tt.kind, attempt, d, tt.want[attempt], p.Base/2)
			}
		}
	}
}

func TestDelayHonoursRetryAfter(t *testing.T) {
	p := PolicyFor(RateLimited)
	rng := rand.New(rand.NewPCG(1, 1))
	if d := p.Delay(0, 7*time.Second, rng); d != 7*time.Second {
		t.Fatalf("delay %v, want the upstream's 7s", d)
	}
	if d := p.Delay(0, time.Hour, rng); d != maxBackoff {
		t.Fatalf("delay %v, want it capped at %v", d, maxBackoff)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"3", 3 * time.Second, true},
		{" 0.5 ", 500 * time.Millisecond, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		{"", 0, false},
		{"-1", 0, false},
		{"soon", 0, false},
		{"NaN", 0, false},
		{"+Inf", 0, false},
		{"1e12", MaxRetryAfter, true},
		{now.Add(72 * time.Hour).Format(http.TimeFormat), MaxRetryAfter, true},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.value, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.value, got, ok, tt.want, tt.ok)
		}
	}
}

func TestKindForStatus(t *testing.T) {
	tests := map[int]Kind{
		401: InvalidAPIKey, 403: InvalidAPIKey, 404: ModelNotFound, 413: RequestTooLarge, 429: RateLimited,
		408: ProviderUnavailable, 504: ProviderUnavailable, 500: ProviderUnavailable, 502: ProviderUnavailable,
		503: ProviderUnavailable, 529: ProviderUnavailable, 400: MalformedRequest, 422: MalformedRequest,
	}
	for status, want := range tests {
		if got := KindForStatus(status); got != want {
			t.Errorf("status %d: %s, want %s", status, got, want)
		}
	}
}

func TestErrorCarriesContext(t *testing.T) {
	cause := errors.New("connection reset")
	err := fmt.Errorf("dispatch: %w", &Error{Kind: ProviderUnavailable, Scope: ScopeProvider, Provider: "groq", Model: "llama-3.1-8b-instant", Status: 503, RetryAfter: 2 * time.Second, Err: cause})
	if KindOf(err) != ProviderUnavailable || ScopeOf(err) != ScopeProvider || RetryAfterOf(err) != 2*time.Second || !errors.Is(err, cause) {
		t.Fatalf("context lost: %v", err)
	}
	want := "dispatch: provider_unavailable provider=groq model=llama-3.1-8b-instant status=503: connection reset"
	if err.Error() != want {
		t.Fatalf("message %q", err.Error())
	}
	if KindOf(cause) != Internal || ScopeOf(cause) != ScopeUnknown {
		t.Fatal("unclassified error not internal")
	}
}

func BenchmarkBackoff(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = Backoff(time.Second, i%4, rng)
	}
}
