package actors

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/assign"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// WorkerActor owns one worker host: its transport (the SSH connection, or the in-process backend), its
// job slots and queue, and its worker breaker. Jobs run in goroutines; each finishes in place on its
// own goroutine (its slot freed, its result sent to the coordinator that dispatched it, the next
// queued job started), under mu, which the actor's messages take too: a message back to the actor
// for each call cost a delivery and a wake-up. A job whose host does not return it within its budget
// plus a grace period is answered as a host timeout, so a hung host is the host's fault and never the
// provider's.
type WorkerActor struct {
	deps      *Deps
	ref       *WorkerRef
	transport fleet.Transport
	log       *zap.Logger
	self      *actor.PID
	root      *actor.RootContext
	mu        sync.Mutex
	breaker   *resilience.Breaker
	running   map[string]*runningJob
	queue     []*messages.Dispatch
	health    fleet.Health
	healthErr string
	// watch is when the watchdog next looks for silent hosts: the earliest end of a running job's
	// budget and grace. One timer serves every job, since budgets end in about the order jobs start.
	watch alarm
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
	job       *messages.Job
	replyTo   *actor.PID
	ticket    resilience.Ticket
	cancel    context.CancelFunc
	silentAt  time.Time // its budget and grace are over: the host has not returned it
	cancelled bool      // its sender no longer wants it
}

// watchdog is the worker's timer: look for running jobs whose host stayed silent.
type watchdog struct{}

// NewWorkerActor returns the producer of a worker actor.
func NewWorkerActor(deps *Deps, ref *WorkerRef, transport fleet.Transport) actor.Producer {
	return func() actor.Actor { return &WorkerActor{deps: deps, ref: ref, transport: transport} }
}

// Receive implements actor.Actor.
func (w *WorkerActor) Receive(ctx actor.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch m := ctx.Message().(type) {
	case *actor.Started:
		w.self, w.root = ctx.Self(), ctx.ActorSystem().Root
		w.watch = newAlarm(w.root, w.self, watchdog{})
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
		w.health, w.healthErr = fleet.Health(prev.Transport), prev.TransportError
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
		if why := w.checkDispatch(m); why != "" {
			w.deps.Drop(KindWorker, why, m)
			if why == DropUnknownModel || why == DropOtherProvider {
				// Well formed but for a model the catalog no longer holds as its provider's: the call is
				// not made, and its asker hears so rather than waiting for its deadline.
				res := w.identity(m.Job)
				res.ErrorKind, res.ErrorMessage = string(resilience.NotSent), "the model is not in the catalog as this provider's"
				ctx.Send(m.ReplyTo, res)
			}
			return
		}
		if len(w.running) < max(w.ref.Spec.Slots, 1) {
			w.start(m)
		} else {
			w.queue = append(w.queue, m)
			ctx.Send(m.ReplyTo, &messages.JobQueued{JobId: m.Job.JobId, Probe: m.Probe})
		}
		w.publish()
	case *messages.CancelJob:
		if why := checkCancelJob(m); why != "" {
			w.deps.Drop(KindWorker, why, m)
			return
		}
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
	case crashed:
		panic(m.reason)
	case watchdog:
		if w.watch.due() {
			w.silentHosts()
		}
	case *actor.Restarting:
		w.failAll("the worker restarted after a crash")
	case *actor.Stopping:
		// Stopped for good after repeated crashes (at shutdown no job runs): its jobs are answered as
		// Conclave's fault, so that their coordinators retry them elsewhere at once.
		w.failAll("the worker stopped")
	default:
		w.deps.unknown(KindWorker, m)
	}
}

// checkDispatch checks a job (see checkDispatch) and that the worker runs no job of its id: a second
// job of one id would take the first one's place and its answer. A twin still queued is found when it
// starts, without a scan of the queue for every job.
func (w *WorkerActor) checkDispatch(d *messages.Dispatch) string {
	if why := checkDispatch(d, w.deps.catalog(), time.Now()); why != "" {
		return why
	}
	if _, running := w.running[d.Job.JobId]; running {
		return DropDuplicate
	}
	return ""
}

// silentHosts answers the running jobs past their budget and grace as host timeouts, and sets the
// watchdog for the next.
func (w *WorkerActor) silentHosts() {
	now := time.Now()
	for _, r := range w.running {
		if !now.Before(r.silentAt) {
			r.cancel()
			res := w.identity(r.job)
			res.ErrorKind, res.ErrorMessage = string(resilience.HostTimeout), "the worker host did not return the call within its budget"
			w.finish(res, false)
		}
	}
	for _, r := range w.running {
		w.watchBy(r.silentAt)
	}
}

// watchBy makes sure the watchdog looks no later than at.
func (w *WorkerActor) watchBy(at time.Time) {
	w.watch.by(at)
}

// failAll answers every queued and running job as an internal fault: a crashed worker lost them, and
// their coordinators must not wait for their deadlines to learn it.
func (w *WorkerActor) failAll(why string) {
	fail := func(replyTo *actor.PID, res *messages.JobResult) {
		res.ErrorKind, res.ErrorMessage = string(resilience.Internal), why
		w.root.Send(replyTo, res)
	}
	for id, r := range w.running {
		r.cancel()
		fail(r.replyTo, w.identity(r.job))
		delete(w.running, id)
	}
	for _, d := range w.queue {
		fail(d.ReplyTo, w.identity(d.Job))
	}
	w.queue = nil
	w.watch.stop()
	w.publish()
}

