package consensus

import (
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/blueprints"
)

func TestDecided(t *testing.T) {
	long := strings.Repeat("a long free-text answer that explains itself at length ", 8)
	tests := []struct {
		desc    string
		answers []string
		kind    Kind
		unasked int
		decided bool
		need    int
	}{
		{"three of five agree: the other two cannot outvote them", []string{"A", "A", "A"}, Choice, 2, true, 0},
		{"two against one with two to come: one more for the leader decides it", []string{"A", "B", "A"}, Choice, 2, false, 1},
		{"three different answers with two to come: both must join a leader", []string{"A", "B", "C"}, Choice, 2, false, 2},
		{"three against one with one to come", []string{"A", "B", "A", "A"}, Choice, 1, true, 0},
		{"two against two with one to come: the last decides", []string{"A", "B", "A", "B"}, Choice, 1, false, 1},
		{"a tie is not decided when nobody is left", []string{"A", "B"}, Choice, 0, false, 0},
		{"a lead is decided when nobody is left", []string{"A", "B", "A"}, Choice, 0, true, 0},
		{"equivalent answers vote together", []string{"The answer is (B).", "B", "b"}, Choice, 2, true, 0},
		{"free text is never decided early", []string{long, long, long}, Text, 2, false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			resps := make([]Response, len(tt.answers))
			for i, a := range tt.answers {
				resps[i] = Response{Model: string(rune('m' + i)), Text: a}
			}
			decided, need := Decided(resps, tt.unasked, tt.kind, nil)
			if decided != tt.decided || need != tt.need {
				t.Fatalf("Decided = %v, need %d; want %v, need %d", decided, need, tt.decided, tt.need)
			}
		})
	}
}

func TestDecidedVotesAgreeWithTheWholePanel(t *testing.T) {
	// Every way five models can answer among three options, asked three first and then as many more as
	// each verdict needs: a vote decided early chooses what the vote of all five chooses.
	const panel, first = 5, 3
	options := []string{"A", "B", "C"}
	for code := range 243 { // 3^5
		resps := make([]Response, panel)
		for i, c := 0, code; i < panel; i, c = i+1, c/3 {
			resps[i] = Response{Model: string(rune('m' + i)), Text: options[c%3]}
		}
		whole, err := Decide(Input{Strategy: blueprints.Majority, Responses: resps, Kind: Choice})
		if err != nil {
			t.Fatal(err)
		}
		asked := first
		for {
			decided, need := Decided(resps[:asked], panel-asked, Choice, nil)
			if decided {
				early, err := Decide(Input{Strategy: blueprints.Majority, Responses: resps[:asked], Kind: Choice})
				if err != nil {
					t.Fatal(err)
				}
				if early.Answer != whole.Answer {
					t.Fatalf("answers %v: decided on %d with %q, the whole panel chooses %q", resps, asked, early.Answer, whole.Answer)
				}
				break
			}
			if asked == panel {
				break
			}
			if need < 1 || asked+need > panel {
				t.Fatalf("answers %v: %d asked, need %d", resps, asked, need)
			}
			asked += need
		}
	}
}
