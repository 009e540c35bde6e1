// Package eval owns the measurement of routing quality on real model behaviour: it replays recorded
// answers of public models to public benchmark questions through the real pipeline (actors,
// selection, consensus, feedback), online and in a fixed order, and compares the answers with the gold
// ones, with the best single model in hindsight, with an oracle ensemble of the models best in
// hindsight, and across selection policies and reward signals.
package eval

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"go.uber.org/zap"
)

// Run is one configuration of the online pipeline.
type Run struct {
	// Policy is a selection policy: thompson, ucb1, epsilon_greedy or uniform.
	Policy string `json:"policy"`
	// Reward is reliability (the answer's posterior by the reliability-weighted vote), agreement (with
	// the consensus), arbiter (the consensus score), gold (the true answer, given back through the
	// feedback API after each request: an upper reference, not a product mode) or gold5 (reliability,
	// and the true answer of a seeded GoldShare of the prompts, which also anchors the estimator: a
	// small share of truth, as a product could buy). reliability-dep and gold5-dep are the same with
	// an estimator that sees models that err together (config dependence).
	Reward string `json:"reward"`
}

// reward is the run's reward without its -dep, and whether it had one.
func (r Run) reward() (string, bool) { return strings.CutSuffix(r.Reward, "-dep") }

// Name is "policy/reward".
func (r Run) Name() string { return r.Policy + "/" + r.Reward }

// ParseRuns reads "policy/reward,policy/reward".
func ParseRuns(s string) ([]Run, error) {
	var runs []Run
	for _, part := range strings.Split(s, ",") {
		policy, reward, ok := strings.Cut(strings.TrimSpace(part), "/")
		if !ok {
			return nil, fmt.Errorf("run %q: want policy/reward", part)
		}
		if _, err := bandit.ParsePolicy(policy); err != nil {
			return nil, err
		}
		switch reward {
		case "reliability", "agreement", "arbiter", "gold", "gold5", "reliability-dep", "gold5-dep":
		default:
			return nil, fmt.Errorf("run %q: reward must be reliability, agreement, arbiter, gold or gold5 (the first and last with -dep or not)", part)
		}
		runs = append(runs, Run{Policy: policy, Reward: reward})
	}
	return runs, nil
}

// DefaultRuns are the product (Thompson Sampling rewarded by agreement with the consensus), the
// reliability-weighted vote that is to replace it, the same with a small share of truth, the other
// reward signals, the other selection policies, and uniform selection as the random baseline.
var DefaultRuns = []Run{
	{"thompson", "agreement"}, {"thompson", "reliability"}, {"thompson", "reliability-dep"}, {"thompson", "gold5"}, {"thompson", "gold5-dep"},
	{"thompson", "arbiter"}, {"thompson", "gold"},
	{"ucb1", "agreement"}, {"epsilon_greedy", "agreement"}, {"uniform", "agreement"},
}

// DefaultDatasets are the replay datasets: four with gold answers, and alpaca-eval's free text judged
// by preference.
var DefaultDatasets = []string{"mmlu-pro", "gsm", "crux", "math-l5", "alpaca-eval"}

// Options configure an evaluation. The zero value of each field means its default.
type Options struct {
	Data     *providers.ReplayData
	Runs     []Run
	Seed     uint64
	Workers  int    // models asked per prompt; default 3
	Quorum   int    // min_responses; default 2
	Strategy string // consensus strategy; default majority
	// QuorumMode is fixed (default) or adaptive: models asked best-first in waves of Quorum until the
	// answer is settled.
	QuorumMode string
	// CategoryBy is dataset (one arm per model and dataset), subject (one per dataset subject, e.g.
	// MMLU-Pro's law), or classify (the classifier chooses among the 22 blueprints).
	CategoryBy string
	// Every is the timeline step in prompts; default 100.
	Every int
	// Latency is every replayed model's latency; zero answers at once and keeps the run deterministic.
	Latency providers.Latency
	// Timeout is the collection deadline in seconds; default 30.
	Timeout float64
	Log     *zap.Logger
	// Progress, when set, is told after every prompt of every run.
	Progress func(run string, done, total int)
}

