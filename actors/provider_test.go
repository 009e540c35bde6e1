package actors

import (
	"context"
	"fmt"
	"github.com/conclave-ai/conclave/internal/arms"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/platform/logging"
	"github.com/conclave-ai/conclave/internal/platform/metrics"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// providerHarness runs one provider actor and collects the permits it sends.
type providerHarness struct {
	t       *testing.T
	system  *actor.ActorSystem
	ref     *ProviderRef
	pid     *actor.PID
	permits chan *messages.Permit
	inbox   *actor.PID
	clock   *clock.Fake
	deps    *Deps
}

func newProviderHarness(t *testing.T, limits ratelimit.Limits, change ...func(*Deps)) *providerHarness {
	t.Helper()
	system := actor.NewActorSystem(logging.ActorLogger(zap.NewNop()))
	clk := clock.NewFake(time.Now())
	dir := NewDirectory(system, []fleet.WorkerSpec{}, []string{"groq"}, arms.NewBoard(nil, nil, bandit.DefaultPrior, 0), nil)
	deps := &Deps{Log: zap.NewNop(), Clock: clk, Dir: dir, Timers: scheduler.NewTimerScheduler(system.Root),
		Admission: Admission{LeaseGrace: 50 * time.Millisecond,
			Breakers:   map[string]resilience.Settings{"groq": {Threshold: 2, Window: time.Minute, OpenFor: 10 * time.Second}},
			RateLimits: map[string]ratelimit.Limits{"groq": limits}},
		Runtime: Runtime{Middleware: []actor.ReceiverMiddleware{crashOn}},
		Catalog: testCatalog(t, "groq", "m", "ma", "mb", "m1", "m2", "sync-model", "busy", "gone-model", "gone", "other", "bad", "good", "elsewhere:x"),
		Metrics: metrics.New(metrics.Source{})}
	for _, c := range change {
		c(deps)
	}
	h := &providerHarness{t: t, system: system, ref: dir.Provider("groq"), permits: make(chan *messages.Permit, 100), clock: clk}
	h.inbox = system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if p, ok := ctx.Message().(*messages.Permit); ok {
			h.permits <- p
		}
	}))
	h.deps = deps
	h.pid = system.Root.Spawn(deps.Props(NewProviderActor(deps, h.ref)))
	t.Cleanup(func() {
		_ = system.Root.PoisonFuture(h.pid).Wait()
		_ = system.Root.PoisonFuture(h.inbox).Wait()
		system.Shutdown()
	})
	return h
}

func (h *providerHarness) acquire(job string, deadline time.Duration) {
	h.acquireModel(job, "m", deadline)
}

func (h *providerHarness) acquireModel(job, model string, deadline time.Duration) {
	h.system.Root.Send(h.pid, &messages.Acquire{JobId: job, Model: model, Tokens: 10, Deadline: ts(time.Now().Add(deadline)), ReplyTo: h.inbox})
}

// acquireBy asks for a permit whose request stops waiting for rate limits at queueBy (zero: unset).
func (h *providerHarness) acquireBy(job, model string, deadline time.Duration, queueBy time.Time) {
	a := &messages.Acquire{JobId: job, Model: model, Tokens: 10, Deadline: ts(time.Now().Add(deadline)), ReplyTo: h.inbox}
	if !queueBy.IsZero() {
		a.QueueBy = ts(queueBy)
	}
	h.system.Root.Send(h.pid, a)
}

func (h *providerHarness) settle(job, model string, provider, modelEffect messages.Effect) {
	h.system.Root.Send(h.pid, &messages.Outcome{JobId: job, Model: model, ProviderEffect: provider, ModelEffect: modelEffect})
}

// call acquires a permit for a model and settles it with the effects.
func (h *providerHarness) call(job, model string, provider, modelEffect messages.Effect) *messages.Permit {
	h.t.Helper()
	h.acquireModel(job, model, time.Minute)
	p := h.permit()
	if p.Granted {
		h.settle(job, model, provider, modelEffect)
	}
	return p
}

func (h *providerHarness) permit() *messages.Permit {
	h.t.Helper()
	select {
	case p := <-h.permits:
		return p
	case <-time.After(10 * time.Second):
		h.t.Fatal("no permit within 10 s")
		return nil
	}
}

func (h *providerHarness) noPermit(wait time.Duration) {
	h.t.Helper()
	select {
	case p := <-h.permits:
		h.t.Fatalf("unexpected permit %v", p)
	case <-time.After(wait):
	}
}

