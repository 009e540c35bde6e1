package consensus

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Output formats a request may ask for; any other asks for text.
const (
	FormatJSONObject = "json_object"
	FormatJSONSchema = "json_schema"
)

// Format is what a request asks its answers to be: JSON (of a schema) or text, and the tools a model
// may call instead of answering.
type Format struct {
	// Type is json_object, json_schema, or anything else for text.
	Type string
	// Schema is json_schema's JSON schema; empty, any JSON object is valid.
	Schema string
	Tools  []Tool
}

// Tool is a function the models may call, with the JSON schema of its arguments (empty: any object).
type Tool struct {
	Name       string
	Parameters string
}

// ToolCall is a model's call of a tool: a function and its arguments as JSON text.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Structure is a request's format made ready to judge its answers: the schema compiled once for all
// of them. The zero Structure (and nil) asks for text and knows no tools.
type Structure struct {
	json   bool
	schema *boundedSchema
	tools  map[string]string // name -> parameters schema
}

// Compile readies a request's format. It fails only on a schema that cannot be compiled (CheckSchema,
// which intake calls, refuses it first): the caller's mistake, to be refused before any model is
// asked. A schema may not refer to anything outside itself.
func Compile(f Format) (*Structure, error) {
	s := &Structure{json: f.Type == FormatJSONObject || f.Type == FormatJSONSchema}
	if s.json && f.Type == FormatJSONSchema && strings.TrimSpace(f.Schema) != "" {
		sch, err := compileSchema(f.Schema)
		if err != nil {
			return nil, fmt.Errorf("response_format schema: %w", err)
		}
		s.schema = sch
	}
	if len(f.Tools) > 0 {
		s.tools = make(map[string]string, len(f.Tools))
		for _, t := range f.Tools {
			s.tools[t.Name] = t.Parameters
		}
	}
	return s, nil
}

// JSON reports whether the answers are to be JSON.
func (s *Structure) JSON() bool { return s != nil && s.json }

// schemaURL names a caller's schema inside the compiler; nothing is ever loaded from it.
const schemaURL = "urn:conclave:schema"

// refuseLoads is the compiler's loader: a schema from a request must never make Conclave read a file
// or fetch a URL ($ref to anything but itself).
type refuseLoads struct{}

func (refuseLoads) Load(url string) (any, error) {
	return nil, fmt.Errorf("a schema may only refer to itself, not to %s", url)
}

// compileSchema compiles a schema within its bounds, as intake checked it (CheckSchema).
func compileSchema(text string) (*boundedSchema, error) {
	sch, _, err := compileBounded(text, MaxSchemaNodes)
	return sch, err
}

// Ballot forms: what an answer gave.
const (
	FormJSON      = "json"
	FormToolCalls = "tool_calls"
	FormText      = "text"
)

// Ballot is what one answer votes for in a structured decision.
type Ballot struct {
	// Form is FormJSON, FormToolCalls or FormText.
	Form string `json:"form"`
	// Canonical is the answer in one form for all its spellings: its canonical JSON; for tool calls,
	// the canonical JSON of its calls as a sorted list of {name, arguments}; for text, its normal form.
	// Empty when the answer is invalid before it could be read.
	Canonical string `json:"canonical"`
	// Digest is a short hash of the form and canonical text: equal digests, equal ballots.
	Digest string `json:"digest"`
	// Group numbers the distinct valid ballots in the order they first appear; -1 when invalid.
	Group int  `json:"group"`
	Valid bool `json:"valid"`
	// Problem says why the answer is invalid.
	Problem string `json:"problem,omitempty"`
	value   any    // the parsed JSON, for the field-wise merge
}

// key is the ballot's identity in the vote.
func (b Ballot) key() string { return b.Form + "\x00" + b.Canonical }

