package consensus

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
