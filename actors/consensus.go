package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/consensus"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/providers"
	"github.com/conclave-ai/conclave/resilience"
	"go.uber.org/zap"
)

// ConsensusActor merges one request's answers. For the rotating strategy it first asks the arbiter model
// for a verdict through a worker, like any other call (permit, dispatch, result), and falls back to the
// local arbiter when the model cannot be reached or does not answer in time. It replies to its parent,
// the coordinator, and stops.
type ConsensusActor struct {
	deps       *Deps
	in         *messages.ConsensusInput
	jobID      string
	permit     *messages.Permit
	asked      time.Time
	cancel     func()
	verdict    *consensus.Verdict
	arbiterErr string
	latency    float64
	decided    bool
}

type arbiterDeadline struct{}

// NewConsensusActor returns the producer of a consensus actor.
func NewConsensusActor(deps *Deps, in *messages.ConsensusInput) actor.Producer {
	return func() actor.Actor { return &ConsensusActor{deps: deps, in: in} }
}

// Receive implements actor.Actor.
func (a *ConsensusActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if a.in.ArbiterModel == "" {
			a.decide(ctx)
			return
		}
		a.jobID = a.in.RequestId + "/arbiter"
		a.asked = time.Now()
		deadline := a.in.Deadline.AsTime()
		a.cancel = a.deps.Timers.SendOnce(max(time.Until(deadline), 0), ctx.Self(), arbiterDeadline{})
		ctx.Send(a.deps.Dir.Provider(a.in.ArbiterProvider).PID, &messages.Acquire{JobId: a.jobID, Model: a.in.ArbiterModel,
			Tokens: int32(a.promptTokens()), Deadline: a.in.Deadline, ReplyTo: ctx.Self()})
	case *messages.Permit:
		if a.decided {
			if m.Granted {
				a.outcome(ctx, m, false, resilience.Cancelled)
			}
			return
		}
		if !m.Granted {
			a.arbiterErr = "permit refused: " + m.Reason
			a.decide(ctx)
			return
		}
		a.permit = m
		cands := make([]string, len(a.in.Candidates))
		for i, c := range a.in.Candidates {
			cands[i] = c.Text
		}
		ctx.Send(a.deps.Dir.Worker(a.in.ArbiterWorker).PID, &messages.Dispatch{ReplyTo: ctx.Self(), Job: &messages.Job{
			RequestId: a.in.RequestId, JobId: a.jobID, Kind: providers.KindArbiter, Model: a.in.ArbiterModel, Provider: a.in.ArbiterProvider,
			Prompt: a.in.Task, Candidates: cands, Category: a.in.Category, MaxTokens: 256, Deadline: a.in.Deadline,
		}})
	case *messages.JobResult:
		if a.decided || m.JobId != a.jobID {
			return
		}
		a.latency = m.LatencyMs
		a.outcome(ctx, a.permit, m.Ok, resilience.Kind(m.ErrorKind))
		if !m.Ok {
			a.arbiterErr = fmt.Sprintf("%s: %s", m.ErrorKind, m.ErrorMessage)
		} else if v, err := consensus.ParseVerdict(m.Text, len(a.in.Candidates)); err != nil {
			a.arbiterErr = err.Error()
		} else {
			a.verdict = &v
		}
		a.decide(ctx)
	case arbiterDeadline:
		a.cancel = nil
		if !a.decided {
			a.arbiterErr = "arbiter did not answer in time"
			if a.permit != nil {
				a.outcome(ctx, a.permit, false, resilience.WorkerTimeout)
				ctx.Send(a.deps.Dir.Worker(a.in.ArbiterWorker).PID, &messages.CancelJob{JobId: a.jobID})
			}
			a.decide(ctx)
		}
	case *actor.Stopping:
		if a.cancel != nil {
			a.cancel()
		}
	}
}

func (a *ConsensusActor) promptTokens() int {
	n := len(a.in.Task)
	for _, c := range a.in.Candidates {
		n += len(c.Text)
	}
	return (n+3)/4 + 256
}

func (a *ConsensusActor) outcome(ctx actor.Context, p *messages.Permit, ok bool, kind resilience.Kind) {
	if p == nil {
		return
	}
	ctx.Send(a.deps.Dir.Provider(a.in.ArbiterProvider).PID, &messages.Outcome{JobId: a.jobID, Model: a.in.ArbiterModel,
		Generation: p.Generation, Probe: p.Probe, Success: ok, ErrorKind: string(kind)})
}

func (a *ConsensusActor) decide(ctx actor.Context) {
	a.decided = true
	if a.cancel != nil {
		a.cancel()
		a.cancel = nil
	}
	resps := make([]consensus.Response, len(a.in.Candidates))
	for i, c := range a.in.Candidates {
		resps[i] = consensus.Response{Model: c.Model, Provider: c.Provider, Worker: c.Worker, Text: c.Text,
			Capability: c.Capability, Recency: c.Recency, Reliability: c.Reliability}
	}
	in := consensus.Input{Strategy: blueprints.Strategy(a.in.Strategy), Responses: resps, Round: a.in.Round, QualityFromAgreement: true}
	if a.verdict != nil {
		in.Arbiter, in.Verdict = a.in.ArbiterModel, a.verdict
	}
	reply := &messages.ConsensusResult{}
	r, err := consensus.Decide(in)
	if err != nil {
		reply.Failure = err.Error()
	} else {
		reply.Answer = r.Answer
		reply.Contributed = r.Contributed
		reply.Weighted = r.Weighted
		reply.Decision = &messages.ArbiterDecision{Strategy: string(r.Strategy), Arbiter: r.Arbiter, Chosen: int32(r.Chosen),
			ChosenModel: resps[r.Chosen].Model, Scores: r.Scores, Agreement: r.Agreement, Disagreement: r.Disagreement,
			Round: a.in.Round, ArbiterError: a.arbiterErr, ArbiterLatencyMs: a.latency}
		if a.in.ArbiterModel != "" {
			a.deps.Log.Info("arbiter consulted", zap.String("event", "arbiter"), zap.String("request_id", a.in.RequestId),
				zap.String("arbiter_model", a.in.ArbiterModel), zap.String("decided_by", r.Arbiter), zap.String("error", a.arbiterErr),
				zap.Float64("latency_ms", a.latency), zap.Duration("waited", time.Since(a.asked)))
		}
	}
	ctx.Send(ctx.Parent(), reply)
	ctx.Stop(ctx.Self())
}
