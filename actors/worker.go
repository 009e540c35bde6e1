package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/fleet"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/providers"
	"github.com/conclave-ai/conclave/resilience"
	"go.uber.org/zap"
)

// WorkerActor owns one worker host: its transport (the SSH connection, or the in-process backend), its
// job slots and queue, and its worker breaker. Jobs run in goroutines; their results come back to the
// actor as messages and go on to the coordinator that dispatched them. A job whose host does not
// return it within its budget plus a grace period is answered as a host timeout, so a hung host is
// the host's fault and never the provider's.
type WorkerActor struct {
	deps      *Deps
	ref       *WorkerRef
	transport fleet.Transport
	log       *zap.Logger
	breaker   *resilience.Breaker
	running   map[string]*runningJob
	queue     []*messages.Dispatch
	completed int64
	failed    int64
	health    fleet.Health
	healthErr string
}

// transportHealth is what the transport said of its connection.
type transportHealth struct {
	health fleet.Health
	err    error
}

// healthReporter is a transport that reports its connection's health (SSH).
type healthReporter interface {
	OnHealth(func(fleet.Health, error))
}

// runningJob is a job out on the host.
type runningJob struct {
	base      *messages.JobResult // the result's identity, for results the actor makes itself
	replyTo   *actor.PID
	ticket    resilience.Ticket
	cancel    context.CancelFunc
	watchdog  func()
	cancelled bool // its sender no longer wants it
}

// jobDone carries a finished call back to its worker actor. It stays local to the worker's node, so it
// is a plain struct.
type jobDone struct{ result *messages.JobResult }

// hostSilent is the watchdog of a running job: its budget and grace are over.
type hostSilent struct{ jobID string }

// NewWorkerActor returns the producer of a worker actor.
func NewWorkerActor(deps *Deps, ref *WorkerRef, transport fleet.Transport) actor.Producer {
	return func() actor.Actor { return &WorkerActor{deps: deps, ref: ref, transport: transport} }
}

// Receive implements actor.Actor.
func (w *WorkerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		w.log = w.deps.Log.With(zap.String("worker", w.ref.Spec.Name))
		w.running = map[string]*runningJob{}
		settings := resilience.WorkerBreakerSettings(w.ref.Spec.Name)
		settings.Clock = w.deps.Clock
		settings.OnStateChange = func(t resilience.Transition) {
			w.log.Warn("worker breaker transition", zap.String("event", "breaker_transition"), zap.String("kind", "worker"),
				zap.Stringer("from", t.From), zap.Stringer("to", t.To), zap.Uint64("generation", t.Generation))
		}
		prev := w.ref.Snapshot()
		w.breaker = resilience.ResumeBreaker(settings, prev.Breaker)
		w.completed, w.failed, w.health, w.healthErr = prev.Completed, prev.Failed, prev.Transport, prev.TransportError
		if h, ok := w.transport.(healthReporter); ok {
			self, root := ctx.Self(), ctx.ActorSystem().Root
			h.OnHealth(func(health fleet.Health, err error) { root.Send(self, &transportHealth{health: health, err: err}) })
		}
		w.publish()
	case *transportHealth:
		w.health, w.healthErr = m.health, ""
		if m.err != nil {
			w.healthErr = m.err.Error()
		}
		w.publish()
	case *messages.Dispatch:
		if m.Job == nil || m.ReplyTo == nil {
			// A bug in the sender, not an expected failure: let supervision restart this actor.
			panic("worker: dispatch without a job or a reply address")
		}
		if len(w.running) < max(w.ref.Spec.Slots, 1) {
			w.start(ctx, m)
		} else {
			w.queue = append(w.queue, m)
		}
		w.publish()
	case *messages.CancelJob:
		if r, ok := w.running[m.JobId]; ok {
			r.cancelled = true
			r.cancel() // its call returns cancelled
		}
		for i, d := range w.queue {
			if d.Job.JobId == m.JobId {
				w.queue = append(w.queue[:i], w.queue[i+1:]...)
				break
			}
		}
		w.publish()
	case *jobDone:
		w.finish(ctx, m.result)
	case hostSilent:
		if r, ok := w.running[m.jobID]; ok {
			r.cancel()
			res := copyIdentity(r.base)
			res.ErrorKind, res.ErrorMessage = string(resilience.HostTimeout), "the worker host did not return the call within its budget"
			w.finish(ctx, res)
		}
	case *actor.Restarting:
		w.failAll(ctx, "the worker restarted after a crash")
	case *actor.Stopping:
		for _, r := range w.running {
			r.cancel()
			r.watchdog()
		}
	}
}

func copyIdentity(r *messages.JobResult) *messages.JobResult {
	return &messages.JobResult{JobId: r.JobId, RequestId: r.RequestId, Kind: r.Kind, Model: r.Model, Provider: r.Provider, Worker: r.Worker, Attempt: r.Attempt}
}

