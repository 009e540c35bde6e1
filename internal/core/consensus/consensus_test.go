package consensus

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/blueprints"
)

func TestWeightedScoreExamplesOfTheSpecification(t *testing.T) {
	a := WeightedScore(0.92, 0.88, 0.99, 0.90)
	b := WeightedScore(0.71, 0.65, 0.94, 0.74)
	if math.Abs(a-0.9255) > 1e-12 || math.Abs(b-0.7615) > 1e-12 {
		t.Fatalf("scores %.12f and %.12f, want 0.9255 and 0.7615", a, b)
	}
	if higher := math.Round((a/b - 1) * 100); higher != 22 {
		t.Fatalf("first is %.0f%% higher, want 22%%", higher)
	}
	if s := WeightedScore(2, -1, math.NaN(), 1); s != 0.35+0.20 {
		t.Fatalf("inputs not clamped to [0,1]: %v", s)
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"B", "b"},
		{"(B)", "b"},
		{"b) Paris", "b"},
		{"The answer is (C).", "c"},
		{"Final answer: D", "d"},
		{"answer: 42", "42"},
		{"  The answer is 18.0 ", "18"},
		{"$1,000", "1000"},
		{"-3.50", "-3.5"},
		{"Paris!", "paris"},
		{"The   Eiffel\tTower.", "the eiffel tower"},
		{"A cat sat on the mat", "a cat sat on the mat"},
		{"So the answer is: Paris", "paris"},
	}
	for _, tt := range tests {
		if got := Normalize(tt.in); got != tt.want {
			t.Errorf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func resp(model, text string, w float64) Response {
	return Response{Model: model, Provider: "sim", Text: text, Capability: w, Recency: w, Reliability: w, Quality: w}
}

func TestMajority(t *testing.T) {
	tests := []struct {
		desc        string
		resps       []Response
		wantChosen  int
		wantAnswer  string
		contributed []bool
	}{
		{
			desc:        "largest group of equivalent answers wins",
			resps:       []Response{resp("a", "B", 0.5), resp("b", "The answer is (C)", 0.9), resp("c", "c", 0.4), resp("d", "C.", 0.6)},
			wantChosen:  1,
			wantAnswer:  "The answer is (C)",
			contributed: []bool{false, true, true, true},
		},
		{
			desc:        "a tie goes to the group with the higher weighted score",
			resps:       []Response{resp("a", "12", 0.3), resp("b", "12.0", 0.3), resp("c", "$13", 0.9), resp("d", "13", 0.2)},
			wantChosen:  2,
			wantAnswer:  "$13",
			contributed: []bool{false, false, true, true},
		},
		{
			desc:        "a single response is its own majority",
			resps:       []Response{resp("a", "yes", 0.1)},
			wantChosen:  0,
			wantAnswer:  "yes",
			contributed: []bool{true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			r, err := Decide(Input{Strategy: blueprints.Majority, Responses: tt.resps})
			if err != nil {
				t.Fatal(err)
			}
			if r.Chosen != tt.wantChosen || r.Answer != tt.wantAnswer || r.Arbiter != "" {
				t.Fatalf("chose %d %q (arbiter %q)", r.Chosen, r.Answer, r.Arbiter)
			}
			if fmt.Sprint(r.Contributed) != fmt.Sprint(tt.contributed) {
				t.Fatalf("contributed %v, want %v", r.Contributed, tt.contributed)
			}
		})
	}
}

func TestDecidersDecideAPlainMajority(t *testing.T) {
	learned := func(model, text string, q float64) Response {
		r := resp(model, text, 0.5)
		r.Learned = q
		return r
	}
	// Two proven models against three drawn to explore: a plain vote follows the explorers.
	split := []Response{learned("a", "A", 0.8), learned("b", "A", 0.7), learned("c", "B", 0.6), learned("d", "B", 0.2), learned("e", "B", 0.1)}
	tests := []struct {
		desc       string
		resps      []Response
		deciders   int
		wantAnswer string
		// contributed is the answer's group; inMajority the plain majority's and decided the answers
		// that decided, both nil when every answer voted alike.
		contributed, inMajority, decided []bool
	}{
		{
			desc: "the answers of the best-learned models decide; the others cannot outvote them", resps: split, deciders: 3,
			wantAnswer: "A", contributed: []bool{true, true, false, false, false}, inMajority: []bool{false, false, true, true, true},
			decided: []bool{true, true, true, false, false},
		},
		{
			desc: "no deciders: every answer votes alike", resps: split, deciders: 0,
			wantAnswer: "B", contributed: []bool{false, false, true, true, true},
		},
		{
			desc: "as many deciders as answers: every answer votes alike", resps: split, deciders: 5,
			wantAnswer: "B", contributed: []bool{false, false, true, true, true},
		},
		{
			desc:  "the other answers break a tie among the deciders",
			resps: []Response{learned("a", "A", 0.8), learned("b", "B", 0.7), learned("c", "C", 0.6), learned("d", "C", 0.2), learned("e", "D", 0.1)}, deciders: 3,
			wantAnswer: "C", contributed: []bool{false, false, true, true, false}, inMajority: []bool{false, false, true, true, false},
			decided: []bool{true, true, true, false, false},
		},
		{
			desc:  "ties in learned quality go to the earlier answers",
			resps: []Response{learned("a", "A", 0.5), learned("b", "A", 0.5), learned("c", "B", 0.5), learned("d", "B", 0.5), learned("e", "B", 0.5)}, deciders: 3,
			wantAnswer: "A", contributed: []bool{true, true, false, false, false}, inMajority: []bool{false, false, true, true, true},
			decided: []bool{true, true, true, false, false},
		},
		{
			desc:  "two deciders agreeing outweigh a plain majority of three",
			resps: []Response{learned("a", "A", 0.1), learned("b", "B", 0.9), learned("c", "B", 0.8), learned("d", "A", 0.7), learned("e", "A", 0.2)}, deciders: 3,
			wantAnswer: "B", contributed: []bool{false, true, true, false, false}, inMajority: []bool{true, false, false, true, true},
			decided: []bool{false, true, true, true, false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			r, err := Decide(Input{Strategy: blueprints.Majority, Responses: tt.resps, Kind: Choice, Deciders: tt.deciders})
			if err != nil {
				t.Fatal(err)
			}
			if r.Answer != tt.wantAnswer {
				t.Fatalf("answer %q, want %q", r.Answer, tt.wantAnswer)
			}
			if fmt.Sprint(r.Contributed) != fmt.Sprint(tt.contributed) || fmt.Sprint(r.InMajority) != fmt.Sprint(tt.inMajority) ||
				fmt.Sprint(r.Deciders) != fmt.Sprint(tt.decided) {
				t.Fatalf("contributed %v, in majority %v, deciders %v; want %v, %v, %v", r.Contributed, r.InMajority, r.Deciders,
					tt.contributed, tt.inMajority, tt.decided)
			}
		})
	}
}

func TestDecidersLeaveOtherDecisionsAlone(t *testing.T) {
	resps := []Response{resp("a", "A", 0.9), resp("b", "B", 0.5), resp("c", "B", 0.5)}
	for i := range resps {
		resps[i].Learned = 0.9 - 0.1*float64(i)
	}
	// A weighted vote weighs every answer already, and so does a reliability-weighted one whose
	// estimates no truth anchors.
	for _, in := range []Input{
		{Strategy: blueprints.Weighted, Responses: resps, Kind: Choice, Deciders: 1},
		{Strategy: blueprints.Majority, Responses: withAccuracy(resps, 0.7), Kind: Choice, Deciders: 1},
	} {
		r, err := Decide(in)
		if err != nil {
			t.Fatal(err)
		}
		if r.InMajority != nil || r.Deciders != nil {
			t.Fatalf("%s: in majority %v, deciders %v, want none", in.Strategy, r.InMajority, r.Deciders)
		}
		plain := in
		plain.Deciders = 0
		if want, _ := Decide(plain); r.Answer != want.Answer {
			t.Fatalf("%s: answer %q with deciders, %q without", in.Strategy, r.Answer, want.Answer)
		}
	}
}

func TestAnchoredDecidersDecideAReliabilityWeightedVote(t *testing.T) {
	estimated := func(model, text string, acc float64, anchored bool) Response {
		r := resp(model, text, 0.5)
		r.Accuracy, r.Learned, r.Anchored = acc, acc, anchored
		return r
	}
	// The two best models say A; three weaker ones, together weighing a little more, say B.
	split := func(anchored ...bool) []Response {
		accs, texts := []float64{0.8, 0.75, 0.7, 0.65, 0.6}, "AABBB"
		out := make([]Response, len(accs))
		for i, a := range accs {
			out[i] = estimated(string(rune('a'+i)), texts[i:i+1], a, anchored[i])
		}
		return out
	}
	tests := []struct {
		desc       string
		resps      []Response
		wantAnswer string
		decided    []bool // nil: every answer weighed by its accuracy
	}{
		{
			desc: "the three best anchored models decide", resps: split(true, true, true, true, true),
			wantAnswer: "A", decided: []bool{true, true, true, false, false},
		},
		{
			desc: "too few anchored models: every answer weighs in", resps: split(true, true, false, false, false),
			wantAnswer: "B",
		},
		{
			desc: "an unanchored model does not decide, however well estimated", resps: split(false, true, true, true, true),
			wantAnswer: "B", decided: []bool{false, true, true, true, false},
		},
		{
			desc: "the other answers break a tie among the deciders",
			resps: []Response{estimated("a", "A", 0.7, true), estimated("b", "B", 0.7, true), estimated("c", "C", 0.7, true),
				estimated("d", "C", 0.5, false), estimated("e", "D", 0.5, false)},
			wantAnswer: "C", decided: []bool{true, true, true, false, false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			r, err := Decide(Input{Strategy: blueprints.Majority, Responses: tt.resps, Kind: Choice, Deciders: 3})
			if err != nil {
				t.Fatal(err)
			}
			if r.Answer != tt.wantAnswer || fmt.Sprint(r.Deciders) != fmt.Sprint(tt.decided) || len(r.Groups) != len(tt.resps) {
				t.Fatalf("answer %q, deciders %v, groups %v; want %q, %v", r.Answer, r.Deciders, r.Groups, tt.wantAnswer, tt.decided)
			}
			// The answer's posterior leads.
			if top := slices.Max(r.Scores); r.Scores[r.Chosen] != top {
				t.Fatalf("the answer's posterior %v, the highest %v", r.Scores[r.Chosen], top)
			}
		})
	}
}

func withAccuracy(resps []Response, acc float64) []Response {
	out := slices.Clone(resps)
	for i := range out {
		out[i].Accuracy = acc
	}
	return out
}

func TestMajorityVoteShares(t *testing.T) {
	r, _ := Decide(Input{Strategy: blueprints.Majority, Responses: []Response{resp("a", "x", 1), resp("b", "x", 1), resp("c", "y", 1), resp("d", "x", 1)}})
	want := []float64{0.75, 0.75, 0.25, 0.75}
	for i := range want {
		if r.Scores[i] != want[i] {
			t.Fatalf("scores %v, want %v", r.Scores, want)
		}
	}
	if len(r.Agreement) != 1 || !strings.Contains(r.Agreement[0], `"x" from 3 of 4: a, b, d`) {
		t.Fatalf("agreement %q", r.Agreement)
	}
	if len(r.Disagreement) != 1 || !strings.Contains(r.Disagreement[0], `"y" from 1 of 4: c`) {
		t.Fatalf("disagreement %q", r.Disagreement)
	}
}

func TestQualityFromAgreement(t *testing.T) {
	resps := []Response{resp("a", "x", 0.5), resp("b", "x", 0.5), resp("c", "y", 0.5)}
	for i := range resps {
		resps[i].Quality = 0
	}
	r, _ := Decide(Input{Strategy: blueprints.Weighted, Responses: resps, QualityFromAgreement: true})
	// a and b agree fully with one of two peers: quality 0.5, adding 0.2 × 0.5 to their score.
	if want := 0.35*0.5 + 0.2*0.5 + 0.25*0.5 + 0.2*0.5; math.Abs(r.Weighted[0]-want) > 1e-12 || math.Abs(r.Weighted[2]-(want-0.1)) > 1e-12 {
		t.Fatalf("weighted %v", r.Weighted)
	}
	if resps[0].Quality != 0 {
		t.Fatal("the caller's responses were modified")
	}
}

func TestWeightedLetsTrustedMinorityWin(t *testing.T) {
	resps := []Response{resp("strong1", "A", 0.95), resp("strong2", "A", 0.95), resp("weak1", "B", 0.2), resp("weak2", "B", 0.2), resp("weak3", "B", 0.2)}
	maj, _ := Decide(Input{Strategy: blueprints.Majority, Responses: resps})
	w, _ := Decide(Input{Strategy: blueprints.Weighted, Responses: resps})
	if Normalize(maj.Answer) != "b" || Normalize(w.Answer) != "a" {
		t.Fatalf("majority %q, weighted %q; want b and a", maj.Answer, w.Answer)
	}
	if want := 1.9 / 2.5; math.Abs(w.Scores[0]-want) > 1e-9 {
		t.Fatalf("weighted share %v, want %v", w.Scores[0], want)
	}
}

func TestRotatingArbiterTakesTurns(t *testing.T) {
	models := []string{"m-c", "m-a", "m-b"}
	var got []string
	for round := uint64(0); round < 6; round++ {
		got = append(got, ArbiterFor(models, round))
	}
	if want := "[m-a m-b m-c m-a m-b m-c]"; fmt.Sprint(got) != want {
		t.Fatalf("arbiters %v, want %s", got, want)
	}
	if ArbiterFor(nil, 3) != "" {
		t.Fatal("arbiter without participants")
	}
}

func TestRotating(t *testing.T) {
	resps := []Response{resp("a", "blue", 0.5), resp("b", "red", 0.5), resp("c", "red", 0.5)}
	tests := []struct {
		desc        string
		in          Input
		wantAnswer  string
		wantArbiter string
		wantScores  []float64
	}{
		{
			desc:        "the arbiter model's choice stands, even against the majority",
			in:          Input{Arbiter: "b", Verdict: &Verdict{Choice: 0, Scores: []float64{0.9, 0.2, 0.3}}},
			wantAnswer:  "blue",
			wantArbiter: "b",
			wantScores:  []float64{0.9, 0.2, 0.3},
		},
		{
			desc:        "a synthesis replaces the chosen text",
			in:          Input{Arbiter: "c", Verdict: &Verdict{Choice: 1, Answer: "Red, mostly."}},
			wantAnswer:  "Red, mostly.",
			wantArbiter: "c",
			wantScores:  []float64{0, 0.5, 0.5},
		},
		{
			desc:        "no arbiter model reachable: the local arbiter decides",
			in:          Input{},
			wantAnswer:  "red",
			wantArbiter: LocalArbiter,
			wantScores:  []float64{0, 0.5, 0.5},
		},
		{
			desc:        "an out-of-range verdict is ignored",
			in:          Input{Arbiter: "a", Verdict: &Verdict{Choice: 7}},
			wantAnswer:  "red",
			wantArbiter: LocalArbiter,
			wantScores:  []float64{0, 0.5, 0.5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			tt.in.Strategy, tt.in.Responses = blueprints.Rotating, resps
			r, err := Decide(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if r.Answer != tt.wantAnswer || r.Arbiter != tt.wantArbiter || fmt.Sprint(r.Scores) != fmt.Sprint(tt.wantScores) {
				t.Fatalf("got %q by %q scores %v", r.Answer, r.Arbiter, r.Scores)
			}
		})
	}
}

func TestPairwiseCopeland(t *testing.T) {
	resps := []Response{resp("a", "one", 0.5), resp("b", "two", 0.9), resp("c", "three", 0.5), resp("d", "four", 0.5)}
	// c beats everyone; a, b, d form a cycle (a > b > d > a).
	beats := map[[2]int]bool{{2, 0}: true, {2, 1}: true, {2, 3}: true, {0, 1}: true, {1, 3}: true, {3, 0}: true}
	prefer := func(i, j int) float64 {
		switch {
		case beats[[2]int{i, j}]:
			return 0.8
		case beats[[2]int{j, i}]:
			return 0.2
		}
		return 0.5
	}
	r, err := Decide(Input{Strategy: blueprints.Pairwise, Responses: resps, Prefer: prefer, Arbiter: "judge-model"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Chosen != 2 || r.Arbiter != "judge-model" {
		t.Fatalf("chose %d by %q", r.Chosen, r.Arbiter)
	}
	want := []float64{1.0 / 3, 1.0 / 3, 1, 1.0 / 3}
	for i := range want {
		if math.Abs(r.Scores[i]-want[i]) > 1e-12 {
			t.Fatalf("copeland shares %v, want %v", r.Scores, want)
		}
	}
	// Without c, the cycle ties at one win each: the higher weighted score (b) is chosen.
	r, _ = Decide(Input{Strategy: blueprints.Pairwise, Responses: []Response{resps[0], resps[1], resps[3]}, Prefer: func(i, j int) float64 {
		m := map[[2]int]float64{{0, 1}: 1, {1, 2}: 1, {0, 2}: 0}
		return m[[2]int{i, j}]
	}})
	if r.Chosen != 1 {
		t.Fatalf("cycle tie-break chose %d, want 1", r.Chosen)
	}
}

func TestPairwiseLocalJudgePrefersAgreement(t *testing.T) {
	resps := []Response{resp("a", "7", 0.6), resp("b", "7", 0.6), resp("c", "9", 0.9)}
	r, _ := Decide(Input{Strategy: blueprints.Pairwise, Responses: resps})
	if Normalize(r.Answer) != "7" || r.Arbiter != LocalArbiter {
		t.Fatalf("chose %q by %q", r.Answer, r.Arbiter)
	}
}

func words(seed, n int, vocab []string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocab[(seed*7+i*13+i*i)%len(vocab)])
	}
	return b.String()
}

func TestLocalArbiterPicksTheConsensusCentre(t *testing.T) {
	base := "The service should cache the user profile in Redis with a five minute expiry and invalidate it on every profile update event"
	resps := []Response{
		resp("outlier", "Rewrite everything in Haskell because monads make caching unnecessary and types prevent all bugs forever", 0.99),
		resp("close1", base+" so reads stay fast.", 0.5),
		resp("centre", base+".", 0.5),
		resp("close2", base+" and log misses.", 0.5),
	}
	r, err := LocalChoice(resps)
	if err != nil {
		t.Fatal(err)
	}
	if r.Chosen != 2 || r.Arbiter != LocalArbiter {
		t.Fatalf("chose %d (%q), want the centre", r.Chosen, resps[r.Chosen].Model)
	}
	if r.Scores[0] >= r.Scores[2] {
		t.Fatalf("outlier scored %v, centre %v", r.Scores[0], r.Scores[2])
	}
	again, _ := LocalChoice(resps)
	if fmt.Sprint(again) != fmt.Sprint(r) {
		t.Fatal("local arbiter not deterministic")
	}
	full, _ := Decide(Input{Strategy: blueprints.Rotating, Responses: resps})
	if want := []bool{false, true, true, true}; fmt.Sprint(full.Contributed) != fmt.Sprint(want) {
		t.Fatalf("contributed %v, want %v", full.Contributed, want)
	}
}

func TestFreeTextPoints(t *testing.T) {
	resps := []Response{
		resp("a", "Use a read-through cache for profiles. Expire entries after five minutes. Shard by tenant id.", 0.5),
		resp("b", "Expire entries after five minutes. Use a read-through cache for the profiles.", 0.5),
		resp("c", "Use a read through cache for profiles. Store sessions in Postgres instead of memory.", 0.5),
	}
	r, _ := Decide(Input{Strategy: blueprints.Rotating, Responses: resps})
	joined := strings.Join(r.Agreement, "|")
	if !strings.Contains(joined, "read-through cache for profiles (3 of 3)") || !strings.Contains(joined, "Expire entries after five minutes (2 of 3)") {
		t.Fatalf("agreement %q", r.Agreement)
	}
	dis := strings.Join(r.Disagreement, "|")
	if !strings.Contains(dis, "Shard by tenant id (only a)") || !strings.Contains(dis, "Store sessions in Postgres instead of memory (only c)") {
		t.Fatalf("disagreement %q", r.Disagreement)
	}
}

func TestDecideErrors(t *testing.T) {
	if _, err := Decide(Input{Strategy: blueprints.Majority}); !errors.Is(err, ErrNoResponses) {
		t.Fatalf("want ErrNoResponses, got %v", err)
	}
	if _, err := Decide(Input{Strategy: "astrology", Responses: []Response{resp("a", "x", 1)}}); err == nil {
		t.Fatal("unknown strategy accepted")
	}
}

var benchVocab = strings.Fields("the cache service request latency profile user update event database shard tenant index query read write replica queue worker retry timeout budget policy limit token model answer consensus vote score")

func benchResponses(wordsEach int, categorical bool) []Response {
	resps := make([]Response, 6)
	for i := range resps {
		text := words(i%3, wordsEach, benchVocab)
		if categorical {
			text = []string{"A", "B", "A", "(A)", "C", "a"}[i]
		}
		resps[i] = Response{Model: fmt.Sprintf("m%d", i), Text: text, Capability: 0.9, Recency: 0.7, Reliability: 0.95, Quality: 0.8}
	}
	return resps
}

func BenchmarkWeighted6(b *testing.B) {
	in := Input{Strategy: blueprints.Weighted, Responses: benchResponses(0, true)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decide(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMajority6(b *testing.B) {
	in := Input{Strategy: blueprints.Majority, Responses: benchResponses(0, true)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decide(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLocalArbiter6x300Words(b *testing.B) {
	resps := benchResponses(300, false)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LocalChoice(resps); err != nil {
			b.Fatal(err)
		}
	}
}

// benchFreeText is six answers of five sentences in the shape of a plan, most sentences shared by a
// majority and some each answer's own: the shape the simulated models give a free-text task.
func benchFreeText() []Response {
	shared := []string{"Start with the billing schema, then look at the replicas.", "The main risk lies in the cutover when the traffic changes.",
		"Keep the writes separate from the reads.", "Measure the latency before tuning the queries.", "Document how the service depends on the database."}
	own := []string{"Prefer a simple dump over a clever replication.", "Check the indexes against the queries first.",
		"Treat the old cluster as the source of truth for the migration.", "Keep the quarters separate from the tenants."}
	resps := make([]Response, 6)
	for i := range resps {
		var b strings.Builder
		for k, s := range shared {
			if (i+k)%4 == 3 {
				s = own[(i+k)%len(own)]
			}
			if k > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(s)
		}
		resps[i] = Response{Model: fmt.Sprintf("m%d", i), Text: b.String(), Capability: 0.9, Recency: 0.7, Reliability: 0.95, Learned: 0.5 + float64(i)/20}
	}
	return resps
}

func BenchmarkMajority6FreeText(b *testing.B) {
	in := Input{Strategy: blueprints.Majority, Responses: benchFreeText(), QualityFromAgreement: true}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decide(in); err != nil {
			b.Fatal(err)
		}
	}
}
