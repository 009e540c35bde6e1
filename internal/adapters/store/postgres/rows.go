package postgres

import (
	"encoding/json"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/messages"
)

// columns is a batch of records laid out as one array per column, for INSERT ... SELECT FROM unnest:
// one statement per table for the whole batch.
type columns struct {
	exec    execColumns
	results resultColumns
	phases  phaseColumns
	verdict verdictColumns
	rewards rewardColumns
}

type execColumns struct {
	id, clientID, node, task, category, blueprint, overrides, strategy, outcome, errorCode, answer []string
	keyID, teamID, traceID                                                                         []string
	received, completed                                                                            []time.Time
	confidence, timeout, totalMs                                                                   []float64
	workers, minResponses, status                                                                  []int32
	degraded                                                                                       []bool
	inputTokens, outputTokens, cost                                                                []int64
	record                                                                                         [][]byte
}

// args are the arguments of insertExecutionsSQL.
func (x execColumns) args() []any {
	return []any{x.id, x.clientID, x.node, x.received, x.completed, x.task, x.category, x.confidence, x.blueprint, x.workers,
		x.minResponses, x.timeout, x.overrides, x.strategy, x.outcome, x.status, x.errorCode, x.degraded, x.answer, x.totalMs,
		x.inputTokens, x.outputTokens, x.cost, x.record, x.keyID, x.traceID}
}

type resultColumns struct {
	id                                                                       []string
	received                                                                 []time.Time
	position, attempt, httpStatus                                            []int32
	job, model, provider, worker, status, raw, errKind, errScope, errMessage []string
	finish, served, upstreamID                                               []string
	latency, providerLatency, budget, score                                  []float64
	contributed, decider                                                     []bool
	inputTokens, outputTokens, cost                                          []int64
}

type phaseColumns struct {
	id, phase []string
	received  []time.Time
	ms        []float64
}

type verdictColumns struct {
	id, strategy, arbiter, arbiterError, chosenModel, scores, agreement, disagreement []string
	received                                                                          []time.Time
	fallback, synthesis                                                               []bool
	chosen                                                                            []int32
	latency                                                                           []float64
	inputTokens, outputTokens, cost                                                   []int64
}

// rewardColumns are rewards for the learning tables, one row per (model, category) update.
type rewardColumns struct {
	model, category, reason, id, node []string
	reward                            []float64
	at                                []time.Time
}

// text makes a string fit a PostgreSQL text column, which takes neither NUL bytes nor invalid UTF-8
// (a model may answer either); the record's bytes keep the exact text.
func text(s string) string { return store.ValidText(s) }

func jsonText(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}

func texts(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = text(s)
	}
	return out
}

// add lays out one record. received is its time of arrival, or now for a record without one.
func (c *columns) add(e *messages.Execution, now time.Time) error {
	raw, err := e.MarshalVT()
	if err != nil {
		return err
	}
	received := now
	if e.ReceivedAt != nil {
		received = e.ReceivedAt.AsTime()
	}
	completed := received
	if e.CompletedAt != nil {
		completed = e.CompletedAt.AsTime()
	}
	c.exec.add(e, raw, received, completed)
	c.results.add(e, received)
	if p := e.Phases; p != nil {
		c.phases.add(e.RequestId, received, p)
	}
	if d := e.Decision; d != nil {
		c.verdict.add(e.RequestId, received, d)
	}
	c.rewards.add(e.RequestId, e.NodeId, completed, e.BanditUpdates)
	return nil
}

// add lays out a record's executions row; raw is the record's encoding.
func (x *execColumns) add(e *messages.Execution, raw []byte, received, completed time.Time) {
	bp := e.GetBlueprint()
	x.id = append(x.id, e.RequestId)
	x.clientID = append(x.clientID, text(e.ClientRequestId))
	x.node = append(x.node, text(e.NodeId))
	x.task = append(x.task, text(e.Task))
	x.category = append(x.category, e.GetClassification().GetCategory())
	x.blueprint = append(x.blueprint, bp.GetName())
	x.overrides = append(x.overrides, jsonText(texts(e.Overrides)))
	x.strategy = append(x.strategy, bp.GetStrategy())
	x.outcome = append(x.outcome, store.Outcome(e))
	x.errorCode = append(x.errorCode, e.GetError().GetCode())
	x.answer = append(x.answer, text(e.Answer))
	x.received = append(x.received, received)
	x.completed = append(x.completed, completed)
	x.confidence = append(x.confidence, e.GetClassification().GetConfidence())
	x.timeout = append(x.timeout, bp.GetTimeoutSeconds())
	x.totalMs = append(x.totalMs, e.GetPhases().GetTotalMs())
	x.cost = append(x.cost, e.CostNanos)
	x.workers = append(x.workers, bp.GetWorkers())
	x.minResponses = append(x.minResponses, bp.GetMinResponses())
	x.status = append(x.status, e.StatusCode)
	x.degraded = append(x.degraded, e.Degraded)
	x.inputTokens = append(x.inputTokens, int64(e.GetUsage().GetInputTokens()))
	x.outputTokens = append(x.outputTokens, int64(e.GetUsage().GetOutputTokens()))
	x.record = append(x.record, raw)
	x.keyID = append(x.keyID, text(e.KeyId))
	x.teamID = append(x.teamID, text(e.TeamId))
	x.traceID = append(x.traceID, text(e.TraceId))
}

