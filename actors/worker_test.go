package actors

import (
	"context"
	"github.com/conclave-ai/conclave/internal/arms"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/platform/logging"
	"github.com/conclave-ai/conclave/internal/platform/metrics"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// transportFunc is a transport made of a function.
type transportFunc func(ctx context.Context, call providers.Call) (providers.Reply, error)

func (f transportFunc) Run(ctx context.Context, call providers.Call) (providers.Reply, error) {
	return f(ctx, call)
}
func (transportFunc) Close() error { return nil }

// workerHarness runs one worker actor with one slot and collects what it sends back.
type workerHarness struct {
	t       *testing.T
	system  *actor.ActorSystem
	ref     *WorkerRef
	pid     *actor.PID
	inbox   *actor.PID
	results chan *messages.JobResult
	started chan *messages.JobStarted
	deps    *Deps
}

func newWorkerHarness(t *testing.T, transport fleet.Transport) *workerHarness {
	t.Helper()
	system := actor.NewActorSystem(logging.ActorLogger(zap.NewNop()))
	spec := fleet.WorkerSpec{Name: "w", Tier: 1, Slots: 1}
	dir := NewDirectory(system, []fleet.WorkerSpec{spec}, nil, arms.NewBoard(nil, nil, bandit.DefaultPrior, 0), nil)
	deps := &Deps{Log: zap.NewNop(), Clock: clock.Real{}, Dir: dir, Timers: scheduler.NewTimerScheduler(system.Root),
		Catalog: testCatalog(t, "p", "m", "q:n"), Runtime: Runtime{Middleware: []actor.ReceiverMiddleware{crashOn}}, Metrics: metrics.New(metrics.Source{})}
	h := &workerHarness{t: t, system: system, ref: dir.Workers[0], deps: deps, results: make(chan *messages.JobResult, 10), started: make(chan *messages.JobStarted, 10)}
	h.inbox = system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *messages.JobResult:
			h.results <- m
		case *messages.JobStarted:
			h.started <- m
		}
	}))
	h.pid = system.Root.Spawn(deps.Props(NewWorkerActor(deps, h.ref, transport)))
	t.Cleanup(func() {
		_ = system.Root.PoisonFuture(h.pid).Wait()
		_ = system.Root.PoisonFuture(h.inbox).Wait()
		system.Shutdown()
	})
	return h
}

func (h *workerHarness) dispatch(id string, timeout time.Duration) {
	h.system.Root.Send(h.pid, &messages.Dispatch{ReplyTo: h.inbox, Job: &messages.Job{JobId: id, Kind: providers.KindAnswer, Model: "m", Provider: "p",
		Deadline: ts(time.Now().Add(time.Minute)), TimeoutSeconds: timeout.Seconds()}})
}

func (h *workerHarness) result() *messages.JobResult {
	h.t.Helper()
	select {
	case r := <-h.results:
		return r
	case <-time.After(10 * time.Second):
		h.t.Fatal("no result within 10 s")
		return nil
	}
}

func blockUntilCancelled(ctx context.Context, _ providers.Call) (providers.Reply, error) {
	<-ctx.Done()
	return providers.Reply{}, ctx.Err()
}

func TestWorkerReportsTheBudgetOfEachCall(t *testing.T) {
	h := newWorkerHarness(t, transportFunc(func(context.Context, providers.Call) (providers.Reply, error) {
		return providers.Reply{Text: "B"}, nil
	}))
	h.dispatch("a", 2*time.Second)
	select {
	case s := <-h.started:
		if s.JobId != "a" || s.BudgetSeconds != 2 {
			t.Fatalf("started %+v: want the job's timeout as its budget", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no start")
	}
	if r := h.result(); !r.Ok || r.Text != "B" {
		t.Fatalf("result %+v", r)
	}
}

func TestRestartedWorkerFailsItsQueuedAndRunningJobs(t *testing.T) {
	h := newWorkerHarness(t, transportFunc(blockUntilCancelled))
	h.dispatch("running", time.Minute)
	h.dispatch("queued", time.Minute) // one slot: this one waits
	h.system.Root.Send(h.pid, crash{"a bug"})
	got := map[string]string{}
	for i := 0; i < 2; i++ {
		r := h.result()
		got[r.JobId] = r.ErrorKind
	}
	if got["running"] != string(resilience.Internal) || got["queued"] != string(resilience.Internal) {
		t.Fatalf("results %v: a crashed worker must fail every job it held", got)
	}
	// The restarted worker still serves, and does not answer the old jobs twice.
	h.dispatch("after", 10*time.Millisecond)
	if r := h.result(); r.JobId != "after" {
		t.Fatalf("result %+v", r)
	}
}

func TestAHostThatStopsAnsweringTimesOut(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h := newWorkerHarness(t, transportFunc(func(context.Context, providers.Call) (providers.Reply, error) {
		<-release // a dead host notices nothing
		return providers.Reply{}, nil
	}))
	h.dispatch("a", 100*time.Millisecond)
	if r := h.result(); r.ErrorKind != string(resilience.HostTimeout) {
		t.Fatalf("result %+v: want a host timeout", r)
	}
	// The host's breaker counts its timeout and the slot is free.
	waitUntil(t, func() bool { s := h.ref.Snapshot(); return s.Breaker.ErrorsInWindow == 1 && s.InFlight == 0 })
}

func TestAPanickingCallIsAnInternalError(t *testing.T) {
	h := newWorkerHarness(t, transportFunc(func(context.Context, providers.Call) (providers.Reply, error) { panic("adapter bug") }))
	h.dispatch("a", time.Second)
	if r := h.result(); r.ErrorKind != string(resilience.Internal) {
		t.Fatalf("result %+v", r)
	}
	waitUntil(t, func() bool { return h.ref.Snapshot().Failed == 1 })
	if s := h.ref.Snapshot(); s.Breaker.ErrorsInWindow != 0 {
		t.Fatalf("the host was blamed for Conclave's panic: %+v", s.Breaker)
	}
}
