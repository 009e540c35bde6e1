package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/slots"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// WorkerActor owns one worker host: its transport (the SSH connection, or the in-process backend) and
// its job slots (internal/slots: the jobs running and waiting, the worker breaker, the watchdog for
// silent hosts). It takes dispatches and cancellations, and remakes the slots after a crash. Jobs run
// in goroutines; each ends in place on its own goroutine (its slot freed, its result sent to the
// coordinator that dispatched it, the next waiting job started) through the slots, which do their own
// locking: a message back to the actor for each call cost a delivery and a wake-up. A job whose host
// does not return it within its budget plus a grace period is answered as a host timeout, so a hung
// host is the host's fault and never the provider's.
type WorkerActor struct {
	deps      *Deps
	ref       *WorkerRef
	transport fleet.Transport
	parts     *workerParts // made at the start, with the slots
}

// healthReporter is a transport that reports its connection's health (SSH).
type healthReporter interface {
	OnHealth(func(fleet.Health, error))
}

// NewWorkerActor returns the producer of a worker actor.
func NewWorkerActor(deps *Deps, ref *WorkerRef, transport fleet.Transport) actor.Producer {
	return func() actor.Actor { return &WorkerActor{deps: deps, ref: ref, transport: transport} }
}

// Receive implements actor.Actor.
func (w *WorkerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		w.started(ctx)
	case *messages.Dispatch:
		w.parts.dispatch(m)
	case *messages.CancelJob:
		w.parts.host.Cancel(m.JobId)
	case crashed:
		panic(m.reason)
	case *actor.Restarting:
		w.ref.live.Store(nil)
		w.failAll("the worker restarted after a crash")
	case *actor.Stopping:
		// Stopped for good after repeated crashes (at shutdown no job runs): its jobs are answered as
		// Conclave's fault, so that their coordinators retry them elsewhere at once.
		w.ref.live.Store(nil)
		w.failAll("the worker stopped")
	default:
		w.deps.unknown(KindWorker, m)
	}
}

// started makes the worker's slots, its breaker resumed from what it last published.
func (w *WorkerActor) started(ctx actor.Context) {
	p := &workerParts{deps: w.deps, ref: w.ref, transport: w.transport, self: ctx.Self(), root: ctx.ActorSystem().Root,
		log: w.deps.Log.With(zap.String("worker", w.ref.Spec.Name))}
	settings := resilience.WorkerBreakerSettings(w.ref.Spec.Name)
	settings.Clock = w.deps.Clock
	settings.OnStateChange = func(t resilience.Transition) {
		p.log.Warn("worker breaker transition", zap.String("event", "breaker_transition"), zap.String("kind", "worker"),
			zap.Stringer("from", t.From), zap.Stringer("to", t.To), zap.Uint64("generation", t.Generation))
	}
	prev := w.ref.Snapshot()
	p.host = slots.New(slots.Config{Slots: w.ref.Spec.Slots, Breaker: resilience.ResumeBreaker(settings, prev.Breaker),
		Grace: w.deps.hostGrace, Shell: p})
	w.parts = p
	if h, ok := w.transport.(healthReporter); ok {
		h.OnHealth(w.ref.publishHealth) // a published snapshot, safe from the transport's goroutine
	}
	p.host.Changed()
	w.ref.live.Store(p)
}

// dispatch offers a job to the slots, on the granting gate's goroutine or the actor's. A job for a
// model the catalog no longer holds as its provider's is not made, and its asker hears so rather than
// waiting for its deadline.
func (w *workerParts) dispatch(d *messages.Dispatch) {
	if d.GetJob() == nil || d.GetReplyTo() == nil {
		w.deps.Drop(KindWorker, DropMalformed, d) // no call to make, or nobody to answer
		return
	}
	if why := checkModel(w.deps.catalog(), d.Job.Provider, d.Job.Model); why != "" {
		w.deps.Drop(KindWorker, why, d)
		w.fail(d, resilience.NotSent, "the model is not in the catalog as this provider's")
		return
	}
	if !w.host.Offer(&slots.Job{ID: d.Job.JobId, Deadline: d.Job.Deadline.AsTime(), Timeout: seconds(d.Job.TimeoutSeconds), Ask: d}) {
		w.deps.Drop(KindWorker, DropDuplicate, d) // a second job of one id would take the first one's answer
	}
}

// failAll answers every queued and running job as an internal fault: a crashed worker lost them, and
// their coordinators must not wait for their deadlines to learn it.
func (w *WorkerActor) failAll(why string) {
	for _, j := range w.parts.host.FailAll() {
		w.parts.fail(j.Ask.(*messages.Dispatch), resilience.Internal, why)
	}
}

// identity is a job's result before its call says anything.
func identity(ref *WorkerRef, job *messages.Job) *messages.JobResult {
	return &messages.JobResult{JobId: job.JobId, RequestId: job.RequestId, Kind: job.Kind, Model: job.Model,
		Provider: job.Provider, Worker: ref.Spec.Name, Attempt: job.Attempt}
}

// workerParts are what a worker's jobs need, and the way in to its slots while its actor is up; fixed
// once the actor made its slots, so that the gates and the jobs' goroutines read no actor state.
type workerParts struct {
	deps      *Deps
	ref       *WorkerRef
	transport fleet.Transport
	log       *zap.Logger
	self      *actor.PID
	root      *actor.RootContext
	host      *slots.Host
}