func (o *Options) defaults() {
	if len(o.Runs) == 0 {
		o.Runs = DefaultRuns
	}
	if o.Workers <= 0 {
		o.Workers = 3
	}
	if o.Quorum <= 0 {
		o.Quorum = min(2, o.Workers)
	}
	if o.Strategy == "" {
		o.Strategy = string(blueprints.Majority)
	}
	if o.CategoryBy == "" {
		o.CategoryBy = "dataset"
	}
	if o.Every <= 0 {
		o.Every = 100
	}
	if o.Timeout <= 0 {
		o.Timeout = 30
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
}

// Report is the outcome of an evaluation.
type Report struct {
	Seed       uint64                    `json:"seed"`
	Workers    int                       `json:"workers"`
	Quorum     int                       `json:"min_responses"`
	Strategy   string                    `json:"strategy"`
	QuorumMode string                    `json:"quorum,omitempty"`
	CategoryBy string                    `json:"category_by"`
	Prompts    int                       `json:"prompts"`
	Merged     int                       `json:"merged_duplicate_prompts"`
	Runs       []string                  `json:"runs"`
	Datasets   map[string]*DatasetReport `json:"datasets"`
	Overall    *DatasetReport            `json:"overall"`
	Timeline   []Point                   `json:"timeline"`
	// FreeText scores the free-text prompts (alpaca-eval) by judge preference; nil without them.
	FreeText *OpenReport `json:"free_text,omitempty"`
	Elapsed  string      `json:"elapsed"`
}

// DatasetReport compares the runs with the baselines on one dataset (or overall).
type DatasetReport struct {
	Prompts int `json:"prompts"`
	// BestSingle is the model with the highest accuracy in hindsight (overall: each dataset's best).
	BestSingle Baseline `json:"best_single"`
	// Oracle is majority voting among the Workers models best in hindsight (fixed, per dataset).
	Oracle Baseline              `json:"oracle_ensemble"`
	Runs   map[string]*RunResult `json:"runs"`
}

// Baseline is an accuracy with the models behind it.
type Baseline struct {
	Models   []string `json:"models"`
	Accuracy float64  `json:"accuracy"`
}

// RunResult is one run's outcome on a dataset.
type RunResult struct {
	Accuracy float64 `json:"accuracy"`
	Correct  int     `json:"correct"`
	Failed   int     `json:"failed_requests"`
	Degraded int     `json:"degraded"`
	// Regret is the cumulative pseudo-regret of selection: per prompt, the mean hindsight accuracy (in the
	// prompt's category) of the best Workers models minus that of the models selected.
	Regret float64 `json:"regret"`
	// Selected counts how often each model was selected over the last quarter of the dataset's prompts,
	// where learning has settled; the most selected come first.
	Selected []Count `json:"selected_late"`
	// SecondHalf is the accuracy over the second half of the dataset's prompts (overall: of the stream).
	SecondHalf float64 `json:"second_half_accuracy"`
	// Calls counts the model calls made (quorum replacements and retries included); ModelsPerPrompt is
	// Calls per prompt, the run's cost in calls. The replay data has no token counts.
	Calls           int     `json:"calls"`
	ModelsPerPrompt float64 `json:"models_per_prompt"`
	picks           map[string]int
	prompts         int
	secondRight     int
	secondSeen      int
}

// Count is a model with a number of selections.
type Count struct {
	Model string `json:"model"`
	N     int    `json:"n"`
}

// Point is the state of every run after Prompts prompts.
type Point struct {
	Prompts int                    `json:"prompts"`
	Runs    map[string]PointResult `json:"runs"`
}

// PointResult is a run's cumulative accuracy and regret at a point.
type PointResult struct {
	Accuracy float64 `json:"accuracy"`
	Regret   float64 `json:"regret"`
}

// item is one prompt in evaluation order, with what the offline baselines need.
type item struct {
	rec *providers.ReplayRecord
	// category is what the request names ("" lets the classifier choose); key is the category of the
	// hindsight reference (the dataset when the classifier chooses).
	category, key string
	models        []string
}

// Evaluate runs every configuration over the data and computes the baselines.
func Evaluate(ctx context.Context, opts Options) (*Report, error) {
	opts.defaults()
	began := time.Now()
	items := order(opts.Data.Records, opts.Seed, opts.CategoryBy)
	open := openItems(opts.Data.Records, opts.Seed)
	if len(items) == 0 && len(open) == 0 {
		return nil, fmt.Errorf("no prompt with a gold answer or judged answers")
	}
	hind := hindsight(items)
	rep := &Report{Seed: opts.Seed, Workers: opts.Workers, Quorum: opts.Quorum, Strategy: opts.Strategy, QuorumMode: opts.QuorumMode, CategoryBy: opts.CategoryBy,
		Prompts: len(items), Merged: opts.Data.Merged, Datasets: map[string]*DatasetReport{}}
	if len(open) > 0 {
		var err error
		if rep.FreeText, err = evaluateOpen(ctx, open, opts); err != nil {
			return nil, err
		}
	}
	if len(items) == 0 {
		rep.Elapsed = time.Since(began).Round(time.Millisecond).String()
		return rep, nil
	}
	baselines(rep, items, hind, opts)
	for _, run := range opts.Runs {
		rep.Runs = append(rep.Runs, run.Name())
		if err := online(ctx, rep, items, hind, run, opts); err != nil {
			return nil, fmt.Errorf("run %s: %w", run.Name(), err)
		}
	}
	rep.Elapsed = time.Since(began).Round(time.Millisecond).String()
	return rep, nil
}

// order puts the prompts with a gold answer in a fixed order, shuffled by the seed so that the datasets
// interleave like mixed traffic.
func order(records []*providers.ReplayRecord, seed uint64, categoryBy string) []item {
	var items []item
	for _, r := range records {
		if r.Gold == nil {
			continue
		}
		it := item{rec: r, category: categoryKey(r, categoryBy)}
		it.key = it.category
		if it.key == "" {
			it.key = sanitize(r.Dataset)
		}
		for m := range r.Answers {
			it.models = append(it.models, m)
		}
		sort.Strings(it.models)
		items = append(items, it)
	}
	shuffle(items, seed)
	return items
}

// shuffle orders items by the seed, so that datasets interleave like mixed traffic.
func shuffle(items []item, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xe7a1))
	rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
}