// sync waits until the actor processed everything sent before.
func (h *providerHarness) sync() {
	h.t.Helper()
	h.acquireModel("sync", "sync-model", time.Minute)
	p := h.permit()
	if p.Granted {
		h.settle("sync", "sync-model", neutral, neutral)
	}
}

const (
	neutral = messages.Effect_EFFECT_NEUTRAL
	success = messages.Effect_EFFECT_SUCCESS
	failure = messages.Effect_EFFECT_FAILURE
)

func TestProviderActorBlocksAtTheLimitUntilRoomReturns(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{Concurrency: 1})
	h.acquire("a", time.Minute)
	if first := h.permit(); !first.Granted {
		t.Fatalf("first permit %v", first)
	}
	// At 100% the next call waits instead of failing.
	h.acquire("b", time.Minute)
	h.noPermit(50 * time.Millisecond)
	if snap := h.ref.Snapshot(); snap.Waiting != 1 || snap.RateLimitUse != 1 {
		t.Fatalf("snapshot %+v", snap)
	}
	h.settle("a", "m", success, success)
	if p := h.permit(); !p.Granted || p.JobId != "b" {
		t.Fatalf("permit %v after the release", p)
	}
	// A waiting call whose deadline passes is refused.
	h.acquire("c", 30*time.Millisecond)
	if p := h.permit(); p.Granted || p.JobId != "c" || p.Reason != "rate_limited" {
		t.Fatalf("permit %v", p)
	}
	// A waiting call its asker gave up on leaves the queue, and the permit it never got is not counted.
	h.acquire("d", time.Minute)
	h.settle("d", "m", neutral, neutral)
	h.settle("b", "m", neutral, neutral)
	h.acquire("e", time.Minute)
	if p := h.permit(); !p.Granted || p.JobId != "e" {
		t.Fatalf("permit %v: the withdrawn acquisition still held its place", p)
	}
}

// A wait for the window's next free moment survives an earlier wake-up: here a lease that expires
// before the window frees, whose wake-up must not leave the waiting call to its own deadline.
func TestProviderActorAsksAgainWhenTheWindowFrees(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{RequestsPerMinute: 1})
	h.acquire("a", 100*time.Millisecond) // its lease, and the actor's wake-up, end at 150 ms
	if p := h.permit(); !p.Granted {
		t.Fatalf("first permit %v", p)
	}
	h.clock.Advance(ratelimit.Window - 300*time.Millisecond) // the window frees 300 ms from now
	h.acquire("w", time.Minute)
	h.noPermit(20 * time.Millisecond)
	h.clock.Advance(time.Second)
	if p := h.permit(); !p.Granted || p.JobId != "w" {
		t.Fatalf("permit %v once the window had room", p)
	}
}

func TestProviderActorBreakerAndProbe(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{})
	for _, job := range []string{"a", "b"} {
		h.call(job, "m"+job, failure, neutral) // provider-wide faults
	}
	if p := h.call("c", "m", neutral, neutral); p.Granted || p.Reason != "breaker_open" || p.RetryAfterSeconds <= 0 {
		t.Fatalf("permit %v while open", p)
	}
	if h.ref.Snapshot().Breaker.State != resilience.Open || h.ref.Snapshot().Faults24h != 2 {
		t.Fatalf("snapshot %+v", h.ref.Snapshot())
	}
	h.clock.Advance(10 * time.Second)
	h.acquire("probe", time.Minute)
	h.acquire("second", time.Minute)
	probe, second := h.permit(), h.permit()
	if !probe.Granted || !probe.Probe || second.Granted || second.Reason != "probe_in_flight" {
		t.Fatalf("half-open permits %v and %v", probe, second)
	}
	// The probe never reached the provider (its host refused it): the breaker stays half-open, and
	// admits the next probe at once.
	h.settle("probe", "m", neutral, neutral)
	h.sync()
	if st := h.ref.Snapshot().Breaker.State; st != resilience.HalfOpen {
		t.Fatalf("breaker %s after a probe that never reached the provider", st)
	}
	h.call("probe2", "m", success, success)
	h.sync()
	if st := h.ref.Snapshot().Breaker.State; st != resilience.Closed {
		t.Fatalf("breaker %s after a good probe", st)
	}
}

