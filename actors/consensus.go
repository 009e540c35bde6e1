package actors

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// ConsensusActor merges the answers of one request whose strategy asks an arbiter model (rotating,
// pairwise): it asks the arbiter for a verdict through a worker, like any other call (permit, dispatch,
// result), and falls back to the local arbiter when the model cannot be reached or does not answer
// before the request's deadline. It replies to its parent, the coordinator, and stops; stopped early,
// it gives its permit back. The other strategies are decided by a call in the coordinator (decision).
type ConsensusActor struct {
	deps *Deps
	in   *messages.ConsensusInput
	// st is the request's format, compiled by its coordinator; shown are the candidates the arbiter
	// may choose among (all of them, or a structured request's valid ones) and judged what it sees.
	st         *consensus.Structure
	shown      []int
	judged     []consensus.Judged
	jobID      string
	asked      time.Time
	cancel     func()
	verdict    *consensus.Verdict
	arbiterErr string
	latency    float64
	usage      *messages.Usage // the arbiter call's
	cost       int64           // nano-dollars
	decided    bool
	settled    bool // the arbiter's permit (or acquisition) has been settled
	// synthesis reads the answer the arbiter writes as it streams, for the coordinator to relay.
	synthesis consensus.SynthesisStream
	// started is when the arbiter's worker said its call started; errKind the call's error class when it
	// failed or was cut by the deadline. Both are for the record's account of the call (its trace).
	started time.Time
	errKind string
}

type arbiterDeadline struct{}

// NewConsensusActor returns the producer of a consensus actor; st is in's format as its coordinator
// compiled it (nil: compiled here).
func NewConsensusActor(deps *Deps, in *messages.ConsensusInput, st *consensus.Structure) actor.Producer {
	return func() actor.Actor { return &ConsensusActor{deps: deps, in: in, st: st} }
}

// Receive implements actor.Actor.
func (a *ConsensusActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *messages.Permit: // a refusal
		if a.ownJob(m) {
			a.refused(ctx, m)
		}
	case *messages.JobResult:
		if a.ownJob(m) {
			a.result(ctx, m)
		}
	case *messages.Delta:
		if a.ownJob(m) {
			a.relay(ctx, m)
		}
	case *messages.JobStarted:
		// The worker's word that the arbiter's call started: its result will tell how it went.
		if m.JobId == a.jobID && a.started.IsZero() {
			a.started = time.Now()
		}
	case *messages.JobQueued:
		// The arbiter's call waits for a slot of its worker: its start or its result will tell.
	case arbiterDeadline:
		a.cancel = nil
		if !a.decided {
			a.arbiterErr = "arbiter did not answer in time"
			if !a.started.IsZero() {
				a.errKind = string(resilience.Cancelled) // the call is stopped as the decision is made
			}
			a.decide(ctx)
		}
	case *actor.Stopping:
		a.withdraw(ctx)
		if a.cancel != nil {
			a.cancel()
		}
	default:
		a.deps.unknown(KindConsensus, m)
	}
}

// start shows the answers to the arbiter and asks for its permit; with fewer than two answers to
// judge, or an arbiter that cannot be reached, the vote decides at once.
func (a *ConsensusActor) start(ctx actor.Context) {
	if a.st == nil {
		st, err := structureOf(a.in)
		if err != nil {
			ctx.Send(ctx.Parent(), &messages.ConsensusResult{Failure: err.Error()})
			ctx.Stop(ctx.Self())
			return
		}
		a.st = st
	}
	a.jobID = execution.ArbiterCall(a.in.RequestId)
	a.asked = time.Now()
	deadline := a.in.Deadline.AsTime()
	a.cancel = a.deps.Timers.SendOnce(max(time.Until(deadline), 0), ctx.Self(), arbiterDeadline{})
	kind, _ := consensus.ParseKind(a.in.AnswerKind)
	a.shown, a.judged = consensus.ArbiterView(responses(a.in), kind, a.st)
	why := a.unreachable()
	if len(a.shown) < 2 {
		why = "fewer than two valid answers to judge" // nothing to choose between: the vote decides without the arbiter's cost
	}
	if why != "" {
		a.settled = true // nothing was asked
		a.arbiterErr = why
		a.decide(ctx)
		return
	}
	// A grant sends the job to the arbiter's worker, whose word says it was granted.
	a.deps.Dir.Provider(a.in.ArbiterProvider).Acquire(ctx, &messages.Acquire{JobId: a.jobID, Model: a.in.ArbiterModel,
		Tokens: int32(a.promptTokens()), Deadline: a.in.Deadline, QueueBy: a.in.QueueBy, ReplyTo: ctx.Self(),
		Dispatch: &messages.Dispatch{ReplyTo: ctx.Self(), Job: a.arbiterJob()}, DispatchTo: a.deps.Dir.Worker(a.in.ArbiterWorker).PID})
}

