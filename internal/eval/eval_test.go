package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/testenv"
)

// world makes a replay dataset of multiple-choice prompts whose models answer correctly with known
// probabilities, wrong answers spread over the other options.
func world(t *testing.T, prompts int, skills map[string]float64) *providers.ReplayData {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	letters := []string{"A", "B", "C", "D", "E", "F"}
	models := make([]string, 0, len(skills))
	for m := range skills {
		models = append(models, m)
	}
	sort.Strings(models) // map order is random: draw in a fixed order
	d := &providers.ReplayData{}
	for i := 0; i < prompts; i++ {
		gold := letters[rng.IntN(len(letters))]
		rec := &providers.ReplayRecord{ID: fmt.Sprintf("quiz/%d", i), Dataset: "quiz", Category: "quiz", Kind: "choice",
			Prompt: fmt.Sprintf("Question %d?", i), Gold: &gold, Answers: map[string]providers.ReplayResponse{}}
		for _, m := range models {
			p := skills[m]
			a := gold
			if rng.Float64() >= p {
				for a == gold {
					a = letters[rng.IntN(len(letters))]
				}
			}
			ok := a == gold
			rec.Answers[m] = providers.ReplayResponse{Answer: &a, Correct: &ok}
		}
		d.Add(rec)
	}
	return d
}

var skills = map[string]float64{"ace": 0.92, "good": 0.85, "fair": 0.8, "meh": 0.45, "poor": 0.35, "bad": 0.3, "worse": 0.25, "worst": 0.2}