func TestProviderActorEjectsOneFailingModel(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{})
	for i := 0; i < 5; i++ {
		h.call(fmt.Sprint("bad", i), "bad", neutral, failure)
		h.call(fmt.Sprint("good", i), "good", success, success) // the others answer between its faults
	}
	if p := h.call("x", "bad", neutral, neutral); p.Granted || p.Reason != "model_ejected" || p.RetryAfterSeconds <= 0 {
		t.Fatalf("permit %v for an ejected model", p)
	}
	if p := h.call("y", "good", success, success); !p.Granted {
		t.Fatalf("permit %v for a healthy model of the same provider", p)
	}
	snap := h.ref.Snapshot()
	if snap.Breaker.State != resilience.Closed || snap.Models["bad"].Reason != providerstate.ModelEjected {
		t.Fatalf("snapshot %+v", snap)
	}
	if reason, until := snap.ModelStatus("bad", h.clock.Now()); reason != bandit.ModelEjected || until.IsZero() {
		t.Fatalf("model status %v %v", reason, until)
	}
	// Its ejection ends: one probe decides.
	h.clock.Advance(31 * time.Second)
	if p := h.call("probe", "bad", success, success); !p.Granted || !p.Probe {
		t.Fatalf("probe permit %v", p)
	}
}

func TestProviderActorTripsWhenFaultsSpreadAcrossModels(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{}) // the harness's provider breaker trips at 2
	h.call("a", "m1", neutral, failure)
	h.call("b", "m2", neutral, failure)
	h.sync()
	if st := h.ref.Snapshot().Breaker.State; st != resilience.Open {
		t.Fatalf("breaker %s after consecutive faults of two models", st)
	}
}

func TestProviderActorBlocksOneModelOnItsOwn429(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{})
	h.acquireModel("a", "busy", time.Minute)
	h.permit()
	h.system.Root.Send(h.pid, &messages.Outcome{JobId: "a", Model: "busy", BlockModelSeconds: 20})
	// An acquisition whose deadline comes before the reset is refused at once, with the wait.
	h.acquireModel("b", "busy", time.Second)
	if p := h.permit(); p.Granted || p.Reason != "model_rate_limited" || p.RetryAfterSeconds != 20 {
		t.Fatalf("permit %v for the blocked model", p)
	}
	if p := h.call("c", "other", success, success); !p.Granted {
		t.Fatalf("permit %v for another model of the provider", p)
	}
	h.clock.Advance(20 * time.Second)
	if p := h.call("d", "busy", success, success); !p.Granted {
		t.Fatalf("permit %v after the reset", p)
	}
}

func TestProviderActorReclaimsAbandonedPermits(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{Concurrency: 1})
	h.acquire("abandoned", 100*time.Millisecond) // its asker never reports an outcome
	if p := h.permit(); !p.Granted {
		t.Fatalf("permit %v", p)
	}
	h.acquire("next", time.Minute)
	if p := h.permit(); !p.Granted || p.JobId != "next" {
		t.Fatalf("the abandoned permit was not reclaimed: %v", p)
	}
}

func TestProviderActorRemovesModelsNotFound(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{})
	h.acquireModel("a", "gone-model", time.Minute)
	h.permit()
	h.system.Root.Send(h.pid, &messages.Outcome{JobId: "a", Model: "gone-model", ModelEffect: failure, RemoveModel: true})
	if p := h.call("b", "gone-model", neutral, neutral); p.Granted || p.Reason != "model_removed" {
		t.Fatalf("permit %v for a removed model", p)
	}
	if h.ref.Snapshot().Models["gone-model"].Reason != providerstate.ModelRemoved || h.ref.Snapshot().Breaker.State != resilience.Closed {
		t.Fatalf("snapshot %+v", h.ref.Snapshot())
	}
}

