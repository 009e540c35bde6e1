package consensus

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// nest is a schema of n levels, each the items of the one above.
func nest(n int) string {
	return strings.Repeat(`{"items":`, n-1) + `{}` + strings.Repeat(`}`, n-1)
}

// flat is an object schema of n properties, each the schema sub.
func flat(n int, sub string) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"p%d":%s`, i, sub)
	}
	b.WriteString(`}}`)
	return b.String()
}

func TestCheckSchema(t *testing.T) {
	tests := []struct {
		desc, schema string
		problem      string // a part of the error; "" when the schema is good
	}{
		{"a schema referring to a definition", `{"$defs":{"n":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/n"}}}`, ""},
		{"a list of itself, recursively", `{"type":"object","properties":{"next":{"$ref":"#"}},"$defs":{"unused":{"$ref":"#/$defs/unused"}}}`, ""},
		{"a schema of schemas", `{"$ref":"https://json-schema.org/draft/2020-12/schema"}`, ""},
		{"a $ref cycle", `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, "#/$defs/a refers to itself"},
		{"a $ref to the root, from the root", `{"$ref":"#"}`, "# refers to itself"},
		{"a cycle through allOf and anyOf, under a property", `{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/a"}]}},
			"properties":{"x":{"$ref":"#/$defs/a"}}}`, "refers to itself"},
		{"a cycle of draft-07 definitions", `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{"$ref":"#/definitions/a"}},"$ref":"#/definitions/a"}`, "refers to itself"},
		{"a $dynamicRef to itself", `{"$dynamicAnchor":"m","anyOf":[{"$dynamicRef":"#m"}]}`, "refers to itself"},
		{"a $ref to a missing definition", `{"$ref":"#/$defs/nope"}`, "a $ref to #/$defs/nope finds nothing"},
		{"a $ref to a URL", `{"$ref":"http://127.0.0.1:1/x.json"}`, "may only refer to itself, not to http://127.0.0.1:1/x.json"},
		{"a $ref to a file", `{"$ref":"file:///etc/passwd"}`, "may only refer to itself"},
		{"a $schema at a URL", `{"$schema":"http://127.0.0.1:1/meta.json"}`, "may only refer to itself"},
		{"a type that is none", `{"type":"strin"}`, "not a valid JSON schema: at /type"},
		{"a pattern that is no regular expression", `{"pattern":"("}`, "not a valid JSON schema: at /pattern"},
		{"a multipleOf the compiler cannot read", `{"multipleOf":1e9999999}`, "exponent is beyond 400"},
		{"a minimum of a million digits' exponent", `{"minimum":-1e-999999}`, "exponent is beyond 400"},
		{"a long number", `{"maximum":` + strings.Repeat("9", 65) + `}`, "more than 64 characters"},
		{"numbers at the bounds", `{"maximum":1e400,"minimum":-1.7976931348623157e308,"multipleOf":1E-400,"const":` + strings.Repeat("9", 64) + `}`, ""},
		{"as deep as a body", nest(MaxSchemaDepth), ""},
		{"deeper", nest(MaxSchemaDepth + 1), "must nest at most 32 levels"},
		{"deeper in an array", `{"enum":[` + strings.Repeat("[", MaxSchemaDepth) + strings.Repeat("]", MaxSchemaDepth) + `]}`, "must nest at most 32 levels"},
		{"brackets and booleans in strings do not count", `{"description":"{[{[ true false ]}]}` + strings.Repeat("{", 100) + `\"{"}`, ""},
		{"as many subschemas as allowed", flat(MaxSchemaNodes-2, "true"), ""}, // and the root and its properties
		{"one more", flat(MaxSchemaNodes-1, "true"), "at most 4096 objects and booleans"},
		// 4 MB, which the compiler took minutes over: refused as it is read.
		{"a hundred thousand properties", flat(100_000, `{"type":"string"}`), "at most 4096 objects and booleans"},
		{"not JSON", `{"type":`, "not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			start := time.Now()
			_, err := CheckSchema(tt.schema, MaxSchemaNodes)
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("took %v", took)
			}
			switch {
			case tt.problem == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.problem != "" && (err == nil || !strings.Contains(err.Error(), tt.problem)):
				t.Fatalf("error %v, want one saying %q", err, tt.problem)
			case err != nil && (strings.Contains(err.Error(), schemaURL) || strings.Contains(err.Error(), "\n")):
				t.Fatalf("error %q names the compiler's URL or spans lines", err)
			}
			// The answers' check compiles it the same way.
			if _, cerr := Compile(Format{Type: FormatJSONSchema, Schema: tt.schema}); (cerr == nil) != (err == nil) {
				t.Fatalf("Compile: %v, CheckSchema: %v", cerr, err)
			}
		})
	}
}

func TestCheckSchemaCountsAgainstABudget(t *testing.T) {
	schema := flat(99, "{}") // the root, its properties and 99 subschemas
	n, err := CheckSchema(schema, MaxSchemaNodes)
	if err != nil || n != 101 {
		t.Fatalf("%d nodes, %v; want 101", n, err)
	}
	if _, err := CheckSchema(schema, 100); err == nil || !strings.Contains(err.Error(), "with the request's other schemas") {
		t.Fatalf("a schema over the budget left: %v", err)
	}
	if _, err := CheckSchema(schema, 10*MaxSchemaNodes); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckSchema(flat(MaxSchemaNodes, "{}"), 10*MaxSchemaNodes); err == nil {
		t.Fatal("a budget above MaxSchemaNodes raised the bound")
	}
}

// A schema referring to a URL is refused without the URL being fetched.
func TestCheckSchemaFetchesNothing(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/schema+json")
		fmt.Fprint(w, `{"type":"string"}`)
	}))
	defer srv.Close()
	for _, schema := range []string{`{"$ref":"` + srv.URL + `/x.json"}`, `{"$schema":"` + srv.URL + `/meta.json"}`,
		`{"$id":"` + srv.URL + `/root.json","properties":{"a":{"$ref":"x.json"}}}`} {
		if _, err := CheckSchema(schema, MaxSchemaNodes); err == nil || !strings.Contains(err.Error(), "may only refer to itself") {
			t.Errorf("%s: %v", schema, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the schema's URL was fetched %d times", n)
	}
}

// chain is a schema of n definitions, each applying the next twice to the same value (with keyword
// anyOf, oneOf or allOf), and a last one that wants a string: checking a value that fails takes
// 2^(n+2)-2 evaluations.
func chain(n int, keyword string) string {
	var b strings.Builder
	b.WriteString(`{"$ref":"#/$defs/d0","$defs":{`)
	for i := range n {
		fmt.Fprintf(&b, `"d%d":{%q:[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, keyword, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"string"}}}`, n)
	return b.String()
}

// union is an anyOf of n simple types.
func union(n int) string {
	types := []string{`{"type":"string","maxLength":%d}`, `{"type":"integer","minimum":%d}`, `{"enum":["a%d","b"]}`, `{"const":%d}`, `{"type":"array","maxItems":%d}`}
	branches := make([]string, n)
	for i := range branches {
		branches[i] = fmt.Sprintf(types[i%len(types)], i)
	}
	return `{"anyOf":[` + strings.Join(branches, ",") + `]}`
}

// Schemas of real use: a typical tool's parameters, OpenAI's structured-output examples (a union of
// $defs, nullable fields, a recursive user interface), a recursive filter expression.
const (
	toolSchema = `{"type":"object","properties":{
		"location":{"type":"object","properties":{"city":{"type":"string"},"country":{"type":"string","enum":["FR","DE","US","GB","JP"]},
			"coordinates":{"type":"object","properties":{"lat":{"type":"number","minimum":-90,"maximum":90},"lon":{"type":"number","minimum":-180,"maximum":180}},"required":["lat","lon"]}},
			"required":["city"]},
		"unit":{"type":"string","enum":["celsius","fahrenheit"]},
		"days":{"type":"integer","minimum":1,"maximum":14},
		"include":{"type":"array","items":{"type":"string","enum":["wind","rain","uv","pollen"]},"uniqueItems":true},
		"period":{"oneOf":[{"type":"null"},
			{"type":"object","properties":{"kind":{"const":"range"},"from":{"type":"string","format":"date"},"to":{"type":"string","format":"date"}},"required":["kind","from"]},
			{"type":"object","properties":{"kind":{"const":"list"},"dates":{"type":"array","items":{"type":"string","format":"date"},"maxItems":31}},"required":["kind","dates"]}]}},
		"required":["location","unit"],"additionalProperties":false}`
	structuredOutput = `{"type":"object","properties":{
		"steps":{"type":"array","items":{"$ref":"#/$defs/step"}},
		"item":{"anyOf":[{"$ref":"#/$defs/user"},{"$ref":"#/$defs/address"}]},
		"final_answer":{"type":"string"}},
		"required":["steps","item","final_answer"],"additionalProperties":false,
		"$defs":{
		"step":{"type":"object","properties":{"explanation":{"type":"string"},"output":{"anyOf":[{"type":"string"},{"type":"null"}]}},"required":["explanation","output"],"additionalProperties":false},
		"user":{"type":"object","properties":{"name":{"type":"string"},"age":{"type":["integer","null"]},"email":{"anyOf":[{"type":"string"},{"type":"null"}]}},"required":["name","age","email"],"additionalProperties":false},
		"address":{"type":"object","properties":{"number":{"type":"string"},"street":{"type":"string"},"city":{"type":"string"}},"required":["number","street","city"],"additionalProperties":false}}}`
	uiSchema = `{"type":"object","properties":{
		"type":{"type":"string","enum":["div","button","header","section","field","form"]},
		"label":{"type":"string"},
		"children":{"type":"array","items":{"$ref":"#"}},
		"attributes":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"value":{"type":"string"}},"required":["name","value"],"additionalProperties":false}}},
		"required":["type","label","children","attributes"],"additionalProperties":false}`
	filterSchema = `{"$ref":"#/$defs/expr","$defs":{"expr":{"anyOf":[
		{"type":"object","properties":{"and":{"type":"array","items":{"$ref":"#/$defs/expr"}}},"required":["and"],"additionalProperties":false},
		{"type":"object","properties":{"or":{"type":"array","items":{"$ref":"#/$defs/expr"}}},"required":["or"],"additionalProperties":false},
		{"type":"object","properties":{"not":{"$ref":"#/$defs/expr"}},"required":["not"],"additionalProperties":false},
		{"type":"object","properties":{"field":{"type":"string"},"op":{"enum":["eq","ne","lt","gt"]},"value":{"type":["string","number","boolean","null"]}},"required":["field","op","value"],"additionalProperties":false}]}}}`
)

// A schema whose check of one value can take more than MaxValueEvaluations evaluations is refused
// when it is read, however the evaluations multiply.
func TestCheckSchemaBoundsTheWorkOfAValue(t *testing.T) {
	tests := []struct {
		desc, schema string
		problem      string // a part of the error; "" when the schema is good
	}{
		{"a chain of 18 anyOf", chain(18, "anyOf"), "would take up to 1048574 evaluations of one value (at /; at most 10000)"},
		{"a chain of 30 anyOf", chain(30, "anyOf"), "would take up to 4294967294 evaluations of one value"},
		{"a chain of 18 oneOf", chain(18, "oneOf"), "would take up to 1048574 evaluations"},
		{"a chain of 18 allOf", chain(18, "allOf"), "would take up to 1048574 evaluations"},
		{"a chain at the bound", chain(11, "anyOf"), ""}, // 8,190
		{"a chain past it", chain(12, "anyOf"), "would take up to 16382 evaluations"},
		{"a chain through not, if and then", func() string {
			var b strings.Builder
			for i := range 12 {
				fmt.Fprintf(&b, `"d%d":{"not":{"$ref":"#/$defs/d%d"},"if":{"$ref":"#/$defs/d%d"},"then":{"$ref":"#/$defs/d%d"}},`, i, i+1, i+1, i+1)
			}
			return `{"$ref":"#/$defs/d0","$defs":{` + b.String() + `"d12":{}}}`
		}(), "evaluations of one value"},
		// Branches that descend into the same part of the value multiply level after level, each
		// level cheap: a value 14 levels down would be evaluated 16,384 times, and a deeper one more.
		{"a union of two branches with the same recursive property", `{"anyOf":[{"properties":{"a":{"$ref":"#"}}},{"properties":{"a":{"$ref":"#"}}}]}`,
			"evaluations of one value (at /a/a/a/a/a/a/a/a/a/a/a/a;"},
		{"the same, through items and additionalProperties", `{"$defs":{"n":{"oneOf":[{"items":{"$ref":"#/$defs/n"}},{"additionalProperties":{"$ref":"#/$defs/n"}},{"items":{"$ref":"#/$defs/n"}}]}},"$ref":"#/$defs/n"}`,
			"evaluations of one value (at /*/*/*/*/*/*/*"},
		// A $dynamicRef resolves to the outermost schema declaring its anchor: here one no keyword
		// leads to, which applies the recursion twice.
		{"a $dynamicRef to an anchor nothing refers to", `{"$ref":"urn:x:c","$defs":{
			"c":{"$id":"urn:x:c","properties":{"a":{"$ref":"urn:x:b"}},
				"$defs":{"x":{"$dynamicAnchor":"m","anyOf":[{"type":"object","properties":{"a":{"$ref":"urn:x:b"}}},{"type":"object","properties":{"a":{"$ref":"urn:x:b"}}}]}}},
			"b":{"$id":"urn:x:b","$dynamicAnchor":"m","properties":{"a":{"$dynamicRef":"#m"}}}}}`, "evaluations of one value"},
		{"a $recursiveRef", `{"$schema":"https://json-schema.org/draft/2019-09/schema","$recursiveAnchor":true,"properties":{"a":{"$recursiveRef":"#"}}}`,
			"has a $recursiveRef to a $recursiveAnchor"},
		{"overlapping variants by the thousand", func() string {
			variants := make([]string, 1000)
			for i := range variants {
				variants[i] = fmt.Sprintf(`{"properties":{"p%d":{}},"additionalProperties":{}}`, i)
			}
			return `{"anyOf":[` + strings.Join(variants, ",") + `]}`
		}(), "is too intricate to bound the work of checking a value"},
		{"a union of 50 simple types", union(50), ""},
		{"a union of 4000", union(4000), ""},
		{"a recursive tree", uiSchema, ""},
		{"a recursive union", filterSchema, ""},
		{"a tool's parameters", toolSchema, ""},
		{"a structured output", structuredOutput, ""},
		{"a recursive tree extending a base with allOf", `{"$defs":{"base":{"type":"object","properties":{"children":{"type":"array"}}},
			"node":{"allOf":[{"$ref":"#/$defs/base"},{"properties":{"children":{"items":{"$ref":"#/$defs/node"}}}}]}},"$ref":"#/$defs/node"}`, ""},
		{"any JSON value", `{"$defs":{"v":{"anyOf":[{"type":"string"},{"type":"number"},{"type":"boolean"},{"type":"null"},
			{"type":"array","items":{"$ref":"#/$defs/v"}},{"type":"object","additionalProperties":{"$ref":"#/$defs/v"}}]}},"$ref":"#/$defs/v"}`, ""},
		{"a $dynamicRef recursion", `{"$dynamicAnchor":"n","type":"object","properties":{"c":{"type":"array","items":{"$dynamicRef":"#n"}}}}`, ""},
		{"the meta-schema", `{"$ref":"https://json-schema.org/draft/2020-12/schema"}`, ""},
		{"draft-07's", `{"$ref":"http://json-schema.org/draft-07/schema#"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, err := CheckSchema(tt.schema, MaxSchemaNodes)
			switch {
			case tt.problem == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.problem != "" && (err == nil || !strings.Contains(err.Error(), tt.problem)):
				t.Fatalf("error %v, want one saying %q", err, tt.problem)
			}
			if _, cerr := Compile(Format{Type: FormatJSONSchema, Schema: tt.schema}); (cerr == nil) != (err == nil) {
				t.Fatalf("Compile: %v, CheckSchema: %v", cerr, err)
			}
		})
	}
}