// ownJob says whether a message names the arbiter's job; one of another job is dropped.
func (a *ConsensusActor) ownJob(m interface{ GetJobId() string }) bool {
	if m.GetJobId() != a.jobID {
		a.deps.Drop(KindConsensus, DropWrongTarget, m)
		return false
	}
	return true
}

// relay hands the synthesis the arbiter writes to the coordinator as it comes, until the decision is
// made.
func (a *ConsensusActor) relay(ctx actor.Context, m *messages.Delta) {
	if text := a.synthesis.Feed(m.Text); text != "" && !a.decided {
		ctx.Send(ctx.Parent(), &messages.Delta{RequestId: a.in.RequestId, JobId: a.jobID, Text: text})
	}
}

// refused takes the provider's refusal of the arbiter's permit: the vote decides.
func (a *ConsensusActor) refused(ctx actor.Context, m *messages.Permit) {
	if a.decided || m.Granted {
		return // withdrawn when the decision was made; a grant went to the worker with the job
	}
	a.settled = true // nothing to give back
	a.arbiterErr = "permit refused: " + m.Reason
	a.decide(ctx)
}

// result takes the arbiter's answer: its call is settled, its verdict read, and the decision made.
func (a *ConsensusActor) result(ctx actor.Context, m *messages.JobResult) {
	if a.decided {
		return // came after the decision: the call was given back already
	}
	a.latency, a.usage, a.cost = m.LatencyMs, m.Usage, m.CostNanos
	kind := resilience.Kind(m.ErrorKind)
	if m.Ok {
		kind = ""
	}
	// The arbiter's time is Conclave's choice, not the model's: its timeout blames nobody.
	a.settle(ctx, resilience.Blame(resilience.Call{Kind: kind, Scope: resilience.ParseScope(m.ErrorScope)}), m)
	if !m.Ok {
		a.arbiterErr, a.errKind = fmt.Sprintf("%s: %s", m.ErrorKind, m.ErrorMessage), m.ErrorKind
	} else if v, err := consensus.ParseVerdict(m.Text, len(a.shown)); err != nil {
		a.arbiterErr = err.Error()
	} else {
		v = v.Expand(a.shown, len(a.in.Candidates))
		a.verdict = &v
	}
	a.decide(ctx)
}

// unreachable says why the arbiter cannot be asked at all (its provider's or its worker's actor is
// stopped for good), or "": the local arbiter decides at once instead of waiting for the deadline.
func (a *ConsensusActor) unreachable() string {
	if p := a.deps.Dir.Provider(a.in.ArbiterProvider); p == nil || p.Stopped() != "" {
		return "the arbiter's provider is stopped"
	}
	if w := a.deps.Dir.Worker(a.in.ArbiterWorker); w == nil || w.Stopped() != "" {
		return "the arbiter's worker is stopped"
	}
	return ""
}

// withdraw gives back the arbiter's permit (or its waiting acquisition) unused and stops its call.
func (a *ConsensusActor) withdraw(ctx actor.Context) {
	if a.jobID == "" || a.settled {
		return
	}
	a.settle(ctx, resilience.Verdict{}, nil)
	a.deps.Dir.Worker(a.in.ArbiterWorker).Cancel(ctx, a.jobID)
}

