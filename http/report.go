package httpapi

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/intake"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
)

// A door decodes its body into a route request and hands it to intake.Check, the one validation of a
// route request, which the remote listener calls too. What the door finds itself is the body's form: a
// member of the wrong JSON type, an unknown member, a value its wire format does not know. intake names
// its problems as /route-thompson and chat completions name fields; a report keeps the trail back to
// the body's own names (a Responses input item, an Anthropic content block), and the order in which the
// door read the body, so that every problem is listed once, under the body's name, in reading order.

// report collects a door's problems as it decodes a body, and the trail from the fields of the route
// request it builds to the body's.
type report struct {
	errs problems.Errors
	// order numbers the body's fields in the order the door read them.
	order map[string]int
	// names maps a field of the route request, as intake names it, to the body's field; "" is the
	// body's top level (the sampling parameters, under "parameters" in /route-thompson, are at the top of
	// a /v1 body).
	names map[string]string
}

func newReport() *report { return &report{order: map[string]int{}, names: map[string]string{}} }

// Add records a problem the door found with a field of the body.
func (r *report) Add(field, message string) {
	r.visit(field)
	r.errs.Add(field, message)
}

// count is how many problems the door found so far.
func (r *report) count() int { return len(r.errs) }

// visit notes that the door read a field of the body now.
func (r *report) visit(field string) {
	if _, ok := r.order[field]; !ok {
		r.order[field] = len(r.order)
	}
}

// name notes that intake's field, and what is under it, is the body's field, read now.
func (r *report) name(field, body string) {
	r.names[field] = body
	if body != "" {
		r.visit(body)
	}
}

// alias is name without reading: the body's field for one of intake's, read where the door reads it.
func (r *report) alias(field, body string) { r.names[field] = body }

// parents lists a field and the fields it is under, the field first: tools[0].function.name, then
// tools[0].function, tools[0], tools.
func parents(field string) []string {
	out := []string{field}
	for i := len(field) - 1; i > 0; i-- {
		if field[i] == '.' || field[i] == '[' {
			out = append(out, field[:i])
		}
	}
	return out
}

// rename gives one of intake's fields the body's name.
func (r *report) rename(field string) string {
	for _, p := range parents(field) {
		body, ok := r.names[p]
		if !ok {
			continue
		}
		rest := field[len(p):]
		if body == "" {
			return strings.TrimPrefix(rest, ".")
		}
		return body + rest
	}
	return field
}

// rank is when the door read a field, or what it is under: -1 when it did not (an unknown member,
// which the door lists first).
func (r *report) rank(field string) int {
	for _, p := range parents(field) {
		if n, ok := r.order[p]; ok {
			return n
		}
	}
	return -1
}

// shadowed reports whether the door found a problem with a field, or with a part of it: intake's
// judgement of what the door could decode of it says nothing more (a conversation the door refused an
// item of has no visible task to judge).
func (r *report) shadowed(field string) bool {
	for _, p := range r.errs {
		if p.Field == field || strings.HasPrefix(p.Field, field+".") || strings.HasPrefix(p.Field, field+"[") {
			return true
		}
	}
	return false
}

// inOrder sorts problems by when the door read their fields, keeping the order of those of one field.
func (r *report) inOrder(ps problems.Errors) problems.Errors {
	slices.SortStableFunc(ps, func(a, b problems.Problem) int { return r.rank(a.Field) - r.rank(b.Field) })
	return ps
}

// judge hands a decoded request to intake and merges its problems with the door's, under the body's
// names. The status is 0 when the request may go on, 400 with every problem (those of form first, then
// unknown names), or 404 when the only problems are unknown models or blueprints.
func (s *Server) judge(req *messages.RouteRequest, r *report) (int, []*messages.Problem) {
	v := intake.Check(req, s.engine)
	bad := append(problems.Errors{}, r.errs...)
	var unknown problems.Errors
	for _, set := range []struct {
		from problems.Errors
		to   *problems.Errors
	}{{v.Bad, &bad}, {v.Unknown, &unknown}} {
		for _, p := range set.from {
			if field := r.rename(p.Field); !r.shadowed(field) {
				*set.to = append(*set.to, problems.Problem{Field: field, Message: p.Message})
			}
		}
	}
	switch {
	case len(bad) > 0:
		return http.StatusBadRequest, details(append(r.inOrder(bad), r.inOrder(unknown)...).Capped())
	case len(unknown) > 0:
		return http.StatusNotFound, details(r.inOrder(unknown).Capped())
	}
	return 0, nil
}

// unknown refuses each member of the object at that its reader does not take, in name order; at ""
// is the body itself.
func (r *report) unknown(at string, members map[string]json.RawMessage, takes func(string) bool) {
	for _, k := range slices.Sorted(maps.Keys(members)) {
		if !takes(k) {
			if at != "" {
				k = at + "." + k
			}
			r.Add(k, "unknown field")
		}
	}
}

// only takes the names given; has the names a set holds.
func only(names ...string) func(string) bool {
	return func(k string) bool { return slices.Contains(names, k) }
}

func has(set map[string]bool) func(string) bool { return func(k string) bool { return set[k] } }
