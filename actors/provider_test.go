package actors

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/conclave-ai/conclave/bandit"
	"github.com/conclave-ai/conclave/clock"
	"github.com/conclave-ai/conclave/fleet"
	"github.com/conclave-ai/conclave/logging"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/ratelimit"
	"github.com/conclave-ai/conclave/resilience"
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
}

func newProviderHarness(t *testing.T, limits ratelimit.Limits) *providerHarness {
	t.Helper()
	system := actor.NewActorSystem(logging.ActorLogger(zap.NewNop()))
	clk := clock.NewFake(time.Now())
	dir := NewDirectory(system, []fleet.WorkerSpec{}, []string{"groq"}, NewArmBoard(nil, nil, bandit.DefaultPrior, 0), nil)
	deps := &Deps{Log: zap.NewNop(), Clock: clk, Dir: dir, Timers: scheduler.NewTimerScheduler(system.Root), LeaseGrace: 50 * time.Millisecond,
		Breakers:   map[string]resilience.Settings{"groq": {Threshold: 2, Window: time.Minute, OpenFor: 10 * time.Second}},
		RateLimits: map[string]ratelimit.Limits{"groq": limits}}
	h := &providerHarness{t: t, system: system, ref: dir.Provider("groq"), permits: make(chan *messages.Permit, 100), clock: clk}
	h.inbox = system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if p, ok := ctx.Message().(*messages.Permit); ok {
			h.permits <- p
		}
	}))
	h.pid = system.Root.Spawn(actor.PropsFromProducer(NewProviderActor(deps, h.ref)))
	t.Cleanup(func() {
		_ = system.Root.PoisonFuture(h.pid).Wait()
		_ = system.Root.PoisonFuture(h.inbox).Wait()
		system.Shutdown()
	})
	return h
}

func (h *providerHarness) acquire(job string, deadline time.Duration) {
	h.system.Root.Send(h.pid, &messages.Acquire{JobId: job, Model: "m", Tokens: 10, Deadline: ts(time.Now().Add(deadline)), ReplyTo: h.inbox})
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

func TestProviderActorBlocksAtTheLimitUntilRoomReturns(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{Concurrency: 1})
	h.acquire("a", time.Minute)
	first := h.permit()
	if !first.Granted {
		t.Fatalf("first permit %v", first)
	}
	// At 100% the next call waits instead of failing.
	h.acquire("b", time.Minute)
	h.noPermit(50 * time.Millisecond)
	if snap := h.ref.Snapshot(); snap.Waiting != 1 || snap.RateLimitUse != 1 {
		t.Fatalf("snapshot %+v", snap)
	}
	h.system.Root.Send(h.pid, &messages.Outcome{JobId: "a", Model: "m", Generation: first.Generation, Success: true})
	if p := h.permit(); !p.Granted || p.JobId != "b" {
		t.Fatalf("permit %v after the release", p)
	}
	// A waiting call whose deadline passes is refused.
	h.acquire("c", 30*time.Millisecond)
	if p := h.permit(); p.Granted || p.JobId != "c" || p.Reason != "rate_limited" {
		t.Fatalf("permit %v", p)
	}
}

func TestProviderActorBreakerAndProbe(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{})
	for _, job := range []string{"a", "b"} {
		h.acquire(job, time.Minute)
		p := h.permit()
		h.system.Root.Send(h.pid, &messages.Outcome{JobId: job, Model: "m", Generation: p.Generation, ErrorKind: string(resilience.ProviderUnavailable)})
	}
	h.acquire("c", time.Minute)
	if p := h.permit(); p.Granted || p.Reason != "breaker_open" {
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
	// A 429 proves the provider is up: the probe closes the breaker.
	h.system.Root.Send(h.pid, &messages.Outcome{JobId: "probe", Model: "m", Generation: probe.Generation, Probe: true, ErrorKind: string(resilience.RateLimited)})
	h.acquire("after", time.Minute)
	if p := h.permit(); !p.Granted || p.Probe {
		t.Fatalf("permit %v after the probe", p)
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
	h.acquire("a", time.Minute)
	p := h.permit()
	h.system.Root.Send(h.pid, &messages.Outcome{JobId: "a", Model: "gone-model", Generation: p.Generation, ErrorKind: string(resilience.ModelNotFound)})
	h.acquire("b", time.Minute)
	h.permit()
	if !h.ref.Snapshot().Removed["gone-model"] || h.ref.Snapshot().Breaker.State != resilience.Closed {
		t.Fatalf("snapshot %+v", h.ref.Snapshot())
	}
}
