package consensus

import (
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
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

// The claims and word hashes the scanners find are those of a byte-by-byte reading, on texts built at
// random from the bytes that end claims and words, bullets, numbers and letters outside ASCII.
func TestScannersFollowAPlainReading(t *testing.T) {
	pieces := []string{".", "!", "?", "\n", " ", "  ", "- ", "• ", "1. ", "3)", "a", "Word", "x.y", "3.5", "É", "ß", "日本", "\t", "é.", "\xff", "Z9", "0q", "_", "@", "AZaz09"}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100_000 {
		var b strings.Builder
		for n := rng.IntN(24); n >= 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		s := b.String()
		if got, want := appendClaims(nil, s), plainClaims(s); !slices.Equal(got, want) {
			t.Fatalf("appendClaims(%q) = %q, a plain reading gives %q", s, got, want)
		}
		if got, want := appendWordHashes(nil, s), plainWordHashes(s); !slices.Equal(got, want) {
			t.Fatalf("appendWordHashes(%q) = %x, a plain reading gives %x", s, got, want)
		}
	}
}

// plainClaims reads claims one byte at a time: the reference for appendClaims.
func plainClaims(text string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(text) && len(out) < maxClaimsPerResponse; i++ {
		end := i == len(text)
		if !end {
			c := text[i]
			end = c == '\n' || ((c == '.' || c == '!' || c == '?') && (i+1 == len(text) || text[i+1] == ' ' || text[i+1] == '\n'))
		}
		if end {
			if s := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(text[start:i]), "-*•0123456789.) ")); s != "" {
				out = append(out, s)
			}
			start = i + 1
		}
	}
	return out
}

// plainWordHashes hashes the lower-cased words strings.FieldsFunc finds: the reference for
// appendWordHashes.
func plainWordHashes(text string) []uint64 {
	var out []uint64
	for _, w := range strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		h := fnv.New64a()
		h.Write([]byte(strings.ToLower(w)))
		out = append(out, h.Sum64())
	}
	return out
}
