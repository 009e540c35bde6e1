// Package ratelimit owns provider rate limits: requests per minute, tokens per minute and concurrent
// calls, as sliding windows. Window is the local implementation, owned by a provider actor; a shared
// implementation over Redis satisfies the same Limiter interface.
package ratelimit

import (
	"time"

	"github.com/conclave-ai/conclave/clock"
)

// Limits are one provider's limits; zero means unlimited.
type Limits struct {
	RequestsPerMinute int `json:"requests_per_minute"`
	TokensPerMinute   int `json:"tokens_per_minute"`
	Concurrency       int `json:"concurrency"`
}

// Decision is the answer to a reservation.
type Decision struct {
	Allowed bool
	// RetryAfter is how long until the window has room again, when not allowed.
	RetryAfter time.Duration
	// Reason names the exhausted limit when not allowed: requests, tokens, concurrency or upstream.
	Reason string
	// Use is the highest share of any limit in use after the decision, in [0, 1].
	Use float64
}

// Limiter reserves capacity for calls to one provider.
type Limiter interface {
	// Reserve checks the limits and, when they allow it, records one call of tokens tokens.
	Reserve(tokens int) Decision
	// Release ends a reserved call (the concurrency limit counts calls between Reserve and Release).
	Release()
	// Observe applies what the provider's response headers said about its own limits.
	Observe(Upstream)
	// Use is the highest share of any limit currently in use, in [0, 1].
	Use() float64
}

// Upstream is a provider's own view of its limits, read from response headers.
type Upstream struct {
	RemainingRequests int64 // -1 when unknown
	RemainingTokens   int64 // -1 when unknown
	LimitRequests     int64
	LimitTokens       int64
	ResetRequests     time.Duration
	ResetTokens       time.Duration
	RetryAfter        time.Duration
	// PerModel is true when the limits are the model's own, not the provider's.
	PerModel bool
}

// Exhausted is how long the headers say no call will be taken: until the reset of a limit with nothing
// remaining, or the Retry-After; zero when a call may go.
func (u Upstream) Exhausted() time.Duration {
	d := u.RetryAfter
	if u.RemainingRequests == 0 {
		d = max(d, u.ResetRequests)
	}
	if u.RemainingTokens == 0 {
		d = max(d, u.ResetTokens)
	}
	return d
}

const window = time.Minute

type event struct {
	at     time.Time
	tokens int
}

// Window is a sliding-window limiter: it remembers each call of the last minute, so the counts are
// exact rather than approximated by fixed buckets. It is not safe for concurrent use; its owner (the
// provider actor) serialises access.
type Window struct {
	limits   Limits
	clock    clock.Clock
	events   []event // oldest first, from head on
	head     int
	tokens   int // sum of the live events' tokens
	inFlight int
	// blockedUntil honours the provider's own word: a 429 with Retry-After, or headers saying a limit
	// is exhausted until its reset.
	blockedUntil time.Time
}

// NewWindow returns a local limiter; a nil clock means the real clock.
func NewWindow(l Limits, c clock.Clock) *Window {
	return &Window{limits: l, clock: clock.Or(c)}
}

// Limits returns the configured limits.
func (w *Window) Limits() Limits { return w.limits }

func (w *Window) prune(now time.Time) {
	cut := now.Add(-window)
	for w.head < len(w.events) && !w.events[w.head].at.After(cut) {
		w.tokens -= w.events[w.head].tokens
		w.head++
	}
	// Compact once the dead prefix dominates, so each event is copied O(1) times on average.
	if w.head > 64 && w.head*2 > len(w.events) {
		n := copy(w.events, w.events[w.head:])
		w.events = w.events[:n]
		w.head = 0
	}
}

func (w *Window) live() []event { return w.events[w.head:] }

// Reserve implements Limiter.
func (w *Window) Reserve(tokens int) Decision {
	now := w.clock.Now()
	w.prune(now)
	deny := func(reason string, after time.Duration) Decision {
		return Decision{Reason: reason, RetryAfter: max(after, time.Millisecond), Use: w.use()}
	}
	if now.Before(w.blockedUntil) {
		return deny("upstream", w.blockedUntil.Sub(now))
	}
	if l := w.limits.Concurrency; l > 0 && w.inFlight >= l {
		// Room comes back when a call ends; the owner retries on Release.
		return deny("concurrency", 0)
	}
	live := w.live()
	if l := w.limits.RequestsPerMinute; l > 0 && len(live) >= l {
		return deny("requests", live[len(live)-l].at.Add(window).Sub(now))
	}
	if l := w.limits.TokensPerMinute; l > 0 && w.tokens+tokens > l {
		if tokens > l {
			return deny("tokens", window) // can never fit; the caller's deadline ends the wait
		}
		// Wait until enough of the oldest events leave the window.
		need := w.tokens + tokens - l
		for _, e := range live {
			need -= e.tokens
			if need <= 0 {
				return deny("tokens", e.at.Add(window).Sub(now))
			}
		}
	}
	w.events = append(w.events, event{at: now, tokens: tokens})
	w.tokens += tokens
	w.inFlight++
	return Decision{Allowed: true, Use: w.use()}
}

// Release implements Limiter.
func (w *Window) Release() {
	if w.inFlight > 0 {
		w.inFlight--
	}
}

// Observe implements Limiter: a Retry-After, or an exhausted upstream limit with a reset, blocks the
// window until then.
func (w *Window) Observe(u Upstream) {
	w.blockedUntil = later(w.blockedUntil, w.clock.Now().Add(u.Exhausted()))
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Use implements Limiter.
func (w *Window) Use() float64 {
	now := w.clock.Now()
	w.prune(now)
	if now.Before(w.blockedUntil) {
		return 1
	}
	return w.use()
}

func (w *Window) use() float64 {
	u := 0.0
	if l := w.limits.RequestsPerMinute; l > 0 {
		u = max(u, float64(len(w.live()))/float64(l))
	}
	if l := w.limits.TokensPerMinute; l > 0 {
		u = max(u, float64(w.tokens)/float64(l))
	}
	if l := w.limits.Concurrency; l > 0 {
		u = max(u, float64(w.inFlight)/float64(l))
	}
	return min(u, 1)
}

// Wait is how long until the window has room for one more call, zero when it has room now or when only
// the concurrency limit is full (a call ending frees a slot at a moment nobody knows).
func (w *Window) Wait() time.Duration {
	now := w.clock.Now()
	w.prune(now)
	var d time.Duration
	if now.Before(w.blockedUntil) {
		d = w.blockedUntil.Sub(now)
	}
	live := w.live()
	if l := w.limits.RequestsPerMinute; l > 0 && len(live) >= l {
		d = max(d, live[len(live)-l].at.Add(window).Sub(now))
	}
	if l := w.limits.TokensPerMinute; l > 0 && w.tokens >= l {
		need := w.tokens - l + 1
		for _, e := range live {
			if need -= e.tokens; need <= 0 {
				d = max(d, e.at.Add(window).Sub(now))
				break
			}
		}
	}
	return d
}

// Counts reports the calls and tokens in the current window and the calls in flight.
func (w *Window) Counts() (requests, tokens, inFlight int) {
	w.prune(w.clock.Now())
	return len(w.live()), w.tokens, w.inFlight
}
