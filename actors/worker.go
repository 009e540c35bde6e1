package actors

import (
	"context"
	"errors"
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
// actor as messages and go on to the coordinator that dispatched them.
type WorkerActor struct {
	deps      *Deps
	ref       *WorkerRef
	transport fleet.Transport
	log       *zap.Logger
	breaker   *resilience.Breaker
	running   map[string]context.CancelFunc
	queue     []*messages.Dispatch
	completed int64
	failed    int64
}

// jobDone carries a finished job back to its worker actor. It stays local to the worker's node, so it
// is a plain struct; it is self-contained so that a restarted worker can still forward it.
type jobDone struct {
	result    *messages.JobResult
	replyTo   *actor.PID
	hostFault bool
	ticket    resilience.Ticket
}

// NewWorkerActor returns the producer of a worker actor.
func NewWorkerActor(deps *Deps, ref *WorkerRef, transport fleet.Transport) actor.Producer {
	return func() actor.Actor { return &WorkerActor{deps: deps, ref: ref, transport: transport} }
}

// Receive implements actor.Actor.
func (w *WorkerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		w.log = w.deps.Log.With(zap.String("worker", w.ref.Spec.Name))
		w.running = map[string]context.CancelFunc{}
		settings := resilience.WorkerBreakerSettings(w.ref.Spec.Name)
		settings.Clock = w.deps.Clock
		settings.OnStateChange = func(t resilience.Transition) {
			w.log.Warn("worker breaker transition", zap.String("event", "breaker_transition"), zap.String("kind", "worker"),
				zap.Stringer("from", t.From), zap.Stringer("to", t.To), zap.Uint64("generation", t.Generation))
		}
		w.breaker = resilience.NewBreaker(settings)
		prev := w.ref.Snapshot()
		w.completed, w.failed = prev.Completed, prev.Failed
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
		if cancel, ok := w.running[m.JobId]; ok {
			cancel()
		}
		for i, d := range w.queue {
			if d.Job.JobId == m.JobId {
				w.queue = append(w.queue[:i], w.queue[i+1:]...)
				break
			}
		}
		w.publish()
	case *jobDone:
		w.finish(ctx, m)
	case *actor.Stopping:
		for _, cancel := range w.running {
			cancel()
		}
	}
}

func (w *WorkerActor) start(ctx actor.Context, d *messages.Dispatch) {
	job := d.Job
	result := &messages.JobResult{JobId: job.JobId, RequestId: job.RequestId, Kind: job.Kind, Model: job.Model,
		Provider: job.Provider, Worker: w.ref.Spec.Name, Attempt: job.Attempt}
	ticket, err := w.breaker.Allow()
	if err != nil {
		result.ErrorKind, result.ErrorMessage = string(resilience.SSHRefused), "worker breaker open: "+err.Error()
		ctx.Send(d.ReplyTo, result)
		return
	}
	deadline := job.Deadline.AsTime()
	jobCtx, cancel := context.WithDeadline(context.Background(), deadline)
	w.running[job.JobId] = cancel
	call := providers.Call{RequestID: job.RequestId, JobID: job.JobId, Kind: job.Kind, Model: job.Model, Provider: job.Provider,
		Prompt: job.Prompt, Candidates: job.Candidates, Category: job.Category, MaxTokens: int(job.MaxTokens), Attempt: int(job.Attempt)}
	self, root, replyTo, transport := ctx.Self(), ctx.ActorSystem().Root, d.ReplyTo, w.transport
	go func() {
		defer cancel()
		began := time.Now()
		reply, err := transport.Run(jobCtx, call)
		result.LatencyMs = ms(time.Since(began))
		if reply.RateLimit != nil {
			result.RateLimit = rateLimitInfo(reply.RateLimit)
		}
		if err != nil {
			kind := fleet.ClassifyError(err)
			result.ErrorKind, result.ErrorMessage = string(kind), err.Error()
			var re *resilience.Error
			if errors.As(err, &re) {
				result.HttpStatus = int32(re.Status)
				result.RetryAfterSeconds = re.RetryAfter.Seconds()
			}
		} else {
			result.Ok = true
			result.Text = reply.Text
			result.Usage = &messages.Usage{InputTokens: int32(reply.Usage.InputTokens), OutputTokens: int32(reply.Usage.OutputTokens)}
		}
		// Host faults (refused or dropped connections) count against this worker's breaker; provider
		// faults are the provider actor's business.
		hostFault := err != nil && (result.ErrorKind == string(resilience.SSHRefused) || result.ErrorKind == string(resilience.NetworkTimeout))
		root.Send(self, &jobDone{result: result, replyTo: replyTo, hostFault: hostFault, ticket: ticket})
	}()
}

func (w *WorkerActor) finish(ctx actor.Context, m *jobDone) {
	delete(w.running, m.result.JobId)
	w.breaker.Record(m.ticket, !m.hostFault)
	if m.result.Ok {
		w.completed++
	} else {
		w.failed++
	}
	ctx.Send(m.replyTo, m.result)
	for len(w.queue) > 0 && len(w.running) < max(w.ref.Spec.Slots, 1) {
		next := w.queue[0]
		w.queue = w.queue[1:]
		w.start(ctx, next)
	}
	w.publish()
}

func (w *WorkerActor) publish() {
	w.ref.snap.Store(&fleet.Snapshot{
		Name: w.ref.Spec.Name, Tier: w.ref.Spec.Tier, Slots: w.ref.Spec.Slots,
		InFlight: len(w.running), Queued: len(w.queue), Breaker: w.breaker.Snapshot(),
		Completed: w.completed, Failed: w.failed,
	})
}