func TestEvaluateOnAKnownWorld(t *testing.T) {
	data := world(t, 600, skills)
	opts := Options{Data: data, Seed: 3, Workers: 3, Quorum: 2, Runs: []Run{{"thompson", "agreement"}, {"thompson", "reliability"}, {"thompson", "gold"}, {"uniform", "agreement"}}}
	rep, err := Evaluate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Datasets["quiz"]
	if d.Prompts != 600 || d.BestSingle.Models[0] != "ace" {
		t.Fatalf("baselines %+v", d)
	}
	// The oracle is majority voting among ace, good and fair, computed here independently.
	right := 0
	for _, r := range data.Records {
		votes := map[string]int{}
		for _, m := range []string{"ace", "good", "fair"} {
			votes[*r.Answers[m].Answer]++
		}
		best, n := *r.Answers["ace"].Answer, 0
		for a, v := range votes {
			if v > n || (v == n && a == *r.Answers["ace"].Answer) {
				best, n = a, v
			}
		}
		if best == *r.Gold {
			right++
		}
	}
	if want := float64(right) / 600; d.Oracle.Accuracy != want {
		t.Fatalf("oracle accuracy %v, want %v", d.Oracle.Accuracy, want)
	}
	ts, gold, uni := d.Runs["thompson/agreement"], d.Runs["thompson/gold"], d.Runs["uniform/agreement"]
	t.Logf("best single %.3f, oracle %.3f, thompson %.3f (regret %.1f), gold %.3f (regret %.1f), uniform %.3f (regret %.1f)",
		d.BestSingle.Accuracy, d.Oracle.Accuracy, ts.Accuracy, ts.Regret, gold.Accuracy, gold.Regret, uni.Accuracy, uni.Regret)
	if ts.Accuracy <= uni.Accuracy || ts.Regret >= uni.Regret/2 {
		t.Fatalf("Thompson Sampling did not beat uniform selection: %+v vs %+v", ts, uni)
	}
	if top := ts.Selected[0].Model; skills[top] < 0.8 {
		t.Fatalf("late selection favours %s", top)
	}
	// The reliability-weighted vote learns the same world without labels, at least as well.
	rel := d.Runs["thompson/reliability"]
	t.Logf("thompson/reliability %.3f (regret %.1f)", rel.Accuracy, rel.Regret)
	if rel.Accuracy < ts.Accuracy || skills[rel.Selected[0].Model] < 0.8 {
		t.Fatalf("reliability %+v against agreement %+v", rel, ts)
	}
	if len(rep.Timeline) != 6 || rep.Timeline[5].Prompts != 600 {
		t.Fatalf("timeline %+v", rep.Timeline)
	}
	// Deterministic for a seed.
	again, err := Evaluate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(rep.Datasets)
	b, _ := json.Marshal(again.Datasets)
	if !bytes.Equal(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
	var svg, table strings.Builder
	if err := rep.WriteSVG(&svg); err != nil || !strings.HasPrefix(svg.String(), "<svg") || strings.Count(svg.String(), "<polyline") != 8 {
		t.Fatalf("svg: %v", err)
	}
	rep.WriteTable(&table)
	if !strings.Contains(table.String(), "thompson/agreement accuracy") {
		t.Fatalf("table:\n%s", table.String())
	}
}

func TestCorrect(t *testing.T) {
	tests := []struct {
		kind, answer, gold string
		want               bool
	}{
		{"number", "18", "18.0", true},
		{"number", "1e2", "100", true},
		{"number", "17", "18", false},
		{"choice", "B", "B", true},
		{"choice", "b", "B", true},
		{"choice", "A", "B", false},
		{"exact", "'abc'", "'abc'", true},
		{"exact", " a", "a", false},
		{"exact", "a ", "a", false},
		{"exact", "[1, 2]", "(1, 2)", false},
		{"number", "x", "x", true},
	}
	for _, tt := range tests {
		if got := correct(tt.kind, tt.answer, tt.gold); got != tt.want {
			t.Errorf("correct(%s, %q, %q) = %v", tt.kind, tt.answer, tt.gold, got)
		}
	}
}

func TestParseRuns(t *testing.T) {
	runs, err := ParseRuns("thompson/agreement, uniform/gold, thompson/gold5, thompson/reliability-dep")
	if err != nil || len(runs) != 4 || runs[1].Name() != "uniform/gold" || runs[2].Name() != "thompson/gold5" || runs[3].Name() != "thompson/reliability-dep" {
		t.Fatalf("%v %v", runs, err)
	}
	for _, bad := range []string{"thompson", "oracle/agreement", "thompson/vibes", "thompson/agreement-dep"} {
		if _, err := ParseRuns(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestSharedDevData runs a short evaluation on the real recorded data when it is beside the project.
func TestSharedDevData(t *testing.T) {
	dir := testenv.SharedDir(t, "data", "replay")
	data, err := providers.LoadReplay(dir, []string{"gsm"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Evaluate(context.Background(), Options{Data: data, Seed: 1, Workers: 5, Quorum: 3, Runs: []Run{{"thompson", "agreement"}, {"uniform", "agreement"}}})
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Datasets["gsm"]
	if d.Prompts != 666 || d.BestSingle.Models[0] != "gpt-4o-2024-08-06" {
		t.Fatalf("gsm baselines %+v", d.BestSingle)
	}
	if ts, uni := d.Runs["thompson/agreement"], d.Runs["uniform/agreement"]; ts.Regret >= uni.Regret {
		t.Fatalf("regret %.1f not below uniform's %.1f", ts.Regret, uni.Regret)
	}
	for name, r := range d.Runs {
		if r.Failed != 0 {
			t.Fatalf("%s: %d requests failed: replaying recorded answers must never fail", name, r.Failed)
		}
	}
}

// TestScoringAgreesWithTheData checks the scoring against the replay data's own verdict on every
// recorded answer: the kinds keep CRUXEval's spaces and brackets, compare numbers by value, and letters.
func TestScoringAgreesWithTheData(t *testing.T) {
	dir := testenv.SharedDir(t, "data", "replay")
	data, err := providers.LoadReplay(dir, DefaultDatasets)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range data.Records {
		for m, a := range r.Answers {
			if r.Gold == nil || a.Answer == nil || a.Correct == nil {
				continue
			}
			checked++
			if got := correct(r.Kind, *a.Answer, *r.Gold); got != *a.Correct {
				t.Fatalf("%s, %s: %q against %q scored %v, the data says %v", r.ID, m, *a.Answer, *r.Gold, got, *a.Correct)
			}
		}
	}
	if checked < 100000 {
		t.Fatalf("only %d answers checked", checked)
	}
}

func TestSummarizeGivesMeanAndRangeOverSeeds(t *testing.T) {
	report := func(seed uint64, acc, half float64) *Report {
		run := func() map[string]*RunResult {
			return map[string]*RunResult{"thompson/reliability": {Accuracy: acc, SecondHalf: half, Regret: 10 * acc, ModelsPerPrompt: 5}}
		}
		return &Report{Seed: seed, Runs: []string{"thompson/reliability"},
			Datasets: map[string]*DatasetReport{"quiz": {BestSingle: Baseline{Accuracy: 0.9}, Oracle: Baseline{Accuracy: 0.95}, Runs: run()}},
			Overall:  &DatasetReport{BestSingle: Baseline{Accuracy: 0.9}, Oracle: Baseline{Accuracy: 0.95}, Runs: run()}}
	}
	s := Summarize([]*Report{report(1, 0.7, 0.8), report(2, 0.8, 0.9), report(3, 0.75, 0.7)})
	got := s.Datasets["quiz"]["thompson/reliability"]
	if math.Abs(got.Accuracy.Mean-0.75) > 1e-12 || got.Accuracy.Min != 0.7 || got.Accuracy.Max != 0.8 || got.SecondHalf.Max != 0.9 {
		t.Fatalf("summary %+v", got)
	}
	if fmt.Sprint(s.Seeds) != "[1 2 3]" || s.BestSingle[Overall] != 0.9 {
		t.Fatalf("summary %+v", s)
	}
	var table strings.Builder
	s.WriteTable(&table)
	if !strings.Contains(table.String(), "| thompson/reliability accuracy | 75.0% (70.0%–80.0%) | 75.0% (70.0%–80.0%) |") {
		t.Fatalf("table:\n%s", table.String())
	}
}

func TestFreeTextFeedbackLearnsWhoWritesBest(t *testing.T) {
	prefs := map[string]float64{"great": 0.8, "good": 0.6, "fair": 0.3, "poor": 0.1, "bad": 0.05, "worse": 0.05}
	d := &providers.ReplayData{}
	for i := range 150 {
		rec := &providers.ReplayRecord{ID: fmt.Sprintf("chat/%d", i), Dataset: "alpaca-eval", Category: "chat", Kind: "open",
			Prompt: fmt.Sprintf("Write a note about topic %d.", i), Answers: map[string]providers.ReplayResponse{}}
		for m, p := range prefs {
			p := p
			rec.Answers[m] = providers.ReplayResponse{Preference: &p, Text: fmt.Sprintf("A note by %s about topic %d, with several sentences of its own.", m, i)}
		}
		d.Add(rec)
	}
	rep, err := Evaluate(context.Background(), Options{Data: d, Seed: 1, Workers: 3, Quorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	ft := rep.FreeText
	if ft == nil || ft.Prompts != 150 || ft.BestSingle.Models[0] != "great" {
		t.Fatalf("free text %+v", ft)
	}
	fb, free := ft.Runs["thompson/feedback"], ft.Runs["thompson/agreement"]
	t.Logf("feedback %+v; label-free %+v", fb, free)
	if fb.Preference <= fb.RandomMember+0.1 || fb.Preference > fb.BestMember {
		t.Fatalf("with feedback the answer should beat a random panel member: %+v", fb)
	}
	if free.ModelsPerPrompt != 3 || free.Failed != 0 {
		t.Fatalf("label-free run %+v", free)
	}
	var table strings.Builder
	rep.WriteTable(&table)
	if !strings.Contains(table.String(), "| thompson/feedback |") {
		t.Fatalf("table:\n%s", table.String())
	}
}

func TestAuditedIsASeededShare(t *testing.T) {
	a, again, other := audited(20000, 1), audited(20000, 1), audited(20000, 2)
	count := func(xs []bool) (n int) {
		for _, x := range xs {
			if x {
				n++
			}
		}
		return n
	}
	if fmt.Sprint(a) != fmt.Sprint(again) || fmt.Sprint(a) == fmt.Sprint(other) {
		t.Fatal("the audited prompts must follow the seed, and only it")
	}
	if n := count(a); n < 900 || n > 1100 {
		t.Fatalf("%d of 20000 audited, want about %v", n, GoldShare*20000)
	}
}

func TestGold5LearnsAKnownWorld(t *testing.T) {
	data := world(t, 400, skills)
	opts := Options{Data: data, Seed: 3, Workers: 3, Quorum: 2, Runs: []Run{{"thompson", "gold5"}}}
	rep, err := Evaluate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Datasets["quiz"].Runs["thompson/gold5"]
	t.Logf("thompson/gold5 %.3f (regret %.1f)", r.Accuracy, r.Regret)
	if r.Accuracy < 0.8 || skills[r.Selected[0].Model] < 0.8 {
		t.Fatalf("gold5 %+v", r)
	}
}
