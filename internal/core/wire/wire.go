// Package wire holds the rules of the providers' wire formats that Conclave speaks on both sides: to
// providers (internal/adapters/providers) and to its own callers (http's doors), so that the two
// never disagree.
package wire

import "strings"

// ToolUseID writes a tool call's id as the Messages API takes it (letters, digits, _ and -): an id from
// another format keeps its allowed characters and is the same on the call and on its result.
func ToolUseID(id string) string {
	clean := strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' {
			return r
		}
		return '_'
	}, id)
	if clean == "" {
		clean = "call"
	}
	return clean
}
