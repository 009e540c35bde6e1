package actors

import (
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/conclave-ai/conclave/consensus"
	"github.com/conclave-ai/conclave/messages"
)

// FeedbackUpdates turns a caller's feedback on an execution into rewards, one per model that answered:
// with the true answer, 1 for a model whose answer agrees with it (the consensus package's notion of
// agreement) and 0 for one whose answer does not; with explicit scores, each named model's score.
// Timeouts and errors were already penalised when the request ran and are not counted again.
func FeedbackUpdates(exec *messages.Execution, fb *messages.RecordFeedback, arms *ArmBoard) ([]*messages.BanditUpdate, error) {
	if (fb.Answer == nil) == (len(fb.Scores) == 0) {
		return nil, errors.New("give either the true answer or scores per model")
	}
	category := exec.GetClassification().GetCategory()
	answered := map[string]string{}
	var order []string
	for _, r := range exec.Results {
		if _, seen := answered[r.Model]; r.Status == "ok" && !seen {
			answered[r.Model] = r.Text
			order = append(order, r.Model)
		}
	}
	if len(order) == 0 {
		return nil, errors.New("the execution has no answer to judge")
	}
	var updates []*messages.BanditUpdate
	add := func(model string, reward float64, reason string) {
		a := arms.Arm(category, model)
		updates = append(updates, &messages.BanditUpdate{Model: model, Category: category, Reward: reward, Reason: reason,
			AlphaBefore: a.Alpha, BetaBefore: a.Beta})
	}
	if fb.Answer != nil {
		for _, m := range order {
			if consensus.Similarity(answered[m], *fb.Answer) >= consensus.ContributionThreshold {
				add(m, 1, "feedback_correct")
			} else {
				add(m, 0, "feedback_wrong")
			}
		}
		return updates, nil
	}
	models := make([]string, 0, len(fb.Scores))
	for m := range fb.Scores {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		s := fb.Scores[m]
		if _, ok := answered[m]; !ok {
			return nil, fmt.Errorf("model %q did not answer in this execution", m)
		}
		if s < 0 || s > 1 {
			return nil, fmt.Errorf("score of %q must be between 0 and 1, got %g", m, s)
		}
		add(m, s, "feedback_score")
	}
	return updates, nil
}

func feedbackResult(status int, msg string) *messages.FeedbackResult {
	return &messages.FeedbackResult{Status: int32(status), Message: msg}
}

var (
	feedbackNotFound = feedbackResult(http.StatusNotFound, "no execution with this id")
	feedbackTwice    = feedbackResult(http.StatusConflict, "feedback was already given for this execution")
)
