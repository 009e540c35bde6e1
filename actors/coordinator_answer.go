package actors

import (
	"time"

	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// The coordinator's steps 8 to 10: consensus over the collected answers, the arms' learning, the
// record and the answer.

// finishCollection hands the answers to a consensus actor, or fails the request when there are none.
func (c *CoordinatorActor) finishCollection(ctx host) {
	c.due.Stop()
	d := c.machine.Done()
	c.exec.Quorum = execution.Quorum(c.plan, d.Quorum, c.audit)
	c.exec.Phases.CollectMs = ms(time.Since(c.dispatchStart))
	if c.exec.Phases.DispatchMs == 0 {
		c.exec.Phases.DispatchMs = c.exec.Phases.CollectMs
	}
	logCollected(c.log, c.plan, d, c.exec, c.machine.Records(), max(c.jobLines-JobLogBudget, 0))
	if kind, msg, retryAfter, why, failed := execution.Failure(d, c.broken, c.machine.Records(), c.providerFault); failed {
		c.fail(ctx, kind, msg, retryAfter, why)
		return
	}
	c.exec.Degraded = d.Degraded
	c.answers = d.Answers
	if c.plan.IsDirect() { // one answer, its own: nothing to merge, but it must be what was asked
		j := d.Answers[0]
		if problem := execution.DirectAnswerProblem(j, c.structure); problem != "" {
			c.fail(ctx, resilience.NoValidAnswer, "the answer is not the JSON the request asks for", 0,
				problems.Errors{{Field: j.Slot.Model, Message: problem}})
			return
		}
		c.consensusStart = time.Now()
		c.onConsensus(ctx, execution.DirectAnswer(j))
		return
	}
	in := execution.ConsensusInput(c.req, c.plan, d.Answers, weights{c}, c.accuracyVotes())
	models := make([]string, len(d.Answers))
	for i, j := range d.Answers {
		models[i] = j.Slot.Model
	}
	c.consult(ctx, in, models)
}

// consult hands the answers to a consensus actor of its own when the strategy asks an arbiter model
// (after waiting for its turn), and otherwise decides them at once.
func (c *CoordinatorActor) consult(ctx host, in *messages.ConsensusInput, models []string) {
	if consensus.AsksArbiter(c.plan.Blueprint.Strategy) && len(in.Candidates) > 1 {
		if c.round == nil {
			c.waiting, c.waitingModels = in, models
			return
		}
		execution.Arbiter(in, models, *c.round, time.Now(), c.deps.Plan.ArbiterTimeout, c.plan.Deadline, c.queueBy(), c.streams())
	}
	c.consensusStart = time.Now()
	c.exec.Phases.ConsensusStartMs = execution.Offset(c.origin, c.consensusStart)
	if in.ArbiterModel == "" {
		// Pure and in one turn: a call, not a message. A panic in it fails this request alone.
		c.onConsensus(ctx, decision(in, c.structure, nil))
		return
	}
	c.consulting = true
	c.consensus = ctx.Spawn(c.deps.Props(NewConsensusActor(c.deps, in, c.structure)))
}

func (c *CoordinatorActor) onConsensus(ctx host, r *messages.ConsensusResult) {
	c.consensus, c.consulting = nil, false
	c.exec.Phases.ConsensusMs = ms(time.Since(c.consensusStart))
	if r.Failure != "" {
		if r.FailureCode != string(resilience.NoValidAnswer) {
			c.fail(ctx, resilience.Internal, "consensus failed: "+r.Failure, 0, nil)
			return
		}
		// The record shows who answered what, and feedback penalises every invalid answer.
		c.exec.Decision, c.ballots = r.Decision, r.GetDecision().GetBallots()
		c.fail(ctx, resilience.NoValidAnswer, r.Failure, 0, execution.ProblemsOf(r.FailureDetails))
		return
	}
	c.exec.Decision, c.ballots = r.Decision, r.Decision.Ballots
	c.exec.Answer = r.Answer
	logConsensus(c.log, r, c.exec.Degraded)
	c.progress(ctx, func() *messages.Progress {
		return &messages.Progress{Event: "consensus", Strategy: r.Decision.Strategy, ChosenModel: r.Decision.ChosenModel}
	})

	c.respond(ctx, r)
}

// feedback is step 9: the arms learn from the request (execution.Learning), in one message.
func (c *CoordinatorActor) feedback(ctx host, r *messages.ConsensusResult) {
	t := time.Now()
	if votes := execution.Votes(c.req.RequestId, c.plan.Category, c.answers, r); votes != nil {
		c.deps.Dir.Arms.VoteSent()
		ctx.Send(c.deps.Dir.Bandit, votes)
	}
	var sent []*messages.Reward
	sent, c.exec.BanditUpdates = execution.Learning(c.req.RequestId, c.plan.Category, c.deps.Reward, c.machine.Records(), c.answers, c.ballots, r,
		c.deps.Dir.Arms.Arm)
	rewards(ctx, c.deps.Dir.Bandit, sent...)
	c.exec.Phases.FeedbackMs = ms(time.Since(t))
	logLearning(c.log, c.exec.BanditUpdates)
}

// fail answers with a failure; the record is kept like any other.
func (c *CoordinatorActor) fail(ctx host, kind resilience.Kind, message string, retryAfter time.Duration, wrong problems.Errors) {
	c.exec.Error = execution.FailureOf(kind, message, retryAfter, wrong)
	c.respond(ctx, nil)
}

// respond is step 10: the record to the metrics and the recorder and the summary line to the log first
// (so a caller who scrapes, asks or reads the log right after the answer finds them), then the answer,
// then stop. Nothing changes the record
// afterwards.
func (c *CoordinatorActor) respond(ctx host, r *messages.ConsensusResult) {
	c.answered = true
	c.due.Stop()
	status := 200
	if c.exec.Error != nil {
		status = resilience.StatusOf(resilience.Kind(c.exec.Error.Code))
	}
	c.exec.StatusCode = int32(status)
	if c.machine != nil {
		c.feedback(ctx, r)
		execution.Results(c.exec, c.machine.Records(), c.machine.Retries(), c.answers, r, c.jobID)
	}
	c.exec.CompletedAt = ts(c.deps.now())
	c.exec.Phases.TotalMs = ms(time.Since(c.began))
	c.deps.Metrics.Execution(c.exec)
	level := zap.InfoLevel
	if status >= 500 {
		level = zap.WarnLevel
	}
	if f := c.exec.Error; f != nil && Shedding(resilience.Kind(f.Code)) {
		// Counted in one line for all; the request's own line is for debugging.
		c.deps.Shed().Add(f.Code)
		level = zap.DebugLevel
	}
	if ce := c.deps.Log.Check(level, "request finished"); ce != nil {
		ce.Write(zap.String("request_id", c.req.RequestId), zap.Inline(summary{c.exec, c.plan.Category}))
	}
	if c.deps.AnswersWaitForRecords {
		// The recorder answers once the record is durable (Answer): one round trip, not two.
		ctx.Send(c.deps.Dir.Recorder, &Answer{Exec: c.exec, To: c.replyTo})
	} else {
		ctx.Send(c.deps.Dir.Recorder, c.exec) // the record first: a read right after the answer finds it
		ctx.Send(c.replyTo, c.exec)
	}
	ctx.Stop(ctx.Self())
}