// failAll answers every queued and running job as an internal fault: a crashed worker lost them, and
// their coordinators must not wait for their deadlines to learn it.
func (w *WorkerActor) failAll(ctx actor.Context, why string) {
	fail := func(replyTo *actor.PID, res *messages.JobResult) {
		res.ErrorKind, res.ErrorMessage = string(resilience.Internal), why
		ctx.Send(replyTo, res)
	}
	for id, r := range w.running {
		r.cancel()
		r.watchdog()
		fail(r.replyTo, copyIdentity(r.base))
		delete(w.running, id)
	}
	for _, d := range w.queue {
		fail(d.ReplyTo, w.identity(d.Job))
	}
	w.queue = nil
}

func (w *WorkerActor) identity(job *messages.Job) *messages.JobResult {
	return &messages.JobResult{JobId: job.JobId, RequestId: job.RequestId, Kind: job.Kind, Model: job.Model,
		Provider: job.Provider, Worker: w.ref.Spec.Name, Attempt: job.Attempt}
}

// start runs a job: the call gets its timeout from now, cut at its deadline, and the sender learns the
// time it has.
func (w *WorkerActor) start(ctx actor.Context, d *messages.Dispatch) {
	job := d.Job
	result := w.identity(job)
	ticket, err := w.breaker.Allow()
	if err != nil {
		result.ErrorKind, result.ErrorMessage = string(resilience.WorkerUnavailable), "worker breaker open: "+err.Error()
		ctx.Send(d.ReplyTo, result)
		return
	}
	now := time.Now()
	budget := job.Deadline.AsTime().Sub(now)
	if budget <= 0 {
		// Its deadline passed while it waited in the queue: the call was never made.
		w.breaker.Release(ticket)
		result.ErrorKind, result.ErrorMessage = string(resilience.NotSent), "the deadline passed while the job waited for a free slot"
		ctx.Send(d.ReplyTo, result)
		return
	}
	if t := seconds(job.TimeoutSeconds); t > 0 {
		budget = min(budget, t)
	}
	jobCtx, cancel := context.WithDeadline(context.Background(), now.Add(budget))
	r := &runningJob{base: result, replyTo: d.ReplyTo, ticket: ticket, cancel: cancel}
	r.watchdog = w.deps.Timers.SendOnce(budget+w.deps.hostGrace(budget), ctx.Self(), hostSilent{jobID: job.JobId})
	w.running[job.JobId] = r
	ctx.Send(d.ReplyTo, &messages.JobStarted{JobId: job.JobId, BudgetSeconds: budget.Seconds()})
	call := fleet.CallOf(job)
	self, root, transport := ctx.Self(), ctx.ActorSystem().Root, w.transport
	w.deps.run(func() {
		defer cancel()
		began := time.Now()
		reply, err := runCall(jobCtx, transport, call)
		root.Send(self, &jobDone{result: fleet.ResultOf(copyIdentity(result), reply, err, time.Since(began))})
	})
}

// runCall calls the transport, turning a panic in it into an internal error: Conclave's own fault, which
// blames no provider, model or host.
func runCall(ctx context.Context, t fleet.Transport, call providers.Call) (reply providers.Reply, err error) {
	defer func() {
		if v := recover(); v != nil {
			reply, err = providers.Reply{}, &resilience.Error{Kind: resilience.Internal, Model: call.Model, Err: fmt.Errorf("panic in the call: %v", v)}
		}
	}()
	return t.Run(ctx, call)
}

// finish forwards a job's result and starts queued jobs. A result for a job no longer running (its
// host timed out first, or a restart failed it) was answered already and is dropped.
func (w *WorkerActor) finish(ctx actor.Context, res *messages.JobResult) {
	r, ok := w.running[res.JobId]
	if !ok {
		return
	}
	delete(w.running, res.JobId)
	r.watchdog()
	kind := resilience.Kind(res.ErrorKind)
	if res.Ok {
		kind = ""
	}
	record(w.breaker, r.ticket, hostEffect(kind))
	if r.cancelled && res.Ok {
		// A provider that does not honour cancellation: the answer came after nobody wanted it.
		w.log.Info("late reply discarded", zap.String("event", "late_reply"), zap.String("job_id", res.JobId), zap.String("model", res.Model),
			zap.String("provider", res.Provider), zap.Float64("latency_ms", res.LatencyMs))
	}
	if res.Ok {
		w.completed++
	} else {
		w.failed++
	}
	ctx.Send(r.replyTo, res)
	for len(w.queue) > 0 && len(w.running) < max(w.ref.Spec.Slots, 1) {
		next := w.queue[0]
		w.queue = w.queue[1:]
		w.start(ctx, next)
	}
	w.publish()
}

// hostEffect is what a call's end tells its host's breaker (resilience.Blame's host column).
func hostEffect(kind resilience.Kind) messages.Effect {
	return effect(resilience.Blame(resilience.Call{Kind: kind, FullBudget: true}).Host)
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

func (w *WorkerActor) publish() {
	w.ref.snap.Store(&fleet.Snapshot{
		Name: w.ref.Spec.Name, Tier: w.ref.Spec.Tier, Slots: w.ref.Spec.Slots,
		InFlight: len(w.running), Queued: len(w.queue), Breaker: w.breaker.Snapshot(),
		Completed: w.completed, Failed: w.failed, Transport: w.health, TransportError: w.healthErr,
	})
}