// Structured reports whether responses are decided by their ballots: the request asks for JSON, or
// some answer calls tools.
func Structured(resps []Response, st *Structure) bool {
	if st.JSON() {
		return true
	}
	for _, r := range resps {
		if len(r.ToolCalls) > 0 {
			return true
		}
	}
	return false
}

// maxProblemBytes bounds the reason an answer is invalid.
const maxProblemBytes = 300

// Ballots reads each response's ballot: its tool calls when it made any, else its JSON when the request
// asks for JSON, else its text (free text compared by the kind's normal form). Each tool's parameter
// schema is compiled once, for the first call that names it.
func Ballots(resps []Response, st *Structure, kind Kind) []Ballot {
	out := make([]Ballot, len(resps))
	var params map[string]*boundedSchema // the tools' schemas compiled so far (nil: not compilable)
	groups := map[string]int{}
	for i, r := range resps {
		var b Ballot
		switch {
		case len(r.ToolCalls) > 0:
			if params == nil {
				params = map[string]*boundedSchema{}
			}
			b = callsBallot(r.ToolCalls, st, params)
		case st.JSON():
			b = jsonBallot(r.Text, st)
		default:
			b = Ballot{Form: FormText, Canonical: keyOf(kind, r.Text), Valid: true}
			if strings.TrimSpace(b.Canonical) == "" {
				b.Valid, b.Problem = false, "empty answer"
			}
		}
		b.Problem = clip(b.Problem, maxProblemBytes)
		b.Group = -1
		if b.Valid {
			g, seen := groups[b.key()]
			if !seen {
				g = len(groups)
				groups[b.key()] = g
			}
			b.Group = g
		}
		if b.Canonical != "" {
			sum := sha256.Sum256([]byte(b.key()))
			b.Digest = hex.EncodeToString(sum[:6])
		}
		out[i] = b
	}
	return out
}

func jsonBallot(text string, st *Structure) Ballot {
	b := Ballot{Form: FormJSON}
	v, err := ParseJSON(text)
	if err != nil {
		b.Problem = err.Error()
		return b
	}
	b.Canonical, b.value = CanonicalJSON(v), v
	if st.schema == nil {
		// json_object: what providers' JSON modes promise, and what a field-wise merge needs.
		if _, ok := v.(map[string]any); !ok {
			b.Problem = "not a JSON object"
			return b
		}
	} else {
		budget := int64(MaxAnswerWork)
		if err := st.schema.check(v, &budget); err != nil {
			b.Problem = "does not match the schema: " + schemaProblem(err)
			return b
		}
	}
	b.Valid = true
	return b
}

// callsBallot reads an answer's tool calls as a multiset of (name, canonical arguments): the order of
// the calls and their ids do not matter. Each call must name one of the request's tools (when it gave
// any) with arguments that are a JSON object matching that tool's parameters.
func callsBallot(calls []ToolCall, st *Structure, params map[string]*boundedSchema) Ballot {
	b := Ballot{Form: FormToolCalls}
	budget := int64(MaxAnswerWork) // for all the calls of the answer
	list := make([]parsedCall, len(calls))
	for i, c := range calls {
		v, err := callArguments(c.Arguments)
		if err != nil && b.Problem == "" {
			b.Problem = fmt.Sprintf("arguments of %s: %v", strconv.Quote(c.Name), err)
		}
		list[i] = parsedCall{name: c.Name, args: CanonicalJSON(v), value: v}
		if b.Problem == "" {
			b.Problem = callProblem(c.Name, v, st, params, &budget)
		}
	}
	b.Canonical = canonicalCalls(list)
	b.Valid = b.Problem == ""
	return b
}

// parsedCall is a call of a tool with its arguments parsed, and their canonical JSON.
type parsedCall struct {
	name, args string
	value      any
}

// callArguments parses a call's arguments, which must be a JSON object. No arguments at all stand for
// {}, as some providers send a function without arguments.
func callArguments(arguments string) (any, error) {
	text := strings.TrimSpace(arguments)
	if text == "" {
		text = "{}"
	}
	v, err := ParseJSON(text)
	if err != nil {
		return v, err
	}
	if _, ok := v.(map[string]any); !ok {
		return v, errors.New("not a JSON object")
	}
	return v, nil
}

