package actors

import (
	"github.com/conclave-ai/conclave/internal/arms"
	"net/http"

	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/feedback"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
)

// FeedbackUpdates turns a caller's feedback on an execution into rewards, one per model that answered
// (feedback.FromCaller), with each arm's state before the update for the record.
func FeedbackUpdates(exec *messages.Execution, fb *messages.RecordFeedback, arms *arms.Board) ([]*messages.BanditUpdate, error) {
	category := exec.GetClassification().GetCategory()
	kind, err := consensus.ParseKind(exec.GetClassification().GetAnswerKind())
	if err != nil {
		kind = consensus.Text
	}
	var answers []feedback.Call
	for _, r := range exec.Results {
		if r.Status == "ok" {
			answers = append(answers, feedback.Call{Model: r.Model, Arm: resilience.Judged, Text: r.Text, Later: r.Wave > 0})
		}
	}
	updates, err := feedback.FromCaller(answers, fb.Answer, fb.Scores, kind)
	if err != nil {
		return nil, err
	}
	out := make([]*messages.BanditUpdate, len(updates))
	for i, u := range updates {
		a := arms.Arm(category, u.Model)
		out[i] = &messages.BanditUpdate{Model: u.Model, Category: category, Reward: u.Reward, Reason: u.Reason, AlphaBefore: a.Alpha, BetaBefore: a.Beta}
	}
	return out, nil
}

// TruthVotes is what a caller's true answer tells the reliability estimator: which models answered
// right, nil when the feedback gave scores rather than the answer. The right answers are one group
// and each wrong one its own: the truth says no more of how the wrong ones compare.
func TruthVotes(requestID string, fb *messages.RecordFeedback, updates []*messages.BanditUpdate) *messages.Votes {
	if fb.Answer == nil || len(updates) == 0 {
		return nil
	}
	v := &messages.Votes{Category: updates[0].Category, RequestId: requestID}
	wrong := int32(0)
	for _, u := range updates {
		right := u.Reward == 1 // the true answer rewards a right one with 1, a wrong one with 0
		g := int32(0)
		if !right {
			wrong++
			g = wrong
		}
		v.Models, v.Groups, v.Right = append(v.Models, u.Model), append(v.Groups, g), append(v.Right, right)
	}
	return v
}

func feedbackResult(status int, msg string) *messages.FeedbackResult {
	return &messages.FeedbackResult{Status: int32(status), Message: msg}
}

var (
	feedbackNotFound = feedbackResult(http.StatusNotFound, "no execution with this id")
	feedbackTwice    = feedbackResult(http.StatusConflict, "feedback was already given for this execution")
)
