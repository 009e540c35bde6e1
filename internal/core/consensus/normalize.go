package consensus

import (
	"strconv"
	"strings"
	"unicode"
)

var numberNoise = strings.NewReplacer("$", "", ",", "", "%", "")

// mentionsAnswer reports whether lower-cased text holds one of the words an answer prefix and
// letterInText need.
func mentionsAnswer(s string) bool {
	return strings.Contains(s, "answer") || strings.Contains(s, "option") || strings.Contains(s, "choice")
}

// isSpace is \s of Go's regular expressions.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// prefixWord returns the index after word when s has it at i, or -1.
func prefixWord(s string, i int, words ...string) int {
	for _, w := range words {
		if strings.HasPrefix(s[i:], w) {
			return i + len(w)
		}
	}
	return -1
}

// stripAnswerPrefix drops a leading "the answer is" from lower-cased s, as the pattern
// ^(?:(?:so|thus|therefore|hence),?\s+)?(?:the\s+)?(?:final\s+|correct\s+)?(?:answer|option|choice)(?:\s+is)?\s*[:=-]?\s*
// would: written by hand, because the regular expression cost microseconds per answer.
func stripAnswerPrefix(s string) string {
	i := 0
	// An optional word that must be followed by whitespace; the words of each step start with letters
	// no later step starts with, so taking a step that then fails never hides a match without it.
	optional := func(comma bool, words ...string) {
		j := prefixWord(s, i, words...)
		if j < 0 {
			return
		}
		if comma && j < len(s) && s[j] == ',' {
			j++
		}
		if k := skipSpace(s, j); k > j {
			i = k
		}
	}
	optional(true, "so", "thus", "therefore", "hence")
	optional(false, "the")
	optional(false, "final", "correct")
	j := prefixWord(s, i, "answer", "option", "choice")
	if j < 0 {
		return s
	}
	if k := skipSpace(s, j); k > j && strings.HasPrefix(s[k:], "is") {
		j = k + 2
	}
	j = skipSpace(s, j)
	if j < len(s) && strings.IndexByte(":=-", s[j]) >= 0 {
		j = skipSpace(s, j+1)
	}
	return s[j:]
}

// choiceLetter returns the choice letter lower-cased s starts with, as ^\(?([a-j])\)?(?:[.):]\s*|\s*$)
// would find it.
func choiceLetter(s string) (string, bool) {
	i := 0
	if i < len(s) && s[i] == '(' {
		i++
	}
	if i >= len(s) || s[i] < 'a' || s[i] > 'j' {
		return "", false
	}
	letter := s[i : i+1]
	i++
	if i < len(s) && strings.IndexByte(".):", s[i]) >= 0 {
		return letter, true
	}
	return letter, skipSpace(s, i) == len(s)
}

// numberLike reports whether s is a number as ^[-+]?\$?[0-9][0-9,]*(?:\.[0-9]+)?%?$ says.
func numberLike(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	if i < len(s) && s[i] == '$' {
		i++
	}
	if i >= len(s) || !isDigit(s[i]) {
		return false
	}
	i = integerEnd(s, i)
	if i+1 < len(s) && s[i] == '.' && isDigit(s[i+1]) {
		i = digitsEnd(s, i+1)
	}
	if i < len(s) && s[i] == '%' {
		i++
	}
	return i == len(s)
}

// isDigit reports whether c is an ASCII digit.
func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// integerEnd returns the index of the first byte from i that is neither a digit nor a thousands
// separator.
func integerEnd(s string, i int) int {
	for i < len(s) && (isDigit(s[i]) || s[i] == ',') {
		i++
	}
	return i
}

// digitsEnd returns the index of the first byte from i that is not a digit.
func digitsEnd(s string, i int) int {
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}

// Normalize reduces an answer to the form used to decide whether two answers are the same: lower case,
// a leading "the answer is" (or "answer:", "final answer:") dropped, choice letters reduced to the letter
// ("(B)", "B)", "B. Paris" -> "b"), numbers written canonically ("$1,000.0" -> "1000"), punctuation
// removed and whitespace collapsed.
//
// The patterns are matched by hand: Go's regular expressions cost microseconds per answer, which is
// more than the rest of a vote.
func Normalize(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if mentionsAnswer(s) {
		s = stripAnswerPrefix(s)
	}
	if letter, ok := choiceLetter(s); ok {
		return letter
	}
	trimmed := strings.TrimRight(s, ". ")
	if numberLike(trimmed) {
		clean := numberNoise.Replace(trimmed)
		if f, err := strconv.ParseFloat(clean, 64); err == nil {
			return strconv.FormatFloat(f, 'f', -1, 64)
		}
	}
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteRune(r)
		case unicode.IsSpace(r) || unicode.IsPunct(r) || unicode.IsSymbol(r):
			space = true
		}
	}
	return b.String()
}