func TestProviderActorRestartKeepsItsState(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{})
	h.acquireModel("held", "m", time.Minute)
	h.permit() // a call admitted before the crash
	h.acquireModel("gone", "gone", time.Minute)
	h.permit()
	h.system.Root.Send(h.pid, &messages.Outcome{JobId: "gone", Model: "gone", RemoveModel: true})
	h.call("a", "m1", failure, neutral)
	h.call("b", "m2", failure, neutral)
	h.sync()
	before := h.ref.Snapshot().Breaker
	if before.State != resilience.Open {
		t.Fatalf("breaker %+v", before)
	}
	h.system.Root.Send(h.pid, crash{"a bug"}) // the actor restarts
	waitUntil(t, func() bool { return h.ref.Snapshot().Breaker.Generation > before.Generation })
	after := h.ref.Snapshot()
	if after.Breaker.State != resilience.Open || !after.Breaker.OpenUntil.Equal(before.OpenUntil) || after.Models["gone"].Reason != providerstate.ModelRemoved {
		t.Fatalf("after the restart %+v, before %+v", after, before)
	}
	// The outcome of the call admitted before the crash cannot count in the restarted breaker.
	h.settle("held", "m", failure, neutral)
	h.clock.Advance(10 * time.Second)
	if p := h.call("probe", "m", success, success); !p.Granted || !p.Probe {
		t.Fatalf("probe after the restart: %v", p)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Overload is shed, not held: an acquisition waits for the rate limits only while their window opens
// by its queue bound (the request's, max_queue_seconds from its arrival, or its deadline), and is
// refused at once, with the wait, when it opens later. Each permit must come within the harness's
// 10 s, so a refusal that came only when a one-minute window freed would fail the test.
func TestProviderActorShedsWhatItCannotAdmitInTime(t *testing.T) {
	tests := []struct {
		desc     string
		limits   ratelimit.Limits
		maxQueue time.Duration
		// fill takes what the limits allow before the acquisition.
		fill     func(h *providerHarness)
		deadline time.Duration
		queueBy  time.Duration // from now; zero: unset
		// held says the permit must not come at once (it waits until its bound).
		held     bool
		granted  bool
		reason   string
		min, max float64 // retry_after_seconds
	}{
		{"the window frees after max_queue_seconds: refused at once with the wait", ratelimit.Limits{RequestsPerMinute: 1}, 0,
			func(h *providerHarness) { h.call("a", "m", success, success) }, time.Hour, 0, false, false, "rate_limited", 55, 61},
		{"the window frees after the request's queue bound", ratelimit.Limits{RequestsPerMinute: 1}, time.Hour,
			func(h *providerHarness) { h.call("a", "m", success, success) }, time.Hour, 2 * time.Second, false, false, "rate_limited", 55, 61},
		{"the window frees after the deadline", ratelimit.Limits{RequestsPerMinute: 1}, time.Hour,
			func(h *providerHarness) { h.call("a", "m", success, success) }, time.Second, 0, false, false, "rate_limited", 55, 61},
		{"no known moment (concurrency): it waits until its bound, then hears to come back in a second", ratelimit.Limits{Concurrency: 1},
			300 * time.Millisecond, func(h *providerHarness) { h.acquire("a", time.Minute); h.permit() }, time.Hour, 0, true, false, "rate_limited", 1, 1},
		{"the request's bound is past and the provider is full: refused at once", ratelimit.Limits{Concurrency: 1}, 0,
			func(h *providerHarness) { h.acquire("a", time.Minute); h.permit() }, time.Hour, -time.Second, false, false, "rate_limited", 1, 1},
		{"the request's bound is past but the provider has room: granted", ratelimit.Limits{Concurrency: 2}, 0,
			func(h *providerHarness) { h.acquire("a", time.Minute); h.permit() }, time.Hour, -time.Second, false, true, "", 0, 0},
		{"the model's own block lasts beyond the bound: refused at once with the block", ratelimit.Limits{}, 0,
			func(h *providerHarness) {
				h.acquire("a", time.Minute)
				h.permit()
				h.system.Root.Send(h.pid, &messages.Outcome{JobId: "a", Model: "m", BlockModelSeconds: 20})
			}, time.Hour, 0, false, false, "model_rate_limited", 20, 20},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			h := newProviderHarness(t, tt.limits, func(d *Deps) { d.MaxQueue = tt.maxQueue })
			tt.fill(h)
			var queueBy time.Time
			if tt.queueBy != 0 {
				queueBy = time.Now().Add(tt.queueBy)
			}
			h.acquireBy("x", "m", tt.deadline, queueBy)
			if tt.held {
				h.noPermit(50 * time.Millisecond)
			}
			p := h.permit()
			if p.JobId != "x" || p.Granted != tt.granted || p.Reason != tt.reason || p.RetryAfterSeconds < tt.min || p.RetryAfterSeconds > tt.max {
				t.Fatalf("permit %v, want granted %v, reason %q, retry after %g-%g s", p, tt.granted, tt.reason, tt.min, tt.max)
			}
			if snap := h.ref.Snapshot(); snap.Breaker.State != resilience.Closed || snap.Faults24h != 0 {
				t.Fatalf("snapshot %+v: a refusal for a rate limit blames nobody", snap)
			}
			waitUntil(t, func() bool { return h.ref.Snapshot().Waiting == 0 }) // nothing left in the queue
		})
	}
}