// add lays out a record's worker results, one row each in the order they came.
func (r *resultColumns) add(e *messages.Execution, received time.Time) {
	for i, w := range e.Results {
		r.id = append(r.id, e.RequestId)
		r.received = append(r.received, received)
		r.position = append(r.position, int32(i))
		r.attempt = append(r.attempt, w.Attempt)
		r.httpStatus = append(r.httpStatus, w.HttpStatus)
		r.job = append(r.job, w.JobId)
		r.model = append(r.model, w.Model)
		r.provider = append(r.provider, w.Provider)
		r.worker = append(r.worker, w.Worker)
		r.status = append(r.status, w.Status)
		r.raw = append(r.raw, text(w.Text))
		r.errKind = append(r.errKind, w.ErrorKind)
		r.errScope = append(r.errScope, w.ErrorScope)
		r.errMessage = append(r.errMessage, text(w.ErrorMessage))
		r.finish = append(r.finish, text(w.FinishReason))
		r.served = append(r.served, text(w.ServedModel))
		r.upstreamID = append(r.upstreamID, text(w.UpstreamRequestId))
		r.latency = append(r.latency, w.LatencyMs)
		r.providerLatency = append(r.providerLatency, w.ProviderLatencyMs)
		r.budget = append(r.budget, w.BudgetMs)
		r.score = append(r.score, w.WeightedScore)
		r.cost = append(r.cost, w.CostNanos)
		r.contributed = append(r.contributed, w.Contributed)
		r.decider = append(r.decider, w.Decider)
		r.inputTokens = append(r.inputTokens, int64(w.GetUsage().GetInputTokens()))
		r.outputTokens = append(r.outputTokens, int64(w.GetUsage().GetOutputTokens()))
	}
}

// add lays out a record's phase timings, one row per phase.
func (c *phaseColumns) add(id string, received time.Time, p *messages.Phases) {
	for _, ph := range []struct {
		name string
		ms   float64
	}{{"classify", p.ClassifyMs}, {"blueprint", p.BlueprintMs}, {"select", p.SelectMs}, {"assign", p.AssignMs},
		{"dispatch", p.DispatchMs}, {"collect", p.CollectMs}, {"consensus", p.ConsensusMs}, {"feedback", p.FeedbackMs}, {"total", p.TotalMs}} {
		c.id = append(c.id, id)
		c.received = append(c.received, received)
		c.phase = append(c.phase, ph.name)
		c.ms = append(c.ms, ph.ms)
	}
}

// add lays out a record's consensus decision.
func (v *verdictColumns) add(id string, received time.Time, d *messages.ArbiterDecision) {
	v.id = append(v.id, id)
	v.received = append(v.received, received)
	v.strategy = append(v.strategy, d.Strategy)
	v.arbiter = append(v.arbiter, d.Arbiter)
	v.arbiterError = append(v.arbiterError, text(d.ArbiterError))
	v.chosenModel = append(v.chosenModel, d.ChosenModel)
	v.scores = append(v.scores, jsonText(nonNil(d.Scores)))
	v.agreement = append(v.agreement, jsonText(texts(d.Agreement)))
	v.disagreement = append(v.disagreement, jsonText(texts(d.Disagreement)))
	v.fallback = append(v.fallback, d.ArbiterError != "")
	v.synthesis = append(v.synthesis, d.Synthesis)
	v.chosen = append(v.chosen, d.Chosen)
	v.latency = append(v.latency, d.ArbiterLatencyMs)
	v.cost = append(v.cost, d.ArbiterCostNanos)
	v.inputTokens = append(v.inputTokens, int64(d.GetArbiterUsage().GetInputTokens()))
	v.outputTokens = append(v.outputTokens, int64(d.GetArbiterUsage().GetOutputTokens()))
}

func (r *rewardColumns) add(id, node string, at time.Time, updates []*messages.BanditUpdate) {
	for _, u := range updates {
		r.model = append(r.model, u.Model)
		r.category = append(r.category, u.Category)
		r.reason = append(r.reason, u.Reason)
		r.reward = append(r.reward, u.Reward)
		r.id = append(r.id, id)
		r.node = append(r.node, node)
		r.at = append(r.at, at)
	}
}

func nonNil(f []float64) []float64 {
	if f == nil {
		return []float64{}
	}
	return f
}
