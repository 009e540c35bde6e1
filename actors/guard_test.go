package actors

import (
	"context"
	"fmt"
	"github.com/conclave-ai/conclave/internal/arms"
	"math"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/platform/logging"
	"github.com/conclave-ai/conclave/internal/platform/metrics"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// dropRow is a malformed message for an actor, the reason it is dropped, and whether its asker is told
// (a refusal) rather than left without an answer.
type dropRow struct {
	desc   string
	msg    any
	reason string
	told   bool
}

// expectDropped checks that a row's message was counted once more, on the directory and in the metric.
func expectDropped(t *testing.T, deps *Deps, kind string, row dropRow, before int64) {
	t.Helper()
	waitUntil(t, func() bool { return deps.Dir.Dropped(kind, row.reason) == before+1 })
	if got := droppedMetric(t, deps.Metrics, kind, row.reason); got != float64(before+1) {
		t.Fatalf("%s: metric %v, want %d", row.desc, got, before+1)
	}
}

// Every message the provider cannot serve is dropped and counted, and the provider keeps serving:
// after each, a good acquisition is granted; none of them restarts the actor.
func TestTheProviderDropsWhatItCannotServe(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{})
	deadline := ts(time.Now().Add(time.Minute))
	h.acquireModel("held", "m", time.Minute)
	if p := h.permit(); !p.Granted {
		t.Fatalf("permit %v", p)
	}
	generation := h.ref.Snapshot().Breaker.Generation // a restart resumes the breaker in a newer one
	rows := []dropRow{
		{"an acquisition of an invented model", &messages.Acquire{JobId: "j1", Model: "invented", Deadline: deadline, ReplyTo: h.inbox}, DropUnknownModel, true},
		{"an acquisition of another provider's model", &messages.Acquire{JobId: "j2", Model: "x", Deadline: deadline, ReplyTo: h.inbox}, DropOtherProvider, true},
		{"a second acquisition of a job it holds", &messages.Acquire{JobId: "held", Model: "m", Deadline: deadline, ReplyTo: h.inbox}, DropDuplicate, false},
		{"an outcome naming another model than its lease's", &messages.Outcome{JobId: "held", Model: "n"}, DropWrongTarget, false},
		{"another provider's breaker opening", &messages.PeerBreakerOpened{Provider: "anthropic", OpenUntil: deadline}, DropWrongTarget, false},
		{"a breaker opening without a time", &messages.PeerBreakerOpened{Provider: "groq"}, DropNoTime, false},
		{"a message it does not take", &messages.Votes{Category: "general"}, DropUnknownMessage, false},
	}
	for i, row := range rows {
		before := h.deps.Dir.Dropped(KindProvider, row.reason)
		h.system.Root.Send(h.pid, row.msg)
		if row.told {
			if p := h.permit(); p.Granted || p.Reason != PermitModelUnknown {
				t.Fatalf("%s: permit %v, want a refusal naming the model", row.desc, p)
			}
		}
		if p := h.call(string(rune('a'+i)), "m", success, success); !p.Granted {
			t.Fatalf("after %s: permit %v", row.desc, p)
		}
		expectDropped(t, h.deps, KindProvider, row, before)
	}
	// The held lease still settles: the dropped outcome did not touch it.
	h.settle("held", "m", success, success)
	h.sync()
	if s := h.ref.Snapshot(); s.Breaker.Generation != generation || s.Stopped != "" || len(s.Models) != 0 || s.Breaker.State != resilience.Closed {
		t.Fatalf("snapshot %+v: a dropped message changed the provider", s)
	}
	if len(h.permits) != 0 {
		t.Fatalf("%d permits left unread", len(h.permits))
	}
}

func TestTheWorkerDropsWhatItCannotRun(t *testing.T) {
	h := newWorkerHarness(t, transportFunc(func(context.Context, providers.Call) (providers.Reply, error) {
		return providers.Reply{Text: "B"}, nil
	}))
	job := func(id, model, provider string) *messages.Job {
		return &messages.Job{JobId: id, Kind: providers.KindAnswer, Model: model, Provider: provider, Deadline: ts(time.Now().Add(time.Minute)),
			TimeoutSeconds: 5}
	}
	rows := []dropRow{
		{"a dispatch of an invented model", &messages.Dispatch{Job: job("inv", "invented", "p"), ReplyTo: h.inbox}, DropUnknownModel, true},
		{"a dispatch of a model under the wrong provider", &messages.Dispatch{Job: job("n", "n", "p"), ReplyTo: h.inbox}, DropOtherProvider, true},
		{"a message it does not take", &messages.Acquire{}, DropUnknownMessage, false},
	}
	for _, row := range rows {
		before := h.deps.Dir.Dropped(KindWorker, row.reason)
		h.system.Root.Send(h.pid, row.msg)
		if row.told {
			if r := h.result(); r.ErrorKind != string(resilience.NotSent) {
				t.Fatalf("%s: result %+v, want not_sent", row.desc, r)
			}
		}
		h.dispatch("good", time.Second)
		if r := h.result(); !r.Ok || r.JobId != "good" {
			t.Fatalf("after %s: result %+v", row.desc, r)
		}
		expectDropped(t, h.deps, KindWorker, row, before)
	}
}