// The bound holds: checked against a value that fails every branch, the schemas allowed leave no
// more failed evaluations (leaf errors) than they were reckoned to take, and the chain at the bound
// takes nearly all of it.
func TestSchemaCostIsAnUpperBound(t *testing.T) {
	for _, schema := range []string{chain(11, "anyOf"), chain(11, "oneOf"), union(50), filterSchema, structuredOutput} {
		sch, err := compileSchema(schema)
		if err != nil {
			t.Fatal(err)
		}
		if sch.cost.max > MaxValueEvaluations {
			t.Fatalf("%d evaluations allowed", sch.cost.max)
		}
		var ve *jsonschema.ValidationError
		if err := sch.sch.Validate(1.5); !errors.As(err, &ve) {
			t.Fatalf("%v", err)
		}
		if n := countLeaves(ve); int64(n) > sch.cost.max {
			t.Fatalf("%d failed evaluations, more than the %d reckoned", n, sch.cost.max)
		}
	}
	sch, _ := compileSchema(chain(11, "anyOf"))
	var ve *jsonschema.ValidationError
	errors.As(sch.sch.Validate(1.5), &ve)
	if n, bound := countLeaves(ve), sch.cost.max; n != 1<<11 || bound != 1<<13-2 {
		t.Fatalf("%d failed evaluations of the last definition, %d reckoned in all", n, bound)
	}
}

