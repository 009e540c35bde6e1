package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/conclave-ai/conclave/messages"
)

// The decoders' shared pieces: the frame every chat door's decoder has (decodeAsk), and the readers of
// JSON shapes that every door's body has (objects of known members, bounded lists, members refused by
// name, the conversation a door builds).

// decodeAsk is a chat door's decoder around its own members, which read reads: the body is an object of
// the members the door takes, after them come Conclave's own members (timeout, strict_parameters,
// fallbacks), and intake judges the request. The status is 0 when the request may go on, 400 for
// malformed input and 404 when the only problems are unknown models.
func decodeAsk[R asking](s *Server, body []byte, takes map[string]bool, read func(map[string]json.RawMessage, *report) R) (R, int, []*messages.Problem) {
	var refused R
	fields, bad, ok := objectFields(body, takes)
	if !ok {
		return refused, http.StatusBadRequest, details(bad.errs)
	}
	out := read(fields, bad)
	readOwn(fields, out.asks(), bad)
	if status, ps := s.judge(out.asks().route, bad); status != 0 {
		return refused, status, ps
	}
	return out, 0, nil
}

// objectFields decodes a /v1 body as a JSON object, each of whose members must be one the door takes
// (every other is an unknown field, as OpenAI answers). ok is false when the body is no object at all.
func objectFields(body []byte, takes map[string]bool) (map[string]json.RawMessage, *report, bool) {
	bad := newReport()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		bad.Add("body", "the body must be a JSON object")
		return nil, bad, false
	}
	bad.unknown("", fields, has(takes))
	return fields, bad, true
}

// refuseByName refuses each member given that its door does not carry, in name order, saying why.
func refuseByName(fields map[string]json.RawMessage, refused map[string]string, bad *report) {
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if why, ok := refused[name]; ok {
			if _, set := given(fields, name); set {
				bad.Add(name, why)
			}
		}
	}
}

// withRefused is the members a door takes and those it refuses by name: both get past the check for
// unknown members.
func withRefused(takes map[string]bool, refused map[string]string) map[string]bool {
	out := maps.Clone(takes)
	for name := range refused {
		out[name] = true
	}
	return out
}

// given reports whether a field was sent with a value: JSON null counts as left out, as OpenAI takes it.
func given(fields map[string]json.RawMessage, name string) (json.RawMessage, bool) {
	raw, ok := fields[name]
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return nil, false
	}
	return raw, true
}

// readGiven reads a member given with a value with read; the zero value when it is left out.
func readGiven[T any](fields map[string]json.RawMessage, name string, read func(json.RawMessage, *report) T, bad *report) T {
	raw, ok := given(fields, name)
	if !ok {
		var none T
		return none
	}
	return read(raw, bad)
}

// present reports whether a member decoded into a struct holds a value other than null.
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// object decodes a JSON object into v, and into its members; ok is false when raw is no object of v's
// shape (the members are those decoded, if any).
func object(raw json.RawMessage, v any) (map[string]json.RawMessage, bool) {
	var keys map[string]json.RawMessage
	if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, v) != nil || keys == nil {
		return keys, false
	}
	return keys, true
}

// objectOf decodes the object field into v, refusing it, saying what it must be, when it is no object
// of v's shape, and refusing its members that takes does not take.
func objectOf(raw json.RawMessage, v any, field, must string, takes func(string) bool, bad *report) bool {
	keys, ok := object(raw, v)
	if !ok {
		bad.Add(field, must)
		return false
	}
	bad.unknown(field, keys, takes)
	return true
}

// listOf decodes a list of between 1 and most items (what they are, in its problem) under field;
// notList says what the field must be when it is no such list.
func listOf[T any](raw json.RawMessage, field, notList string, most int, what string, bad *report) ([]T, bool) {
	var items []T
	if json.Unmarshal(raw, &items) != nil {
		bad.Add(field, notList)
		return nil, false
	}
	if len(items) == 0 || len(items) > most {
		bad.Add(field, fmt.Sprintf("must hold between 1 and %d %s", most, what))
		return nil, false
	}
	return items, true
}

// flag reads a boolean; false when left out.
func flag(fields map[string]json.RawMessage, name string, bad *report) bool {
	raw, ok := given(fields, name)
	bad.visit(name)
	if !ok {
		return false
	}
	var b bool
	if json.Unmarshal(raw, &b) != nil {
		bad.Add(name, "must be a boolean")
	}
	return b
}

// conversation is a request's messages, read: the turns for the models, and each turn's role and
// text for the task classification reads.
type conversation struct {
	turns        []*messages.ChatMessage
	roles, texts []string
}

// add appends one turn read, with its role as the caller wrote it and its text for the task.
func (c *conversation) add(turn *messages.ChatMessage, role, text string) {
	c.turns, c.roles, c.texts = append(c.turns, turn), append(c.roles, role), append(c.texts, text)
}

// into puts a conversation into a request, as every chat door does: its turns into the ask, for the
// models, and its transcript as the task, which classification reads.
func (c *conversation) into(route *messages.RouteRequest, ask *messages.Ask) {
	ask.Messages = c.turns
	route.Task = renderTask(c.roles, c.texts)
}

// renderTask turns a conversation into the task the pipeline sends: one user message is the task
// itself; anything longer is a transcript, each message under its role, so every model sees the
// whole conversation.
func renderTask(roles, texts []string) string {
	if len(texts) == 1 && roles[0] == "user" {
		return texts[0]
	}
	var b strings.Builder
	for i, t := range texts {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(strings.ToUpper(roles[i][:1]) + roles[i][1:] + ": ")
		b.WriteString(t)
	}
	return b.String()
}

// turnField is intake's name of the turn the conversation's next turn, or the one n after it, will be.
func turnField(n int) string { return fmt.Sprintf("messages[%d]", n) }

// textTurn is a turn of one text.
func textTurn(role, text string) *messages.ChatMessage {
	return &messages.ChatMessage{Role: role, Content: []*messages.ContentPart{{Type: "text", Text: text}}}
}

// asRole is a role as every wire format names it: developer is OpenAI's newer name for system, the same
// instructions.
func asRole(role string) string {
	if role == "developer" {
		return "system"
	}
	return role
}
