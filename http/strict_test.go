package httpapi

import (
	"fmt"
	"strings"
	"testing"
)

func TestStrictJSON(t *testing.T) {
	nested := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	// many is an object of n distinct keys k0, k1, ..., then the extra members.
	many := func(n int, extra string) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		return b.String() + extra + "}"
	}
	tests := []struct {
		desc, body string
		field      string // the problem's field; empty: accepted
	}{
		{"an object", `{"task": "x", "workers": 3, "models": ["a", "b"]}`, ""},
		{"scalars of every kind", `{"a":-1.5e+3,"b":true,"c":null,"d":false,"e":0}`, ""},
		{"strings holding delimiters and escapes", `{"a":"x,}\"{[:","b":"\\","c":"\u00e9"}`, ""},
		{"a key equal to another's value", `{"a":"b","b":"a"}`, ""},
		{"the same key in two objects", `{"a":{"x":1},"b":{"x":1},"c":[{"x":1},{"x":2}]}`, ""},
		{"empty containers", ` { "a" : { } , "b" : [ ] } `, ""},
		{"a duplicate key", `{"task": "x", "task": "y"}`, "task"},
		{"a duplicate key written with an escape", `{"task": "x", "t\u0061sk": "y"}`, "task"},
		{"a duplicate key in a nested object", `{"task": "x", "metadata": {"a": 1, "b": {"c": 1, "c": 2}}}`, "metadata.b.c"},
		{"a duplicate key in an object in an array", `{"messages": [{"role": "user"}, {"role": "user", "role": "tool"}]}`, "messages.role"},
		{"trailing data", `{"task": "x"} trailing`, "body"},
		{"a second value", `{"task": "x"} 1`, "body"},
		{"not JSON", `{"task": }`, "body"},
		{"empty", ``, "body"},
		{"many keys", many(40, `"last":1`), ""},
		{"a duplicate among many keys, of an early one", many(40, `"k1":2`), "k1"},
		{"a duplicate among many keys, of a late one", many(40, `"k39":2`), "k39"},
		{"a duplicate among few keys, then many", `{"k3":0,` + many(40, `"z":1`)[1:], "k3"},
		{"as deep as allowed", nested(maxJSONDepth), ""},
		{"deeper than allowed", nested(maxJSONDepth + 1), "body"},
		{"an array deeper than allowed", `{"a":` + strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1) + `}`, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			p := strictJSON([]byte(tt.body))
			switch {
			case tt.field == "" && p != nil:
				t.Fatalf("refused: %s %s", p.Field, p.Message)
			case tt.field != "" && p == nil:
				t.Fatalf("accepted, want a problem with %s", tt.field)
			case tt.field != "" && p.Field != tt.field:
				t.Fatalf("problem with %s (%s), want %s", p.Field, p.Message, tt.field)
			}
		})
	}
}
