// Package gate owns a provider's admission as a plain concurrent object: the admission machine
// (internal/core/admission), the provider's limiter, its wake-up timer and the snapshot it publishes
// for selection, behind one lock. The coordinators asking for permits, the limiter's goroutines and
// the provider's actor (peers' breakers, a changed key, its restarts) all change it through its
// methods, in one order, without a message per call: a permit needs no other state, and a message
// each way cost two deliveries per call.
//
// A gate does no messaging of its own: what the machine decides for an asker (a grant, a refusal, a
// cancellation) goes to the Shell it is given, under the lock, so that an asker hears of its grant
// before its cancellation.
package gate

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/admission"
	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"github.com/conclave-ai/conclave/internal/platform/alarm"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"go.uber.org/zap"
)

// Shell carries the machine's decisions for an asker to it. Its methods are called under the gate's
// lock, in the machine's order, and must not block or call the gate.
type Shell interface {
	// Grant lets an acquisition's call go (probe: it is the breaker's probe).
	Grant(ask any, probe bool)
	// Deny refuses an acquisition, for reason, to be asked again after retryAfter (zero: no hint).
	Deny(ask any, reason string, retryAfter time.Duration)
	// Cancel tells whoever a granted acquisition went to that its asker stopped waiting for it.
	Cancel(ask any)
	// Duplicate reports an acquisition of a job id already held; it is ignored.
	Duplicate(ask any)
}

// Config is what a gate is made of. Zero values: no limits (a limiter that lets everything through
// must still be given), the real clock, a discarding log.
type Config struct {
	Name    string
	Machine admission.Config
	// Limiter is the provider's limiter. One that never blocks (ratelimit.Immediate) is called in
	// place, under the lock; any other off it, within LimiterTimeout, its answers coming back to the
	// gate.
	Limiter ratelimit.Limiter
	// Limits are published with the snapshot.
	Limits ratelimit.Limits
	Clock  clock.Clock
	Log    *zap.Logger
	Shell  Shell
	// Published is where the snapshot is published; its value when the gate is made is where the
	// machine resumes from (a restarted gate keeps its breaker and blocked models).
	Published *atomic.Pointer[providerstate.Snapshot]
	// OnPanic hears of a panic on the gate's own goroutines (its timer, the limiter's answers), whose
	// state it may have half changed; nil lets it go on up. A panic on a caller's goroutine goes on up
	// to the caller.
	OnPanic func(reason any)
}

// LimiterTimeout bounds one limiter call that may block (Redis); the fallback answers beyond it.
const LimiterTimeout = 2 * time.Second

// StatsEvery is how often at most a gate publishes a snapshot in which only its counters moved
// (calls, tokens and calls in flight, reliability): a request changes them several times, and
// publishing a snapshot for each was a fifth of the provider's cost. What selection decides on is
// published at once; the counters at the latest with the next usage refresh.
const StatsEvery = 100 * time.Millisecond

// Gate is one provider's admission. Its methods may be called from any goroutine.
type Gate struct {
	name      string
	limits    ratelimit.Limits
	clock     clock.Clock
	log       *zap.Logger
	shell     Shell
	published *atomic.Pointer[providerstate.Snapshot]
	onPanic   func(any)
	limiter   ratelimit.Limiter
	immediate bool

	mu    sync.Mutex
	m     *admission.Machine
	usage ratelimit.Usage
	wake  alarm.Alarm // the machine's wake-up

	publishedAt time.Time // wall clock
}

// New makes a gate and publishes its first snapshot.
func New(cfg Config) *Gate {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	g := &Gate{name: cfg.Name, limits: cfg.Limits, clock: cfg.Clock, log: cfg.Log, shell: cfg.Shell, published: cfg.Published,
		onPanic: cfg.OnPanic, limiter: cfg.Limiter, immediate: ratelimit.Immediate(cfg.Limiter)}
	g.m = admission.New(cfg.Machine, *cfg.Published.Load())
	g.wake = alarm.New(g.woken)
	g.mu.Lock()
	g.publishAt(g.clock.Now(), time.Now())
	g.mu.Unlock()
	return g
}

// Acquire asks for a permit; the answer goes to the shell, now or once the limits have room.
func (g *Gate) Acquire(r admission.Request) {
	g.run(func(now, clk time.Time) { g.m.Acquire(now, clk, r) })
}

// Settle ends a permit with its call's outcome. An outcome naming another model than its permit's
// is refused (false) and changes nothing.
func (g *Gate) Settle(model string, o admission.Outcome) (ok bool) {
	ok = true
	g.run(func(now, clk time.Time) {
		if leased, held := g.m.Leased(o.ID); held && model != "" && model != leased {
			ok = false
			return
		}
		g.m.Settle(now, clk, o)
	})
	return ok
}

