package classify

import (
	"strings"
	"testing"
)

func TestParseModelAnswer(t *testing.T) {
	for _, tc := range []struct {
		desc, answer string
		want         Category
		ok           bool
	}{
		{"the name alone", "debugging", Debugging, true},
		{"in other case, with a full stop", "Debugging.", Debugging, true},
		{"two words with a space", "Code review", CodeReview, true},
		{"with a hyphen, quoted", `"data-analysis"`, DataAnalysis, true},
		{"in a sentence", "The category is: security_audit", SecurityAudit, true},
		{"on a line of its own after a blank", "\n\ntranslation\n", Translation, true},
		{"two categories", "debugging or troubleshooting", "", false},
		{"none", "I cannot tell.", "", false},
		{"empty", "", "", false},
		{"a category inside a longer word is not it", "retesting", "", false},
		{"an essay", strings.Repeat("debugging ", 30), "", false},
	} {
		got, ok := ParseModelAnswer(tc.answer)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %q, %v; want %q, %v", tc.desc, got, ok, tc.want, tc.ok)
		}
	}
}

func TestModelPrompt(t *testing.T) {
	p := ModelPrompt("why does my loop never end?")
	for _, c := range Categories {
		if !strings.Contains(p, "- "+string(c)+": ") || describe[c] == "" {
			t.Errorf("the prompt does not describe %s", c)
		}
	}
	long := strings.Repeat("é", MaxPromptTaskBytes) + "THE END"
	p = ModelPrompt(long)
	if len(p) > 2*MaxPromptTaskBytes || !strings.Contains(p, "THE END") || !strings.Contains(p, "[…]") {
		t.Errorf("a long task is not clipped in the middle: %d bytes", len(p))
	}
	if strings.ToValidUTF8(p, "?") != p {
		t.Error("clipping split a character")
	}
}