// actorDeps are the deps of an actor tested alone: a catalog of m and n (provider p), the general
// category, metrics.
func actorDeps(t *testing.T, system *actor.ActorSystem) *Deps {
	t.Helper()
	cat := testCatalog(t, "p", "m", "n", "o")
	board := arms.NewBoard(cat.Load().All(), []string{"general"}, bandit.DefaultPrior, 0)
	dir := NewDirectory(system, []fleet.WorkerSpec{}, nil, board, []string{"general"})
	return &Deps{Log: zap.NewNop(), Clock: clock.Real{}, Dir: dir, Timers: scheduler.NewTimerScheduler(system.Root), Catalog: cat,
		Metrics: metrics.New(metrics.Source{})}
}

func newSystem(t *testing.T) *actor.ActorSystem {
	t.Helper()
	system := actor.NewActorSystem(logging.ActorLogger(zap.NewNop()))
	t.Cleanup(system.Shutdown)
	return system
}

func stop(t *testing.T, system *actor.ActorSystem, pid *actor.PID) {
	t.Helper()
	t.Cleanup(func() { _ = system.Root.PoisonFuture(pid).Wait() })
}

func TestTheArmsWriterDropsRewardsWithoutAnArm(t *testing.T) {
	system := newSystem(t)
	deps := actorDeps(t, system)
	pid := system.Root.Spawn(deps.Props(NewArmsActor(deps)))
	stop(t, system, pid)
	good := func() *messages.Reward { return &messages.Reward{Model: "m", Category: "general", Reward: 1} }
	rows := []dropRow{
		{"an invented model's reward", &messages.Reward{Model: "invented", Category: "general", Reward: 1}, DropUnknownModel, false},
		{"an invented category's reward", &messages.Reward{Model: "m", Category: "invented", Reward: 1}, DropUnknownCategory, false},
		{"a NaN reward", &messages.Reward{Model: "m", Category: "general", Reward: math.NaN()}, DropBadReward, false},
		{"a reward of two, in a batch beside a good one", &messages.Rewards{Rewards: []*messages.Reward{
			{Model: "m", Category: "general", Reward: 2}, good()}}, DropBadReward, false},
		{"a reward without a model", &messages.Reward{Category: "general", Reward: 1}, DropUnknownModel, false},
		{"a message it does not take", &messages.Votes{}, DropUnknownMessage, false},
	}
	pulls := int64(0)
	for _, row := range rows {
		before := deps.Dir.Dropped(KindArm, row.reason)
		system.Root.Send(pid, row.msg)
		if _, batch := row.msg.(*messages.Rewards); batch {
			pulls++
		}
		system.Root.Send(pid, good())
		pulls++
		waitUntil(t, func() bool { return deps.Dir.Arms.Arm("general", "m").Pulls == pulls })
		expectDropped(t, deps, KindArm, row, before)
	}
	if a := deps.Dir.Arms.Arm("general", "m"); a.Alpha != bandit.DefaultPrior.Alpha+float64(pulls) || a.Beta != bandit.DefaultPrior.Beta {
		t.Fatalf("arm %+v: only the good rewards count", a)
	}
}