// Enable takes the provider back after its key changed; it reports whether it was disabled.
func (g *Gate) Enable() (was bool) {
	g.run(func(time.Time, time.Time) { was = g.m.Enable() })
	return was
}

// PeerOpened opens the breaker because another controller's opened, until then; it reports whether
// that changed the breaker, and until when it is open.
func (g *Gate) PeerOpened(until time.Time) (opened bool, openUntil time.Time) {
	g.run(func(now, clk time.Time) {
		opened = g.m.PeerOpened(now, clk, until)
		openUntil = g.m.Breaker().OpenUntil
	})
	return opened, openUntil
}

// OpenFor is how long the provider's breaker stays open.
func (g *Gate) OpenFor() time.Duration { return g.m.BreakerSettings().OpenFor }

// Stop refuses every acquisition still waiting, and every one after: the provider is stopped for
// good. Its timers end.
func (g *Gate) Stop() {
	g.run(func(time.Time, time.Time) { g.m.Stop() })
	g.Close()
}

// Close ends the gate's timers; what it holds stays published. A gate is closed when its actor
// restarts or stops.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.wake.Close()
}

// Models is how many models the machine holds state for.
func (g *Gate) Models() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m.Models()
}

// RefreshUsage reads the limiter's use: other controllers spend a shared limit too.
func (g *Gate) RefreshUsage() {
	lim := g.limiter
	g.askLimiter(false, func(c context.Context) (ratelimit.Usage, error) { return lim.Usage(c) })
}

// run applies one event to the machine under the lock, carries out its effects and publishes.
func (g *Gate) run(event func(now, clk time.Time)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now, clk := time.Now(), g.clock.Now()
	event(now, clk)
	for effects := g.m.Effects(); len(effects) > 0; effects = g.m.Effects() {
		for _, e := range effects {
			g.do(now, clk, e)
		}
	}
	g.publishAt(clk, now)
}

// do carries out one of the machine's effects; the lock is held.
func (g *Gate) do(now, clk time.Time, e admission.Effect) {
	switch e.Kind {
	case admission.Grant:
		g.shell.Grant(e.Ask, e.Probe)
	case admission.Deny:
		g.shell.Deny(e.Ask, e.Reason, e.RetryAfter)
	case admission.Cancel:
		g.shell.Cancel(e.Ask)
	case admission.Duplicate:
		g.shell.Duplicate(e.Ask)
	case admission.Reserve:
		g.reserve(now, clk, e.ID, e.Tokens)
	case admission.Release:
		words, _ := e.Words.([]ratelimit.Upstream)
		g.release(now, clk, e.ID, e.Tokens, words)
	case admission.Wake:
		g.wake.By(e.At) // leases expire and waiting acquisitions are tried again then
	case admission.Idle:
		g.wake.Stop() // no lease to expire, nobody waiting: no idle wake-up
	default:
		g.logEffect(e)
	}
}

// logEffect logs the effects that only say what happened.
func (g *Gate) logEffect(e admission.Effect) {
	switch e.Kind {
	case admission.Expired:
		g.log.Warn("permit expired without an outcome", zap.String("event", "permit_expired"), zap.String("job_id", e.ID))
	case admission.LimiterDown:
		g.log.Warn("rate limiter unavailable", zap.String("event", "limiter_error"), zap.Error(e.Err))
	case admission.Limited:
		g.log.Debug("rate limited", zap.String("event", "rate_limited"), zap.String("reason", e.Reason),
			zap.Duration("retry_after", e.RetryAfter), zap.Int("waiting", g.m.Waiting()))
	case admission.Disabled:
		g.log.Error("provider disabled until its key changes", zap.String("event", "provider_disabled"), zap.String("because", e.Reason))
	case admission.Removed:
		g.log.Warn("model removed from the pool", zap.String("event", "model_removed"), zap.String("model", e.Model))
	}
}

// reserve asks the limiter for a reservation: in place when it never blocks, else off the lock, its
// answer applied when it comes.
func (g *Gate) reserve(now, clk time.Time, id string, tokens int) {
	if g.immediate {
		d, err := g.limiter.Reserve(context.Background(), id, tokens)
		g.usage = d.Usage
		g.m.Reserved(now, clk, id, answerOf(d, err))
		return
	}
	lim := g.limiter
	go func() {
		defer g.recoverPanic()
		c, cancel := context.WithTimeout(context.Background(), LimiterTimeout)
		defer cancel()
		d, err := lim.Reserve(c, id, tokens)
		g.run(func(now, clk time.Time) { g.m.Reserved(now, clk, id, answerOf(d, err)) })
	}()
}

