package consensus

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// The patterns the hand-written matchers of Normalize follow, as regular expressions: the reference
// they are checked against.
var (
	answerPrefixRE = regexp.MustCompile(`^(?:(?:so|thus|therefore|hence),?\s+)?(?:the\s+)?(?:final\s+|correct\s+)?(?:answer|option|choice)(?:\s+is)?\s*[:=-]?\s*`)
	choiceLetterRE = regexp.MustCompile(`^\(?([a-j])\)?(?:[.):]\s*|\s*$)`)
	numberLikeRE   = regexp.MustCompile(`^[-+]?\$?[0-9][0-9,]*(?:\.[0-9]+)?%?$`)
)

// TestMatchersFollowTheirPatterns compares each hand-written matcher with its regular expression on
// answers built from the patterns' own pieces, joined at random, and on the table's answers.
func TestMatchersFollowTheirPatterns(t *testing.T) {
	pieces := []string{"so", "thus", "therefore", "hence", ",", " ", "  ", "\t", "\n", "the", "final", "correct", "answer", "option",
		"choice", "is", "island", ":", "=", "-", "(", ")", ".", "a", "b", "j", "k", "x", "1", "0", "42", "$", "%", "+", ",5", ".25", "z"}
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := []string{"", "the answer is (b).", "so, the final answer: c", "answer island", "(b)x", "b)x", "(b", "b", "(k)", "1,000.5%", "-$3.", "+.5"}
	for range 200_000 {
		var b strings.Builder
		for n := rng.IntN(7); n >= 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		inputs = append(inputs, b.String())
	}
	for _, s := range inputs {
		if got, want := stripAnswerPrefix(s), answerPrefixRE.ReplaceAllString(s, ""); got != want {
			t.Fatalf("stripAnswerPrefix(%q) = %q, the pattern gives %q", s, got, want)
		}
		m := choiceLetterRE.FindStringSubmatch(s)
		if got, ok := choiceLetter(s); ok != (m != nil) || ok && got != m[1] {
			t.Fatalf("choiceLetter(%q) = %q %v, the pattern gives %q", s, got, ok, m)
		}
		if got, want := numberLike(s), numberLikeRE.MatchString(s); got != want {
			t.Fatalf("numberLike(%q) = %v, the pattern gives %v", s, got, want)
		}
	}
}

func TestTrimBulletIsTrimLeft(t *testing.T) {
	for _, s := range []string{"", "- a", "* b", "• c", "12. d", "3) e", "•• -1. f", " \tg", "-•\t- h", "•", "x • y", "\u2022x", "\u2023x"} {
		if got, want := trimBullet(s), strings.TrimLeft(s, "-*•0123456789.) "); got != want {
			t.Errorf("trimBullet(%q) = %q, want %q", s, got, want)
		}
	}
}
