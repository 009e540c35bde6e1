package actors

import (
	"github.com/conclave-ai/conclave/internal/arms"
	"math"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/collect"
	"github.com/conclave-ai/conclave/internal/core/intake"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// What every actor checks before it acts on a message. A message no sender of Conclave's could have
// made (no reply address where an answer is due, a model the catalog does not hold, an empty id, a
// count below zero or past any real one, a reward outside [0, 1], a missing time) is dropped: counted
// and logged by Deps.Drop, never a panic, and it changes no state, so no message can crash an actor or
// grow its memory. The checks are pure: each returns why a message is dropped, or "".

// Why a message is dropped: the reason label of conclave_actor_messages_dropped_total.
const (
	DropNoReplyTo       = "no_reply_to"      // no address for the answer it asks
	DropNoJobID         = "no_job_id"        // an empty job id
	DropNoRequestID     = "no_request_id"    // an empty request id
	DropUnknownModel    = "unknown_model"    // a model the live catalog does not hold
	DropOtherProvider   = "other_provider"   // a model of another provider
	DropUnknownCategory = "unknown_category" // a category with no blueprint
	DropBadCount        = "bad_count"        // a count or token figure below zero or past any real one
	DropBadNumber       = "bad_number"       // a time span or score that is NaN, infinite, negative or absurd
	DropBadReward       = "bad_reward"       // a reward outside [0, 1]
	DropNoTime          = "no_time"          // a timestamp missing where it is required
	DropBadTime         = "bad_time"         // a timestamp that is invalid, or too far ahead
	DropMalformed       = "malformed"        // another impossible field
	DropWrongTarget     = "wrong_target"     // meant for another actor (another arm, provider or request)
	DropDuplicate       = "duplicate_job"    // a job id the actor already holds
	DropUnexpected      = "unexpected"       // an answer to nothing the actor asked
	DropUnknownMessage  = "unknown_message"  // a type the actor does not take
	DropActorStopped    = "actor_stopped"    // for a child its supervisor stopped for good
	DropSpawnFailed     = "spawn_failed"     // its child could not be started
)

// Bounds past which a figure is absurd: no request of Conclave's comes near them.
const (
	// MaxIDBytes bounds a job or request id (a request id is a UUID; a job id, the request's and a
	// number).
	MaxIDBytes = 256
	// MaxTokens bounds a token figure: two orders of magnitude above the largest context window.
	MaxTokens = 1 << 27
	// MaxSeconds bounds a time span (a budget, a block, a Retry-After): a week.
	MaxSeconds = 7 * 24 * 3600
	// MaxAhead bounds how far ahead a deadline may be.
	MaxAhead = MaxSeconds * time.Second
	// MaxAttempt bounds a job's attempt number.
	MaxAttempt = 1000
	// MaxVotes bounds the answers of one prompt handed to the estimator.
	MaxVotes = 1024
	// MaxRewards bounds the rewards of one batch: a request's, two per model it called.
	MaxRewards = 1024
	// maxKindBytes bounds an error kind's name (they are short identifiers).
	maxKindBytes = 64
	// MaxTools bounds a request's tools, and MaxToolCalls one answer's calls of them.
	MaxTools     = 1024
	MaxToolCalls = 1024
	// MaxNameBytes bounds a tool's or a call's function name, and a call's id.
	MaxNameBytes = 1024
	// MaxSchemaBytes bounds a JSON schema (the output format's, a tool's parameters) and a call's
	// arguments: far past any real one, and each is compiled or parsed once per request.
	MaxSchemaBytes = 8 << 20
)

// badSeconds reports a time span in seconds that is not a real one.
func badSeconds(s float64) bool {
	return math.IsNaN(s) || math.IsInf(s, 0) || s < 0 || s > MaxSeconds
}

func badMs(ms float64) bool { return badSeconds(ms / 1000) }

// finite reports a number that is neither NaN nor infinite.
func finite(xs ...float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// checkDeadline checks a required deadline: present, valid, and at most MaxAhead after now (a passed
// one is valid: its asker is answered that it passed).
func checkDeadline(t *timestamppb.Timestamp, now time.Time) string {
	switch {
	case t == nil:
		return DropNoTime
	case t.CheckValid() != nil, t.AsTime().After(now.Add(MaxAhead)):
		return DropBadTime
	}
	return ""
}

func checkID(id, empty string) string {
	switch {
	case id == "":
		return empty
	case len(id) > MaxIDBytes:
		return DropMalformed
	}
	return ""
}

// knownModel reports whether the live catalog holds a model. A nil catalog holds none.
func knownModel(cat *catalog.Catalog, model string) bool {
	if cat == nil || model == "" {
		return false
	}
	_, ok := cat.Get(model)
	return ok
}

// checkModel checks that a model is in the live catalog and is provider's.
func checkModel(cat *catalog.Catalog, provider, model string) string {
	if !knownModel(cat, model) {
		return DropUnknownModel
	}
	if m, _ := cat.Get(model); m.Provider != provider {
		return DropOtherProvider
	}
	return ""
}

// checkAcquire checks an acquisition sent to provider's actor. The model is checked last, so that an
// acquisition dropped only for its model is otherwise well formed and its asker can be told.
func checkAcquire(m *messages.Acquire, provider string, cat *catalog.Catalog, now time.Time) string {
	switch {
	case m == nil:
		return DropMalformed
	case m.ReplyTo == nil:
		return DropNoReplyTo
	case m.Tokens < 0 || m.Tokens > MaxTokens:
		return DropBadCount
	}
	if r := checkID(m.JobId, DropNoJobID); r != "" {
		return r
	}
	if r := checkDeadline(m.Deadline, now); r != "" {
		return r
	}
	if m.Dispatch != nil || m.DispatchTo != nil {
		// The job the provider hands its worker once it grants the permit: the same job and model.
		switch {
		case m.DispatchTo == nil:
			return DropNoReplyTo
		case m.Dispatch.GetJob().GetJobId() != m.JobId || m.Dispatch.GetJob().GetModel() != m.Model:
			return DropMalformed
		}
		if r := checkDispatch(m.Dispatch, cat, now); r != "" {
			return r
		}
	}
	return checkModel(cat, provider, m.Model)
}

// checkOutcome checks the settlement of a permit.
func checkOutcome(o *messages.Outcome) string {
	switch {
	case o == nil:
		return DropMalformed
	case o.Tokens < 0 || o.Tokens > MaxTokens:
		return DropBadCount
	case !validEffect(o.ProviderEffect) || !validEffect(o.ModelEffect):
		return DropMalformed
	case badSeconds(o.BlockModelSeconds) || badSeconds(o.BlockProviderSeconds):
		return DropBadNumber
	}
	if r := checkID(o.JobId, DropNoJobID); r != "" {
		return r
	}
	return checkRateLimit(o.RateLimit)
}

func validEffect(e messages.Effect) bool {
	return e == messages.Effect_EFFECT_NEUTRAL || e == messages.Effect_EFFECT_SUCCESS || e == messages.Effect_EFFECT_FAILURE
}

// checkRateLimit checks what a reply says of its provider's limits (nil says nothing); -1 is an
// unknown count.
func checkRateLimit(rl *messages.RateLimitInfo) string {
	if rl == nil {
		return ""
	}
	for _, n := range []int64{rl.LimitRequests, rl.RemainingRequests, rl.LimitTokens, rl.RemainingTokens} {
		if n < -1 || n > 1<<40 {
			return DropBadCount
		}
	}
	if badSeconds(rl.ResetRequestsSeconds) || badSeconds(rl.ResetTokensSeconds) {
		return DropBadNumber
	}
	return ""
}

// checkPeerOpened checks another controller's breaker opening, sent to provider's actor.
func checkPeerOpened(m *messages.PeerBreakerOpened, provider string) string {
	switch {
	case m == nil:
		return DropMalformed
	case m.Provider != provider:
		return DropWrongTarget
	case m.OpenUntil == nil:
		return DropNoTime
	case m.OpenUntil.CheckValid() != nil:
		return DropBadTime
	}
	return ""
}

// checkDispatch checks a job sent to a worker: its answer's address, its identity, its model (in the
// catalog, and its provider's), its limits and its deadline.
func checkDispatch(d *messages.Dispatch, cat *catalog.Catalog, now time.Time) string {
	switch {
	case d == nil || d.Job == nil:
		return DropMalformed
	case d.ReplyTo == nil:
		return DropNoReplyTo
	}
	j := d.Job
	if r := checkID(j.JobId, DropNoJobID); r != "" {
		return r
	}
	switch {
	case len(j.RequestId) > MaxIDBytes:
		return DropMalformed
	case j.Kind != providers.KindAnswer && j.Kind != providers.KindArbiter:
		return DropMalformed
	case j.MaxTokens < 0 || j.MaxTokens > MaxTokens, j.Attempt < 0 || j.Attempt > MaxAttempt:
		return DropBadCount
	case badSeconds(j.TimeoutSeconds), j.Temperature != nil && (!finite(*j.Temperature) || *j.Temperature < 0):
		return DropBadNumber
	}
	if r := checkDeadline(j.Deadline, now); r != "" {
		return r
	}
	return checkModel(cat, j.Provider, j.Model)
}

// checkCancelJob checks a job's cancellation.
func checkCancelJob(m *messages.CancelJob) string {
	if m == nil {
		return DropMalformed
	}
	return checkID(m.JobId, DropNoJobID)
}

// checkReward checks a reward's own fields: a model, a category and a value in [0, 1].
func checkReward(r *messages.Reward) string {
	switch {
	case r == nil:
		return DropMalformed
	case r.Model == "":
		return DropUnknownModel
	case r.Category == "":
		return DropUnknownCategory
	case !finite(r.Reward) || r.Reward < 0 || r.Reward > 1:
		return DropBadReward
	}
	return ""
}

// checkArmReward checks a reward for an arm: only a catalog model and a category of the board have
// one, so the arms are bounded by the catalog times the categories, whatever names rewards carry.
func checkArmReward(r *messages.Reward, cat *catalog.Catalog, board *arms.Board) string {
	if why := checkReward(r); why != "" {
		return why
	}
	switch {
	case !knownModel(cat, r.Model):
		return DropUnknownModel
	case !board.HasCategory(r.Category):
		return DropUnknownCategory
	}
	return ""
}

// CheckVotes checks a reliability-weighted vote: a blueprint's category, a group per catalog model, each
// group an answer of the prompt (or -1, none), and with a caller's truth a verdict per model.
func CheckVotes(v *messages.Votes, cat *catalog.Catalog, board *arms.Board) string {
	switch {
	case v == nil:
		return DropMalformed
	case v.Category == bandit.AllCategories || !board.HasCategory(v.Category):
		return DropUnknownCategory
	case len(v.Models) != len(v.Groups), len(v.Right) > 0 && len(v.Right) != len(v.Models), len(v.Later) > 0 && len(v.Later) != len(v.Models):
		return DropMalformed
	case len(v.Models) > MaxVotes:
		return DropBadCount
	}
	for i, m := range v.Models {
		if !knownModel(cat, m) {
			return DropUnknownModel
		}
		if g := v.Groups[i]; g < -1 || int(g) >= len(v.Models) {
			return DropMalformed
		}
	}
	return ""
}

// checkFormat checks a request's output format and tools, as a request carries them and as its
// consensus input does: a known format, bounded counts and sizes. Whether a schema compiles is the
// coordinator's question (a refusal naming the schema's fault), not a reason to drop a message.
func checkFormat(f *messages.OutputFormat, tools []*messages.Tool) string {
	switch {
	case f.GetType() != "" && !intake.OutputFormats[f.GetType()], len(f.GetName()) > MaxNameBytes: // none: text
		return DropMalformed
	case len(f.GetSchema()) > MaxSchemaBytes, len(tools) > MaxTools:
		return DropBadCount
	}
	for _, t := range tools {
		switch {
		case t == nil:
			return DropMalformed
		case len(t.Name) > MaxNameBytes, len(t.Parameters) > MaxSchemaBytes:
			return DropBadCount
		}
	}
	return ""
}

// checkToolCalls checks an answer's calls of tools: bounded, whatever the model made of them (a call
// of an unknown function or with broken arguments is an invalid ballot, not a malformed message).
func checkToolCalls(calls []*messages.ToolCall) string {
	if len(calls) > MaxToolCalls {
		return DropBadCount
	}
	for _, c := range calls {
		switch {
		case c == nil:
			return DropMalformed
		case len(c.Id) > MaxNameBytes, len(c.Name) > MaxNameBytes, len(c.Arguments) > MaxSchemaBytes:
			return DropBadCount
		}
	}
	return ""
}

// checkConsensusResult checks a consensus answer to n candidates: a failure (internal, or
// no_valid_answer with a ballot per candidate), or a decision with a score, a weight and a verdict for
// each, and a ballot for each when it voted on ballots.
func checkConsensusResult(r *messages.ConsensusResult, n int) string {
	switch {
	case r == nil:
		return DropMalformed
	case r.Failure != "":
		switch r.FailureCode {
		case "":
			return ""
		case string(resilience.NoValidAnswer):
			if len(r.GetDecision().GetBallots()) != n || len(r.FailureDetails) > n {
				return DropMalformed
			}
			return ""
		}
		return DropMalformed
	case r.Decision == nil, len(r.Contributed) < n, len(r.Weighted) < n, len(r.Decision.Scores) < n,
		len(r.Groups) != 0 && len(r.Groups) != n, r.Decision.Chosen < 0 || int(r.Decision.Chosen) >= max(n, 1),
		len(r.Decision.Ballots) != 0 && len(r.Decision.Ballots) != n:
		return DropMalformed
	case !finite(r.Weighted...) || !finite(r.Decision.Scores...):
		return DropBadNumber
	}
	return ""
}

// jobOf is the number of a job of request requestID, from its id ("<request id>/<number>").
func jobOf(jobID, requestID string) (int, bool) {
	rest, ok := strings.CutPrefix(jobID, requestID+"/")
	if !ok || rest == "" || strings.IndexByte(rest, '/') >= 0 {
		return 0, false
	}
	seq, ok := collect.JobSeq(jobID)
	return seq, ok && seq >= 0
}

// permitReasons are the refusals a provider actor answers with.
var permitReasons = map[string]bool{
	"rate_limited": true, "provider_disabled": true, "model_removed": true, "model_rate_limited": true, "probe_in_flight": true,
	"model_probe_in_flight": true, "breaker_open": true, "model_ejected": true, string(resilience.RequestTooLarge): true,
	PermitModelUnknown: true, PermitProviderStopped: true,
}

// checkPermit checks a provider's answer to one of requestID's acquisitions.
func checkPermit(p *messages.Permit, requestID string) string {
	switch {
	case p == nil:
		return DropMalformed
	case !p.Granted && !permitReasons[p.Reason]:
		return DropMalformed
	case badSeconds(p.RetryAfterSeconds):
		return DropBadNumber
	}
	if _, ok := jobOf(p.JobId, requestID); !ok {
		return DropWrongTarget
	}
	return ""
}

// checkArbiterPermit checks a provider's answer to a consensus actor's acquisition of job jobID.
func checkArbiterPermit(p *messages.Permit, jobID string) string {
	switch {
	case p == nil, !p.Granted && !permitReasons[p.Reason]:
		return DropMalformed
	case p.JobId != jobID:
		return DropWrongTarget
	}
	return ""
}

// checkJobStarted checks a worker's word that one of requestID's jobs started, with its budget.
func checkJobStarted(m *messages.JobStarted, requestID string) string {
	switch {
	case m == nil:
		return DropMalformed
	case badSeconds(m.BudgetSeconds):
		return DropBadNumber
	}
	if _, ok := jobOf(m.JobId, requestID); !ok {
		return DropWrongTarget
	}
	return ""
}

// checkJobQueued checks a worker's word that one of requestID's jobs waits for a slot.
func checkJobQueued(m *messages.JobQueued, requestID string) string {
	if m == nil {
		return DropMalformed
	}
	if _, ok := jobOf(m.JobId, requestID); !ok {
		return DropWrongTarget
	}
	return ""
}

// checkJobResult checks the result of one of requestID's jobs (requestID empty: any job's).
func checkJobResult(r *messages.JobResult, requestID string) string {
	switch {
	case r == nil:
		return DropMalformed
	case badMs(r.LatencyMs), badMs(r.ProviderLatencyMs), badSeconds(r.RetryAfterSeconds), r.CostNanos < 0:
		return DropBadNumber
	case r.Usage != nil && (r.Usage.InputTokens < 0 || r.Usage.OutputTokens < 0), r.Attempt < 0:
		return DropBadCount
	case len(r.ErrorKind) > maxKindBytes:
		return DropMalformed
	}
	if requestID != "" {
		if _, ok := jobOf(r.JobId, requestID); !ok {
			return DropWrongTarget
		}
	} else if r.JobId == "" {
		return DropNoJobID
	}
	if why := checkToolCalls(r.ToolCalls); why != "" { // they reach the consensus as they are
		return why
	}
	return checkRateLimit(r.RateLimit)
}

// checkCancelRequest checks a request's cancellation, sent to the coordinator of requestID: its code is
// one the request can end with, and it is for this request (or for all, at shutdown).
func checkCancelRequest(m *messages.CancelRequest, requestID string) string {
	switch {
	case m == nil:
		return DropMalformed
	case m.Code != string(resilience.ClientClosed) && m.Code != string(resilience.ShuttingDown):
		return DropMalformed
	case m.RequestId != "" && m.RequestId != requestID:
		return DropWrongTarget
	}
	return ""
}

// CheckCancel checks a cancellation sent to the request supervisor: a code a request can end with,
// and all requests cancelled at once only by the shutdown.
func CheckCancel(m *messages.CancelRequest) string {
	switch {
	case m == nil:
		return DropMalformed
	case m.Code != string(resilience.ClientClosed) && m.Code != string(resilience.ShuttingDown):
		return DropMalformed
	case m.RequestId == "" && m.Code != string(resilience.ShuttingDown):
		return DropNoRequestID
	}
	return ""
}

// CheckRouteRequest checks a request the request supervisor is to run: whom to answer, an id fit to
// name an actor and its jobs, a task, a real timeout, an output format and tools within the bounds its
// consensus input is held to.
func CheckRouteRequest(m *messages.RouteRequest, hasSender bool) string {
	switch {
	case m == nil:
		return DropMalformed
	case !hasSender:
		return DropNoReplyTo
	}
	if r := checkID(m.RequestId, DropNoRequestID); r != "" {
		return r
	}
	switch {
	case strings.ContainsAny(m.RequestId, "/$"): // a path separator, or protoactor's prefix of generated names
		return DropMalformed
	case m.Task == "":
		return DropMalformed
	case m.TimeoutSeconds != nil && problems.Timeout(*m.TimeoutSeconds) != "":
		return DropBadNumber
	case m.ReceivedAt != nil && m.ReceivedAt.CheckValid() != nil:
		return DropBadTime
	}
	return checkFormat(m.GetAsk().GetResponseFormat(), m.GetAsk().GetTools())
}

// checkAsk checks a question to the recorder: someone to answer and, when it concerns one record, its
// id (withID false: a flush).
func checkAsk(hasSender bool, requestID string, withID bool) string {
	if !hasSender {
		return DropNoReplyTo
	}
	if withID {
		return checkID(requestID, DropNoRequestID)
	}
	return ""
}

// checkExecution checks a record handed to the recorder.
func checkExecution(e *messages.Execution) string {
	if e == nil {
		return DropMalformed
	}
	return checkID(e.RequestId, DropNoRequestID)
}

// progressEvents are the steps a coordinator tells a request's listener.
var progressEvents = map[string]bool{"classified": true, "selected": true, "dispatched": true, "reply": true, "retry": true, "consensus": true}

// checkProgress checks a step told to the listener of requestID (empty: of any request).
func checkProgress(p *messages.Progress, requestID string) string {
	switch {
	case p == nil:
		return DropMalformed
	case requestID != "" && p.RequestId != requestID:
		return DropWrongTarget
	case !progressEvents[p.Event]:
		return DropMalformed
	case badMs(p.ElapsedMs), badMs(p.LatencyMs), badMs(p.DelayMs), !finite(p.Confidence):
		return DropBadNumber
	case p.Attempt < 0 || p.Attempt > MaxAttempt:
		return DropBadCount
	}
	return ""
}

// check says why a message is dropped, or "": what a job's message says must be of this request's
// jobs (and, for a result, of the job's model); a consensus answer, or a dead letter, must answer the
// consensus asked; nothing about the calls is taken before the calls are planned.
func (c *CoordinatorActor) check(msg any) string {
	switch m := msg.(type) {
	case *messages.Permit:
		return c.jobCheck(checkPermit(m, c.req.RequestId), m.GetJobId())
	case *messages.JobQueued:
		return c.jobCheck(checkJobQueued(m, c.req.RequestId), m.GetJobId())
	case *messages.JobStarted:
		return c.jobCheck(checkJobStarted(m, c.req.RequestId), m.GetJobId())
	case *messages.JobResult:
		why := c.jobCheck(checkJobResult(m, c.req.RequestId), m.GetJobId())
		if why == "" {
			if seq, _ := jobOf(m.JobId, c.req.RequestId); c.machine.Job(seq).Slot.Model != m.Model {
				return DropWrongTarget
			}
		}
		return why
	case *messages.Delta:
		switch {
		case c.req.StreamTo == nil || m.RequestId != c.req.RequestId:
			return DropUnexpected
		case m.JobId == c.req.RequestId+"/arbiter": // the synthesis of the arbiter, from the consensus actor
			if c.consensus == nil {
				return DropUnexpected
			}
			return ""
		}
		return c.jobCheck("", m.GetJobId())
	case *messages.CancelRequest:
		return checkCancelRequest(m, c.req.RequestId)
	case *messages.ConsensusResult:
		if !c.consulting {
			return DropUnexpected
		}
		return checkConsensusResult(m, len(c.answers))
	}
	return ""
}

// jobCheck adds to a job message's own check that the job exists: the machine made it.
func (c *CoordinatorActor) jobCheck(why, jobID string) string {
	if why != "" {
		return why
	}
	if seq, _ := jobOf(jobID, c.req.RequestId); c.machine == nil || c.machine.Job(seq) == nil {
		return DropWrongTarget
	}
	return ""
}

// CheckRewards checks a batch of rewards the bandit supervisor hands to the arms' writer: not empty
// and bounded; the writer checks each reward.
func CheckRewards(b *messages.Rewards) string {
	switch {
	case b == nil || len(b.Rewards) == 0:
		return DropMalformed
	case len(b.Rewards) > MaxRewards:
		return DropBadCount
	}
	return ""
}
