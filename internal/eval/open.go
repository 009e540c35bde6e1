package eval

import (
	"context"
	"fmt"
	"sort"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/messages"
)

// OpenRuns are the runs on free-text prompts: the product without labels, and the same with the
// judge's preference of every answer given back as feedback scores after each prompt.
var OpenRuns = []Run{{"thompson", "agreement"}, {"thompson", "feedback"}}

// OpenReport scores the answers Conclave returns to free-text prompts (alpaca-eval) by the judge's
// preference of the model that wrote them, against the panel it asked.
type OpenReport struct {
	Prompts int `json:"prompts"`
	// BestSingle is the model with the highest mean preference in hindsight, over the prompts.
	BestSingle Baseline            `json:"best_single"`
	Runs       map[string]*OpenRun `json:"runs"`
}

// OpenRun is one run's mean preferences.
type OpenRun struct {
	// Preference is the mean judge preference of the answer returned.
	Preference float64 `json:"preference"`
	// RandomMember is the mean over prompts of the asked panel's mean preference: a random pick.
	RandomMember float64 `json:"random_member"`
	// BestMember is the mean over prompts of the asked panel's best preference: a perfect pick.
	BestMember      float64 `json:"best_member"`
	Failed          int     `json:"failed_requests"`
	ModelsPerPrompt float64 `json:"models_per_prompt"`
}

// openItems are the free-text prompts with judged answers, each with the models a judge scored, in
// the seed's order.
func openItems(records []*providers.ReplayRecord, seed uint64) []item {
	var items []item
	for _, r := range records {
		if r.Gold != nil {
			continue
		}
		it := item{rec: r, category: sanitize(r.Dataset)}
		it.key = it.category
		for m, a := range r.Answers {
			if a.Preference != nil && a.Text != "" {
				it.models = append(it.models, m)
			}
		}
		if len(it.models) < 2 {
			continue
		}
		sort.Strings(it.models)
		items = append(items, it)
	}
	shuffle(items, seed)
	return items
}

// evaluateOpen runs the open runs over the free-text prompts.
func evaluateOpen(ctx context.Context, items []item, opts Options) (*OpenReport, error) {
	rep := &OpenReport{Prompts: len(items), Runs: map[string]*OpenRun{}}
	sum, n := map[string]float64{}, map[string]int{}
	for _, it := range items {
		for _, m := range it.models {
			sum[m] += *it.rec.Answers[m].Preference
			n[m]++
		}
	}
	mean := map[string]float64{}
	for m := range sum {
		mean[m] = sum[m] / float64(n[m])
	}
	if top := ranked(mean); len(top) > 0 {
		rep.BestSingle = Baseline{Models: top[:1], Accuracy: mean[top[0]]}
	}
	for _, run := range OpenRuns {
		r, err := openRun(ctx, items, run, opts)
		if err != nil {
			return nil, fmt.Errorf("run %s on free text: %w", run.Name(), err)
		}
		rep.Runs[run.Name()] = r
	}
	return rep, nil
}

func openRun(ctx context.Context, items []item, run Run, opts Options) (*OpenRun, error) {
	e, err := newEngine(items, run, opts)
	if err != nil {
		return nil, err
	}
	defer e.Shutdown(context.Background())
	out := &OpenRun{}
	calls := 0
	rewards := absorbed{}
	for i, it := range items {
		req, exec, err := ask(ctx, e, fmt.Sprintf("eval-open-%d", i), it, "text")
		if err != nil {
			return nil, err
		}
		calls += len(exec.GetResults())
		pref := func(m string) float64 { return *it.rec.Answers[m].Preference }
		var panel []string
		for _, p := range exec.GetSelection().GetPicks() {
			panel = append(panel, p.Model)
		}
		if len(panel) > 0 {
			total, best := 0.0, 0.0
			for _, m := range panel {
				total += pref(m)
				best = max(best, pref(m))
			}
			out.RandomMember += total / float64(len(panel))
			out.BestMember += best
		}
		if exec.StatusCode != 200 {
			out.Failed++
		} else {
			out.Preference += pref(exec.GetDecision().GetChosenModel())
		}
		n := len(exec.BanditUpdates)
		if run.Reward == "feedback" && exec.StatusCode == 200 {
			scores := map[string]float64{}
			for _, r := range exec.GetResults() {
				if r.Status == "ok" {
					scores[r.Model] = pref(r.Model)
				}
			}
			fb, err := e.Feedback(ctx, &messages.RecordFeedback{RequestId: req.RequestId, Scores: scores})
			if err != nil {
				return nil, err
			}
			n += len(fb.Updates)
		}
		if err := rewards.settle(ctx, e, it.category, n); err != nil {
			return nil, err
		}
		if opts.Progress != nil {
			opts.Progress(run.Name()+" (free text)", i+1, len(items))
		}
	}
	k := float64(max(len(items), 1))
	out.Preference /= k
	out.RandomMember /= k
	out.BestMember /= k
	out.ModelsPerPrompt = float64(calls) / k
	return out, nil
}