// settle ends the arbiter's permit with its provider: the call's verdict, or nothing at all.
func (a *ConsensusActor) settle(ctx actor.Context, v resilience.Verdict, r *messages.JobResult) {
	if a.settled {
		return
	}
	a.settled = true
	var retryAfter time.Duration
	if r != nil {
		retryAfter = seconds(r.RetryAfterSeconds)
	}
	a.deps.Dir.Provider(a.in.ArbiterProvider).Settle(ctx, Settlement(a.jobID, a.in.ArbiterModel, v, retryAfter, r))
}

// arbiterJob asks the arbiter model for its verdict: the task and the responses it may choose among
// with their weighted scores, an answer constrained to the verdict's schema, at temperature 0.
func (a *ConsensusActor) arbiterJob() *messages.Job {
	strategy := blueprints.Strategy(a.in.Strategy)
	texts := make([]string, len(a.judged))
	for i, j := range a.judged {
		texts[i] = j.Text
	}
	system, prompt := consensus.ArbiterPrompt(strategy, a.in.Task, a.judged)
	maxTokens, upstream := a.deps.modelLimits(a.in.ArbiterModel)
	zero := 0.0
	return &messages.Job{RequestId: a.in.RequestId, KeyId: a.in.KeyId, JobId: a.jobID, Kind: providers.KindArbiter, Model: a.in.ArbiterModel, UpstreamModel: upstream,
		Provider: a.in.ArbiterProvider, System: system, Prompt: prompt, Task: a.in.Task, Candidates: texts, Category: a.in.Category,
		MaxTokens: int32(maxTokens), Temperature: &zero, ResponseSchema: string(consensus.VerdictSchema(strategy)), ResponseName: "verdict_" + a.in.Strategy,
		Deadline: a.in.Deadline, TimeoutSeconds: max(time.Until(a.in.Deadline.AsTime()).Seconds(), 0),
		// A synthesis of text can be read as it is written; a structured answer is decided whole.
		Stream: a.in.Stream && !consensus.Structured(responses(a.in), a.st)}
}

// responses are the candidates of in as the strategies read them.
func responses(in *messages.ConsensusInput) []consensus.Response {
	resps := make([]consensus.Response, len(in.Candidates))
	for i, c := range in.Candidates {
		resps[i] = consensus.Response{Model: c.Model, Provider: c.Provider, Worker: c.Worker, Text: c.Text,
			Capability: c.Capability, Recency: c.Recency, Reliability: c.Reliability, Accuracy: c.Accuracy, Learned: c.Learned, Anchored: c.Anchored,
			ToolCalls: toolCalls(c.ToolCalls), Dependence: c.Dependence}
	}
	return resps
}

func toolCalls(calls []*messages.ToolCall) []consensus.ToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]consensus.ToolCall, len(calls))
	for i, c := range calls {
		out[i] = consensus.ToolCall{ID: c.GetId(), Name: c.GetName(), Arguments: c.GetArguments()}
	}
	return out
}

// FormatOf is a request's output format and tools as consensus reads them.
func FormatOf(f *messages.OutputFormat, tools []*messages.Tool) consensus.Format {
	out := consensus.Format{Type: f.GetType(), Schema: f.GetSchema()}
	for _, t := range tools {
		out.Tools = append(out.Tools, consensus.Tool{Name: t.GetName(), Parameters: t.GetParameters()})
	}
	return out
}

// structureOf compiles the format of a consensus input.
func structureOf(in *messages.ConsensusInput) (*consensus.Structure, error) {
	return consensus.Compile(FormatOf(in.ResponseFormat, in.Tools))
}

func (a *ConsensusActor) promptTokens() int {
	n := len(a.in.Task)
	for _, j := range a.judged {
		n += len(j.Text)
	}
	return (n+3)/4 + 256
}

