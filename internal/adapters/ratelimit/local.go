package ratelimit

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/platform/clock"
)

// event is one reservation in the window: its tokens, at its time (since the limiter's origin). A
// phantom event is capacity the provider's headers said was spent; it holds no slot. Events hold no
// pointers: a busy minute is hundreds of thousands of them, which the garbage collector then need
// not mark.
type event struct {
	at     time.Duration
	tokens int
}

// slot is a call in flight: the end of its lease, and where its event is (base-relative), so that its
// release can correct the tokens it reserved.
type slot struct {
	until time.Time
	event int64
}

// Local is a sliding-window limiter counting this process's calls: it remembers each call of the last
// minute, so the counts are exact rather than approximated by fixed buckets. It is safe for concurrent
// use and never blocks.
type Local struct {
	mu     sync.Mutex
	limits Limits
	clock  clock.Clock
	origin time.Time
	events []event // oldest first, from head on
	head   int
	base   int64           // the number of events dropped from the front of events
	tokens int             // sum of the live events' tokens
	slots  map[string]slot // calls in flight
	// firstExpiry is no later than the first lease of slots to end (zero: none is held).
	firstExpiry time.Time
	lease       time.Duration
	blocked     time.Time // the provider's own word: no call until then
}

// DefaultLease is how long a concurrency slot is held when its call never releases it.
const DefaultLease = 10 * time.Minute

// NewLocal returns a local limiter; a nil clock means the real clock, a zero lease DefaultLease.
func NewLocal(l Limits, c clock.Clock, lease time.Duration) *Local {
	if lease <= 0 {
		lease = DefaultLease
	}
	c = clock.Or(c)
	return &Local{limits: l, clock: c, origin: c.Now(), slots: map[string]slot{}, lease: lease}
}

// Limits returns the configured limits.
func (w *Local) Limits() Limits { return w.limits }

// NeverBlocks marks Local as a limiter that answers at once (see Immediate).
func (w *Local) NeverBlocks() {}

func (w *Local) since(t time.Time) time.Duration { return t.Sub(w.origin) }

func (w *Local) prune(now time.Time) {
	cut := w.since(now) - Window
	for w.head < len(w.events) && w.events[w.head].at <= cut {
		w.tokens -= w.events[w.head].tokens
		w.head++
	}
	// Compact once the dead prefix dominates, so each event is copied O(1) times on average.
	if w.head > 64 && w.head*2 > len(w.events) {
		n := copy(w.events, w.events[w.head:])
		w.events = w.events[:n]
		w.base += int64(w.head)
		w.head = 0
	}
	if len(w.slots) == 0 || now.Before(w.firstExpiry) {
		return // no lease is over: the slots need not be read
	}
	w.firstExpiry = time.Time{}
	for id, s := range w.slots {
		if !now.Before(s.until) {
			delete(w.slots, id)
		} else if w.firstExpiry.IsZero() || s.until.Before(w.firstExpiry) {
			w.firstExpiry = s.until
		}
	}
}

func (w *Local) live() []event { return w.events[w.head:] }

// Reserve implements Limiter.
func (w *Local) Reserve(_ context.Context, id string, estimate int) (Decision, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	w.prune(now)
	if l := w.limits.TokensPerMinute; l > 0 && estimate > l {
		return Decision{Reason: ReasonTokens, Usage: w.usage(now)}, ErrTooLarge
	}
	if _, dup := w.slots[id]; dup {
		return Decision{Allowed: true, At: now, Usage: w.usage(now)}, nil // asked twice: the first reservation stands
	}
	if reason, wait, ok := w.room(now, estimate); !ok {
		return Decision{Reason: reason, RetryAfter: wait, At: now, Usage: w.usage(now)}, nil
	}
	until := now.Add(w.lease)
	w.slots[id] = slot{until: until, event: w.base + int64(len(w.events))}
	if w.firstExpiry.IsZero() || until.Before(w.firstExpiry) {
		w.firstExpiry = until
	}
	w.events = append(w.events, event{at: w.since(now), tokens: estimate})
	w.tokens += estimate
	return Decision{Allowed: true, At: now, Usage: w.usage(now)}, nil
}

