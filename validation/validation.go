// Package validation owns the shape of input validation errors, so that every layer that rejects
// input (blueprints, the HTTP API) reports every problem at once, each tied to the field at fault.
package validation

import "strings"

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