func (a *ConsensusActor) decide(ctx actor.Context) {
	a.decided = true
	a.withdraw(ctx)
	if a.cancel != nil {
		a.cancel()
		a.cancel = nil
	}
	reply := decision(a.in, a.st, a.verdict)
	if d := reply.Decision; d != nil {
		d.ArbiterError, d.ArbiterLatencyMs, d.ArbiterUsage, d.ArbiterCostNanos = a.arbiterErr, a.latency, a.usage, a.cost
		d.ArbiterModel, d.ArbiterProvider, d.ArbiterErrorKind = a.in.ArbiterModel, a.in.ArbiterProvider, a.errKind
		if !a.started.IsZero() {
			d.ArbiterStartedMs = max(ms(a.started.Sub(a.asked)), 0.001)
		}
		if ce := a.deps.Log.Check(zap.DebugLevel, "arbiter consulted"); ce != nil {
			ce.Write(zap.String("event", "arbiter"), zap.String("request_id", a.in.RequestId),
				zap.String("arbiter_model", a.in.ArbiterModel), zap.String("decided_by", d.Arbiter), zap.String("error", a.arbiterErr),
				zap.Float64("latency_ms", a.latency), zap.Duration("waited", time.Since(a.asked)))
		}
	}
	ctx.Send(ctx.Parent(), reply)
	ctx.Stop(ctx.Self())
}

// decision merges the answers of in (st its compiled format), with the arbiter model's verdict when
// there is one. A panic in the strategies is the request's failure, not the actor's. Without a single valid answer the failure is no_valid_answer, with each model's
// problem and the ballots.
func decision(in *messages.ConsensusInput, st *consensus.Structure, verdict *consensus.Verdict) (reply *messages.ConsensusResult) {
	reply = &messages.ConsensusResult{}
	defer func() {
		if v := recover(); v != nil {
			reply = &messages.ConsensusResult{Failure: fmt.Sprintf("%s: the strategy panicked: %v", resilience.Internal, v)}
		}
	}()
	resps := responses(in)
	kind, _ := consensus.ParseKind(in.AnswerKind)
	cin := consensus.Input{Strategy: blueprints.Strategy(in.Strategy), Responses: resps, Round: in.Round, QualityFromAgreement: true,
		Kind: kind, Structure: st, Deciders: int(in.Deciders)}
	if verdict != nil {
		cin.Arbiter, cin.Verdict = in.ArbiterModel, verdict
	}
	r, err := consensus.Decide(cin)
	var invalid *consensus.NoValidAnswerError
	switch {
	case errors.As(err, &invalid):
		reply.Failure, reply.FailureCode = "no answer is what the request asked for", string(resilience.NoValidAnswer)
		for i, b := range invalid.Ballots {
			reply.FailureDetails = append(reply.FailureDetails, &messages.Problem{Field: resps[i].Model, Message: b.Problem})
		}
		reply.Decision = &messages.ArbiterDecision{Strategy: in.Strategy, Chosen: -1, Round: in.Round, Ballots: ballots(resps, invalid.Ballots)}
		return reply
	case err != nil:
		reply.Failure = err.Error()
		return reply
	}
	reply.Answer, reply.Contributed, reply.Weighted, reply.Unjudged = r.Answer, r.Contributed, r.Weighted, r.Unjudged
	reply.InMajority, reply.Deciders = r.InMajority, r.Deciders
	if len(r.Groups) > 0 {
		reply.Groups = make([]int32, len(r.Groups))
		for i, g := range r.Groups {
			reply.Groups[i] = int32(g)
		}
	}
	reply.Decision = &messages.ArbiterDecision{Strategy: string(r.Strategy), Arbiter: r.Arbiter, Chosen: int32(r.Chosen),
		ChosenModel: resps[r.Chosen].Model, Scores: r.Scores, Agreement: r.Agreement, Disagreement: r.Disagreement,
		Round: in.Round, Synthesis: r.Synthesis, Ballots: ballots(resps, r.Ballots), Merged: r.Merged}
	return reply
}

// ballots are a decision's ballots as the record shows them.
func ballots(resps []consensus.Response, bs []consensus.Ballot) []*messages.Ballot {
	if len(bs) == 0 {
		return nil
	}
	out := make([]*messages.Ballot, len(bs))
	for i, b := range bs {
		out[i] = &messages.Ballot{Model: resps[i].Model, Form: b.Form, Canonical: b.Display(), Digest: b.Digest, Group: int32(b.Group),
			Valid: b.Valid, Problem: b.Problem}
	}
	return out
}