// room says whether a call of tokens fits now, or which limit is spent and when to ask again.
func (w *Local) room(now time.Time, tokens int) (string, time.Duration, bool) {
	if now.Before(w.blocked) {
		return ReasonUpstream, w.blocked.Sub(now), false
	}
	if l := w.limits.Concurrency; l > 0 && len(w.slots) >= l {
		return ReasonConcurrency, 0, false // a slot comes back when a call ends, or its lease does
	}
	live, at := w.live(), w.since(now)
	if l := w.limits.RequestsPerMinute; l > 0 && len(live) >= l {
		return ReasonRequests, max(live[len(live)-l].at+Window-at, time.Millisecond), false
	}
	if l := w.limits.TokensPerMinute; l > 0 && w.tokens+tokens > l {
		need := w.tokens + tokens - l // wait until enough of the oldest events leave the window
		for _, e := range live {
			if need -= e.tokens; need <= 0 {
				return ReasonTokens, max(e.at+Window-at, time.Millisecond), false
			}
		}
		return ReasonTokens, Window, false
	}
	return "", 0, true
}

// Release implements Limiter.
func (w *Local) Release(_ context.Context, id string, actual int) (Usage, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	if s, ok := w.slots[id]; ok {
		delete(w.slots, id)
		// Its event may have left the window already (a call longer than the window).
		if i := s.event - w.base; actual >= 0 && i >= int64(w.head) && i < int64(len(w.events)) {
			w.tokens += actual - w.events[i].tokens
			w.events[i].tokens = actual
		}
	}
	w.prune(now)
	return w.usage(now), nil
}

// Observe implements Limiter.
func (w *Local) Observe(_ context.Context, u Upstream) (Usage, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	w.prune(now)
	if d := u.Exhausted(); d > 0 && now.Add(d).After(w.blocked) {
		w.blocked = now.Add(d)
	}
	requests, tokens, requestsFor, tokensFor := Resync(w.limits, u, len(w.live()), w.tokens)
	// Phantom events leave the window when the provider's own window resets.
	for range requests {
		w.phantom(now.Add(requestsFor-Window), 0)
	}
	if tokens > 0 {
		w.phantom(now.Add(tokensFor-Window), tokens)
	}
	return w.usage(now), nil
}

// phantom adds spent capacity that leaves the window at at+Window, keeping the events in time order;
// the slots of the events after it follow them.
func (w *Local) phantom(at time.Time, tokens int) {
	e := event{at: w.since(at), tokens: tokens}
	i := len(w.events)
	for i > w.head && w.events[i-1].at > e.at {
		i--
	}
	w.events = slices.Insert(w.events, i, e)
	w.tokens += tokens
	for id, s := range w.slots {
		if s.event >= w.base+int64(i) {
			s.event++
			w.slots[id] = s
		}
	}
}

// Usage implements Limiter.
func (w *Local) Usage(context.Context) (Usage, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	w.prune(now)
	return w.usage(now), nil
}

func (w *Local) usage(now time.Time) Usage {
	u := Usage{Requests: len(w.live()), Tokens: w.tokens, InFlight: len(w.slots)}
	u.RequestsUse = share(u.Requests, w.limits.RequestsPerMinute)
	u.TokensUse = share(u.Tokens, w.limits.TokensPerMinute)
	u.ConcurrencyUse = share(u.InFlight, w.limits.Concurrency)
	if now.Before(w.blocked) {
		u.Blocked = w.blocked.Sub(now)
	}
	if _, wait, ok := w.room(now, 0); !ok {
		u.RoomIn = wait
	}
	return u
}
