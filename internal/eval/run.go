package eval

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// baselines fills in, per dataset and overall, the best single model and the oracle ensemble.
func baselines(rep *Report, items []item, h hindsightTable, opts Options) {
	byDataset := map[string][]item{}
	for _, it := range items {
		byDataset[it.rec.Dataset] = append(byDataset[it.rec.Dataset], it)
	}
	overall := &DatasetReport{Runs: map[string]*RunResult{}}
	var singleRight, oracleRight float64
	for name, its := range byDataset {
		top := ranked(h.byDataset[name])
		d := &DatasetReport{Prompts: len(its), Runs: map[string]*RunResult{}}
		d.BestSingle = Baseline{Models: top[:1], Accuracy: h.byDataset[name][top[0]]}
		k := min(opts.Workers, len(top))
		d.Oracle = Baseline{Models: top[:k]}
		right := 0
		for _, it := range its {
			if oracleVote(it, top[:k], h.byDataset[name]) {
				right++
			}
		}
		d.Oracle.Accuracy = float64(right) / float64(len(its))
		rep.Datasets[name] = d
		overall.Prompts += len(its)
		singleRight += d.BestSingle.Accuracy * float64(len(its))
		oracleRight += float64(right)
		overall.BestSingle.Models = append(overall.BestSingle.Models, name+": "+top[0])
	}
	sort.Strings(overall.BestSingle.Models)
	overall.BestSingle.Accuracy = singleRight / float64(overall.Prompts)
	overall.Oracle = Baseline{Models: []string{fmt.Sprintf("each dataset's top %d", opts.Workers)}, Accuracy: oracleRight / float64(overall.Prompts)}
	rep.Overall = overall
}

// oracleVote is majority voting among fixed models with Conclave's consensus: equivalent answers grouped,
// ties going to the group of the better models (their hindsight accuracy is their capability). Models
// that gave no answer do not vote.
func oracleVote(it item, models []string, acc map[string]float64) bool {
	var resps []consensus.Response
	for _, m := range models {
		r, ok := it.rec.Answers[m]
		if !ok || r.Answer == nil || *r.Answer == "" {
			continue
		}
		resps = append(resps, consensus.Response{Model: m, Text: *r.Answer, Capability: acc[m]})
	}
	if len(resps) == 0 {
		return false
	}
	kind, _ := consensus.ParseKind(it.rec.Kind)
	res, err := consensus.Decide(consensus.Input{Strategy: blueprints.Majority, Responses: resps, Kind: kind})
	return err == nil && correct(it.rec.Kind, res.Answer, *it.rec.Gold)
}

// newEngine starts the real pipeline for a run over the items, on the replayed answers.
func newEngine(items []item, run Run, opts Options) (*engine.Engine, error) {
	cfg := config.Default()
	cfg.Seed = opts.Seed
	cfg.NodeID = "eval" // the node id enters the random streams: fixed, so a seed replays on any machine
	cfg.Policy = run.Policy
	reward, dependence := run.reward()
	cfg.Reward, cfg.Dependence = reward, dependence
	switch reward {
	case "gold", "feedback":
		cfg.Reward = "external" // the truth, or the judge's scores, come back through the feedback API
	case "gold5":
		cfg.Reward = "reliability" // label-free, but for the share of prompts whose truth comes back
	}
	cfg.RateLimits.Providers = map[string]ratelimit.Limits{}
	cfg.WorkerSlots = 64
	// Replayed providers have nothing to recover from: the backoff schedule shrinks to microseconds so
	// quorum retries cost no wall time (their count and order are unchanged).
	cfg.Retry.Scale = 0.0001
	cat, err := opts.Data.Catalog()
	if err != nil {
		return nil, err
	}
	bps, err := evalBlueprints(items, opts)
	if err != nil {
		return nil, err
	}
	backend := providers.NewReplay(opts.Data, opts.Seed)
	backend.Latency = opts.Latency
	return engine.New(engine.Options{Config: cfg, Log: opts.Log, Catalog: cat, Backend: backend, Blueprints: bps})
}

// ask routes one replayed prompt, saying the kind of answer it asks for.
func ask(ctx context.Context, e *engine.Engine, id string, it item, kind string) (*messages.RouteRequest, *messages.Execution, error) {
	md, _ := structpb.NewStruct(map[string]any{"answer_kind": kind})
	req := &messages.RouteRequest{RequestId: id, Task: it.rec.Prompt, Category: it.category, Models: it.models,
		ReceivedAt: timestamppb.New(time.Now()), Metadata: md}
	exec, err := e.Route(ctx, req)
	return req, exec, err
}

// absorbed counts the rewards sent to each category's arms (and to the arms across categories).
type absorbed map[string]int64

// settle adds a prompt's n rewards in category and waits until the arms have them all, so that the
// next selection sees what this prompt taught: rewards travel to the arms asynchronously.
func (a absorbed) settle(ctx context.Context, e *engine.Engine, category string, n int) error {
	for _, c := range []string{category, bandit.AllCategories} {
		a[c] += int64(n)
		if err := e.Settle(ctx, c, a[c]); err != nil {
			return err
		}
	}
	return nil
}