// slowLimiter is a limiter that does I/O (as Redis does): each reservation waits for the test to let
// it answer.
type slowLimiter struct {
	ratelimit.Limiter
	answer chan struct{}
}

func (l slowLimiter) Reserve(ctx context.Context, id string, estimate int) (ratelimit.Decision, error) {
	select {
	case <-l.answer:
	case <-ctx.Done():
		return ratelimit.Decision{}, ctx.Err()
	}
	return l.Limiter.Reserve(ctx, id, estimate)
}

// An acquisition waiting while the limiter answers another is waiting its turn, not for a rate limit:
// past its queue bound, it is still served when the limiter has room.
func TestWaitingForTheLimitersAnswerIsNotARateLimit(t *testing.T) {
	answer := make(chan struct{})
	h := newProviderHarness(t, ratelimit.Limits{RequestsPerMinute: 100}, func(d *Deps) {
		d.Limiters = func(_ string, l ratelimit.Limits) ratelimit.Limiter {
			return slowLimiter{Limiter: ratelimit.NewLocal(l, d.Clock, 0), answer: answer}
		}
	})
	past := time.Now().Add(-time.Second)
	h.acquireBy("a", "m", time.Minute, past)
	h.acquireBy("b", "m", time.Minute, past)
	h.noPermit(50 * time.Millisecond)
	answer <- struct{}{}
	answer <- struct{}{}
	for range 2 {
		if p := h.permit(); !p.Granted {
			t.Fatalf("permit %v: want both granted", p)
		}
	}
}

// A model blocked for less than the queue bound is waited for, then admitted.
func TestProviderActorWaitsForAModelBlockThatEndsInTime(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{})
	h.acquire("a", time.Minute)
	h.permit()
	h.system.Root.Send(h.pid, &messages.Outcome{JobId: "a", Model: "m", BlockModelSeconds: 0.2})
	h.acquire("b", time.Minute)
	h.noPermit(20 * time.Millisecond)
	h.clock.Advance(time.Second) // the block is over on the limits' clock; the wake-up comes on the wall's
	if p := h.permit(); !p.Granted || p.JobId != "b" {
		t.Fatalf("permit %v once the block ended", p)
	}
}

// panicsOnce is a limiter that never blocks and panics on its first reservation.
type panicsOnce struct {
	ratelimit.Limiter
	panicked atomic.Bool
}

func (*panicsOnce) NeverBlocks() {}

func (l *panicsOnce) Reserve(ctx context.Context, id string, estimate int) (ratelimit.Decision, error) {
	if l.panicked.CompareAndSwap(false, true) {
		panic("a limiter's bug")
	}
	return l.Limiter.Reserve(ctx, id, estimate)
}

// A panic in an acquisition made in place fails its asker and restarts the provider's actor from its
// published state, as a panic in its mailbox would: what it may have half changed is not used again.
func TestAPanicInPlaceRestartsTheProvider(t *testing.T) {
	lim := &panicsOnce{}
	h := newProviderHarness(t, ratelimit.Limits{}, func(d *Deps) {
		d.Limiters = func(_ string, l ratelimit.Limits) ratelimit.Limiter {
			lim.Limiter = ratelimit.NewLocal(l, d.Clock, 0)
			return lim
		}
	})
	waitUntil(t, func() bool { return h.ref.live.Load() != nil })
	first := h.ref.live.Load()
	gen := h.ref.Snapshot().Breaker.Generation
	acquire := func(job string) {
		h.ref.Acquire(h.system.Root, &messages.Acquire{JobId: job, Model: "m", Tokens: 10, Deadline: ts(time.Now().Add(time.Minute)), ReplyTo: h.inbox})
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the asker did not see the panic")
			}
		}()
		acquire("a")
	}()
	waitUntil(t, func() bool {
		live := h.ref.live.Load()
		return live != nil && live != first && h.ref.Snapshot().Breaker.Generation > gen
	})
	acquire("b")
	if p := h.permit(); !p.Granted || p.JobId != "b" {
		t.Fatalf("after the restart: %v", p)
	}
}
