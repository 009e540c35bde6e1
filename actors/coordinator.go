package actors

import (
	"github.com/conclave-ai/conclave/internal/platform/alarm"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/collect"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/plan"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// CoordinatorActor runs one request through steps 2 to 10 of the pipeline. It is a thin shell: the
// plan (steps 2-5), the collection state machine (6-7) and feedback (9) are pure decisions; the actor
// times and logs each, interprets the machine's effects as messages and timers, hands the answers to a
// consensus actor (8), assembles the record and answers its caller exactly once (10). After answering
// it changes nothing: the record it handed over is never touched again.
type CoordinatorActor struct {
	deps    *Deps
	req     *messages.RouteRequest
	replyTo *actor.PID
	seq     uint64
	rng     *rand.Rand
	log     *zap.Logger
	exec    *messages.Execution
	began   time.Time
	// origin is the request's receipt, from which the record counts the moments a trace shows.
	origin  time.Time
	world   plan.World
	plan    *plan.Plan
	machine *collect.Machine
	// audit marks an adaptive request that asks every model.
	audit bool

	due           alarm.Alarm // the collection machine's next due moment
	dispatchStart time.Time
	undispatched  int // initial jobs not yet given their permit

	answers []*collect.Job // in candidate order
	// round is the rotating arbiter's turn, taken off the actor while the models answer (it may ask
	// Redis); waiting holds the consensus input when collection ends before the turn comes.
	round          *uint64
	waiting        *messages.ConsensusInput
	waitingModels  []string
	consensus      *actor.PID
	consensusStart time.Time
	answered       bool
	// jobIDs are the jobs' names, by number.
	jobIDs      []string
	collectByTS *timestamppb.Timestamp
	queueByTS   *timestamppb.Timestamp
	// jobLines counts the per-call lines logged (replies, retries, denied permits, replacements); past
	// JobLogBudget they are counted instead, so no request logs without bound.
	jobLines int
	// consulting is true while the request waits for its consensus answer.
	consulting bool
	// streaming is the job whose answer is relayed to the caller as it comes (the first to send a
	// piece); broken says it failed after its first piece, so nothing can take its place.
	streaming string
	broken    bool
	// structure is the request's output format and tools, compiled once when it starts; ballots are
	// its answers' ballots once the consensus has read them (nil for answers of text).
	structure *consensus.Structure
	ballots   []*messages.Ballot
	// relay, for a direct call hosted by its caller, takes the pieces of a streamed answer in place of
	// the request's stream_to.
	relay func(*messages.Delta)
}

// wake is the coordinator's one timer: a tick of the collection machine is due.
type wake struct{}

// turnTaken brings the rotating arbiter's turn to the coordinator.
type turnTaken struct{ round uint64 }

// NewCoordinatorActor returns the producer of the coordinator of one request.
func NewCoordinatorActor(deps *Deps, req *messages.RouteRequest, replyTo *actor.PID, seq uint64) actor.Producer {
	return func() actor.Actor {
		return &CoordinatorActor{deps: deps, req: req, replyTo: replyTo, seq: seq}
	}
}

// host is where a coordinator runs: an actor's context, or a direct call's caller (direct.go). It is
// the part of actor.Context a coordinator uses.
type host interface {
	Self() *actor.PID
	Send(pid *actor.PID, message any)
	Spawn(props *actor.Props) *actor.PID
	Stop(pid *actor.PID)
	ActorSystem() *actor.ActorSystem
}

// Receive implements actor.Actor.
func (c *CoordinatorActor) Receive(ctx actor.Context) { c.receive(ctx, ctx.Message()) }

// receive takes one message, wherever the coordinator runs.
func (c *CoordinatorActor) receive(ctx host, msg any) {
	if c.answered {
		return // the record is handed over: nothing may change it
	}
	if why := c.check(msg); why != "" {
		c.deps.Drop(KindCoordinator, why, msg)
		if _, ok := msg.(*messages.ConsensusResult); ok && c.consulting {
			// The answer it waited for is unusable, and no other comes: the request fails now.
			c.consulting = false
			c.fail(ctx, resilience.Internal, "consensus answered a malformed result ("+why+")", 0, nil)
		}
		return
	}
	switch m := msg.(type) {
	case *actor.Started:
		c.start(ctx)
	case *messages.Permit: // a refusal: a grant comes from the worker the provider dispatched the job to
		seq, _ := jobOf(m.JobId, c.req.RequestId)
		c.onPermit(ctx, time.Now(), seq, m)
	case *messages.JobQueued:
		seq, _ := jobOf(m.JobId, c.req.RequestId)
		c.granted(ctx, time.Now(), seq, m.Probe)
	case *messages.JobStarted:
		seq, _ := jobOf(m.JobId, c.req.RequestId)
		now := time.Now()
		c.granted(ctx, now, seq, m.Probe)
		c.apply(ctx, c.machine.Started(now, seq, seconds(m.BudgetSeconds)))
	case *messages.JobResult:
		c.onResult(ctx, m)
	case *messages.Delta:
		c.onDelta(ctx, m)
	case wake:
		if c.due.Due() {
			c.apply(ctx, c.machine.Tick(time.Now()))
		}
	case *messages.CancelRequest:
		c.stop(ctx, resilience.Kind(m.Code))
	case turnTaken:
		c.round = &m.round
		if in := c.waiting; in != nil {
			c.waiting = nil
			c.consult(ctx, in, c.waitingModels)
		}
	case *messages.ConsensusResult:
		c.onConsensus(ctx, m)
	case *actor.Stopping:
		c.due.Stop()
	default:
		c.deps.unknown(KindCoordinator, m)
	}
}

// jobID names a job across the actors: the request's id and the job's number, made once.
func (c *CoordinatorActor) jobID(j *collect.Job) string {
	for len(c.jobIDs) <= j.Seq { // jobs are numbered in the order they are made
		c.jobIDs = append(c.jobIDs, c.req.RequestId+"/"+strconv.Itoa(len(c.jobIDs)))
	}
	return c.jobIDs[j.Seq]
}

// apply interprets the collection machine's effects.
func (c *CoordinatorActor) apply(ctx host, effects []collect.Effect) {
	for _, e := range effects {
		j := e.Job
		switch e.Kind {
		case collect.Acquire:
			if c.unreachable(ctx, j) {
				continue
			}
			// The provider dispatches the job itself once it grants the permit.
			c.deps.Dir.Provider(j.Slot.Provider).Acquire(ctx, &messages.Acquire{JobId: c.jobID(j), Model: j.Slot.Model,
				Tokens: int32(c.plan.ContextTokens), Deadline: c.collectBy(), QueueBy: c.queueBy(), ReplyTo: ctx.Self(),
				Dispatch: &messages.Dispatch{ReplyTo: ctx.Self(), Job: c.job(j)}, DispatchTo: c.deps.Dir.Worker(j.Worker).PID})
		case collect.Dispatch:
			c.dispatched(ctx, j)
		case collect.Settle:
			if p := c.deps.Dir.Provider(j.Slot.Provider); p.Stopped() == "" {
				p.Settle(ctx, c.outcome(j, e.Record))
			}
		case collect.Cancel:
			if w := c.deps.Dir.Worker(j.Worker); w.Stopped() == "" {
				w.Cancel(ctx, c.jobID(j))
			}
		case collect.Wake:
			c.due.Set(e.At)
		case collect.Retried:
			rs := c.machine.Retries()
			r := rs[len(rs)-1]
			c.jobLog("retry", zap.String("event", "retry"), zap.String("model", r.Model), zap.String("provider", r.Provider),
				zap.String("from_worker", r.FromWorker), zap.Int("attempt", r.Attempt), zap.String("kind", string(r.Kind)),
				zap.Duration("delay", r.Delay), zap.String("outcome", r.Outcome))
			c.progress(ctx, func() *messages.Progress {
				return &messages.Progress{Event: "retry", Model: r.Model, Provider: r.Provider, Worker: r.FromWorker, Attempt: int32(r.Attempt),
					ErrorKind: string(r.Kind), DelayMs: ms(r.Delay), Status: r.Outcome}
			})
		case collect.Finish:
			c.finishCollection(ctx)
			return
		}
	}
}

// unreachable answers a job whose provider or worker actor is stopped for good (after the job was
// planned) on their behalf, through the actor's own mailbox: a refused permit, or a result that sends
// the job to another worker. It reports whether it did.
func (c *CoordinatorActor) unreachable(ctx host, j *collect.Job) bool {
	id := c.jobID(j)
	if c.deps.Dir.Provider(j.Slot.Provider).Stopped() != "" {
		ctx.Send(ctx.Self(), &messages.Permit{JobId: id, Reason: PermitProviderStopped})
		return true
	}
	if c.deps.Dir.Worker(j.Worker).Stopped() != "" {
		ctx.Send(ctx.Self(), &messages.JobResult{JobId: id, RequestId: c.req.RequestId, Kind: providers.KindAnswer, Model: j.Slot.Model,
			Provider: j.Slot.Provider, Worker: j.Worker, Attempt: int32(j.Attempt), ErrorKind: string(resilience.WorkerUnavailable),
			ErrorMessage: "the worker is stopped"})
		return true
	}
	return false
}

// progress tells the request's listener, if it has one, of a step; the step is built only then.
func (c *CoordinatorActor) progress(ctx host, step func() *messages.Progress) {
	if c.req.ProgressTo == nil {
		return
	}
	p := step()
	p.RequestId, p.ElapsedMs = c.req.RequestId, ms(time.Since(c.began))
	ctx.Send(c.req.ProgressTo, p)
}

// progressOf reports the planning step whose phase just ended: classification, then selection.
func (c *CoordinatorActor) progressOf(ctx host, phase *float64) {
	switch phase {
	case &c.exec.Phases.ClassifyMs:
		c.progress(ctx, func() *messages.Progress { return execution.Classified(c.exec.Classification) })
	case &c.exec.Phases.SelectMs:
		c.progress(ctx, func() *messages.Progress { return execution.Selected(c.plan) })
	}
}

// dispatched notes a job its provider dispatched: the first word from its worker says the permit was
// granted.
func (c *CoordinatorActor) dispatched(ctx host, j *collect.Job) {
	if j.Initial {
		if c.undispatched--; c.undispatched == 0 {
			c.exec.Phases.DispatchMs = ms(time.Since(c.dispatchStart))
		}
	}
	// Debug: the assignment line names the workers, and each reply its worker and attempt.
	if ce := c.log.Check(zap.DebugLevel, "job dispatched"); ce != nil {
		ce.Write(zap.String("event", "dispatch"), zap.Int("job", j.Seq), zap.String("model", j.Slot.Model),
			zap.String("provider", j.Slot.Provider), zap.String("worker", j.Worker), zap.Int("attempt", j.Attempt), zap.Bool("probe", j.Probe))
	}
	c.progress(ctx, func() *messages.Progress {
		return &messages.Progress{Event: "dispatched", Model: j.Slot.Model, Provider: j.Slot.Provider, Worker: j.Worker, Attempt: int32(j.Attempt)}
	})
}

func (c *CoordinatorActor) onPermit(ctx host, now time.Time, seq int, p *messages.Permit) {
	if p.Granted {
		c.granted(ctx, now, seq, p.Probe)
		return
	}
	if j := c.machine.Job(seq); j != nil {
		c.jobLog("permit denied", zap.String("event", "permit_denied"), zap.Int("job", seq), zap.String("model", j.Slot.Model),
			zap.String("provider", j.Slot.Provider), zap.String("reason", p.Reason), zap.Float64("retry_after_seconds", p.RetryAfterSeconds))
	}
	c.apply(ctx, c.machine.Permit(now, seq, collect.Permit{Reason: p.Reason, RetryAfter: seconds(p.RetryAfterSeconds)}))
}

// granted applies a job's permit, once: the machine takes a grant only while the job waits for it.
func (c *CoordinatorActor) granted(ctx host, now time.Time, seq int, probe bool) {
	if j := c.machine.Job(seq); j != nil && probe {
		j.Probe = true
	}
	c.apply(ctx, c.machine.Permit(now, seq, collect.Permit{Granted: true}))
}

// onDelta relays a piece of a streamed answer to the caller: the pieces of the first job to stream
// only, so that a retry's answer is never interleaved with a broken one.
func (c *CoordinatorActor) onDelta(ctx host, d *messages.Delta) {
	if c.streaming == "" {
		c.streaming = d.JobId
	}
	switch {
	case d.JobId != c.streaming || c.broken:
	case c.relay != nil:
		c.relay(d)
	default:
		ctx.Send(c.req.StreamTo, d)
	}
}

// streams reports whether the request's answer is relayed to its caller as it comes.
func (c *CoordinatorActor) streams() bool { return c.req.StreamTo != nil || c.relay != nil }

func (c *CoordinatorActor) onResult(ctx host, r *messages.JobResult) {
	seq, _ := jobOf(r.JobId, c.req.RequestId)
	now := time.Now()
	if r.JobId == c.streaming && !r.Ok && !c.broken {
		// Its caller holds part of an answer already: another model's, or a retry's, cannot follow it.
		c.broken = true
		// Its result's effects come first: a failure that is not retried finishes the request, and Stop
		// then has nothing left to do. The machine reuses its effect buffer, so they are copied.
		settled := slices.Clone(c.machine.Result(now, seq, collect.Reply{Kind: resilience.Kind(r.ErrorKind), Scope: resilience.ParseScope(r.ErrorScope), Ref: r}))
		c.apply(ctx, settled)
		c.apply(ctx, c.machine.Stop(now, resilience.Kind(r.ErrorKind)))
		return
	}
	c.granted(ctx, now, seq, false) // a result the worker gave without starting the call (its breaker is open)
	reply := collect.Reply{OK: r.Ok, Text: r.Text, ToolCalls: len(r.ToolCalls), Kind: resilience.Kind(r.ErrorKind), Scope: resilience.ParseScope(r.ErrorScope),
		RetryAfter: seconds(r.RetryAfterSeconds), Ref: r}
	effects := c.machine.Result(now, seq, reply)
	if j := c.machine.Job(seq); j != nil && j.Record != nil && j.Record.Ref == r { // a reply that settled its call, not a late one
		c.logReply(seq, r, j.Record)
		c.progress(ctx, func() *messages.Progress {
			return &messages.Progress{Event: "reply", Model: r.Model, Provider: r.Provider, Worker: r.Worker, Attempt: int32(j.Attempt),
				Status: string(j.Record.Status), LatencyMs: r.LatencyMs, ErrorKind: string(j.Record.Kind)}
		})
	}
	c.apply(ctx, effects)
}

// outcome is the message that settles a job's permit with its provider. A job settled while it waited
// for its permit may have been dispatched by the provider meanwhile: it is stopped.
func (c *CoordinatorActor) outcome(j *collect.Job, rec *collect.Record) *messages.Outcome {
	r, _ := rec.Ref.(*messages.JobResult)
	o := Settlement(c.jobID(j), j.Slot.Model, rec.Verdict, rec.RetryAfter, r)
	o.Stop = rec.WaitedForPermit
	return o
}

// stop ends the request for a reason outside it: its caller left, or the shutdown timeout ended.
func (c *CoordinatorActor) stop(ctx host, kind resilience.Kind) {
	if c.machine == nil {
		return // still planning: the request answers on its own in a moment
	}
	if c.consensus != nil {
		ctx.Stop(c.consensus) // it gives its arbiter's permit back
		c.fail(ctx, kind, execution.StopMessage(kind), 0, nil)
		return
	}
	c.apply(ctx, c.machine.Stop(time.Now(), kind))
}