// online runs one configuration of the real pipeline over the items, in order.
func online(ctx context.Context, rep *Report, items []item, h hindsightTable, run Run, opts Options) error {
	e, err := newEngine(items, run, opts)
	if err != nil {
		return err
	}
	defer e.Shutdown(context.Background())

	name := run.Name()
	results := map[string]*RunResult{}
	for ds := range rep.Datasets {
		results[ds] = &RunResult{}
		rep.Datasets[ds].Runs[name] = results[ds]
	}
	overall := &RunResult{}
	rep.Overall.Runs[name] = overall
	rewards := absorbed{}
	audit := audited(len(items), opts.Seed)
	reward, _ := run.reward()
	bestN := map[string]float64{}
	seen := map[string]int{}
	for i, it := range items {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The replay data says what kind of answer each task asks for, as a caller who knows would.
		req, exec, err := ask(ctx, e, fmt.Sprintf("eval-%d", i), it, it.rec.Kind)
		if err != nil {
			return err
		}
		d := results[it.rec.Dataset]
		right := exec.StatusCode == 200 && correct(it.rec.Kind, exec.Answer, *it.rec.Gold)
		seen[it.rec.Dataset]++
		secondHalf := map[*RunResult]bool{d: seen[it.rec.Dataset] > rep.Datasets[it.rec.Dataset].Prompts/2, overall: i >= len(items)/2}
		for _, r := range []*RunResult{d, overall} {
			switch {
			case exec.StatusCode != 200:
				r.Failed++
			case right:
				r.Correct++
			}
			if exec.Degraded {
				r.Degraded++
			}
			r.prompts++
			r.Calls += len(exec.GetResults())
			if secondHalf[r] {
				r.secondSeen++
				if right {
					r.secondRight++
				}
			}
		}
		n := len(exec.BanditUpdates)
		if (reward == "gold" || reward == "gold5" && audit[i]) && exec.StatusCode == 200 {
			fb, err := e.Feedback(ctx, &messages.RecordFeedback{RequestId: req.RequestId, Answer: it.rec.Gold})
			if err != nil {
				return err
			}
			n += len(fb.Updates)
		}
		if err := rewards.settle(ctx, e, exec.GetClassification().GetCategory(), n); err != nil {
			return err
		}
		if _, ok := bestN[it.key]; !ok {
			bestN[it.key] = h.bestN(it.key, it.models, opts.Workers)
		}
		regret := bestN[it.key] // nothing selected: all of it
		late := seen[it.rec.Dataset] > rep.Datasets[it.rec.Dataset].Prompts*3/4
		if picks := exec.GetSelection().GetPicks(); len(picks) > 0 {
			sum := 0.0
			for _, p := range picks {
				sum += h.byCategory[it.key][p.Model]
				if late {
					if d.picks == nil {
						d.picks = map[string]int{}
					}
					d.picks[p.Model]++
				}
			}
			regret -= sum / float64(len(picks))
		}
		d.Regret += regret
		overall.Regret += regret
		if seen := i + 1; seen%opts.Every == 0 || seen == len(items) {
			point(rep, seen, name, overall)
		}
		if opts.Progress != nil {
			opts.Progress(name, i+1, len(items))
		}
	}
	all := []*RunResult{overall}
	for _, r := range results {
		all = append(all, r)
	}
	for _, r := range all {
		r.ModelsPerPrompt = float64(r.Calls) / float64(max(r.prompts, 1))
		r.SecondHalf = float64(r.secondRight) / float64(max(r.secondSeen, 1))
	}
	for ds, r := range results {
		r.Accuracy = float64(r.Correct) / float64(rep.Datasets[ds].Prompts)
		for m, n := range r.picks {
			r.Selected = append(r.Selected, Count{Model: m, N: n})
		}
		sort.Slice(r.Selected, func(i, j int) bool {
			if r.Selected[i].N != r.Selected[j].N {
				return r.Selected[i].N > r.Selected[j].N
			}
			return r.Selected[i].Model < r.Selected[j].Model
		})
		r.Selected = r.Selected[:min(len(r.Selected), 8)]
	}
	overall.Accuracy = float64(overall.Correct) / float64(len(items))
	return nil
}

// GoldShare is the share of prompts whose true answer a gold5 run gives back.
const GoldShare = 0.05

// audited draws the prompts whose truth comes back under gold5: a GoldShare of them, drawn from the
// seed alone, so every run of a seed (and every machine) audits the same prompts.
func audited(n int, seed uint64) []bool {
	rng := rand.New(rand.NewPCG(seed, 0x601d5))
	out := make([]bool, n)
	for i := range out {
		out[i] = rng.Float64() < GoldShare
	}
	return out
}

func point(rep *Report, seen int, run string, overall *RunResult) {
	var p *Point
	for i := range rep.Timeline {
		if rep.Timeline[i].Prompts == seen {
			p = &rep.Timeline[i]
		}
	}
	if p == nil {
		rep.Timeline = append(rep.Timeline, Point{Prompts: seen, Runs: map[string]PointResult{}})
		p = &rep.Timeline[len(rep.Timeline)-1]
	}
	p.Runs[run] = PointResult{Accuracy: float64(overall.Correct) / float64(seen), Regret: overall.Regret}
}

// evalBlueprints adds a blueprint per evaluated category: the configured workers, quorum and strategy.
func evalBlueprints(items []item, opts Options) (*blueprints.Set, error) {
	set, err := blueprints.Embedded()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var extra []blueprints.Blueprint
	for _, it := range items {
		if it.category == "" || seen[it.category] {
			continue
		}
		seen[it.category] = true
		extra = append(extra, blueprints.Blueprint{Name: it.category, Description: "evaluation of " + it.category,
			Workers: opts.Workers, TimeoutSeconds: opts.Timeout, Strategy: blueprints.Strategy(opts.Strategy), MinResponses: opts.Quorum,
			Quorum: opts.QuorumMode})
	}
	if opts.CategoryBy == "classify" {
		// The classifier picks among the 22 blueprints; give them the evaluation's shape too.
		for _, b := range set.All() {
			b.Workers, b.MinResponses, b.Strategy, b.TimeoutSeconds = opts.Workers, opts.Quorum, blueprints.Strategy(opts.Strategy), opts.Timeout
			b.Quorum = opts.QuorumMode
			extra = append(extra, b)
		}
	}
	return set.With(extra...)
}
