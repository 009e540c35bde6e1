package accuracy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// quiz draws prompts whose answers come from models of known accuracy: right with probability p,
// otherwise one of wrong wrong answers, the first of them more often (wrong answers collide).
func quiz(rng *rand.Rand, accuracy map[string]float64, order []string, wrong int) []Vote {
	votes := make([]Vote, 0, len(order))
	for _, m := range order {
		g := 0 // group 0 is the right answer
		if rng.Float64() >= accuracy[m] {
			g = 1
			if rng.Float64() < 0.5 {
				g = 1 + rng.IntN(wrong)
			}
		}
		votes = append(votes, Vote{Model: m, Group: g})
	}
	return votes
}

func TestEMFindsTheStrongModelAloneInBeingRight(t *testing.T) {
	// Three weak models share their mistakes; agreement would rank them above the strong one.
	accuracy := map[string]float64{"strong": 0.9, "weak1": 0.45, "weak2": 0.45, "weak3": 0.45}
	order := []string{"strong", "weak1", "weak2", "weak3"}
	rng := rand.New(rand.NewPCG(1, 2))
	e := New(Config{})
	for range 600 {
		e.Observe("quiz", quiz(rng, accuracy, order, 3))
	}
	v := e.View()
	for m, want := range accuracy {
		got, _ := v.Get("quiz", m)
		if got.Answers != 600 || got.Accuracy < want-0.08 || got.Accuracy > want+0.08 {
			t.Errorf("%s: estimate %+v, want accuracy %.2f ± 0.08 from 600 answers", m, got, want)
		}
	}
	// The strong model outvotes two weak ones that agree.
	credit := e.credit("quiz", &prompt{votes: []Vote{{Model: "strong", Group: 0}, {Model: "weak1", Group: 1}, {Model: "weak2", Group: 1}}, groups: 2})
	if credit[0] <= credit[1] {
		t.Fatalf("credit %v: the strong model alone should be believed", credit)
	}
}

func TestPoolingLendsACategoryTheModelsOverallAccuracy(t *testing.T) {
	tests := []struct {
		desc    string
		sharing float64
		// wantNear is the estimate the new category should be close to.
		wantNear float64
	}{
		{"pooled towards the overall record", 0, 0.8},
		{"independent categories believe the two that agree", -1, 0.35},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			e := New(Config{Sharing: tt.sharing})
			rng := rand.New(rand.NewPCG(3, 4))
			accuracy := map[string]float64{"a": 0.9, "b": 0.6, "c": 0.6}
			for range 400 {
				e.Observe("old", quiz(rng, accuracy, []string{"a", "b", "c"}, 2))
			}
			// One prompt in a new category where "a" is alone: with pooling its record elsewhere counts.
			e.Observe("new", []Vote{{Model: "a", Group: 0}, {Model: "b", Group: 1}, {Model: "c", Group: 1}})
			got, _ := e.View().Get("new", "a")
			if got.Accuracy < tt.wantNear-0.15 || got.Accuracy > tt.wantNear+0.15 {
				t.Fatalf("estimate in the new category %+v, want about %.2f", got, tt.wantNear)
			}
		})
	}
}

func TestTheWindowKeepsTheLatestPrompts(t *testing.T) {
	e := New(Config{Window: 50})
	for i := range 120 {
		g := 0
		if i >= 60 { // the model turns wrong: only the latest 50 prompts count
			g = 1
		}
		e.Observe("quiz", []Vote{{Model: "drifts", Group: g}, {Model: "steady1", Group: 0}, {Model: "steady2", Group: 0}})
	}
	got, _ := e.View().Get("quiz", "drifts")
	if got.Answers != 50 || got.Accuracy > 0.3 {
		t.Fatalf("estimate %+v, want 50 answers, mostly wrong", got)
	}
}

func TestAViewNeverChanges(t *testing.T) {
	e := New(Config{})
	e.Observe("quiz", []Vote{{Model: "a", Group: 0}, {Model: "b", Group: 0}, {Model: "c", Group: 0}})
	v := e.View()
	before, ok := v.Get("quiz", "a")
	if !ok {
		t.Fatal("no estimate after a prompt")
	}
	for range 30 {
		e.Observe("quiz", []Vote{{Model: "a", Group: 1}, {Model: "b", Group: 0}, {Model: "c", Group: 0}})
	}
	if after, _ := v.Get("quiz", "a"); after != before {
		t.Fatalf("a published view changed: %+v then %+v", before, after)
	}
	for _, votes := range [][]Vote{{{Model: "a", Group: -1}}, {{Model: "a", Group: 0}, {Model: "b", Group: 0}}, {{Model: "a", Group: 0}, {Model: "b", Group: 0}, {Model: "c", Group: -1}}} {
		if e.Observe("quiz", votes) {
			t.Fatalf("a prompt with fewer than %d answers refitted: %v", MinAnswers, votes)
		}
	}
	if got, _ := e.View().Get("quiz", "b"); got.Answers != 31 {
		t.Fatalf("prompts with fewer than %d answers were counted: %+v", MinAnswers, got)
	}
}