func (w *WorkerActor) identity(job *messages.Job) *messages.JobResult {
	return &messages.JobResult{JobId: job.JobId, RequestId: job.RequestId, Kind: job.Kind, Model: job.Model,
		Provider: job.Provider, Worker: w.ref.Spec.Name, Attempt: job.Attempt}
}

// start runs a job: the call gets its timeout from now, cut at its deadline, and the sender learns the
// time it has.
func (w *WorkerActor) start(d *messages.Dispatch) {
	job := d.Job
	if _, running := w.running[job.JobId]; running {
		w.deps.Drop(KindWorker, DropDuplicate, d) // its twin started first
		return
	}
	ticket, err := w.breaker.Allow()
	if err != nil {
		result := w.identity(job)
		result.ErrorKind, result.ErrorMessage = string(resilience.WorkerUnavailable), "worker breaker open: "+err.Error()
		w.root.Send(d.ReplyTo, result)
		return
	}
	now := time.Now()
	budget := job.Deadline.AsTime().Sub(now)
	if budget <= 0 {
		// Its deadline passed while it waited in the queue: the call was never made.
		w.breaker.Release(ticket)
		result := w.identity(job)
		result.ErrorKind, result.ErrorMessage = string(resilience.NotSent), "the deadline passed while the job waited for a free slot"
		w.root.Send(d.ReplyTo, result)
		return
	}
	if t := seconds(job.TimeoutSeconds); t > 0 {
		budget = min(budget, t)
	}
	jobCtx, cancel := context.WithDeadline(context.Background(), now.Add(budget))
	r := &runningJob{job: job, replyTo: d.ReplyTo, ticket: ticket, cancel: cancel, silentAt: now.Add(budget + w.deps.hostGrace(budget))}
	w.running[job.JobId] = r
	w.watchBy(r.silentAt)
	// The answer's bytes count in flight from its worker, which sees it before anyone holds it.
	hold := &answerHold{acct: w.deps.Inflight.Account(job.RequestId)}
	w.root.Send(d.ReplyTo, &messages.JobStarted{JobId: job.JobId, BudgetSeconds: budget.Seconds(), Probe: d.Probe})
	call := fleet.CallOf(job)
	root, transport, result := w.root, w.transport, w.identity(job)
	var onDelta func(providers.Delta)
	if job.Stream {
		// Each piece goes to the job's sender as it comes, from the call's goroutine, in order; a piece
		// the in-flight bound refuses stops the call.
		replyTo, requestID, jobID := d.ReplyTo, job.RequestId, job.JobId
		onDelta = func(p providers.Delta) {
			if piece := fleet.DeltaOf(requestID, jobID, p); hold.piece(piece) {
				root.Send(replyTo, piece)
			} else {
				cancel()
			}
		}
	}
	w.deps.run(func() {
		defer cancel()
		defer w.crashOnPanic()
		began := time.Now()
		reply, err := runCall(jobCtx, transport, call, onDelta)
		res := fleet.ResultOf(result, reply, err, time.Since(began))
		answered := res.Ok
		hold.result(res)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.finish(res, answered)
		if len(w.running) == 0 {
			w.watch.stop() // nothing left to watch: no idle look for silent hosts
		}
	})
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

// crashOnPanic, deferred by a call's goroutine, which finishes the call in place, makes a panic there
// the worker's crash: it is handed to the actor, which crashes with it, so that its supervisor restarts
// it and its jobs are answered, as with a panic in its mailbox. A panic in the transport itself is the
// call's internal error (runCall).
func (w *WorkerActor) crashOnPanic() {
	if v := recover(); v != nil {
		w.root.Send(w.self, crashed{reason: v})
	}
}

// finish forwards a job's result and starts queued jobs. A result for a job no longer running (its
// host timed out first, or a restart failed it) was answered already and is dropped. answered says the
// host returned an answer, though the in-flight bound may have dropped it since: the host did its part.
func (w *WorkerActor) finish(res *messages.JobResult, answered bool) {
	r, ok := w.running[res.JobId]
	if !ok {
		return
	}
	delete(w.running, res.JobId)
	kind := resilience.Kind(res.ErrorKind)
	if answered {
		kind = ""
	}
	w.breaker.Settle(r.ticket, resilience.Blame(resilience.Call{Kind: kind, FullBudget: true}).Host)
	if r.cancelled && answered {
		// A provider that does not honour cancellation: the answer came after nobody wanted it.
		w.log.Info("late reply discarded", zap.String("event", "late_reply"), zap.String("job_id", res.JobId), zap.String("model", res.Model),
			zap.String("provider", res.Provider), zap.Float64("latency_ms", res.LatencyMs))
	}
	if answered {
		w.ref.completed.Add(1)
	} else {
		w.ref.failed.Add(1)
	}
	w.root.Send(r.replyTo, res)
	for len(w.queue) > 0 && len(w.running) < max(w.ref.Spec.Slots, 1) {
		next := w.queue[0]
		w.queue = w.queue[1:]
		w.start(next)
	}
	w.publish()
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

// publish sets the worker's job counters and, when its breaker or its connection changed, a new
// snapshot.
func (w *WorkerActor) publish() {
	w.ref.inFlight.Store(int32(len(w.running)))
	w.ref.queued.Store(int32(len(w.queue)))
	prev, breaker := w.ref.snap.Load(), w.breaker.Snapshot()
	if prev.Breaker == breaker && prev.Transport == string(w.health) && prev.TransportError == w.healthErr {
		return
	}
	w.ref.snap.Store(&assign.Worker{Name: w.ref.Spec.Name, Tier: w.ref.Spec.Tier, Slots: w.ref.Spec.Slots, Breaker: breaker,
		Transport: string(w.health), TransportError: w.healthErr})
}
