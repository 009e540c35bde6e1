package actors

import (
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/collect"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/plan"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// logClassified writes step 2's debug lines.
func logClassified(log *zap.Logger, p *plan.Plan, cls *messages.Classification) {
	r := p.Classification
	if ce := log.Check(zap.DebugLevel, "task classified"); ce != nil {
		ce.Write(zap.String("event", "classification"), zap.String("category", p.Category),
			zap.Float64("confidence", r.Confidence), zap.String("best", string(r.Best)), zap.Bool("fallback", r.Fallback),
			zap.Bool("explicit", cls.Explicit), zap.Array("signals", signalsField(r.Signals)), zap.String("priority", cls.Priority),
			zap.String("language", cls.Language), zap.String("complexity", cls.Complexity), zap.Int32("context_length", cls.ContextLength),
			zap.String("answer_kind", cls.AnswerKind), zap.String("classified_by", cls.ClassifiedBy))
	}
	if r.LowConfidence && !cls.Explicit {
		if ce := log.Check(zap.DebugLevel, "low confidence classification"); ce != nil {
			ce.Write(zap.String("event", "low_confidence_classification"),
				zap.String("category", p.Category), zap.String("best", string(r.Best)), zap.Float64("confidence", r.Confidence),
				zap.Array("alternatives", alternativesField(r.Alternatives)), zap.String("classified_by", cls.ClassifiedBy))
		}
	}
}

// logBlueprint writes step 3's debug line.
func logBlueprint(log *zap.Logger, p *plan.Plan, overrides []string) {
	bp := p.Blueprint
	if ce := log.Check(zap.DebugLevel, "blueprint chosen"); ce != nil {
		ce.Write(zap.String("event", "blueprint"), zap.String("blueprint", bp.Name), zap.Int("workers", bp.Workers),
			zap.Float64("timeout_seconds", bp.TimeoutSeconds), zap.String("strategy", string(bp.Strategy)),
			zap.Int("min_responses", bp.MinResponses), zap.Float64("quorum_grace_seconds", bp.QuorumGraceSeconds), zap.Strings("overrides", overrides),
			zap.Time("deadline", p.Deadline), zap.Time("collect_by", p.CollectBy))
	}
}

// logAssigned writes step 5's debug line.
func logAssigned(log *zap.Logger, p *plan.Plan) {
	if ce := log.Check(zap.DebugLevel, "workers assigned"); ce != nil {
		ce.Write(zap.String("event", "assignment"), zap.Strings("workers", p.Workers), zap.Bool("heavy", p.Heavy),
			zap.Array("rejected", rejectionsField(p.Rejected)))
	}
}

// logCollected writes step 7's debug line: how collection ended and every settled call.
func logCollected(log *zap.Logger, p *plan.Plan, d collect.Done, exec *messages.Execution, records []*collect.Record, suppressed int) {
	if ce := log.Check(zap.DebugLevel, "collection finished"); ce != nil {
		q := exec.Quorum
		ce.Write(zap.String("event", "collect_done"), zap.Int("ok", len(d.Answers)), zap.Int("min_responses", p.Blueprint.MinResponses),
			zap.Int("rounds", d.Rounds), zap.Int32("asked", q.Asked), zap.Int32("waves", q.Waves), zap.String("stopped", q.Stopped),
			zap.Float64("collect_ms", exec.Phases.CollectMs), zap.String("failure", string(d.Failure)),
			zap.Array("calls", callsField(records)), zap.Int("lines_suppressed", suppressed))
	}
}

// logConsensus writes step 8's debug line.
func logConsensus(log *zap.Logger, r *messages.ConsensusResult, degraded bool) {
	if ce := log.Check(zap.DebugLevel, "consensus reached"); ce != nil {
		d := r.Decision
		ce.Write(zap.String("event", "consensus"), zap.String("strategy", d.Strategy),
			zap.String("arbiter", d.Arbiter), zap.Int32("chosen", d.Chosen), zap.Float64s("scores", d.Scores),
			zap.Bools("contributed", r.Contributed), zap.Bools("deciders", r.Deciders), zap.Strings("agreement", d.Agreement), zap.Strings("disagreement", d.Disagreement),
			zap.String("arbiter_error", d.ArbiterError), zap.Bool("degraded", degraded), zap.Bool("merged", d.Merged),
			zap.Int("invalid", execution.InvalidBallots(d.Ballots)))
	}
}

// JobLogBudget is the most per-call lines one request logs; the rest are counted in its collect_done
// line (`lines_suppressed`), and the record still holds every call.
const JobLogBudget = 64

// jobLog logs a per-call line while the request's budget lasts.
func (c *CoordinatorActor) jobLog(msg string, fields ...zap.Field) {
	if c.jobLines++; c.jobLines <= JobLogBudget {
		c.log.Debug(msg, fields...)
	}
}

// logReply writes a settled call's line: a failed call's at debug within the request's budget of
// per-call lines, an answer's at debug (collect_done summarises it).
func (c *CoordinatorActor) logReply(seq int, r *messages.JobResult, rec *collect.Record) {
	if rec.Status != collect.OK {
		c.jobLog("reply received", zap.String("event", "reply"), zap.Int("job", seq), zap.String("model", r.Model),
			zap.String("provider", r.Provider), zap.String("worker", r.Worker), zap.String("status", string(rec.Status)),
			zap.String("error_kind", string(rec.Kind)), zap.String("error_scope", r.ErrorScope), zap.Float64("latency_ms", r.LatencyMs),
			zap.Int32("http_status", r.HttpStatus))
	} else if ce := c.log.Check(zap.DebugLevel, "reply received"); ce != nil {
		ce.Write(zap.String("event", "reply"), zap.Int("job", seq), zap.String("model", r.Model), zap.String("provider", r.Provider),
			zap.String("worker", r.Worker), zap.String("status", string(rec.Status)), zap.Float64("latency_ms", r.LatencyMs))
	}
}

// logLearning is the debug line of what a request taught its arms.
func logLearning(log *zap.Logger, updates []*messages.BanditUpdate) {
	if ce := log.Check(zap.DebugLevel, "bandit updated"); ce != nil && len(updates) > 0 {
		ce.Write(zap.String("event", "bandit_updates"), zap.String("category", updates[0].Category), zap.Array("updates", updatesField(updates)))
	}
}

func (c *CoordinatorActor) logSelection(picks []bandit.Pick, counts map[string]int, skipped []bandit.Skip, eligible int, replacing bool) {
	if !c.log.Core().Enabled(zap.DebugLevel) {
		return
	}
	log := c.log.Debug
	if replacing {
		log = c.jobLog
	}
	log("models selected", zap.String("event", "selection"), zap.String("policy", c.deps.Plan.Policy.String()), zap.Bool("replacement", replacing),
		zap.Int("eligible", eligible), zap.Array("picks", picksField(picks)), zap.Object("skip_counts", countsField(counts)),
		zap.Array("skipped", skipsField(skipped)), zap.Uint64("sequence", c.seq))
}
