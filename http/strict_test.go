package httpapi

import (
	"strings"
	"testing"
)

func TestStrictJSON(t *testing.T) {
	nested := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
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
