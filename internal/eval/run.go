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

	o := newOnlineRun(e, rep, h, run, opts, len(items))
	for i, it := range items {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := o.step(ctx, i, it); err != nil {
			return err
		}
		if seen := i + 1; seen%opts.Every == 0 || seen == len(items) {
			point(rep, seen, o.name, o.overall)
		}
		if opts.Progress != nil {
			opts.Progress(o.name, i+1, len(items))
		}
	}
	o.finish()
	return nil
}

// onlineRun is one configuration's pass over the items: the engine it routes through, the results it
// fills per dataset and overall, and what it keeps between prompts.
type onlineRun struct {
	e      *engine.Engine
	rep    *Report
	h      hindsightTable
	opts   Options
	name   string
	reward string // the run's reward, without -dep
	// audit marks the prompts whose truth a gold5 run gives back, one per prompt of the run.
	audit    []bool
	results  map[string]*RunResult // by dataset
	overall  *RunResult
	absorbed absorbed
	// bestN caches the regret's reference per category; seen counts each dataset's prompts so far.
	bestN map[string]float64
	seen  map[string]int
}

// newOnlineRun enters the run's results in the report, per dataset and overall.
func newOnlineRun(e *engine.Engine, rep *Report, h hindsightTable, run Run, opts Options, total int) *onlineRun {
	reward, _ := run.reward()
	o := &onlineRun{e: e, rep: rep, h: h, opts: opts, name: run.Name(), reward: reward, audit: audited(total, opts.Seed),
		results: map[string]*RunResult{}, overall: &RunResult{}, absorbed: absorbed{}, bestN: map[string]float64{},
		seen: map[string]int{}}
	for ds := range rep.Datasets {
		o.results[ds] = &RunResult{}
		rep.Datasets[ds].Runs[o.name] = o.results[ds]
	}
	rep.Overall.Runs[o.name] = o.overall
	return o
}

// step routes the i-th prompt, scores its answer, gives back the rewards the run's signal calls for and
// waits until the arms have them, and adds the prompt's regret.
func (o *onlineRun) step(ctx context.Context, i int, it item) error {
	// The replay data says what kind of answer each task asks for, as a caller who knows would.
	req, exec, err := ask(ctx, o.e, fmt.Sprintf("eval-%d", i), it, it.rec.Kind)
	if err != nil {
		return err
	}
	ds := it.rec.Dataset
	d := o.results[ds]
	right := exec.StatusCode == 200 && correct(it.rec.Kind, exec.Answer, *it.rec.Gold)
	o.seen[ds]++
	d.count(exec, right, o.seen[ds] > o.rep.Datasets[ds].Prompts/2)
	o.overall.count(exec, right, i >= len(o.audit)/2)
	fed, err := o.feedback(ctx, i, it, req, exec)
	if err != nil {
		return err
	}
	if err := o.absorbed.settle(ctx, o.e, exec.GetClassification().GetCategory(), len(exec.BanditUpdates)+fed); err != nil {
		return err
	}
	picks := exec.GetSelection().GetPicks()
	if o.seen[ds] > o.rep.Datasets[ds].Prompts*3/4 {
		d.countPicks(picks)
	}
	regret := o.regret(it, picks)
	d.Regret += regret
	o.overall.Regret += regret
	return nil
}

// feedback gives the true answer of an answered prompt back, as gold does for every prompt and gold5
// for the audited ones, and returns how many rewards that made.
func (o *onlineRun) feedback(ctx context.Context, i int, it item, req *messages.RouteRequest, exec *messages.Execution) (int, error) {
	if !(o.reward == "gold" || o.reward == "gold5" && o.audit[i]) || exec.StatusCode != 200 {
		return 0, nil
	}
	fb, err := o.e.Feedback(ctx, &messages.RecordFeedback{RequestId: req.RequestId, Answer: it.rec.Gold})
	if err != nil {
		return 0, err
	}
	return len(fb.Updates), nil
}

// regret is a prompt's pseudo-regret: the mean hindsight accuracy of its category's best Workers
// models minus that of the models picked (all of it when none was).
func (o *onlineRun) regret(it item, picks []*messages.Pick) float64 {
	if _, ok := o.bestN[it.key]; !ok {
		o.bestN[it.key] = o.h.bestN(it.key, it.models, o.opts.Workers)
	}
	regret := o.bestN[it.key]
	if len(picks) == 0 {
		return regret
	}
	sum := 0.0
	for _, p := range picks {
		sum += o.h.byCategory[it.key][p.Model]
	}
	return regret - sum/float64(len(picks))
}

// finish turns the run's counts into its figures: calls and second-half accuracy everywhere, and per
// dataset the accuracy and the models most selected late.
func (o *onlineRun) finish() {
	all := []*RunResult{o.overall}
	for _, r := range o.results {
		all = append(all, r)
	}
	for _, r := range all {
		r.ModelsPerPrompt = float64(r.Calls) / float64(max(r.prompts, 1))
		r.SecondHalf = float64(r.secondRight) / float64(max(r.secondSeen, 1))
	}
	for ds, r := range o.results {
		r.Accuracy = float64(r.Correct) / float64(o.rep.Datasets[ds].Prompts)
		r.Selected = mostSelected(r.picks, 8)
	}
	o.overall.Accuracy = float64(o.overall.Correct) / float64(len(o.audit))
}

// count adds a routed prompt to the result; secondHalf says whether it falls in the second half of the
// result's prompts.
func (r *RunResult) count(exec *messages.Execution, right, secondHalf bool) {
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
	if secondHalf {
		r.secondSeen++
		if right {
			r.secondRight++
		}
	}
}

// countPicks counts a prompt's selected models towards the result's late selections.
func (r *RunResult) countPicks(picks []*messages.Pick) {
	for _, p := range picks {
		if r.picks == nil {
			r.picks = map[string]int{}
		}
		r.picks[p.Model]++
	}
}

// mostSelected lists at most n models by how often they were picked, the most picked first (ties by
// name); nil when none was.
func mostSelected(picks map[string]int, n int) []Count {
	var out []Count
	for m, k := range picks {
		out = append(out, Count{Model: m, N: k})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		return out[i].Model < out[j].Model
	})
	return out[:min(len(out), n)]
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