// callProblem says what is wrong with a call of the function name with arguments v, or returns "".
// The call must name a function, one of the request's tools when it gave any, with arguments matching
// that tool's parameters: compiled into params the first time a call names the tool, and checked
// within budget, which all the calls of an answer share.
func callProblem(name string, v any, st *Structure, params map[string]*boundedSchema, budget *int64) string {
	if name == "" {
		return "a call names no function"
	}
	if st == nil || st.tools == nil {
		return ""
	}
	schema, known := st.tools[name]
	if !known {
		return "calls " + strconv.Quote(name) + ", which is not one of the request's tools"
	}
	sch, compiled := params[name]
	if !compiled {
		if strings.TrimSpace(schema) != "" {
			sch, _ = compileSchema(schema) // intake refused one that does not compile: past it, unchecked
		}
		params[name] = sch
	}
	if sch == nil {
		return ""
	}
	if err := sch.check(v, budget); err != nil {
		return fmt.Sprintf("arguments of %s do not match its parameters: %s", strconv.Quote(name), schemaProblem(err))
	}
	return ""
}

// canonicalCalls is the canonical JSON of the calls ordered by name, then by canonical arguments.
func canonicalCalls(calls []parsedCall) string {
	slices.SortStableFunc(calls, func(x, y parsedCall) int {
		if c := strings.Compare(x.name, y.name); c != 0 {
			return c
		}
		return strings.Compare(x.args, y.args)
	})
	sorted := make([]any, len(calls))
	for k, c := range calls {
		sorted[k] = map[string]any{"name": c.name, "arguments": c.value}
	}
	return CanonicalJSON(sorted)
}

var schemaPrinter = message.NewPrinter(language.English)

// maxProblemLeaves bounds the leaf errors schemaProblem reads: an error can have a million of them
// (all alike, from a union's branches), which it would take as long to format as to find.
const maxProblemLeaves = 64

// schemaProblem says in one line where a value breaks its schema: its leaf errors' places and reasons,
// each once, up to about maxProblemBytes ("; ..." when it leaves some out). It formats no more than
// that: an error can have a million leaves, and a leaf can quote a megabyte of the value.
func schemaProblem(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return clip(err.Error(), maxProblemBytes)
	}
	var (
		b      strings.Builder
		shown  = map[string]bool{}
		leaves int
		more   bool
	)
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		switch {
		case more:
		case len(e.Causes) > 0:
			for _, c := range e.Causes {
				walk(c)
			}
		case leaves >= maxProblemLeaves || b.Len() >= maxProblemBytes:
			more = true
		default:
			leaves++
			leaf := "at " + valuePlace(e.InstanceLocation) + ": " + leafReason(e.ErrorKind)
			if !shown[leaf] {
				shown[leaf] = true
				if b.Len() > 0 {
					b.WriteString("; ")
				}
				b.WriteString(leaf)
			}
		}
	}
	walk(ve)
	if more {
		b.WriteString("; ...")
	}
	return b.String()
}

