// Package feedback owns step 9 of a request: turning how each call went into one reward per model for
// its bandit arm, when the request runs (judged by the consensus) and later (judged by a caller who
// learned the true answer). Everything here is a pure function of its input.
package feedback

import (
	"errors"
	"fmt"
	"sort"

	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// Mode is how a request's answers are rewarded when it runs.
type Mode string

// Reward modes.
const (
	// Reliability rewards an answer with the probability that it is right, given every answer and the
	// models' estimated accuracies (the reliability-weighted vote's posterior), where the vote has one;
	// elsewhere (free text, another strategy) as Agreement does.
	Reliability Mode = "reliability"
	// Agreement rewards an answer that contributed to the consensus with 1, any other with 0.
	Agreement Mode = "agreement"
	// Arbiter rewards an answer with its consensus score (the arbiter's rating under rotating).
	Arbiter Mode = "arbiter"
	// External leaves answers to callers who learn the truth (POST /executions/:id/feedback).
	External Mode = "external"
)

// ParseMode reads a reward mode; empty means Agreement.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return Agreement, nil
	case Reliability, Agreement, Arbiter, External:
		return m, nil
	}
	return "", fmt.Errorf("unknown reward mode %q (want reliability, agreement, arbiter or external)", s)
}

// Call is one settled call as feedback sees it.
type Call struct {
	Model string
	// Arm is what the call says about the model (resilience.Blame).
	Arm resilience.ArmEffect
	// TimedOut names a penalty a timeout rather than an error.
	TimedOut bool
	Text     string
	// Contributed and Score are the consensus's view of an answer that went to it. Where the vote's
	// deciders chose the answer, Contributed is its agreement with the plain majority of all answers,
	// so that the deciders are not rewarded for the decisions they alone made.
	Contributed bool
	Score       float64
	// Posterior is the answer's probability of being right by the reliability-weighted vote; nil when
	// the decision had none.
	Posterior *float64
	// Invalid marks an answer that is not what the request asked for (not JSON, against its schema, a
	// call of no offered tool): a poor answer whatever the judge, known without any judge.
	Invalid bool
	// Later marks a call an adaptive quorum made only because its earlier waves did not settle the
	// request. Such a model sees only the prompts the first wave found hard, so judging its answer
	// would rate it on a harder share than its own: its arm learns from its faults, its invalid
	// answers, and the answers it gives when asked first (or by an audit that asks everyone).
	Later bool
}

// Update is one model's reward.
type Update struct {
	Model  string
	Reward float64
	Reason string
}

// Judge rewards an answer, or leaves the arm alone (ok false).
type Judge func(c Call) (reward float64, reason string, ok bool)

// Rewards gives each model one reward, by its best outcome in the request, in the order the models
// first appear: a judged answer ranks above a fault, the better judged answer above the worse, a
// timeout above an error. Faults of the model earn beta + 1, and so does an invalid answer, whatever
// the judge (even one that judges nothing now): its fault is as certain as an error's. Calls that say
// nothing of the model (a rate limit, a host or Conclave fault, a call cut by a short deadline or never
// sent) leave its arm alone, and so does a later wave's valid answer (Call.Later).
func Rewards(calls []Call, judge Judge) []Update {
	type best struct {
		Update
		rank float64
		skip bool
	}
	byModel := map[string]*best{}
	var order []string
	for _, c := range calls {
		var u Update
		var rank float64
		skip := false
		switch c.Arm {
		case resilience.Judged:
			if c.Invalid {
				u, rank = Update{c.Model, 0, "invalid"}, 2
				break
			}
			if c.Later { // it answered, so no fault of an earlier attempt stands; but it is not judged
				u, rank, skip = Update{c.Model, 0, "later_wave"}, 2, true
				break
			}
			reward, reason, ok := judge(c)
			u, rank, skip = Update{c.Model, reward, reason}, 2+reward, !ok
		case resilience.Penalty:
			u, rank = Update{c.Model, 0, "error"}, 0
			if c.TimedOut {
				u.Reason, rank = "timeout", 1
			}
		default:
			continue
		}
		b, seen := byModel[c.Model]
		if !seen {
			order = append(order, c.Model)
		}
		if !seen || rank > b.rank {
			byModel[c.Model] = &best{u, rank, skip}
		}
	}
	out := make([]Update, 0, len(order))
	for _, m := range order {
		if b := byModel[m]; !b.skip {
			out = append(out, b.Update)
		}
	}
	return out
}

// ByConsensus judges answers when the request runs: by their contribution to the consensus, by their
// consensus score, or not at all (External).
func ByConsensus(mode Mode) Judge {
	return func(c Call) (float64, string, bool) {
		switch mode {
		case External:
			return 0, "", false
		case Arbiter:
			return c.Score, "arbiter_score", true
		case Reliability:
			if c.Posterior != nil {
				return *c.Posterior, "posterior", true
			}
		}
		if c.Contributed {
			return 1, "contributed", true
		}
		return 0, "poor", true
	}
}

// ErrNothingToJudge is returned for feedback on an execution without an answer.
var ErrNothingToJudge = errors.New("the execution has no answer to judge")

// FromCaller turns a caller's feedback on an execution's answers into rewards: with the true answer, 1
// for an answer equivalent to it (by the answer kind) and 0 otherwise; with scores, each named model's
// score. Only answers are judged: faults were penalised when the request ran, and so were invalid
// answers, which the true answer does not judge again (a caller's explicit score still counts).
func FromCaller(answers []Call, truth *string, scores map[string]float64, kind consensus.Kind) ([]Update, error) {
	if (truth == nil) == (len(scores) == 0) {
		return nil, errors.New("give either the true answer or scores per model")
	}
	var judged []Call
	answered := map[string]bool{}
	for _, c := range answers {
		if c.Arm == resilience.Judged {
			judged = append(judged, c)
			answered[c.Model] = true
		}
	}
	if len(judged) == 0 {
		return nil, ErrNothingToJudge
	}
	if truth != nil {
		valid := judged[:0:0]
		for _, c := range judged {
			if !c.Invalid {
				valid = append(valid, c)
			}
		}
		return Rewards(valid, func(c Call) (float64, string, bool) {
			if consensus.Equivalent(kind, c.Text, *truth) {
				return 1, "feedback_correct", true
			}
			return 0, "feedback_wrong", true
		}), nil
	}
	models := make([]string, 0, len(scores))
	for m := range scores {
		models = append(models, m)
	}
	sort.Strings(models)
	var out []Update
	for _, m := range models {
		s := scores[m]
		if !answered[m] {
			return nil, fmt.Errorf("model %q did not answer in this execution", m)
		}
		if !(s >= 0 && s <= 1) {
			return nil, fmt.Errorf("score of %q must be between 0 and 1, got %g", m, s)
		}
		out = append(out, Update{m, s, "feedback_score"})
	}
	return out, nil
}
