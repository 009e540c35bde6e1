// Package problems owns the shape of what is wrong with an input, so that every layer that rejects
// input (blueprints, the HTTP API) reports every problem at once, each tied to the field at fault.
package problems

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// Problem is one rejected field.
type Problem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Errors is a list of problems; it is an error when not empty.
type Errors []Problem

// Add appends a problem.
func (e *Errors) Add(field, message string) { *e = append(*e, Problem{Field: field, Message: message}) }

// Err returns e as an error, or nil when there is no problem.
func (e Errors) Err() error {
	if len(e) == 0 {
		return nil
	}
	return e
}

func (e Errors) Error() string {
	parts := make([]string, len(e))
	for i, p := range e {
		parts[i] = p.Field + ": " + p.Message
	}
	return "invalid input: " + strings.Join(parts, "; ")
}

// Of returns the problems carried by err, or nil.
func Of(err error) Errors {
	var errs Errors
	if errors.As(err, &errs) {
		return errs
	}
	return nil
}

// MaxProblems is the most problems a report lists; the rest are counted, so a huge input cannot make a
// huge error.
const MaxProblems = 50

// Bounds of what a problem echoes of the input: an unknown key or a bad value can be as long as the body.
const (
	MaxFieldBytes   = 64
	MaxMessageBytes = 256
)

// Capped returns at most MaxProblems problems, their fields and messages clipped, and one more problem
// saying how many were left out.
func (e Errors) Capped() Errors {
	out := make(Errors, 0, min(len(e), MaxProblems+1))
	for i, p := range e {
		if i == MaxProblems {
			out = append(out, Problem{Field: "body", Message: fmt.Sprintf("and %d more problems", len(e)-MaxProblems)})
			break
		}
		out = append(out, Problem{Field: Clip(p.Field, MaxFieldBytes), Message: Clip(p.Message, MaxMessageBytes)})
	}
	return out
}

// Clip cuts s to at most n bytes (and a mark that it was cut), on a character boundary.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// Visible reports whether a text has a character one can see: not only spaces, or format characters
// such as zero-width spaces. A task without one is refused wherever it comes in.
func Visible(text string) bool {
	for _, r := range text {
		if unicode.IsGraphic(r) && !unicode.IsSpace(r) {
			return true
		}
	}
	return false
}

// MaxTimeoutSeconds bounds the wait a caller may ask for.
const MaxTimeoutSeconds = 3600

// Timeout says what is wrong with a caller's timeout in seconds, or returns "" when nothing is. NaN is
// wrong too (a protobuf double can carry it, JSON cannot), hence the comparison written as what holds.
func Timeout(seconds float64) string {
	if !(seconds > 0 && seconds <= MaxTimeoutSeconds) {
		return fmt.Sprintf("must be greater than 0 and at most %d seconds", MaxTimeoutSeconds)
	}
	return ""
}

// MaxClientIDBytes bounds a caller's own id for a request (its X-Request-ID, a remote request's id).
const MaxClientIDBytes = 128

// ClientID says what is wrong with a caller's own id for a request, or returns "": at most
// MaxClientIDBytes printable ASCII characters, as it is logged and recorded beside the server's id.
func ClientID(id string) string {
	bad := len(id) > MaxClientIDBytes
	for i := 0; i < len(id) && !bad; i++ {
		bad = id[i] < 0x21 || id[i] > 0x7e
	}
	if bad {
		return fmt.Sprintf("must be at most %d printable ASCII characters", MaxClientIDBytes)
	}
	return ""
}