func categoryKey(r *providers.ReplayRecord, by string) string {
	switch by {
	case "subject":
		if r.Category != r.Dataset {
			return sanitize(r.Dataset + "_" + r.Category)
		}
		return sanitize(r.Dataset)
	case "classify":
		return ""
	}
	return sanitize(r.Dataset)
}

func sanitize(s string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(s) {
		if ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// correct tells whether an answer matches the gold one, by the kind of answer the task asks for: a
// choice letter, a number by value, an exact literal (spaces and brackets included: CRUXEval's " a" is
// not "a"), or free text.
func correct(kind, answer, gold string) bool {
	k, err := consensus.ParseKind(kind)
	if err != nil {
		k = consensus.Exact
	}
	return consensus.Equivalent(k, answer, gold)
}

func modelCorrect(it item, model string) bool {
	r, ok := it.rec.Answers[model]
	return ok && r.Answer != nil && correct(it.rec.Kind, *r.Answer, *it.rec.Gold)
}

// hindsightTable holds each model's accuracy per dataset and per category, over the prompts it answers.
type hindsightTable struct {
	byDataset  map[string]map[string]float64
	byCategory map[string]map[string]float64
}

func hindsight(items []item) hindsightTable {
	type tally struct{ right, seen int }
	ds, cat := map[string]map[string]*tally{}, map[string]map[string]*tally{}
	add := func(table map[string]map[string]*tally, key, model string, ok bool) {
		if table[key] == nil {
			table[key] = map[string]*tally{}
		}
		t := table[key][model]
		if t == nil {
			t = &tally{}
			table[key][model] = t
		}
		t.seen++
		if ok {
			t.right++
		}
	}
	for _, it := range items {
		for _, m := range it.models {
			ok := modelCorrect(it, m)
			add(ds, it.rec.Dataset, m, ok)
			add(cat, it.key, m, ok)
		}
	}
	flat := func(t map[string]map[string]*tally) map[string]map[string]float64 {
		out := map[string]map[string]float64{}
		for k, ms := range t {
			out[k] = map[string]float64{}
			for m, x := range ms {
				out[k][m] = float64(x.right) / float64(x.seen)
			}
		}
		return out
	}
	return hindsightTable{byDataset: flat(ds), byCategory: flat(cat)}
}

// ranked returns models by descending accuracy, ties by name.
func ranked(acc map[string]float64) []string {
	out := make([]string, 0, len(acc))
	for m := range acc {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if acc[out[i]] != acc[out[j]] {
			return acc[out[i]] > acc[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}

// bestN is the mean hindsight accuracy of a category's n best models: the reference of the regret.
func (h hindsightTable) bestN(category string, models []string, n int) float64 {
	acc := map[string]float64{}
	for _, m := range models {
		acc[m] = h.byCategory[category][m]
	}
	top := ranked(acc)
	sum := 0.0
	for _, m := range top[:min(n, len(top))] {
		sum += acc[m]
	}
	return sum / float64(min(n, len(top)))
}