func TestTheReliabilityEstimatorDropsImpossibleVotes(t *testing.T) {
	system := newSystem(t)
	deps := actorDeps(t, system)
	pid := system.Root.Spawn(deps.Props(NewReliabilityActor(deps)))
	stop(t, system, pid)
	good := &messages.Votes{Category: "general", Models: []string{"m", "n", "o"}, Groups: []int32{0, 0, 1}}
	rows := []dropRow{
		{"votes of an invented model", &messages.Votes{Category: "general", Models: []string{"m", "invented", "o"}, Groups: []int32{0, 0, 1}}, DropUnknownModel, false},
		{"votes of an invented category", &messages.Votes{Category: "invented", Models: good.Models, Groups: good.Groups}, DropUnknownCategory, false},
		{"fewer groups than models", &messages.Votes{Category: "general", Models: good.Models, Groups: []int32{0}}, DropMalformed, false},
		{"a group of two billion", &messages.Votes{Category: "general", Models: good.Models, Groups: []int32{0, 0, math.MaxInt32}}, DropMalformed, false},
		{"a truth for fewer models than voted", &messages.Votes{Category: "general", Models: good.Models, Groups: good.Groups, Right: []bool{true}}, DropMalformed, false},
		{"a message it does not take", &messages.Reward{}, DropUnknownMessage, false},
	}
	for _, row := range rows {
		before := deps.Dir.Dropped(KindReliability, row.reason)
		if _, isVote := row.msg.(*messages.Votes); isVote {
			deps.Dir.Arms.VoteSent()
		}
		system.Root.Send(pid, row.msg)
		deps.Dir.Arms.VoteSent()
		system.Root.Send(pid, good)
		waitUntil(t, func() bool { return !deps.Dir.Arms.VotesPending() })
		expectDropped(t, deps, KindReliability, row, before)
	}
	if deps.Dir.Arms.Estimates() == nil {
		t.Fatal("the good votes were not observed")
	}
	// A well-formed truth is taken, not dropped.
	truth := &messages.Votes{Category: "general", Models: good.Models, Groups: []int32{0, 0, 1}, Right: []bool{true, true, false}}
	before := deps.Dir.Dropped(KindReliability, DropMalformed)
	deps.Dir.Arms.VoteSent()
	system.Root.Send(pid, truth)
	waitUntil(t, func() bool { return !deps.Dir.Arms.VotesPending() })
	if after := deps.Dir.Dropped(KindReliability, DropMalformed); after != before {
		t.Fatalf("a well-formed truth was dropped")
	}
}