// clip cuts s to at most n bytes (and "..."), on a character's boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// valuePlace names a place in a value (/a/0/b), cut short: an answer's keys can be long and deep.
func valuePlace(loc []string) string {
	var b strings.Builder
	for _, tok := range loc {
		if b.Len() >= 96 {
			b.WriteString("/...")
			break
		}
		b.WriteString("/" + clip(tok, 32))
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

// leafReason says why a value breaks one keyword, in a bounded length: the library's own message for
// the kinds that quote only the schema's few numbers, a shorter one for those that would quote the
// value, an enum or a list of names whole.
func leafReason(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Enum:
		return enumReason(k.Want)
	case *kind.Const:
		if composite(k.Want) {
			return "'const' failed"
		}
		return "value must be " + shown(k.Want)
	case *kind.Format:
		return "value is not valid " + clip(k.Want, 32)
	case *kind.Pattern:
		return "value does not match pattern " + shown(k.Want)
	case *kind.AdditionalProperties:
		return "additional properties " + listed(len(k.Properties), func(i int) string { return shown(k.Properties[i]) }) + " not allowed"
	case *kind.PropertyNames:
		return "invalid property name " + shown(k.Property)
	case *kind.Required:
		return requiredReason(k.Missing)
	case *kind.Dependency:
		return dependent(k.Missing, k.Prop)
	case *kind.DependentRequired:
		return dependent(k.Missing, k.Prop)
	case *kind.MinContains:
		return fmt.Sprintf("min %d items required to match contains schema, but matched %d", k.Want, len(k.Got))
	case *kind.MaxContains:
		return fmt.Sprintf("max %d items required to match contains schema, but matched %d", k.Want, len(k.Got))
	}
	return clip(k.LocalizedString(schemaPrinter), 120)
}

// composite reports whether a JSON value is an array or an object, which a reason does not quote.
func composite(v any) bool {
	switch v.(type) {
	case []any, map[string]any:
		return true
	}
	return false
}

// enumReason says which values an enum wants, unless one of them is an array or an object.
func enumReason(want []any) string {
	if slices.ContainsFunc(want, composite) {
		return "'enum' failed"
	}
	if len(want) == 1 {
		return "value must be " + shown(want[0])
	}
	return "value must be one of " + listed(len(want), func(i int) string { return shown(want[i]) })
}

// requiredReason names the missing required properties.
func requiredReason(missing []string) string {
	if len(missing) == 1 {
		return "missing property " + shown(missing[0])
	}
	return "missing properties " + listed(len(missing), func(i int) string { return shown(missing[i]) })
}

func dependent(missing []string, prop string) string {
	return "properties " + listed(len(missing), func(i int) string { return shown(missing[i]) }) + " required, if " + shown(prop) + " exists"
}

// shown writes a primitive JSON value of a problem, strings quoted and cut at 40 bytes.
func shown(v any) string {
	switch v := v.(type) {
	case string:
		return "'" + clip(v, 40) + "'"
	case nil:
		return "null"
	case []any, map[string]any:
		return "value"
	}
	return clip(fmt.Sprint(v), 40)
}

// listed joins the first of n items that fit in about 100 bytes, and says how many are left out.
func listed(n int, item func(i int) string) string {
	var b strings.Builder
	for i := range n {
		if b.Len() >= 100 {
			fmt.Fprintf(&b, ", and %d more", n-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(item(i))
	}
	return b.String()
}

// maxDisplayBytes bounds a ballot as it is written into a record.
const maxDisplayBytes = 512

// Display is the ballot as a record shows it: its canonical form, cut to a bounded length.
func (b Ballot) Display() string {
	if len(b.Canonical) <= maxDisplayBytes {
		return b.Canonical
	}
	return strings.ToValidUTF8(b.Canonical[:maxDisplayBytes], "") + "..."
}

// NoValidAnswerError is a structured decision without a single valid answer. Ballots say each
// response's problem, in the responses' order.
type NoValidAnswerError struct {
	Models  []string
	Ballots []Ballot
}

// ErrNoValidAnswer is what a NoValidAnswerError is.
var ErrNoValidAnswer = errors.New("no valid answer")

func (e *NoValidAnswerError) Error() string {
	parts := make([]string, len(e.Ballots))
	for i, b := range e.Ballots {
		parts[i] = e.Models[i] + ": " + b.Problem
	}
	return "no valid answer (" + strings.Join(parts, "; ") + ")"
}

// Is makes errors.Is(err, ErrNoValidAnswer) hold.
func (e *NoValidAnswerError) Is(target error) bool { return target == ErrNoValidAnswer }
