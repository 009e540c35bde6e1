package actors

import (
	"math"
	"strings"

	"github.com/conclave-ai/conclave/internal/arms"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/collect"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
)

// What an actor checks before it acts on a message: only what keeps its own state sound. Requests are
// validated once, at the doors (internal/core/intake), and every other message is made by Conclave's
// own code in this process, so an actor does not check them again. What remains keeps an actor's
// memory bounded (a provider and its workers keep state only for their own catalog models, the arms
// and the reliability estimator only for a catalog model and a board category), keeps learning finite
// (a reward in [0, 1], finite consensus scores), keeps what an actor indexes by in range (a job of its
// own request that the coordinator's machine made, a consensus answer with an entry per candidate, a
// vote's groups, the ids the recorder keeps records and calls by), and checks the one message that
// comes from outside the process (another controller's breaker opening, through Redis). A message
// that fails a check is dropped: counted and logged by Deps.Drop, never a panic, and it changes no
// state. The checks are pure: each returns why a message is dropped, or "".

// Why a message is dropped: the reason label of conclave_actor_messages_dropped_total.
const (
	DropNoRequestID     = "no_request_id"    // a record without its request id, which the recorder keeps it by
	DropUnknownModel    = "unknown_model"    // a model the live catalog does not hold
	DropOtherProvider   = "other_provider"   // a model of another provider
	DropUnknownCategory = "unknown_category" // a category with no blueprint
	DropBadNumber       = "bad_number"       // a score that is NaN or infinite
	DropBadReward       = "bad_reward"       // a reward outside [0, 1]
	DropNoTime          = "no_time"          // a timestamp missing where it is required
	DropBadTime         = "bad_time"         // a timestamp that is invalid
	DropMalformed       = "malformed"        // no message, one shaped past what the receiver indexes, or one without an id it needs
	DropWrongTarget     = "wrong_target"     // meant for another actor (another provider, job or request)
	DropDuplicate       = "duplicate_job"    // a job id the actor already holds
	DropUnexpected      = "unexpected"       // an answer to nothing the actor asked
	DropUnknownMessage  = "unknown_message"  // a type the actor does not take
	DropActorStopped    = "actor_stopped"    // for a child its supervisor stopped for good
	DropSpawnFailed     = "spawn_failed"     // its child could not be started
)

// DropNoReplyTo is the reason of a question without the address its answer is due at: an answer sent
// to no address would crash the actor that sends it.
const DropNoReplyTo = "no_reply_to"

// MaxTokens caps a token figure Conclave puts in a message (an int32): two orders of magnitude above
// the largest context window.
const MaxTokens = 1 << 27

