package consensus

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/blueprints"
)

func TestArbiterPromptNumbersTheResponses(t *testing.T) {
	system, user := ArbiterPrompt(blueprints.Rotating, "What is 2+2?", []Judged{{"4", 0.81}, {"5", 0.62}})
	for _, want := range []string{"What is 2+2?", "[1] (weighted score 0.81)\n4", "[2] (weighted score 0.62)\n5", "1 to 2", "relevance"} {
		if !strings.Contains(user, want) {
			t.Errorf("prompt lacks %q:\n%s", want, user)
		}
	}
	if strings.Contains(user, "preferences") || system == "" {
		t.Error("a rotating arbiter is asked for preferences, or has no instruction")
	}
	if _, user := ArbiterPrompt(blueprints.Pairwise, "t", []Judged{{"a", 1}, {"b", 1}}); !strings.Contains(user, "preferences") {
		t.Error("a pairwise arbiter is not asked for preferences")
	}
}

func TestVerdictSchemaIsStrictJSONSchema(t *testing.T) {
	for _, s := range blueprints.Strategies {
		var schema map[string]any
		if err := json.Unmarshal(VerdictSchema(s), &schema); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		props := schema["properties"].(map[string]any)
		if len(schema["required"].([]any)) != len(props) || schema["additionalProperties"] != false {
			t.Fatalf("%s: every property must be required and no other allowed: %v", s, schema)
		}
		if _, ok := props["preferences"]; ok != (s == blueprints.Pairwise) {
			t.Fatalf("%s: preferences %v", s, ok)
		}
	}
}

func TestParseVerdict(t *testing.T) {
	tests := []struct {
		desc    string
		reply   string
		choice  int
		scores  int
		points  int
		prefer  bool
		wantErr bool
	}{
		{"the protocol's object", `{"choice": 2, "answer": "4", "scores": [{"relevance":1,"correctness":1,"completeness":0.4},{"relevance":1,"correctness":0,"completeness":1},{"relevance":0,"correctness":0,"completeness":0}], "agreement": ["it is a sum"], "disagreement": []}`, 1, 3, 1, false, false},
		{"plain number scores", `{"choice": 2, "scores": [0.1, 0.9, 0.5]}`, 1, 3, 0, false, false},
		{"prose around it", "After careful thought:\n{\"choice\": \"1\"}\nThanks.", 0, 0, 0, false, false},
		{"wrong number of scores is dropped", `{"choice": 3, "scores": [1]}`, 2, 0, 0, false, false},
		{"a score without its parts is dropped", `{"choice": 3, "scores": [{"relevance":1},1,1]}`, 2, 0, 0, false, false},
		{"preferences", `{"choice": 1, "preferences": [{"first":1,"second":2,"winner":1},{"first":2,"second":3,"winner":0},{"first":9,"second":1,"winner":9}]}`, 0, 0, 0, true, false},
		{"choice out of range", `{"choice": 4}`, 0, 0, 0, false, true},
		{"zero is out of range", `{"choice": 0}`, 0, 0, 0, false, true},
		{"no JSON", "The second one.", 0, 0, 0, false, true},
		{"not a number", `{"choice": "second"}`, 0, 0, 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			v, err := ParseVerdict(tt.reply, 3)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v", err)
			}
			if tt.wantErr {
				return
			}
			if v.Choice != tt.choice || len(v.Scores) != tt.scores || len(v.Agreement) != tt.points || (v.Prefer != nil) != tt.prefer {
				t.Fatalf("verdict %+v", v)
			}
			if tt.prefer && (v.Prefer[0][1] != 1 || v.Prefer[1][0] != 0 || v.Prefer[1][2] != 0.5) {
				t.Fatalf("preferences %v", v.Prefer)
			}
		})
	}
	v, _ := ParseVerdict(`{"choice": 1, "scores": [{"relevance":1,"correctness":0.5,"completeness":0}, 2, -1]}`, 3)
	if v.Scores[0] != 0.5 || v.Scores[1] != 1 || v.Scores[2] != 0 {
		t.Fatalf("scores %v: the mean of the parts, clamped to [0, 1]", v.Scores)
	}
}

func TestAVerdictDrivesEachStrategy(t *testing.T) {
	resps := []Response{resp("a", "Cache the user lookups with a TTL.", 0.5), resp("b", "Add an index on users.email.", 0.5), resp("c", "Add an index on users.email.", 0.5)}
	unified := "Add an index on users.email, then cache the lookups."
	verdict := &Verdict{Choice: 0, Answer: unified, Scores: []float64{1, 0, 0}, Agreement: []string{"the lookup is slow"},
		Prefer: [][]float64{{0.5, 1, 1}, {0, 0.5, 0.5}, {0, 0.5, 0.5}}}
	for _, tt := range []struct {
		strategy  blueprints.Strategy
		answer    string
		synthesis bool
	}{
		{blueprints.Rotating, unified, true},
		{blueprints.Weighted, unified, true},
		{blueprints.Pairwise, resps[0].Text, false},
	} {
		r, err := Decide(Input{Strategy: tt.strategy, Responses: resps, Arbiter: "judge", Verdict: verdict, QualityFromAgreement: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Answer != tt.answer || r.Synthesis != tt.synthesis || r.Arbiter != "judge" || r.Agreement[0] != "the lookup is slow" {
			t.Fatalf("%s: answer %q synthesis %v arbiter %q agreement %v", tt.strategy, r.Answer, r.Synthesis, r.Arbiter, r.Agreement)
		}
	}
	// Weighted: the arbiter's scores are the quality term, so the lone answer it trusts outweighs the pair.
	r, _ := Decide(Input{Strategy: blueprints.Weighted, Responses: resps, Arbiter: "judge", Verdict: &Verdict{Scores: []float64{1, 0, 0}}, QualityFromAgreement: true})
	if r.Weighted[0] <= r.Weighted[1] {
		t.Fatalf("weighted scores %v: the arbiter's quality did not count", r.Weighted)
	}
	// Choice letters are voted, never synthesised.
	r, _ = Decide(Input{Strategy: blueprints.Weighted, Responses: []Response{resp("a", "B", 0.5), resp("b", "B", 0.5)}, Kind: Choice,
		Arbiter: "judge", Verdict: &Verdict{Answer: "C"}})
	if r.Answer != "B" || r.Synthesis {
		t.Fatalf("a choice synthesised: %q", r.Answer)
	}
}
