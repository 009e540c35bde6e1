package consensus

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

var (
	numberNoise  = strings.NewReplacer("$", "", ",", "", "%", "")
	answerPrefix = regexp.MustCompile(`^(?:(?:so|thus|therefore|hence),?\s+)?(?:the\s+)?(?:final\s+|correct\s+)?(?:answer|option|choice)(?:\s+is)?\s*[:=-]?\s*`)
	choiceLetter = regexp.MustCompile(`^\(?([a-j])\)?(?:[.):]\s*|\s*$)`)
	numberLike   = regexp.MustCompile(`^[-+]?\$?[0-9][0-9,]*(?:\.[0-9]+)?%?$`)
)

// mentionsAnswer reports whether lower-cased text holds one of the words answerPrefix and letterInText
// need.
func mentionsAnswer(s string) bool {
	return strings.Contains(s, "answer") || strings.Contains(s, "option") || strings.Contains(s, "choice")
}

// Normalize reduces an answer to the form used to decide whether two answers are the same: lower case,
// a leading "the answer is" (or "answer:", "final answer:") dropped, choice letters reduced to the letter
// ("(B)", "B)", "B. Paris" -> "b"), numbers written canonically ("$1,000.0" -> "1000"), punctuation
// removed and whitespace collapsed.
//
// Each pattern runs only where the text could match it (the words it needs, the character it starts
// with): most answers match none, and Go's regular expressions cost microseconds even to fail.
func Normalize(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if mentionsAnswer(s) {
		s = answerPrefix.ReplaceAllString(s, "")
	}
	if s != "" && (s[0] == '(' || 'a' <= s[0] && s[0] <= 'j') {
		if m := choiceLetter.FindStringSubmatch(s); m != nil {
			return m[1]
		}
	}
	trimmed := strings.TrimRight(s, ". ")
	if trimmed != "" && strings.IndexByte("-+$0123456789", trimmed[0]) >= 0 && numberLike.MatchString(trimmed) {
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