func countLeaves(e *jsonschema.ValidationError) int {
	if len(e.Causes) == 0 {
		return 1
	}
	n := 0
	for _, c := range e.Causes {
		n += countLeaves(c)
	}
	return n
}

// An answer that breaks a large schema everywhere gets a problem of bounded length, formatted from a
// few of its million leaf errors; one too large to check within MaxAnswerWork, or holding a number
// the check cannot read, is invalid without being checked.
func TestAnswerChecksAreBounded(t *testing.T) {
	longEnum := make([]string, 200)
	for i := range longEnum {
		longEnum[i] = fmt.Sprintf("%q", strings.Repeat("x", 1000)+strconv.Itoa(i))
	}
	items := func(n int, item string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
	}
	tests := []struct {
		desc, schema, answer string
		problem              string // a part of the problem; "" for a valid answer
	}{
		{"a chain at the bound, failed", chain(11, "anyOf"), `1`, "does not match the schema: at /: got number, want string"},
		{"a union, failed by a long string", `{"type":"object","properties":{"a":{"anyOf":[{"enum":[` + strings.Join(longEnum, ",") + `]},{"pattern":"^z"},` + union(40)[len(`{"anyOf":[`):] + `}}`,
			`{"a":"` + strings.Repeat("y", 1<<16) + `"}`, "does not match the schema: at /a: value must be one of 'xxxx"},
		{"properties by the thousand", `{"type":"object","additionalProperties":false}`, func() string {
			props := make([]string, 5000)
			for i := range props {
				props[i] = fmt.Sprintf(`"%s%d":1`, strings.Repeat("k", 100), i)
			}
			return `{` + strings.Join(props, ",") + `}`
		}(), "additional properties 'kkkk"},
		{"a long list, each item checked 51 times", `{"type":"array","items":` + union(50) + `}`, items(10_000, `true`),
			"not checked, as checking it could take more than the 250000 evaluations an answer may take"},
		{"a long list of plain items", `{"type":"array","items":{"type":"integer"}}`, items(50_000, `7`), ""},
		{"a number the check cannot read", `{"type":"object","properties":{"n":{"minimum":0}}}`, `{"n":1e100000000}`,
			"not checked, as it holds a number whose exponent is beyond 400"},
		{"a long number", `{"type":"array","items":{"type":"integer"}}`, `[1,` + strings.Repeat("9", 100) + `]`, "more than 64 characters"},
		{"a number within bounds", `{"type":"array","items":{"type":"number","maximum":1e10}}`, `[1e9,-1e-400,` + strings.Repeat("9", 60) + `e236]`, "at /2: maximum"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			st, err := Compile(Format{Type: FormatJSONSchema, Schema: tt.schema})
			if err != nil {
				t.Fatal(err)
			}
			b := Ballots([]Response{{Text: tt.answer}}, st, "")[0]
			switch {
			case tt.problem == "" && !b.Valid:
				t.Fatalf("invalid: %s", b.Problem)
			case tt.problem != "" && (b.Valid || !strings.Contains(b.Problem, tt.problem)):
				t.Fatalf("problem %q, want one saying %q", b.Problem, tt.problem)
			case len(b.Problem) > maxProblemBytes+3:
				t.Fatalf("a problem of %d bytes", len(b.Problem))
			}
			// The same for a tool's arguments, when the answer is an object.
			if !strings.HasPrefix(tt.answer, "{") {
				return
			}
			st, err = Compile(Format{Tools: []Tool{{Name: "f", Parameters: tt.schema}}})
			if err != nil {
				t.Fatal(err)
			}
			b = Ballots([]Response{{ToolCalls: []ToolCall{{Name: "f", Arguments: tt.answer}}}}, st, "")[0]
			if b.Valid == (tt.problem != "") || len(b.Problem) > maxProblemBytes+3 {
				t.Fatalf("a call: valid %v, problem %q", b.Valid, b.Problem)
			}
		})
	}
}

// The problem of a failed check is formatted from a few of its leaves, whatever their number.
func TestSchemaProblemIsBounded(t *testing.T) {
	sch, err := compileSchema(chain(11, "anyOf"))
	if err != nil {
		t.Fatal(err)
	}
	err = sch.sch.Validate(map[string]any{strings.Repeat("k", 1000): 1})
	if p := schemaProblem(err); len(p) > 2*maxProblemBytes || !strings.Contains(p, "got object, want string") {
		t.Fatalf("%d bytes: %q", len(p), p)
	}
}
