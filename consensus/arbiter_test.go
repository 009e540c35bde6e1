package consensus

import (
	"strings"
	"testing"
)

func TestArbiterPromptNumbersCandidates(t *testing.T) {
	p := ArbiterPrompt("What is 2+2?", []string{"4", "5"})
	for _, want := range []string{"What is 2+2?", "[1]\n4", "[2]\n5", "1 to 2"} {
		if !strings.Contains(p, want) {
			t.Errorf("prompt lacks %q:\n%s", want, p)
		}
	}
}

func TestParseVerdict(t *testing.T) {
	tests := []struct {
		desc    string
		reply   string
		choice  int
		scores  int
		wantErr bool
	}{
		{"plain JSON", `{"choice": 2, "scores": [0.1, 0.9, 0.5]}`, 1, 3, false},
		{"prose around it", "After careful thought:\n{\"choice\": \"1\"}\nThanks.", 0, 0, false},
		{"wrong number of scores is dropped", `{"choice": 3, "scores": [1]}`, 2, 0, false},
		{"choice out of range", `{"choice": 4}`, 0, 0, true},
		{"zero is out of range", `{"choice": 0}`, 0, 0, true},
		{"no JSON", "The second one.", 0, 0, true},
		{"not a number", `{"choice": "second"}`, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			v, err := ParseVerdict(tt.reply, 3)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v", err)
			}
			if !tt.wantErr && (v.Choice != tt.choice || len(v.Scores) != tt.scores) {
				t.Fatalf("verdict %+v", v)
			}
		})
	}
}