// release gives a call's reservation back to the limiter, with the tokens it used (-1: unknown), then
// tells it what the provider said of its limits (words).
func (g *Gate) release(now, clk time.Time, id string, tokens int, words []ratelimit.Upstream) {
	call := func(c context.Context) (ratelimit.Usage, error) {
		u, err := g.limiter.Release(c, id, tokens)
		for _, w := range words {
			u, err = g.limiter.Observe(c, w)
		}
		return u, err
	}
	if g.immediate {
		g.usage, _ = call(context.Background())
		g.m.Usage(now, clk, g.usage.RoomIn, true) // a slot the queue may wait for came back
		return
	}
	g.askLimiter(true, call)
}

// askLimiter runs a limiter call that answers with usage: in place for a limiter that never blocks
// (a refresh; releases of such a limiter are made in place by release), else off the lock.
func (g *Gate) askLimiter(released bool, call func(context.Context) (ratelimit.Usage, error)) {
	if g.immediate {
		g.run(func(now, clk time.Time) {
			g.usage, _ = call(context.Background())
			g.m.Usage(now, clk, g.usage.RoomIn, false)
		})
		return
	}
	go func() {
		defer g.recoverPanic()
		c, cancel := context.WithTimeout(context.Background(), LimiterTimeout)
		defer cancel()
		u, err := call(c)
		if err != nil {
			g.log.Debug("rate limiter call failed", zap.String("event", "limiter_error"), zap.Error(err))
		}
		g.run(func(now, clk time.Time) {
			g.usage = u
			g.m.Usage(now, clk, u.RoomIn, released)
		})
	}()
}

// answerOf is a limiter's answer as the machine's event.
func answerOf(d ratelimit.Decision, err error) admission.Answer {
	a := admission.Answer{Allowed: d.Allowed, RetryAfter: d.RetryAfter, Reason: d.Reason, RoomIn: d.Usage.RoomIn}
	switch {
	case errors.Is(err, ratelimit.ErrTooLarge):
		a.TooLarge = true
	case err != nil:
		a.Failed = err
	}
	return a
}

// woken is the wake-up timer's ring. A ring from a moment the timer was moved away from wakes the
// machine early, which is safe: it asks for its next moment again.
func (g *Gate) woken() {
	defer g.recoverPanic()
	g.run(func(now, clk time.Time) {
		if g.wake.Due() {
			g.m.Wake(now, clk)
		}
	})
}

// recoverPanic, deferred by the gate's own goroutines, hands a panic to OnPanic.
func (g *Gate) recoverPanic() {
	if g.onPanic == nil {
		return
	}
	if v := recover(); v != nil {
		g.onPanic(v)
	}
}

// publishAt publishes the snapshot at clk on the injected clock, wall being the time on the real one;
// the lock is held.
func (g *Gate) publishAt(clk, wall time.Time) {
	calls, faults := g.m.Calls24h(clk)
	u := g.usage
	snap := providerstate.Snapshot{
		Name:         g.name,
		Breaker:      g.m.Breaker(),
		Limits:       g.limits,
		RateLimitUse: u.Use(),
		LimitUse:     providerstate.LimitUse{Requests: u.RequestsUse, Tokens: u.TokensUse, Concurrency: u.ConcurrencyUse},
		SharedLimits: u.Shared,
		Requests:     u.Requests,
		Tokens:       u.Tokens,
		InFlight:     u.InFlight,
		Waiting:      g.m.Waiting(),
		Reliability:  float64(calls-faults+1) / float64(calls+2),
		Calls24h:     calls,
		Faults24h:    faults,
		Disabled:     g.m.Disabled(),
		LastFault:    g.m.LastFault(),
	}
	if snap.RateLimitUse >= 1 {
		if wait := max(u.RoomIn, u.Blocked); wait > 0 {
			snap.RoomAt = clk.Add(wait)
		}
	}
	prev := g.published.Load()
	if models, changed := g.m.OutOfPool(clk); changed {
		snap.Models = models
	} else if snap.Models = prev.Models; !decisionsDiffer(prev, &snap) && wall.Sub(g.publishedAt) < StatsEvery {
		return // only the counters moved: they wait for the next publication
	}
	g.publishedAt = wall
	published := snap // only a snapshot that is published leaves the stack
	g.published.Store(&published)
}

// decisionsDiffer reports whether two snapshots differ in what selection and admission read: the
// breaker, the limits' use, when a full limit has room, a disabled key, waiting acquisitions.
func decisionsDiffer(a, b *providerstate.Snapshot) bool {
	return a.Breaker != b.Breaker || a.RateLimitUse != b.RateLimitUse || !a.RoomAt.Equal(b.RoomAt) || a.Disabled != b.Disabled ||
		a.Waiting != b.Waiting || a.SharedLimits != b.SharedLimits || a.LastFault != b.LastFault
}