// finite reports a number that is neither NaN nor infinite.
func finite(xs ...float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// knownModel reports whether the live catalog holds a model. A nil catalog holds none.
func knownModel(cat *catalog.Catalog, model string) bool {
	if cat == nil || model == "" {
		return false
	}
	_, ok := cat.Get(model)
	return ok
}

// checkModel checks that a model is in the live catalog and is provider's: a provider and its workers
// keep state only for their own catalog models. A model discovery just took out of the catalog fails
// it too, so its asker is told rather than left waiting for its deadline.
func checkModel(cat *catalog.Catalog, provider, model string) string {
	if !knownModel(cat, model) {
		return DropUnknownModel
	}
	if m, _ := cat.Get(model); m.Provider != provider {
		return DropOtherProvider
	}
	return ""
}

// checkPeerOpened checks another controller's breaker opening, sent to provider's actor. It comes
// through Redis, from outside this process, so it is checked whole.
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

// checkArmReward checks a reward for an arm: only a catalog model and a category of the board have
// one, so the arms are bounded by the catalog times the categories, whatever names rewards carry; and
// only a reward in [0, 1] keeps alpha and beta finite and growing by at most one.
func checkArmReward(r *messages.Reward, cat *catalog.Catalog, board *arms.Board) string {
	switch {
	case !knownModel(cat, r.GetModel()):
		return DropUnknownModel
	case !board.HasCategory(r.GetCategory()):
		return DropUnknownCategory
	case !finite(r.GetReward()) || r.GetReward() < 0 || r.GetReward() > 1:
		return DropBadReward
	}
	return ""
}

// CheckVotes checks a reliability-weighted vote: a blueprint's category and catalog models only, so
// the estimator's state is bounded like the arms'; and a group per model, each an answer of the
// prompt (or -1, none), with a verdict per model when it carries a caller's truth, since the estimator
// indexes by them and sizes its tables by the groups.
func CheckVotes(v *messages.Votes, cat *catalog.Catalog, board *arms.Board) string {
	switch {
	case v.GetCategory() == bandit.AllCategories || !board.HasCategory(v.GetCategory()):
		return DropUnknownCategory
	case len(v.Models) != len(v.Groups), len(v.Right) > 0 && len(v.Right) != len(v.Models), len(v.Later) > 0 && len(v.Later) != len(v.Models):
		return DropMalformed
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

// checkConsensusResult checks a consensus answer to n candidates in the shape the coordinator indexes
// by candidate: a failure (no_valid_answer with a ballot per candidate), or a decision with a score, a
// weight and a verdict for each, and a ballot for each when it voted on ballots. Its scores and
// weights are what the arms learn from, so they must be finite.
func checkConsensusResult(r *messages.ConsensusResult, n int) string {
	d := r.GetDecision()
	switch {
	case r.GetFailure() != "":
		if r.FailureCode == string(resilience.NoValidAnswer) && len(d.GetBallots()) != n {
			return DropMalformed
		}
		return ""
	case d == nil, len(r.Contributed) < n, len(r.Weighted) < n, len(d.Scores) < n, len(r.Groups) != 0 && len(r.Groups) != n,
		d.Chosen < 0 || int(d.Chosen) >= max(n, 1), len(d.Ballots) != 0 && len(d.Ballots) != n:
		return DropMalformed
	case !finite(r.Weighted...) || !finite(d.Scores...):
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

// check says why the coordinator drops a message, or "": what a job's message says must be of a job
// of this request that its machine made, since the machine indexes by the job's number; a piece of a
// streamed answer needs a caller to relay it to; a consensus answer must answer the consensus asked,
// in the shape the coordinator indexes.
func (c *CoordinatorActor) check(msg any) string {
	switch m := msg.(type) {
	case *messages.Permit, *messages.JobQueued, *messages.JobStarted:
		return c.checkJob(m.(interface{ GetJobId() string }).GetJobId())
	case *messages.JobResult:
		if why := c.checkJob(m.GetJobId()); why != "" {
			return why
		}
		// A result is its job's: another model's would be recorded, and taught, as this one's.
		if seq, _ := jobOf(m.JobId, c.req.RequestId); m.Model != "" && m.Model != c.machine.Job(seq).Slot.Model {
			return DropWrongTarget
		}
		return ""
	case *messages.Delta:
		return c.checkDelta(m)
	case *messages.ConsensusResult:
		if !c.consulting {
			return DropUnexpected
		}
		return checkConsensusResult(m, len(c.answers))
	}
	return ""
}

// checkJob checks that jobID names a job of this request that the machine made; nothing about the
// calls is taken before the calls are planned.
func (c *CoordinatorActor) checkJob(jobID string) string {
	if seq, ok := jobOf(jobID, c.req.RequestId); !ok || c.machine == nil || c.machine.Job(seq) == nil {
		return DropWrongTarget
	}
	return ""
}

// checkDelta checks a piece of a streamed answer: the request streams (its caller's address may be
// nil), and the piece is of one of its jobs, or of its arbiter's synthesis while the consensus runs.
func (c *CoordinatorActor) checkDelta(d *messages.Delta) string {
	switch {
	case !c.streams():
		return DropUnexpected
	case d.GetJobId() == execution.ArbiterCall(c.req.RequestId):
		if c.consensus == nil {
			return DropUnexpected
		}
		return ""
	}
	return c.checkJob(d.GetJobId())
}
