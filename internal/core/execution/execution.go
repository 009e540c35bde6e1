// Package execution owns what a request's steps write down: the execution record's parts (its
// classification, blueprint, selection, quorum, calls, usage, cost and retries), the consensus input
// built from the answers, the failure a collection without an answer ends with, the rewards' inputs and
// the progress events. Each is a pure function of the plan, the collection machine's records and the
// values the caller reads for it; the coordinator only sends what they return.
package execution

import (
	"slices"
	"time"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/collect"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/feedback"
	"github.com/conclave-ai/conclave/internal/core/plan"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Classification is step 2's record.
func Classification(p *plan.Plan) *messages.Classification {
	r, md := p.Classification, p.Classification.Metadata
	cls := &messages.Classification{
		Category: p.Category, Confidence: r.Confidence, Best: string(r.Best), Fallback: r.Fallback, LowConfidence: r.LowConfidence,
		Priority: string(r.Priority), Language: md.Language, Complexity: string(md.Complexity),
		ContextLength: int32(md.ContextLength), Explicit: p.Explicit, AnswerKind: string(p.AnswerKind), ClassifiedBy: p.ClassifiedBy,
	}
	for _, s := range r.Signals {
		cls.Signals = append(cls.Signals, &messages.Signal{Category: string(s.Category), Keyword: s.Keyword})
	}
	return cls
}

// Blueprint is step 3's record.
func Blueprint(bp blueprints.Blueprint) *messages.Blueprint {
	return &messages.Blueprint{Name: bp.Name, Workers: int32(bp.Workers), TimeoutSeconds: bp.TimeoutSeconds,
		Strategy: string(bp.Strategy), MinResponses: int32(bp.MinResponses), QuorumGraceSeconds: bp.QuorumGraceSeconds,
		Quorum: bp.Quorum, QuorumTau: bp.QuorumTau}
}

// Selection is step 4's record: the picks, how many models were eligible, and why the others were
// left out (counts by reason, and the first skips the plan keeps).
func Selection(policy string, sel bandit.Selection, counts map[string]int, skipped []bandit.Skip) *messages.Selection {
	rec := &messages.Selection{Policy: policy, Eligible: int32(sel.Eligible)}
	if len(counts) > 0 {
		rec.SkipCounts = make(map[string]int32, len(counts))
		for reason, n := range counts {
			rec.SkipCounts[reason] = int32(n)
		}
	}
	if len(skipped) > 0 {
		rec.Skipped = make([]*messages.Skip, len(skipped))
		skips := make([]messages.Skip, len(skipped)) // one allocation for the list
		for i, s := range skipped {
			skips[i] = messages.Skip{Model: s.Model, Provider: s.Provider, Reason: s.Reason.String()}
			rec.Skipped[i] = &skips[i]
		}
	}
	rec.Picks = make([]*messages.Pick, len(sel.Picks))
	picks := make([]messages.Pick, len(sel.Picks))
	for i, p := range sel.Picks {
		picks[i] = messages.Pick{Model: p.Model, Provider: p.Provider, Sampled: p.Sampled, Score: p.Score,
			Deprioritised: p.Deprioritised, Explored: p.Explored, Alpha: p.Alpha, Beta: p.Beta}
		rec.Picks[i] = &picks[i]
	}
	return rec
}

// Quorum is how collection ended; an audited request (one that asked every model) says so.
func Quorum(p *plan.Plan, q collect.Quorum, audit bool) *messages.QuorumOutcome {
	mode := blueprints.FixedQuorum
	if p.Blueprint.Adaptive() {
		mode = blueprints.AdaptiveQuorum
	}
	if audit {
		q.Stopped = "audit"
	}
	return &messages.QuorumOutcome{Mode: mode, Asked: int32(q.Asked), Selected: int32(len(p.Selection.Picks)),
		Waves: int32(q.Waves), Stopped: q.Stopped, Posterior: q.Posterior}
}

// Failure is how a request ends when collection gave no answer to merge: its kind, what the caller is
// told, when to come back, and each model's cause (fault is a provider's last fault). ok is false when
// there are answers. broken says a streamed answer broke after its first piece.
func Failure(d collect.Done, broken bool, records []*collect.Record, fault func(provider string) string) (kind resilience.Kind,
	message string, retryAfter time.Duration, why problems.Errors, ok bool) {
	if broken {
		return d.Failure, "the answer's stream broke after it began: " + lastError(records), 0, nil, true
	}
	if d.Failure == "" {
		return "", "", 0, nil, false
	}
	switch {
	case resilience.CallersOwn(d.Failure):
		// The key's own refusal says what to do (and, for a budget, when it resets).
		return d.Failure, errorOf(records, d.Failure), 0, nil, true
	}
	switch d.Failure {
	case resilience.ClientClosed, resilience.ShuttingDown:
		return d.Failure, StopMessage(d.Failure), 0, nil, true
	case resilience.RateLimited:
		message, retryAfter = "every call met a provider's rate limit with no room before the request's queue bound "+
			"(rate_limits.max_queue_seconds) or its deadline, and no other model had room", d.RetryAfter
	case resilience.Overloaded:
		message, retryAfter = "the requests in flight hold max_inflight_bytes already: the answers that came past it were dropped", time.Second
	case resilience.InvalidAPIKey, resilience.PaymentRequired:
		message = "the provider refused its key or its account; it takes no call until its key changes"
	case resilience.ModelNotFound:
		message = "the provider does not know the model; it has left the pool"
	case resilience.RequestTooLarge:
		message = "the task is too large for the models asked: split it into chunks, or name models with a larger " +
			"context window (GET /models lists each model's context_window)"
	case resilience.AllProvidersDown:
		message = "no model could answer: the providers of the models asked are down (refused or failed connections, " +
			"open breakers); the details name each model's cause"
	default:
		message = "no worker returned an answer before the deadline"
	}
	// The details name each model's cause: the caller sees which upstream is down, refused, limited
	// or slow, not only that nothing came.
	return d.Failure, message, retryAfter, Causes(records, fault), true
}

// StopMessage is what a caller is told when its request was stopped from outside.
func StopMessage(kind resilience.Kind) string {
	if kind == resilience.ClientClosed {
		return "the caller went away before the answer"
	}
	return "the request was still running when the shutdown timeout ended"
}

// errorOf is what the call that failed with kind said.
func errorOf(records []*collect.Record, kind resilience.Kind) string {
	for _, rec := range records {
		if r, ok := rec.Ref.(*messages.JobResult); ok && rec.Kind == kind && r.ErrorMessage != "" {
			return r.ErrorMessage
		}
	}
	return string(kind)
}

// lastError is what the last failed call said.
func lastError(records []*collect.Record) string {
	for i := len(records) - 1; i >= 0; i-- {
		if r, ok := records[i].Ref.(*messages.JobResult); ok && !r.Ok {
			return r.ErrorMessage
		}
	}
	return "the call failed"
}

// Weights are what the consensus weighs an answer by, as the caller reads them for the request's
// category: its provider's reliability, the model's capability from the catalog, and what its arm
// learned.
type Weights interface {
	Reliability(provider string) float64
	Capability(model string) float64
	Accuracy(model string) float64
	// Anchored is whether callers' truth anchors the model's accuracy (accuracy.View.Anchored).
	Anchored(model string) bool
	// Dependence is how far two models' votes are not independent (accuracy.View.Dependence).
	Dependence(model, other string) float64
	Recency(model string) float64
}

// ConsensusInput is step 8's input: every answer with its weights. Votes weigh by accuracy only where
// rewards measure it (accuracyVotes); a plain majority is decided by the blueprint's min_responses
// answers of the models learned best, for a panel holds models drawn to explore beside the proven ones.
func ConsensusInput(req *messages.RouteRequest, p *plan.Plan, answers []*collect.Job, w Weights, accuracyVotes bool) *messages.ConsensusInput {
	in := &messages.ConsensusInput{RequestId: req.RequestId, KeyId: req.KeyId, Category: p.Category, Strategy: string(p.Blueprint.Strategy), Task: req.Task,
		AnswerKind: string(p.AnswerKind), ResponseFormat: req.GetAsk().GetResponseFormat(), Tools: req.GetAsk().GetTools()}
	if p.Blueprint.Strategy == blueprints.Majority {
		in.Deciders = int32(p.Blueprint.MinResponses)
	}
	reliability := map[string]float64{} // one reading per provider, so its candidates are weighed alike
	for _, j := range answers {
		s := j.Slot
		rel, ok := reliability[s.Provider]
		if !ok {
			rel = w.Reliability(s.Provider)
			reliability[s.Provider] = rel
		}
		learned := w.Accuracy(s.Model)
		res := j.Record.Ref.(*messages.JobResult)
		cand := &messages.Candidate{Model: s.Model, Provider: s.Provider, Worker: j.Worker, Text: res.Text, ToolCalls: res.ToolCalls,
			Capability: w.Capability(s.Model), Recency: w.Recency(s.Model), Reliability: rel, Learned: learned}
		if accuracyVotes {
			cand.Accuracy, cand.Anchored = learned, w.Anchored(s.Model)
		}
		in.Candidates = append(in.Candidates, cand)
	}
	if accuracyVotes {
		dependent(in.Candidates, w)
	}
	return in
}

// dependent gives each candidate its dependence on the others, when any pair has one: votes of models
// that err together are then discounted.
func dependent(cands []*messages.Candidate, w Weights) {
	var rows [][]float64
	for i, a := range cands {
		for j, b := range cands {
			if j == i {
				continue
			}
			if d := w.Dependence(a.Model, b.Model); d != 0 {
				if rows == nil {
					rows = make([][]float64, len(cands))
					for k := range rows {
						rows[k] = make([]float64, len(cands))
					}
				}
				rows[i][j] = d
			}
		}
	}
	for i, row := range rows {
		cands[i].Dependence = row
	}
}

// DirectAnswer is a direct call's answer as a consensus of one, which judges nobody: the model's arm
// learns only from its faults.
func DirectAnswer(j *collect.Job) *messages.ConsensusResult {
	return &messages.ConsensusResult{Answer: j.Record.Ref.(*messages.JobResult).Text, Contributed: []bool{true}, Weighted: []float64{1}, Unjudged: true,
		Decision: &messages.ArbiterDecision{Strategy: plan.DirectBlueprint, Scores: []float64{1}, ChosenModel: j.Slot.Model}}
}

// answerOf is a job's place among the answers handed to the consensus, if it gave one.
func answerOf(answers []*collect.Job, j *collect.Job) (int, bool) {
	i := slices.Index(answers, j)
	return i, i >= 0
}

// FeedbackCalls are step 9's input: each settled call, judged by the consensus r (nil when the
// request failed before one) through the answers' ballots (nil for answers of text).
func FeedbackCalls(records []*collect.Record, answers []*collect.Job, ballots []*messages.Ballot, r *messages.ConsensusResult) []feedback.Call {
	calls := make([]feedback.Call, 0, len(records))
	for _, rec := range records {
		call := feedback.Call{Model: rec.Job.Slot.Model, Arm: rec.Verdict.Arm, TimedOut: rec.Status == collect.Timeout, Later: rec.Job.Slot.Wave > 0}
		if i, ok := answerOf(answers, rec.Job); ok && rec.Status == collect.OK {
			call.Invalid = i < len(ballots) && !ballots[i].Valid
			if r != nil {
				call.Contributed, call.Score = r.Contributed[i], r.Decision.Scores[i]
				if len(r.InMajority) > i { // a vote its deciders decided: agreement learns from the vote of all
					call.Contributed = r.InMajority[i]
				}
				if len(r.Groups) > 0 { // a reliability-weighted vote: the scores are posteriors
					call.Posterior = &r.Decision.Scores[i]
				}
			}
		}
		calls = append(calls, call)
	}
	return calls
}

// Votes are the answers' groups for the accuracy estimator, when the consensus grouped them all.
func Votes(requestID, category string, answers []*collect.Job, r *messages.ConsensusResult) *messages.Votes {
	if r == nil || len(r.Groups) != len(answers) {
		return nil
	}
	votes := &messages.Votes{Category: category, RequestId: requestID, Groups: r.Groups, Models: make([]string, len(answers))}
	for i, j := range answers {
		votes.Models[i] = j.Slot.Model
		if j.Slot.Wave > 0 {
			if votes.Later == nil {
				votes.Later = make([]bool, len(answers))
			}
			votes.Later[i] = true
		}
	}
	return votes
}

// Results writes the calls, their usage and cost, and the retry history into exec. jobID names a job
// as its messages did. A call that started is placed after exec's received_at, for its trace.
func Results(exec *messages.Execution, records []*collect.Record, retries []collect.Retry, answers []*collect.Job,
	r *messages.ConsensusResult, jobID func(*collect.Job) string) {
	results := make([]messages.WorkerResult, len(records)) // one allocation for the list
	exec.Results = make([]*messages.WorkerResult, 0, len(records))
	origin := exec.GetReceivedAt().AsTime()
	for k, rec := range records {
		j := rec.Job
		wr := &results[k]
		*wr = messages.WorkerResult{JobId: jobID(j), Model: j.Slot.Model, Provider: j.Slot.Provider, Worker: j.Worker, Attempt: int32(j.Attempt),
			Wave: int32(j.Slot.Wave), Status: string(rec.Status), ErrorKind: string(rec.Kind), ErrorScope: rec.Scope.String(), BudgetMs: ms(j.Budget)}
		if !j.StartedAt.IsZero() && exec.ReceivedAt != nil {
			wr.StartedMs = Offset(origin, j.StartedAt)
		}
		if res, ok := rec.Ref.(*messages.JobResult); ok {
			wr.Text, wr.LatencyMs, wr.ErrorMessage, wr.HttpStatus, wr.Usage = res.Text, res.LatencyMs, res.ErrorMessage, res.HttpStatus, res.Usage
			wr.FinishReason, wr.ServedModel, wr.CostNanos, wr.UpstreamRequestId = res.FinishReason, res.ServedModel, res.CostNanos, res.UpstreamRequestId
			wr.ProviderLatencyMs, wr.ToolCalls, wr.DroppedParameters, wr.Logprobs = res.ProviderLatencyMs, res.ToolCalls, res.DroppedParameters, res.Logprobs
			exec.CostNanos += res.CostNanos
			exec.Usage = addUsage(exec.Usage, res.Usage)
			exec.DroppedParameters = union(exec.DroppedParameters, res.DroppedParameters)
		}
		if i, ok := answerOf(answers, j); ok && r != nil && rec.Status == collect.OK {
			wr.WeightedScore, wr.Contributed = r.Weighted[i], r.Contributed[i]
			wr.Decider = i < len(r.Deciders) && r.Deciders[i]
			if d := r.Decision; d != nil && int(d.Chosen) == i {
				exec.FinishReason, exec.ToolCalls = wr.FinishReason, wr.ToolCalls
			}
		}
		exec.Results = append(exec.Results, wr)
	}
	if d := exec.Decision; d != nil {
		exec.CostNanos += d.ArbiterCostNanos
		exec.Usage = addUsage(exec.Usage, d.ArbiterUsage)
	}
	for _, rt := range retries {
		exec.Retries = append(exec.Retries, &messages.Retry{Model: rt.Model, Provider: rt.Provider, FromWorker: rt.FromWorker, ToWorker: rt.ToWorker,
			Attempt: int32(rt.Attempt), Kind: string(rt.Kind), DelayMs: ms(rt.Delay), Outcome: rt.Outcome})
	}
}

// union adds the names of more that names lacks, in order.
func union(names, more []string) []string {
	for _, n := range more {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

func addUsage(sum, u *messages.Usage) *messages.Usage {
	if u == nil {
		return sum
	}
	if sum == nil {
		sum = &messages.Usage{}
	}
	sum.InputTokens += u.InputTokens
	sum.CacheReadTokens += u.CacheReadTokens
	sum.CacheWriteTokens += u.CacheWriteTokens
	sum.OutputTokens += u.OutputTokens
	sum.Estimated = sum.Estimated || u.Estimated
	return sum
}

// Classified and Selected are the progress events of the planning steps.
func Classified(cls *messages.Classification) *messages.Progress {
	return &messages.Progress{Event: "classified", Category: cls.Category, Confidence: cls.Confidence}
}

// Selected names the blueprint, its strategy and the models picked.
func Selected(p *plan.Plan) *messages.Progress {
	ev := &messages.Progress{Event: "selected", Blueprint: p.Blueprint.Name, Strategy: string(p.Blueprint.Strategy)}
	for _, pick := range p.Selection.Picks {
		ev.Models = append(ev.Models, pick.Model)
	}
	return ev
}

// InvalidBallots counts the ballots that were not valid.
func InvalidBallots(bs []*messages.Ballot) int {
	n := 0
	for _, b := range bs {
		if !b.Valid {
			n++
		}
	}
	return n
}

// DirectAnswerProblem is why a direct call's answer is not what the request asked for (a JSON answer
// against its schema), or empty.
func DirectAnswerProblem(j *collect.Job, st *consensus.Structure) string {
	res := j.Record.Ref.(*messages.JobResult)
	if !st.JSON() || len(res.ToolCalls) > 0 {
		return ""
	}
	if b := consensus.Ballots([]consensus.Response{{Model: j.Slot.Model, Text: res.Text}}, st, consensus.Text)[0]; !b.Valid {
		return b.Problem
	}
	return ""
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Offset is a moment of a request as the record keeps it: milliseconds after its receipt (origin). It
// is never below a microsecond, since 0 says that a phase or a call did not happen; a moment a clock
// step put before the receipt is at its start.
func Offset(origin, t time.Time) float64 { return max(ms(t.Sub(origin)), 0.001) }

// Request is what the plan needs of a route request. strictParams, with strict_parameters, are the
// sampling parameters the caller gave, which every model asked must carry.
func Request(r *messages.RouteRequest, strictParams []string) plan.Request {
	req := plan.Request{Task: r.Task, Category: r.Category, Classified: r.ClassifiedCategory, ClassifiedBy: r.ClassifiedBy, Models: r.Models, Overrides: Overrides(r), Direct: r.Direct && len(r.Models) == 1,
		Fallbacks: r.Fallbacks, StrictParams: strictParams, Strict: r.StrictParameters, Allowed: r.AllowedModels, PricedOnly: r.PricedOnly,
		PromptTokens: int(r.PromptTokens)}
	if r.TimeoutSeconds != nil {
		// A timeout too small to be a duration still ends the request at once.
		req.Timeout = max(time.Duration(*r.TimeoutSeconds*float64(time.Second)), time.Nanosecond)
	}
	if r.ReceivedAt != nil {
		req.ReceivedAt = r.ReceivedAt.AsTime()
	}
	if v, ok := r.GetMetadata().GetFields()["answer_kind"]; ok {
		req.AnswerKind = v.GetStringValue()
	}
	req.Images = holdsImages(r.GetAsk())
	return req
}

// holdsImages reports whether a conversation holds an image.
func holdsImages(ask *messages.Ask) bool {
	for _, m := range ask.GetMessages() {
		for _, p := range m.Content {
			if p.Type == messages.PartImage {
				return true
			}
		}
	}
	return false
}

// Overrides reads a request's blueprint overrides.
func Overrides(req *messages.RouteRequest) blueprints.Overrides {
	var o blueprints.Overrides
	if req.Workers != nil {
		w := int(*req.Workers)
		o.Workers = &w
	}
	if req.MinResponses != nil {
		m := int(*req.MinResponses)
		o.MinResponses = &m
	}
	if req.Strategy != nil {
		s := blueprints.Strategy(*req.Strategy)
		o.Strategy = &s
	}
	if req.QuorumGraceSeconds != nil {
		o.QuorumGraceSeconds = req.QuorumGraceSeconds
	}
	o.Quorum, o.QuorumTau = req.Quorum, req.QuorumTau
	return o
}

// Learning is what a request teaches its arms (step 9): every model learns from its calls, answers
// judged by the consensus r (none when the request failed before one, or when it judged nobody),
// faults of the model penalised either way. It returns the rewards to send and the record's account of
// them, with each arm's state before (arm). A direct call's model learns on its arm over all
// categories.
func Learning(requestID, category string, mode feedback.Mode, records []*collect.Record, answers []*collect.Job, ballots []*messages.Ballot,
	r *messages.ConsensusResult, arm func(category, model string) bandit.Arm) ([]*messages.Reward, []*messages.BanditUpdate) {
	if category == "" {
		category = bandit.AllCategories
	}
	judge := feedback.ByConsensus(mode)
	if r == nil || r.Unjudged {
		judge = func(feedback.Call) (float64, string, bool) { return 0, "", false }
	}
	updates := feedback.Rewards(FeedbackCalls(records, answers, ballots, r), judge)
	sent := make([]*messages.Reward, len(updates))
	kept := make([]*messages.BanditUpdate, len(updates))
	for i, u := range updates {
		a := arm(category, u.Model)
		sent[i] = &messages.Reward{Model: u.Model, Category: category, Reward: u.Reward, Reason: u.Reason, RequestId: requestID}
		kept[i] = &messages.BanditUpdate{Model: u.Model, Category: category, Reward: u.Reward, Reason: u.Reason, AlphaBefore: a.Alpha, BetaBefore: a.Beta}
	}
	return sent, kept
}

// Arbiter completes the consensus input of a strategy that asks an arbiter model: the rotation's
// round names the arbiter among the answering models, whose provider and worker it takes; its time
// ends at the arbiter's timeout from now or the request's deadline, whichever comes first, and its
// permit waits for rate limits no longer than the request's calls did (queueBy). A streamed request
// gets the synthesis as the arbiter writes it.
func Arbiter(in *messages.ConsensusInput, models []string, round uint64, now time.Time, timeout time.Duration, deadline time.Time,
	queueBy *timestamppb.Timestamp, stream bool) {
	in.Round = round
	in.ArbiterModel = consensus.ArbiterFor(models, round)
	for _, cd := range in.Candidates {
		if cd.Model == in.ArbiterModel {
			in.ArbiterProvider, in.ArbiterWorker = cd.Provider, cd.Worker
		}
	}
	in.Deadline = timestamppb.New(earlier(now.Add(timeout), deadline))
	in.QueueBy = queueBy
	in.Stream = stream
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// FailureOf is the failure a request answers with, its problems listed.
func FailureOf(kind resilience.Kind, message string, retryAfter time.Duration, wrong problems.Errors) *messages.Failure {
	f := &messages.Failure{Code: string(kind), Message: message, RetryAfterSeconds: retryAfter.Seconds()}
	for _, p := range wrong {
		f.Details = append(f.Details, &messages.Problem{Field: p.Field, Message: p.Message})
	}
	return f
}

// ProblemsOf are a consensus failure's details as problems.
func ProblemsOf(details []*messages.Problem) problems.Errors {
	wrong := make(problems.Errors, len(details))
	for i, p := range details {
		wrong[i] = problems.Problem{Field: p.Field, Message: p.Message}
	}
	return wrong
}

// Collection is the collection machine's configuration for a plan, and its initial assignments: each
// selected model on its worker.
func Collection(p *plan.Plan, retryScale float64) (collect.Config, []collect.Assignment) {
	bp := p.Blueprint
	cfg := collect.Config{MinResponses: bp.MinResponses, QuorumGrace: bp.QuorumGrace(), CallTimeout: bp.Timeout(), CollectBy: p.CollectBy,
		QueueBy: p.QueueBy, FaultAfter: p.FaultAfter, Rounds: p.Rounds(), MoveOn: p.IsDirect(), RetryScale: retryScale}
	initial := make([]collect.Assignment, len(p.Selection.Picks))
	for i, pick := range p.Selection.Picks {
		initial[i] = collect.Assignment{Model: pick.Model, Provider: pick.Provider, Worker: p.Workers[i]}
	}
	return cfg, initial
}

// ArbiterCall names the call an arbiter model makes for a request.
func ArbiterCall(requestID string) string { return requestID + "/arbiter" }

// Settle writes the settlements of a request's calls from the journal into its record: each call's
// usage and cost in its result (or the arbiter's), a result added for a call the record lacks (one
// that started as collection ended), and the request's usage and cost summed again. The journal's
// word wins: a call cut short has its estimated usage there, which its result, answered as the call
// was cancelled, may not carry. The record is returned unchanged when nothing differs, else a copy:
// the record an answer was given with is never changed.
func Settle(exec *messages.Execution, calls []*messages.Call) *messages.Execution {
	if len(calls) == 0 || !settlesChange(exec, calls) {
		return exec
	}
	out := proto.Clone(exec).(*messages.Execution)
	for _, c := range calls {
		if c.CallId == ArbiterCall(out.RequestId) && out.Decision != nil {
			out.Decision.ArbiterUsage, out.Decision.ArbiterCostNanos = c.Usage, c.CostNanos
			continue
		}
		if wr := resultOf(out, c.CallId); wr != nil {
			for _, other := range out.Results { // the call is charged once, on its last result
				if other.JobId == c.CallId && other != wr {
					other.Usage, other.CostNanos = nil, 0
				}
			}
			wr.Usage, wr.CostNanos = c.Usage, c.CostNanos
			continue
		}
		out.Results = append(out.Results, &messages.WorkerResult{JobId: c.CallId, Model: c.Model, Provider: c.Provider,
			Status: string(collect.Cancelled), ErrorKind: string(resilience.Cancelled), Usage: c.Usage, CostNanos: c.CostNanos,
			ErrorMessage: "the call was still running when collection ended"})
	}
	out.Usage, out.CostNanos = nil, 0
	for _, wr := range out.Results {
		out.Usage = addUsage(out.Usage, wr.Usage)
		out.CostNanos += wr.CostNanos
	}
	if d := out.Decision; d != nil {
		out.Usage = addUsage(out.Usage, d.ArbiterUsage)
		out.CostNanos += d.ArbiterCostNanos
	}
	return out
}

// settlesChange reports whether any settlement says something the record does not.
func settlesChange(exec *messages.Execution, calls []*messages.Call) bool {
	for _, c := range calls {
		var usage *messages.Usage
		var cost int64
		switch wr := resultOf(exec, c.CallId); {
		case c.CallId == ArbiterCall(exec.RequestId) && exec.Decision != nil:
			usage, cost = exec.Decision.ArbiterUsage, exec.Decision.ArbiterCostNanos
		case wr == nil:
			return true
		default:
			usage, cost = wr.Usage, wr.CostNanos
		}
		if cost != c.CostNanos || !sameUsage(usage, c.Usage) {
			return true
		}
	}
	return false
}

func sameUsage(a, b *messages.Usage) bool {
	return a.GetInputTokens() == b.GetInputTokens() && a.GetOutputTokens() == b.GetOutputTokens() && a.GetEstimated() == b.GetEstimated()
}

// resultOf is a call's result in a record: its last, when a late answer follows its cancellation.
func resultOf(exec *messages.Execution, jobID string) *messages.WorkerResult {
	var found *messages.WorkerResult
	for _, wr := range exec.Results {
		if wr.JobId == jobID {
			found = wr
		}
	}
	return found
}

// Interrupted settles the calls a dead controller left open at their reservations, and makes a record
// for each of their requests saying so: the request's calls, each charged what it held, and no answer.
// The journal settles a call once; a request whose record was written before its controller died
// keeps that record.
func Interrupted(open []*messages.Call, now time.Time) ([]*messages.Call, []*messages.Execution) {
	settled := make([]*messages.Call, len(open))
	byRequest := map[string]*messages.Execution{}
	var records []*messages.Execution
	at := timestamppb.New(now)
	for i, c := range open {
		s := proto.Clone(c).(*messages.Call)
		s.State, s.SettledAt, s.CostNanos = "interrupted", at, c.ReservedNanos
		settled[i] = s
		rec := byRequest[c.RequestId]
		if rec == nil {
			rec = &messages.Execution{RequestId: c.RequestId, KeyId: c.KeyId, TeamId: c.TeamId, NodeId: c.NodeId, ReceivedAt: c.OpenedAt, CompletedAt: at,
				StatusCode: int32(resilience.StatusOf(resilience.Interrupted)),
				Error: &messages.Failure{Code: string(resilience.Interrupted), Message: "the controller running the request stopped " +
					"before it was recorded; its calls are charged at what they held"}}
			byRequest[c.RequestId] = rec
			records = append(records, rec)
		}
		if c.OpenedAt.AsTime().Before(rec.ReceivedAt.AsTime()) {
			rec.ReceivedAt = c.OpenedAt
		}
		rec.Results = append(rec.Results, &messages.WorkerResult{JobId: c.CallId, Model: c.Model, Provider: c.Provider, Status: "interrupted",
			ErrorKind: string(resilience.Interrupted), CostNanos: c.ReservedNanos})
		rec.CostNanos += c.ReservedNanos
	}
	return settled, records
}
