package consensus

import (
	"testing"

	"github.com/conclave-ai/conclave/blueprints"
)

func TestEquivalentByKind(t *testing.T) {
	tests := []struct {
		desc string
		kind Kind
		a, b string
		want bool
	}{
		{"letters in their spellings", Choice, "B", "The answer is (B).", true},
		{"a letter in prose", Choice, "After checking each option, the answer is c because ...", "(C)", true},
		{"different letters", Choice, "(A)", "(B)", false},
		{"numbers by value", Number, "1,000", "$1000.0", true},
		{"the first number of a sentence", Number, "There are 42 apples.", "42", true},
		{"different numbers", Number, "18", "18.5", false},
		{"exact literals keep their brackets", Exact, "[1, 2]", "(1, 2)", false},
		{"exact literals keep their spaces", Exact, " a", "a", false},
		{"identical literals", Exact, "'ab'", "'ab'", true},
		{"free text normalises brackets away", Text, "[1, 2]", "(1, 2)", true},
		{"free text keeps the old spellings", Text, "The answer is (C).", "c", true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if got := Equivalent(tt.kind, tt.a, tt.b); got != tt.want {
				t.Fatalf("Equivalent(%s, %q, %q) = %v", tt.kind, tt.a, tt.b, got)
			}
		})
	}
}

func TestParseKind(t *testing.T) {
	for in, want := range map[string]Kind{"": Text, "open": Text, "text": Text, "choice": Choice, "number": Number, "exact": Exact} {
		if got, err := ParseKind(in); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseKind("vibes"); err == nil {
		t.Error("an unknown kind was accepted")
	}
}

func TestMajorityVotesByKind(t *testing.T) {
	resps := []Response{resp("a", "[1, 2]", 0.9), resp("b", "[1, 2]", 0.9), resp("c", "(1, 2)", 0.5), resp("d", "(1, 2)", 0.5), resp("e", "(1, 2)", 0.5)}
	exact, err := Decide(Input{Strategy: blueprints.Majority, Responses: resps, Kind: Exact})
	if err != nil {
		t.Fatal(err)
	}
	if exact.Answer != "(1, 2)" || exact.Contributed[0] || exact.Contributed[1] || !exact.Contributed[2] {
		t.Fatalf("exact: answer %q contributed %v", exact.Answer, exact.Contributed)
	}
	text, err := Decide(Input{Strategy: blueprints.Majority, Responses: resps})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range text.Contributed {
		if !c {
			t.Fatalf("as free text every answer is the same one; %d did not contribute", i)
		}
	}
}