// The recorder keeps records and calls of the journal by their ids: one without them is dropped, and
// the recorder keeps recording.
func TestTheRecorderDropsWhatItCannotKeep(t *testing.T) {
	system := newSystem(t)
	deps := actorDeps(t, system)
	pid := system.Root.Spawn(deps.Props(NewRecorderActor(deps, store.NewMemory(100, 0), nil)))
	stop(t, system, pid)
	rows := []dropRow{
		{"a record without its id", &messages.Execution{Task: "t"}, DropNoRequestID, false},
		{"a call without its id", &messages.Call{RequestId: "r0", State: store.CallOpen}, DropMalformed, false},
		{"a call without its request's id", &messages.Call{CallId: "c0", State: store.CallOpen}, DropMalformed, false},
		{"a message it does not take", &messages.Reward{}, DropUnknownMessage, false},
	}
	for i, row := range rows {
		before := deps.Dir.Dropped(KindRecorder, row.reason)
		system.Root.Send(pid, row.msg)
		id := "r" + string(rune('0'+i))
		system.Root.Send(pid, &messages.Execution{RequestId: id, StatusCode: 200})
		res, err := system.Root.RequestFuture(pid, &messages.GetExecution{RequestId: id}, 10*time.Second).Result()
		if err != nil || !res.(*messages.ExecutionLookup).Found {
			t.Fatalf("after %s: %v %v", row.desc, res, err)
		}
		expectDropped(t, deps, KindRecorder, row, before)
	}
	if _, err := system.Root.RequestFuture(pid, &messages.Flush{}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
}

func TestTheProgressListenerTakesOnlyItsRequestsSteps(t *testing.T) {
	system := newSystem(t)
	deps := actorDeps(t, system)
	told := make(chan *messages.Progress, 10)
	pid, done := deps.ListenProgress(system, "r", func(p *messages.Progress) { told <- p })
	rows := []dropRow{
		{"another request's step", &messages.Progress{RequestId: "s", Event: "reply"}, DropWrongTarget, false},
		{"a message it does not take", &messages.Reward{}, DropUnknownMessage, false},
	}
	for _, row := range rows {
		before := deps.Dir.Dropped(KindProgress, row.reason)
		system.Root.Send(pid, row.msg)
		system.Root.Send(pid, &messages.Progress{RequestId: "r", Event: "dispatched", Model: "m"})
		select {
		case p := <-told:
			if p.Event != "dispatched" {
				t.Fatalf("after %s: told %v", row.desc, p)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("after %s: the good step was not told", row.desc)
		}
		expectDropped(t, deps, KindProgress, row, before)
	}
	done()
	if len(told) != 0 {
		t.Fatalf("%d more steps told", len(told))
	}
}

// Drops are logged for the first of each kind and reason, then one in DropLogEvery.
func TestDropsAreLoggedSampled(t *testing.T) {
	system := newSystem(t)
	deps := actorDeps(t, system)
	core, logs := observer.New(zap.InfoLevel)
	deps.Log = zap.New(core)
	for range 2*DropLogEvery + 5 {
		deps.Drop(KindProvider, DropUnknownModel, &messages.Acquire{})
	}
	deps.Drop(KindProvider, DropOtherProvider, &messages.Acquire{})
	lines := logs.FilterField(zap.String("event", "actor_message_dropped")).All()
	if len(lines) != 4 {
		t.Fatalf("%d lines for %d drops, want 4 (the first and every %dth of one reason, the first of another)", len(lines), 2*DropLogEvery+6, DropLogEvery)
	}
	if got := droppedMetric(t, deps.Metrics, KindProvider, DropUnknownModel); got != 2*DropLogEvery+5 {
		t.Fatalf("metric %v", got)
	}
}

// A job id the worker runs already is dropped; one job of an id is answered, once.
func TestTheWorkerRunsOneJobPerID(t *testing.T) {
	h := newWorkerHarness(t, transportFunc(blockUntilCancelled))
	for _, id := range []string{"a", "b", "b", "a"} { // one slot: a runs, the rest wait
		h.dispatch(id, time.Minute)
	}
	waitUntil(t, func() bool { return h.deps.Dir.Dropped(KindWorker, DropDuplicate) == 1 })
	h.system.Root.Send(h.pid, &messages.CancelJob{JobId: "a"})
	if r := h.result(); r.JobId != "a" {
		t.Fatalf("result %+v", r)
	}
	// b runs; its cancellation takes its queued twin too.
	waitUntil(t, func() bool { return h.ref.Snapshot().InFlight == 1 })
	h.system.Root.Send(h.pid, &messages.CancelJob{JobId: "b"})
	if r := h.result(); r.JobId != "b" {
		t.Fatalf("result %+v", r)
	}
	waitUntil(t, func() bool { s := h.ref.Snapshot(); return s.InFlight == 0 && s.Queued == 0 })
	select {
	case r := <-h.results:
		t.Fatalf("a twin was answered: %+v", r)
	default:
	}
}

// Two acquisitions of one job waiting for the rate window: the first is granted, its twin dropped when
// its turn comes, so no second lease replaces the first one's.
func TestTheProviderGrantsOneLeasePerJob(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{Concurrency: 1})
	h.acquire("busy", time.Minute)
	if p := h.permit(); !p.Granted {
		t.Fatalf("permit %v", p)
	}
	h.acquire("twin", time.Minute)
	h.acquire("twin", time.Minute) // waits too: no lease of it yet
	h.noPermit(50 * time.Millisecond)
	h.settle("busy", "m", success, success)
	if p := h.permit(); !p.Granted || p.JobId != "twin" {
		t.Fatalf("permit %v", p)
	}
	waitUntil(t, func() bool { return h.deps.Dir.Dropped(KindProvider, DropDuplicate) == 1 })
	h.settle("twin", "m", success, success)
	h.sync()
	if len(h.permits) != 0 {
		t.Fatalf("the twin was answered too: %v", <-h.permits)
	}
}

// Acquisitions of invented models leave no state behind in the provider: it keeps state only for its
// own catalog models.
func TestInventedModelsGrowNoProviderState(t *testing.T) {
	h := newProviderHarness(t, ratelimit.Limits{})
	var provider *ProviderActor
	produce := NewProviderActor(h.deps, h.ref)
	pid := h.system.Root.Spawn(h.deps.Props(func() actor.Actor {
		a := produce()
		provider = a.(*ProviderActor)
		return a
	}))
	stop(t, h.system, pid)
	sink := h.system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	stop(t, h.system, sink)
	for i := range 1000 {
		h.system.Root.Send(pid, &messages.Acquire{JobId: fmt.Sprint("j", i), Model: fmt.Sprint("invented-", i), Tokens: 1,
			Deadline: ts(time.Now().Add(time.Minute)), ReplyTo: sink})
	}
	// One known model, asked through the same mailbox: once it is answered, the invented ones were seen.
	h.system.Root.Send(pid, &messages.Acquire{JobId: "known", Model: "m", Tokens: 1, Deadline: ts(time.Now().Add(time.Minute)), ReplyTo: h.inbox})
	if p := h.permit(); !p.Granted {
		t.Fatalf("permit %v", p)
	}
	n := provider.front.gate.Models()
	if n != 1 {
		t.Fatalf("the provider holds the state of %d models, want only m's", n)
	}
	if n := h.deps.Dir.Dropped(KindProvider, DropUnknownModel); n != 1000 {
		t.Fatalf("%d counted", n)
	}
}
