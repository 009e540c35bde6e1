package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/validation"
)

// What the model doors share. OpenAI's chat completions (openai.go) and Anthropic's messages
// (anthropic.go) read their own request shapes, but name a model the same way, take the same fields of
// Conclave's own (timeout, strict_parameters, fallbacks), and put what they read into one ask: the
// pipeline, the providers and the record never see which door a request came through.

// objectFields decodes a body that must be a JSON object into its fields.
func objectFields(body []byte) (map[string]json.RawMessage, *messages.Problem) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, &messages.Problem{Field: "body", Message: "the body must be a JSON object"}
	}
	return fields, nil
}

// knownFields adds a problem for each field that is not allowed: refused names the fields a door
// knows but does not carry, with why; anything else is an unknown field.
func knownFields(fields map[string]json.RawMessage, allowed map[string]bool, refused map[string]string, bad *validation.Errors) {
	for _, name := range sortedKeys(fields) {
		switch why, known := refused[name]; {
		case allowed[name]:
		case known:
			if _, set := given(fields, name); set {
				bad.Add(name, why)
			}
		default:
			bad.Add(name, "unknown field")
		}
	}
}

// readModel reads the model a request names: conclave/auto (classification picks the blueprint),
// conclave/<blueprint>, or a catalog model id, which makes the request a direct call of that model.
func (s *Server) readModel(fields map[string]json.RawMessage, out *chatRequest, bad, unknown *validation.Errors) {
	raw, ok := fields["model"]
	switch {
	case !ok:
		bad.Add("model", "is required: conclave/auto, conclave/<blueprint> or a model id (GET /v1/models lists them)")
		return
	case json.Unmarshal(raw, &out.model) != nil || out.model == "":
		bad.Add("model", "must be a non-empty string")
		return
	}
	if name, ours := strings.CutPrefix(out.model, modelPrefix); ours && s.engine.Blueprints().Has(name) {
		out.route.Category = name
		return
	}
	if out.model == autoModel {
		return
	}
	if _, known := s.engine.Catalog().Get(out.model); !known {
		unknown.Add("model", fmt.Sprintf("unknown model %q (GET /v1/models lists them)", validation.Clip(out.model, 128)))
		return
	}
	out.passthroughTo = out.model
	out.route.Models, out.route.Direct = []string{out.model}, true
}

// readConclaveFields reads Conclave's own fields, which every door takes beside its own:
// strict_parameters, fallbacks (after the model is read) and timeout.
func (s *Server) readConclaveFields(fields map[string]json.RawMessage, out *chatRequest, bad, unknown *validation.Errors) {
	out.route.StrictParameters = flag(fields, "strict_parameters", bad)
	if raw, ok := given(fields, "fallbacks"); ok {
		out.route.Fallbacks = s.readFallbacks(raw, out, bad, unknown)
	}
	out.route.TimeoutSeconds = number(fields, "timeout", bad, validation.Timeout)
}

// verdict is a parsed request's status and problems: 0 when it is valid, 400 when anything is
// malformed (unknown names listed too), 404 when only names are unknown.
func verdict(bad, unknown validation.Errors) (int, []*messages.Problem) {
	switch {
	case len(bad) > 0:
		return http.StatusBadRequest, problems(append(bad, unknown...).Capped())
	case len(unknown) > 0:
		return http.StatusNotFound, problems(unknown.Capped())
	}
	return 0, nil
}

// add appends one turn read, with its role as the caller wrote it and its text for the task.
func (c *conversation) add(turn *messages.ChatMessage, role, text string) {
	if role == "user" {
		c.users++
	}
	c.turns, c.roles, c.texts = append(c.turns, turn), append(c.roles, role), append(c.texts, text)
}

// into puts a conversation into a request: its turns into the ask, for the models, and its transcript
// as the task, which classification reads. field names the conversation in problems.
func (c *conversation) into(route *messages.RouteRequest, ask *messages.Ask, field string, bad *validation.Errors) {
	ask.Messages = c.turns
	route.Task = renderTask(c.roles, c.texts)
	if !validation.Visible(route.Task) {
		bad.Add(field, "must have at least one visible character")
	}
}

// callText is a tool call as the task shows it.
func callText(name, args string) string { return fmt.Sprintf("[calls %s(%s)]", name, args) }
