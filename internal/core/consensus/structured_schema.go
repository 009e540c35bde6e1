package consensus

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Bounds of a JSON schema a request gives (its output format's, each tool's parameters), read before
// the schema is compiled: the compiler's time grows with the square of a schema's subschemas (a flat
// schema of 100,000 properties, 4 MB, takes minutes) and faster still with their depth, and it reads
// every number as an exact fraction (an exponent of a million costs milliseconds, one larger makes
// it fail).
const (
	// MaxSchemaDepth bounds how deep a schema nests: as deep as a request's body may, so that no
	// schema a door accepted is refused for it.
	MaxSchemaDepth = 32
	// MaxSchemaNodes bounds the objects and booleans of a request's schemas, all together (each
	// subschema is one of them, and a few other values are): compiling them takes about a tenth of a
	// second at most, on a busy machine.
	MaxSchemaNodes = 4096
	// MaxSchemaNumberBytes bounds a number written in a schema.
	MaxSchemaNumberBytes = 64
	// MaxSchemaExponent bounds a number's exponent: float64's range and more.
	MaxSchemaExponent = 400
)

// CheckSchema compiles a schema (JSON text) as the answers' check does, with budget the objects and
// booleans it may hold (at most MaxSchemaNodes: a request's schemas share them), and returns how many
// it holds, or why it cannot be used: it is out of bounds, or the compiler refuses it, or it refers
// to itself without descending into the value, which JSON Schema leaves undefined and the check fails
// on every value that reaches, or checking one value against it could take more than
// MaxValueEvaluations evaluations of its subschemas. It reads no file and fetches nothing: a reference
// to anything outside the schema is refused. The error says so in one line.
func CheckSchema(text string, budget int) (nodes int, err error) {
	_, nodes, err = compileBounded(text, budget)
	return nodes, err
}

// boundedSchema is a compiled schema with what checking a value against it can cost.
type boundedSchema struct {
	sch  *jsonschema.Schema
	cost *evalCost
}

// compileBounded reads a schema's size and, within its bounds, compiles it and reads its costs: the one
// way a schema of a request is compiled.
func compileBounded(text string, budget int) (*boundedSchema, int, error) {
	nodes, err := schemaSize(text, min(budget, MaxSchemaNodes))
	if err != nil {
		return nil, nodes, err
	}
	sch, anchors, err := compileSafely(text)
	if err != nil {
		return nil, nodes, errors.New("cannot be compiled: " + compileReason(err))
	}
	if at := inPlaceCycle(sch); at != "" {
		return nil, nodes, errors.New("cannot be compiled: " + at + " refers to itself without descending into the value (a $ref cycle)")
	}
	cost, err := schemaCost(sch, anchors)
	if err != nil {
		return nil, nodes, err
	}
	return &boundedSchema{sch: sch, cost: cost}, nodes, nil
}

// uncheckedError is an answer that was not checked against its schema, and why.
type uncheckedError struct{ reason string }

func (e *uncheckedError) Error() string { return e.reason }

// check checks a value (as ParseJSON returns it) against the schema, within what is left of budget
// (MaxAnswerWork for an answer), which it lowers by the work the value may take: a value that could
// take more is not checked, nor one with a number the validator cannot read in bounded time.
func (b *boundedSchema) check(v any, budget *int64) error {
	work, problem := b.cost.answerWork(v, *budget)
	switch {
	case problem != "":
		return &uncheckedError{"not checked, as it " + problem}
	case work > *budget:
		return &uncheckedError{fmt.Sprintf("not checked, as checking it could take more than the %d evaluations an answer may take", MaxAnswerWork)}
	}
	*budget -= work
	return b.sch.Validate(v)
}

// compileSafely compiles a schema, and the subschemas that declare a $dynamicAnchor (which a
// $dynamicRef can reach without any field leading to them); a panic of the compiler (a multipleOf it
// cannot read as a fraction) is an error of the schema, not the end of the process.
func compileSafely(text string) (sch *jsonschema.Schema, anchors []*jsonschema.Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			sch, anchors, err = nil, nil, errors.New("the compiler cannot read it")
		}
	}()
	doc, err := ParseJSON(text)
	if err != nil {
		return nil, nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoads{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, nil, err
	}
	if sch, err = c.Compile(schemaURL); err != nil {
		return nil, nil, err
	}
	if strings.Contains(text, "$dynamicAnchor") {
		for _, at := range anchorPlaces(doc, "", nil) {
			// One that does not compile is not a schema the compiler anchored (those compiled with
			// the root): data that looks like one.
			if s, err := c.Compile(schemaURL + "#" + at); err == nil {
				anchors = append(anchors, s)
			}
		}
	}
	return sch, anchors, nil
}

// anchorPlaces appends the places (URL fragments) of a document's objects that declare a
// $dynamicAnchor.
func anchorPlaces(v any, at string, out []string) []string {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["$dynamicAnchor"].(string); ok {
			out = append(out, at)
		}
		for k, e := range x {
			tok := strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
			out = anchorPlaces(e, at+"/"+url.PathEscape(tok), out)
		}
	case []any:
		for i, e := range x {
			out = anchorPlaces(e, at+"/"+strconv.Itoa(i), out)
		}
	}
	return out
}

