package consensus

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Kind is what an answer is, and so when two answers are the same one.
type Kind string

// The answer kinds.
const (
	// Text is free text: equal normal forms, or enough word overlap for longer answers. It also reads
	// choice letters and numbers in their usual spellings, so it is the right default for unknown tasks.
	Text Kind = "text"
	// Choice is an option letter: "B", "(B)", "The answer is (B)." are the same answer.
	Choice Kind = "choice"
	// Number is a number, compared by value: "1,000", "$1000" and "1000.0" are the same answer.
	Number Kind = "number"
	// Exact is a literal, such as a program's output: answers are the same only when identical, spaces
	// and brackets included ("[1, 2]" and "(1, 2)" differ).
	Exact Kind = "exact"
)

// Kinds lists every kind.
var Kinds = []Kind{Text, Choice, Number, Exact}

// ParseKind reads a kind; empty means Text, and "open" (free text in the replay data) is Text too.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case "", "open":
		return Text, nil
	case Text, Choice, Number, Exact:
		return k, nil
	}
	return "", fmt.Errorf("unknown answer kind %q (want text, choice, number or exact)", s)
}

var (
	letterInText = regexp.MustCompile(`\b(?:answer|option|choice)(?:\s+is)?\s*[:=-]?\s*\(?([a-j])\)?(?:[^a-z0-9]|$)`)
	letterAlone  = regexp.MustCompile(`(?:^|[^a-z0-9])\(([a-j])\)(?:[^a-z0-9]|$)`)
	firstNumber  = regexp.MustCompile(`[-+]?[0-9][0-9,]*(?:\.[0-9]+)?`)
)

// keyOf is an answer's comparison key under a categorical kind.
func keyOf(kind Kind, text string) string {
	switch kind {
	case Exact:
		return text
	case Choice:
		n := Normalize(text)
		if len(n) == 1 && n[0] >= 'a' && n[0] <= 'j' {
			return n
		}
		lower := strings.ToLower(text)
		if mentionsAnswer(lower) {
			if m := letterInText.FindStringSubmatch(lower); m != nil {
				return m[1]
			}
		}
		if strings.IndexByte(lower, '(') >= 0 {
			if m := letterAlone.FindStringSubmatch(lower); m != nil {
				return m[1]
			}
		}
		return n
	case Number:
		if f, err := strconv.ParseFloat(strings.TrimSpace(text), 64); err == nil {
			return strconv.FormatFloat(f, 'f', -1, 64)
		}
		if m := firstNumber.FindString(strings.ReplaceAll(text, "$", "")); m != "" {
			if f, err := strconv.ParseFloat(strings.ReplaceAll(m, ",", ""), 64); err == nil {
				return strconv.FormatFloat(f, 'f', -1, 64)
			}
		}
		return Normalize(text)
	}
	return Normalize(text)
}

// Equivalent reports whether two answers of a kind say the same thing: the test consensus uses for
// "contributed", and the feedback API and the evaluation use against a true answer.
func Equivalent(kind Kind, a, b string) bool {
	x, y := analyse(a, kind), analyse(b, kind)
	return similarity(&x, &y) >= ContributionThreshold
}