func TestPosteriors(t *testing.T) {
	tests := []struct {
		desc     string
		accuracy []float64
		groupOf  []int
		groups   int
		want     []float64
	}{
		{"nobody answered", []float64{0.9}, []int{-1}, 1, []float64{0}},
		{"one vote at chance: all options alike", []float64{1.0 / 3}, []int{0}, 1, []float64{1.0 / 3}},
		{"two groups and one unanswered option", []float64{0.6, 0.6}, []int{0, 1}, 2, []float64{3.0 / 7, 3.0 / 7}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got := Posteriors(tt.accuracy, tt.groupOf, tt.groups)
			for i := range tt.want {
				if d := got[i] - tt.want[i]; d > 1e-9 || d < -1e-9 {
					t.Fatalf("posteriors %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// BenchmarkObserve is the estimator's cost per request once its window is full: most observations
// update the sums, one in RefitEvery refits the whole window.
func BenchmarkObserve(b *testing.B) {
	accuracy := map[string]float64{}
	var order []string
	for i := range 28 {
		m := fmt.Sprint("model-", i)
		accuracy[m], order = 0.3+0.02*float64(i), append(order, m)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	e := New(Config{})
	draw := func() []Vote { i := rng.IntN(len(order) - 5); return quiz(rng, accuracy, order[i:i+5], 3) }
	for range DefaultWindow + DefaultWarmup {
		e.Observe("mmlu", draw())
	}
	b.ResetTimer()
	for b.Loop() {
		e.Observe("mmlu", draw())
	}
}

func TestConfirmKeepsTheTruth(t *testing.T) {
	three := []Vote{{Model: "a", Group: 0}, {Model: "b", Group: 0}, {Model: "c", Group: 1}}
	tests := []struct {
		desc string
		// observed is the prompt observed before the truth, under id "r1"; nil for none.
		observed []Vote
		id       string
		votes    []Vote
		right    []bool
		// wantPrompts and wantTruth are the category's kept prompts and the truth of the last one.
		wantPrompts int
		wantTruth   []float64
	}{
		{"the truth joins the prompt it names", three, "r1", three, []bool{false, false, true}, 1, []float64{0, 0, 1}},
		{"a truth about an unknown request joins as a prompt", three, "r2", []Vote{{Model: "a", Group: 0}, {Model: "c", Group: 1}}, []bool{true, false}, 2, []float64{1, 0}},
		{"a truth teaches even with two answers", nil, "r1", []Vote{{Model: "a", Group: 0}, {Model: "b", Group: 1}}, []bool{false, true}, 1, []float64{0, 1}},
		{"no answer is never right", nil, "r1", []Vote{{Model: "a", Group: -1}, {Model: "b", Group: 0}}, []bool{true, true}, 1, []float64{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			e := New(Config{})
			if tt.observed != nil {
				e.ObserveRequest("q", "r1", tt.observed)
			}
			e.Confirm("q", tt.id, tt.votes, tt.right)
			c := e.categories["q"]
			if len(c.prompts) != tt.wantPrompts {
				t.Fatalf("%d prompts kept, want %d", len(c.prompts), tt.wantPrompts)
			}
			last := c.prompts[len(c.prompts)-1]
			if fmt.Sprint(last.truth) != fmt.Sprint(tt.wantTruth) {
				t.Fatalf("truth %v, want %v", last.truth, tt.wantTruth)
			}
			// The view sums the same credit and truth as a sum from scratch.
			fresh := e.fromCredits()
			for _, m := range []string{"a", "b", "c"} {
				if got, want := e.View().Accuracy("q", m), fresh.Accuracy("q", m); math.Abs(got-want) > 1e-12 {
					t.Errorf("%s: view %v, refit %v", m, got, want)
				}
			}
		})
	}
}

func TestASmallShareOfTruthAnchorsACliqueThatErrsTogether(t *testing.T) {
	// Three weak models copy one another's answer most of the time: unlabelled, EM takes their
	// agreement for accuracy. The truth of one prompt in twenty pulls their estimates back down.
	rng := rand.New(rand.NewPCG(7, 8))
	draw := func() []Vote {
		strong := 0
		if rng.Float64() >= 0.85 {
			strong = 1 + rng.IntN(2)
		}
		shared := 0
		if rng.Float64() >= 0.5 {
			shared = 1 + rng.IntN(2)
		}
		votes := []Vote{{Model: "strong", Group: strong}}
		for _, m := range []string{"w1", "w2", "w3"} {
			g := shared
			if rng.Float64() < 0.2 { // now and then one answers alone
				g = rng.IntN(3)
			}
			votes = append(votes, Vote{Model: m, Group: g})
		}
		return votes
	}
	plain, anchored := New(Config{}), New(Config{})
	for i := range 2000 {
		votes := draw()
		id := fmt.Sprint(i)
		plain.ObserveRequest("q", id, votes)
		anchored.ObserveRequest("q", id, votes)
		if i%20 == 0 {
			right := make([]bool, len(votes))
			for j, v := range votes {
				right[j] = v.Group == 0
			}
			anchored.Confirm("q", id, votes, right)
		}
	}
	plain.Refit()
	anchored.Refit()
	p, a := plain.View().Accuracy("q", "w1"), anchored.View().Accuracy("q", "w1")
	const truly = 0.8*0.5 + 0.2/3 // keeps the shared answer, or answers alone: right one time in three
	t.Logf("w1: unlabelled %.3f, anchored %.3f, true %.3f", p, a, truly)
	if math.Abs(a-truly) > 0.06 || math.Abs(p-truly) < 0.2 {
		t.Fatalf("w1: unlabelled %.3f, anchored %.3f, true %.3f: the truth should pull the clique's estimate to it", p, a, truly)
	}
}

func TestDependenceFindsTheModelsThatErrTogether(t *testing.T) {
	answer := func(rng *rand.Rand, p float64) int {
		if rng.Float64() < p {
			return 0
		}
		return 1 + rng.IntN(2)
	}
	// Without labels even a pair among five draws EM to it: it takes their agreement for accuracy,
	// and the excess agreement shows between the others (see dependence). Anchored by a share of
	// truth, the excess is where it belongs.
	tests := []struct {
		desc string
		// clique copy one shared answer (right 55 % of the time) three times in four; the others
		// answer on their own.
		clique, others []string
		// truth gives the true answer of one prompt in twenty.
		truth bool
		// dependent and independent are pairs whose dependence must be above 0.3, and within 0.15 of 0.
		dependent, independent [][2]string
	}{
		{"three of five, with a share of truth", []string{"w1", "w2", "w3"}, []string{"strong", "mid"}, true,
			[][2]string{{"w1", "w2"}, {"w2", "w3"}}, [][2]string{{"strong", "mid"}, {"strong", "w1"}, {"mid", "w3"}}},
	}
	skill := map[string]float64{"strong": 0.85, "mid": 0.7, "fair": 0.6}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			plain, dep := New(Config{}), New(Config{Dependence: true})
			for i := range 1500 {
				shared := answer(rng, 0.55)
				var votes []Vote
				for _, m := range tt.others {
					votes = append(votes, Vote{Model: m, Group: answer(rng, skill[m])})
				}
				for _, m := range tt.clique {
					g := shared
					if rng.Float64() < 0.25 {
						g = answer(rng, 0.55)
					}
					votes = append(votes, Vote{Model: m, Group: g})
				}
				id := fmt.Sprint(i)
				plain.ObserveRequest("q", id, votes)
				dep.ObserveRequest("q", id, votes)
				if tt.truth && i%20 == 0 {
					right := make([]bool, len(votes))
					for j, v := range votes {
						right[j] = v.Group == 0
					}
					plain.Confirm("q", id, votes, right)
					dep.Confirm("q", id, votes, right)
				}
			}
			plain.Refit()
			dep.Refit()
			v := dep.View()
			for _, p := range tt.dependent {
				if got := v.Dependence("q", p[0], p[1]); got < 0.3 {
					t.Errorf("%s and %s err together: dependence %.3f, want above 0.3", p[0], p[1], got)
				}
			}
			for _, p := range tt.independent {
				if got := v.Dependence("q", p[0], p[1]); got < -0.15 || got > 0.15 {
					t.Errorf("%s and %s are independent: dependence %.3f, want within 0.15 of 0", p[0], p[1], got)
				}
			}
			if got := v.Dependence("q", "w1", "w1") + v.Dependence("q", "w1", "absent"); got != 0 {
				t.Errorf("a model with itself, or with one never seen with it: %.3f, want 0", got)
			}
			if got := plain.View().Dependence("q", "w1", "w2"); got != 0 {
				t.Errorf("an estimator without Dependence reports %.3f", got)
			}
			// Discounted, the clique's agreement earns it no more credit.
			p, d := plain.View().Accuracy("q", "w1"), v.Accuracy("q", "w1")
			t.Logf("w1: independent %.3f, dependent %.3f (true 0.55)", p, d)
			if d > p+0.01 {
				t.Errorf("w1: %.3f with dependence, %.3f without", d, p)
			}
		})
	}
}

func TestALaterWavesVoteCreditsTheOthersButNotItself(t *testing.T) {
	// "second" is asked after the first wave only, on the prompts where the first wave split: there
	// it is right as often as "a" is, but rating it there would rate it on the hard prompts alone.
	e := New(Config{})
	for i := range 300 {
		votes := []Vote{{Model: "a", Group: 0}, {Model: "b", Group: 0}, {Model: "c", Group: 0}}
		if i%3 == 0 { // a hard prompt: the first wave splits and the second is asked
			votes = []Vote{{Model: "a", Group: 0}, {Model: "b", Group: 1}, {Model: "c", Group: 2}, {Model: "second", Group: i % 2, Later: true}}
		}
		e.Observe("quiz", votes)
	}
	v := e.View()
	if got, ok := v.Get("quiz", "second"); ok {
		t.Fatalf("the later wave's model has an estimate from its later answers: %+v", got)
	}
	for _, m := range []string{"a", "b", "c"} {
		if got, _ := v.Get("quiz", m); got.Answers != 300 {
			t.Fatalf("%s: estimate %+v, want 300 answers", m, got)
		}
	}
	// Its answer still weighs: joining "b", it makes "b" more likely right than "c".
	credit := e.credit("quiz", &prompt{votes: []Vote{{Model: "a", Group: 0}, {Model: "b", Group: 1}, {Model: "c", Group: 2}, {Model: "second", Group: 1, Later: true}}, groups: 3})
	if credit[1] <= credit[2] {
		t.Fatalf("credit %v: the later vote did not count for the answer it joined", credit)
	}
}

func TestModelsOfOneFamilyArePresumedToErrTogether(t *testing.T) {
	// Four independent models, two of them of one family: on a few prompts the family's pair starts
	// from FamilyDependence, the others from none; many prompts of independent answers bring it down.
	rng := rand.New(rand.NewPCG(5, 6))
	family := map[string]string{"l1": "llama", "l2": "llama", "g": "gemini", "q": ""}
	observe := func(e *Estimator, n int) {
		for range n {
			votes := quiz(rng, map[string]float64{"l1": 0.7, "l2": 0.7, "g": 0.7, "q": 0.7}, []string{"l1", "l2", "g", "q"}, 2)
			for i := range votes {
				votes[i].Family = family[votes[i].Model]
			}
			e.Observe("quiz", votes)
		}
		e.Refit()
	}
	e := New(Config{Dependence: true})
	observe(e, 10)
	v := e.View()
	if got := v.Dependence("quiz", "l1", "l2"); got < FamilyDependence/2 {
		t.Fatalf("one family after 10 prompts: dependence %.3f, want near %.1f", got, FamilyDependence)
	}
	if got := v.Dependence("quiz", "l1", "g"); got > 0.15 || got < -0.15 {
		t.Fatalf("two families after 10 prompts: dependence %.3f, want near 0", got)
	}
	observe(e, 1500)
	if got := e.View().Dependence("quiz", "l1", "l2"); got > 0.1 {
		t.Fatalf("one family answering independently on 1510 prompts: dependence %.3f, want near 0", got)
	}
}

func TestAnEstimateIsAnchoredByAsMuchTruthAsItsRectifiersPrior(t *testing.T) {
	e := New(Config{})
	votes := []Vote{{Model: "a", Group: 0}, {Model: "b", Group: 0}, {Model: "c", Group: 1}}
	right := []bool{true, true, false}
	for i := range LabelSharing {
		id := fmt.Sprint(i)
		e.ObserveRequest("q", id, votes)
		e.ObserveRequest("q", id+"-unlabelled", votes)
		if est, _ := e.View().Get("q", "a"); e.View().Anchored("q", "a") || est.Labels != float64(i) {
			t.Fatalf("after %d truths: labels %v, anchored", i, est.Labels)
		}
		e.Confirm("q", id, votes, right)
	}
	for _, m := range []string{"a", "c"} {
		if est, _ := e.View().Get("q", m); !e.View().Anchored("q", m) || est.Labels != LabelSharing || est.Answers != 2*LabelSharing {
			t.Fatalf("%s after %d truths: %+v", m, LabelSharing, est)
		}
	}
	if e.View().Anchored("other", "a") {
		t.Fatal("the truth of one category anchored another")
	}
}