// fail answers a job its call did not answer, with why.
func (w *workerParts) fail(d *messages.Dispatch, kind resilience.Kind, why string) {
	res := identity(w.ref, d.Job)
	res.ErrorKind, res.ErrorMessage = string(kind), why
	w.root.Send(d.ReplyTo, res)
}

// The slots.Shell of a worker: it carries out what the slots decide, under their lock, by sending the
// jobs' messages and starting their calls.

func (w *workerParts) Queued(j *slots.Job) {
	d := j.Ask.(*messages.Dispatch)
	w.root.Send(d.ReplyTo, &messages.JobQueued{JobId: d.Job.JobId, Probe: d.Probe})
}

func (w *workerParts) Refuse(j *slots.Job, kind resilience.Kind, why string) {
	w.fail(j.Ask.(*messages.Dispatch), kind, why)
}

func (w *workerParts) TimedOut(j *slots.Job) {
	w.ref.failed.Add(1)
	w.fail(j.Ask.(*messages.Dispatch), resilience.HostTimeout, "the worker host did not return the call within its budget")
}

func (w *workerParts) Duplicate(j *slots.Job) {
	w.deps.Drop(KindWorker, DropDuplicate, j.Ask.(*messages.Dispatch)) // its twin started first
}

func (w *workerParts) Changed(running, queued int, breaker resilience.Snapshot) {
	w.ref.publishJobs(running, queued, breaker)
}

// Start tells the job's sender the time it has and makes the call on a goroutine of its own; the call
// is built there, off the slots' lock (and the granting gate's).
func (w *workerParts) Start(ctx context.Context, cancel context.CancelFunc, j *slots.Job, budget time.Duration) {
	d := j.Ask.(*messages.Dispatch)
	w.root.Send(d.ReplyTo, &messages.JobStarted{JobId: d.Job.JobId, BudgetSeconds: budget.Seconds(), Probe: d.Probe})
	w.deps.run(func() {
		defer cancel()
		defer w.crashOnPanic()
		w.call(ctx, cancel, d)
	})
}

// call makes a job's call and ends the job with its result. Its answer's bytes count in flight from its
// worker, which sees it before anyone holds it; streamed, each piece goes to the job's sender as it
// comes, in order, and a piece the in-flight bound refuses stops the call.
func (w *workerParts) call(ctx context.Context, cancel context.CancelFunc, d *messages.Dispatch) {
	job := d.Job
	hold := w.deps.Inflight.Account(job.RequestId).Answer()
	var onDelta func(providers.Delta)
	if job.Stream {
		onDelta = func(p providers.Delta) {
			if piece := fleet.DeltaOf(job.RequestId, job.JobId, p); hold.Piece(deltaBytes(piece)) {
				w.root.Send(d.ReplyTo, piece)
			} else {
				cancel()
			}
		}
	}
	began := time.Now()
	reply, err := runCall(ctx, w.transport, fleet.CallOf(job), onDelta)
	res := fleet.ResultOf(identity(w.ref, job), reply, err, time.Since(began))
	answered := res.Ok
	if kind := hold.Result(res.Ok, answerBytes(res)); kind != "" {
		refuseAnswer(res, kind, w.deps.Inflight.Limit())
	}
	w.finish(res, answered)
}

// finish ends a job in its slots and forwards its result. A result for a job no longer running (its
// host timed out first, or a restart failed it) was answered already and is dropped. answered says the
// host returned an answer, though the in-flight bound may have dropped it since: the host did its part.
func (w *workerParts) finish(res *messages.JobResult, answered bool) {
	j, cancelled, ok := w.host.Finish(res.JobId, answered, resilience.Kind(res.ErrorKind))
	if !ok {
		return
	}
	if cancelled && answered {
		// A provider that does not honour cancellation: the answer came after nobody wanted it.
		w.log.Info("late reply discarded", zap.String("event", "late_reply"), zap.String("job_id", res.JobId), zap.String("model", res.Model),
			zap.String("provider", res.Provider), zap.Float64("latency_ms", res.LatencyMs))
	}
	if answered {
		w.ref.completed.Add(1)
	} else {
		w.ref.failed.Add(1)
	}
	w.root.Send(j.Ask.(*messages.Dispatch).ReplyTo, res)
}

// runCall calls the transport (streaming when onDelta is set), turning a panic in it into an internal
// error: Conclave's own fault, which blames no provider, model or host.
func runCall(ctx context.Context, t fleet.Transport, call providers.Call, onDelta func(providers.Delta)) (reply providers.Reply, err error) {
	defer func() {
		if v := recover(); v != nil {
			reply, err = providers.Reply{}, &resilience.Error{Kind: resilience.Internal, Model: call.Model, Err: fmt.Errorf("panic in the call: %v", v)}
		}
	}()
	if onDelta != nil {
		return fleet.Stream(ctx, t, call, onDelta)
	}
	return t.Run(ctx, call)
}

// crashOnPanic, deferred by a call's goroutine, which ends the call in place, makes a panic there the
// worker's crash: it is handed to the actor, which crashes with it, so that its supervisor restarts it
// and its jobs are answered, as with a panic in its mailbox. A panic in the transport itself is the
// call's internal error (runCall).
func (w *workerParts) crashOnPanic() {
	if v := recover(); v != nil {
		w.root.Send(w.self, crashed{reason: v})
	}
}

func effect(e resilience.Effect) messages.Effect {
	switch e {
	case resilience.Success:
		return messages.Effect_EFFECT_SUCCESS
	case resilience.Failure:
		return messages.Effect_EFFECT_FAILURE
	}
	return messages.Effect_EFFECT_NEUTRAL
}
