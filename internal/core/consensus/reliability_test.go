package consensus

import (
	"math"
	"testing"

	"github.com/conclave-ai/conclave/blueprints"
)

func voter(model, text string, accuracy float64) Response {
	r := resp(model, text, 0.5)
	r.Accuracy = accuracy
	return r
}

// dependentVoter is a voter with its dependence on each response of the ballot, by index.
func dependentVoter(model, text string, accuracy float64, dependence ...float64) Response {
	r := voter(model, text, accuracy)
	r.Dependence = dependence
	return r
}

func TestReliabilityVote(t *testing.T) {
	tests := []struct {
		desc       string
		kind       Kind
		resps      []Response
		wantAnswer string
		// wantPosterior is each response's posterior; nil when the vote must not weigh by accuracy.
		wantPosterior []float64
	}{
		{desc: "equal accuracies count heads like a plain majority", kind: Choice,
			resps:      []Response{voter("a", "B", 0.6), voter("b", "B", 0.6), voter("c", "C", 0.6)},
			wantAnswer: "B",
			// w = log(0.6*2/0.4) = log 3: B has 3², C 3, the unanswered option 1.
			wantPosterior: []float64{9.0 / 13, 9.0 / 13, 3.0 / 13}},
		{desc: "a strong model alone outvotes two weak ones that agree", kind: Choice,
			resps:      []Response{voter("weak1", "A", 0.4), voter("weak2", "A", 0.4), voter("strong", "D", 0.95)},
			wantAnswer: "D",
			// A: (0.8/0.6)² = 16/9; D: 1.9/0.05 = 38; one option unanswered.
			wantPosterior: []float64{(16.0 / 9) / (16.0/9 + 38 + 1), (16.0 / 9) / (16.0/9 + 38 + 1), 38 / (16.0/9 + 38 + 1)}},
		{desc: "a clique of three weak models that err together no longer outvotes one strong model", kind: Choice,
			resps: []Response{dependentVoter("weak1", "A", 0.6, 0, 0.8, 0.8, 0), dependentVoter("weak2", "A", 0.6, 0.8, 0, 0.8, 0),
				dependentVoter("weak3", "A", 0.6, 0.8, 0.8, 0, 0), voter("strong", "D", 0.9)},
			wantAnswer: "D",
			// Each weak vote weighs 1/(1+0.8+0.8) of log 3: A 3^(3/2.6); D 1.8/0.1 = 18; one option unanswered.
			wantPosterior: []float64{math.Pow(3, 3/2.6) / (math.Pow(3, 3/2.6) + 19), math.Pow(3, 3/2.6) / (math.Pow(3, 3/2.6) + 19),
				math.Pow(3, 3/2.6) / (math.Pow(3, 3/2.6) + 19), 18 / (math.Pow(3, 3/2.6) + 19)}},
		{desc: "the same clique taken as independent outvotes the strong model", kind: Choice,
			resps:      []Response{voter("weak1", "A", 0.6), voter("weak2", "A", 0.6), voter("weak3", "A", 0.6), voter("strong", "D", 0.9)},
			wantAnswer: "A",
			// A: 3³ = 27; D: 18; one option unanswered.
			wantPosterior: []float64{27.0 / 46, 27.0 / 46, 27.0 / 46, 18.0 / 46}},
		{desc: "a model worse than chance counts against its answer", kind: Number,
			resps:      []Response{voter("bad", "7", 0.2), voter("fair", "8", 0.5)},
			wantAnswer: "8",
			// 7: 0.4/0.8 = 0.5; 8: 1/0.5 = 2; one option unanswered.
			wantPosterior: []float64{0.5 / 3.5, 2 / 3.5}},
		{desc: "an empty answer votes for nothing and is never right", kind: Exact,
			resps:         []Response{voter("blank", "", 0.9), voter("x", "[1, 2]", 0.5)},
			wantAnswer:    "[1, 2]",
			wantPosterior: []float64{0, 2.0 / 4}},
		{desc: "more answers than effective options leave no unanswered mass", kind: Choice,
			resps:         []Response{voter("a", "A", 0.5), voter("b", "B", 0.5), voter("c", "C", 0.5), voter("d", "D", 0.5)},
			wantAnswer:    "A",
			wantPosterior: []float64{0.25, 0.25, 0.25, 0.25}},
		{desc: "unknown accuracies keep the plain vote", kind: Choice,
			resps:      []Response{voter("a", "A", 0), voter("b", "A", 0.9), voter("c", "C", 0.99)},
			wantAnswer: "A"},
		{desc: "free text is not voted on by accuracy", kind: Text,
			resps: []Response{voter("a", "The tower was built in 1889 for the world's fair in Paris by Eiffel's company", 0.9),
				voter("b", "It was finished in 1889, built for the Exposition Universelle by Gustave Eiffel's firm", 0.1)},
			wantAnswer: "The tower was built in 1889 for the world's fair in Paris by Eiffel's company"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			r, err := Decide(Input{Strategy: blueprints.Majority, Responses: tt.resps, Kind: tt.kind})
			if err != nil {
				t.Fatal(err)
			}
			if r.Answer != tt.wantAnswer {
				t.Errorf("answer %q, want %q", r.Answer, tt.wantAnswer)
			}
			if tt.wantPosterior == nil {
				if r.Groups != nil {
					t.Errorf("a reliability-weighted vote (scores %v), want none", r.Scores)
				}
				return
			}
			if len(r.Scores) != len(tt.wantPosterior) {
				t.Fatalf("posterior %v, want %v", r.Scores, tt.wantPosterior)
			}
			for i, want := range tt.wantPosterior {
				if math.Abs(r.Scores[i]-want) > 1e-9 {
					t.Errorf("posterior %v, want %v", r.Scores, tt.wantPosterior)
					break
				}
			}
			for i, c := range r.Contributed {
				if c != Equivalent(tt.kind, tt.resps[i].Text, r.Answer) {
					t.Errorf("contributed %v for answer %q", r.Contributed, r.Answer)
				}
			}
		})
	}
}

func TestFreeTextIsChosenByLearnedQuality(t *testing.T) {
	long := func(model, text string, learned float64) Response {
		r := resp(model, text, 0.5)
		r.Learned = learned
		return r
	}
	// Two similar answers from weaker models and a different one from the model that proved itself:
	// similarity would pick the pair, learned quality picks the proven model.
	resps := []Response{
		long("weak1", "Cache the rates in memory for an hour and refresh them from the provider on expiry", 0.3),
		long("weak2", "Cache the rates in memory for one hour and refresh them from the provider when they expire", 0.35),
		long("proven", "Keep a write-through cache in Redis keyed by currency pair with a short TTL and a stale fallback", 0.8),
		long("blank", "", 0.9),
	}
	for _, s := range []blueprints.Strategy{blueprints.Majority, blueprints.Weighted} {
		r, err := Decide(Input{Strategy: s, Responses: resps, Kind: Text})
		if err != nil {
			t.Fatal(err)
		}
		if r.Chosen != 2 || !r.Unjudged {
			t.Fatalf("%s: chose %d (unjudged %v), want the proven model's answer", s, r.Chosen, r.Unjudged)
		}
	}
	// Without learned quality the vote groups similar answers, as before.
	for i := range resps {
		resps[i].Learned = 0
	}
	if r, _ := Decide(Input{Strategy: blueprints.Majority, Responses: resps, Kind: Text}); r.Chosen == 2 || r.Unjudged {
		t.Fatalf("without learned quality: chose %d, unjudged %v", r.Chosen, r.Unjudged)
	}
}