// schemaSize reads a schema's text without building it: its objects and booleans, which it refuses
// beyond budget, its depth and its numbers. The text is JSON (or ParseJSON refuses it after).
func schemaSize(text string, budget int) (nodes int, err error) {
	depth := 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '"':
			i = stringEnd(text, i)
		case c == '{' || c == '[':
			if depth++; depth > MaxSchemaDepth {
				return nodes, fmt.Errorf("must nest at most %d levels", MaxSchemaDepth)
			}
		case c == '}' || c == ']':
			depth--
		case startsNumber(c):
			j := numberEnd(text, i)
			if problem := schemaNumber(text[i:j]); problem != "" {
				return nodes, errors.New(problem)
			}
			i = j - 1
		}
		if c == '{' || c == 't' || c == 'f' { // an object, true or false
			nodes++
		}
		if nodes > budget {
			return nodes, fmt.Errorf("must hold at most %d objects and booleans, with the request's other schemas", MaxSchemaNodes)
		}
	}
	return nodes, nil
}

// stringEnd returns the index of the quote that ends the JSON string opening at i (len(text) when it
// is not closed).
func stringEnd(text string, i int) int {
	for i++; i < len(text) && text[i] != '"'; i++ {
		if text[i] == '\\' {
			i++
		}
	}
	return i
}

// startsNumber reports whether c can start a JSON number.
func startsNumber(c byte) bool { return c == '-' || isDigit(c) }

// numberEnd returns the index just after the JSON number starting at i.
func numberEnd(text string, i int) int {
	for i < len(text) && strings.IndexByte("+-.eE0123456789", text[i]) >= 0 {
		i++
	}
	return i
}

// schemaNumber says what is wrong with a number of a schema, or returns "".
func schemaNumber(n string) string {
	if len(n) > MaxSchemaNumberBytes {
		return fmt.Sprintf("holds a number of more than %d characters", MaxSchemaNumberBytes)
	}
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		if exp, err := strconv.Atoi(strings.TrimPrefix(n[i+1:], "+")); err != nil || exp > MaxSchemaExponent || exp < -MaxSchemaExponent {
			return fmt.Sprintf("holds a number whose exponent is beyond %d", MaxSchemaExponent)
		}
	}
	return ""
}

// compileReason says in one line why the compiler refused a schema, naming places as the schema's own
// JSON pointers (#/$defs/a).
func compileReason(err error) string {
	var (
		invalid *jsonschema.SchemaValidationError
		missing *jsonschema.JSONPointerNotFoundError
		load    *jsonschema.LoadURLError
		reason  string
	)
	switch {
	case errors.As(err, &invalid):
		reason = "not a valid JSON schema: " + schemaProblem(invalid.Err)
	case errors.As(err, &missing):
		reason = "a $ref to " + missing.URL + " finds nothing in the schema"
	case errors.As(err, &load):
		reason = load.Err.Error()
	default:
		reason = err.Error()
	}
	reason = strings.ReplaceAll(reason, schemaURL, "")
	return strings.Join(strings.Fields(reason), " ")
}

// inPlaceCycle finds a subschema that applies to a value itself again, through $ref, allOf, anyOf,
// oneOf, not, if, then, else or a dependent schema, without descending into a property or an item, and
// returns its place ("" when there is none). A schema may still refer to itself for a part of the
// value ({"properties": {"next": {"$ref": "#"}}}). A $dynamicRef is followed to its static target.
func inPlaceCycle(root *jsonschema.Schema) string {
	const (
		open = 1
		done = 2
	)
	state := map[*jsonschema.Schema]int{}
	var found string
	var visit func(s *jsonschema.Schema)
	visit = func(s *jsonschema.Schema) {
		state[s] = open
		for _, c := range inPlace(s) {
			if found != "" {
				return
			}
			switch state[c] {
			case open:
				found = c.Location
			case 0:
				visit(c)
			}
		}
		state[s] = done
	}
	// Every subschema reachable from the root, whatever the edge, is a start of the in-place walk.
	seen := map[*jsonschema.Schema]bool{root: true}
	for queue := []*jsonschema.Schema{root}; len(queue) > 0 && found == ""; {
		s := queue[0]
		queue = queue[1:]
		if state[s] == 0 {
			visit(s)
		}
		for _, c := range append(inPlace(s), descending(s)...) {
			if !seen[c] {
				seen[c] = true
				queue = append(queue, c)
			}
		}
	}
	if found == "" {
		return ""
	}
	return "#" + strings.TrimPrefix(found, schemaURL+"#")
}

// inPlace are the subschemas a schema applies to the value it is applied to.
func inPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	add := func(cs ...*jsonschema.Schema) {
		for _, c := range cs {
			if c != nil {
				out = append(out, c)
			}
		}
	}
	add(s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else)
	if s.DynamicRef != nil {
		add(s.DynamicRef.Ref)
	}
	add(s.AllOf...)
	add(s.AnyOf...)
	add(s.OneOf...)
	for _, c := range s.DependentSchemas {
		add(c)
	}
	for _, d := range s.Dependencies {
		if c, ok := d.(*jsonschema.Schema); ok {
			add(c)
		}
	}
	return out
}

// descending are the subschemas a schema applies to parts of its value: properties, items, names.
func descending(s *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	add := func(cs ...*jsonschema.Schema) {
		for _, c := range cs {
			if c != nil {
				out = append(out, c)
			}
		}
	}
	for _, c := range s.Properties {
		add(c)
	}
	for _, c := range s.PatternProperties {
		add(c)
	}
	for _, v := range []any{s.AdditionalProperties, s.AdditionalItems, s.Items} {
		switch v := v.(type) {
		case *jsonschema.Schema:
			add(v)
		case []*jsonschema.Schema:
			add(v...)
		}
	}
	add(s.PropertyNames, s.UnevaluatedProperties, s.Contains, s.Items2020, s.UnevaluatedItems, s.ContentSchema)
	add(s.PrefixItems...)
	return out
}
