package consensus

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/blueprints"
)

func TestCanonicalJSON(t *testing.T) {
	tests := []struct {
		desc string
		a, b string
		same bool
	}{
		{"key order and spacing do not matter", `{"b": 1, "a": [1, 2]}`, "{\n  \"a\":[1,2],\"b\":1\n}", true},
		{"nested objects are sorted too", `{"o":{"y":1,"x":2}}`, `{"o":{"x":2,"y":1}}`, true},
		{"numbers by value", `[1, 1.0, 10e-1, 0.1e1, -0, 1e21, 0.000001]`, `[1,1,1,1,0,1E+21,1e-6]`, true},
		{"large integers keep every digit", `12345678901234567890`, `12345678901234567891`, false},
		{"escapes are read, not compared", `"\u00e9\/"`, `"é/"`, true},
		{"array order matters", `[1,2]`, `[2,1]`, false},
		{"a string is not a number", `{"a":"1"}`, `{"a":1}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			x, err := ParseJSON(tt.a)
			if err != nil {
				t.Fatal(err)
			}
			y, err := ParseJSON(tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if cx, cy := CanonicalJSON(x), CanonicalJSON(y); (cx == cy) != tt.same {
				t.Fatalf("%s and %s: same %v, want %v", cx, cy, cx == cy, tt.same)
			}
		})
	}
	if got := canonicalNumber("123.4500e2"); got != "12345" {
		t.Fatalf("canonicalNumber = %s", got)
	}
	if _, err := ParseJSON(`{"a":1} trailing`); err == nil {
		t.Fatal("text after the value was taken as JSON")
	}
}

func mustCompile(t *testing.T, f Format) *Structure {
	t.Helper()
	st, err := Compile(f)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

const citySchema = `{"type":"object","required":["city","unit"],"additionalProperties":false,
	"properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1}}}`

func TestCompileRefusesOutsideReferences(t *testing.T) {
	tests := []struct {
		desc   string
		schema string
		ok     bool
	}{
		{"a schema referring to itself", `{"$defs":{"n":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/n"}}}`, true},
		{"a file", `{"$ref":"file:///etc/passwd"}`, false},
		{"a URL", `{"$ref":"https://example.com/schema.json"}`, false},
		{"not JSON", `{"type":`, false},
		{"a type that is none", `{"type":"integr"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, err := Compile(Format{Type: FormatJSONSchema, Schema: tt.schema})
			if (err == nil) != tt.ok {
				t.Fatalf("Compile: %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestSameJSONDifferentlyWrittenAgrees(t *testing.T) {
	st := mustCompile(t, Format{Type: FormatJSONSchema, Schema: citySchema})
	resps := []Response{
		resp("a", `{"city": "Paris", "unit": "celsius", "days": 3}`, 0.5),
		resp("b", "{\n  \"unit\":\"celsius\",\n  \"days\":3.0,\n  \"city\":\"Paris\"\n}", 0.9),
		resp("c", `{"days":3,"city":"Paris","unit":"celsius"}`, 0.7),
	}
	for _, s := range blueprints.Strategies {
		t.Run(string(s), func(t *testing.T) {
			r, err := Decide(Input{Strategy: s, Responses: resps, Structure: st, QualityFromAgreement: true})
			if err != nil {
				t.Fatal(err)
			}
			if r.Merged || r.Chosen < 0 || r.Answer != resps[r.Chosen].Text {
				t.Fatalf("answer %q (chosen %d, merged %v): want one of the answers", r.Answer, r.Chosen, r.Merged)
			}
			for i, b := range r.Ballots {
				if !b.Valid || b.Group != 0 || b.Digest != r.Ballots[0].Digest || !r.Contributed[i] {
					t.Fatalf("ballot %d %+v, contributed %v: want one group of three", i, b, r.Contributed)
				}
			}
			if want := `{"city":"Paris","days":3,"unit":"celsius"}`; r.Ballots[0].Canonical != want {
				t.Fatalf("canonical %s, want %s", r.Ballots[0].Canonical, want)
			}
			if len(r.Agreement) != 1 || !strings.Contains(r.Agreement[0], "from 3 of 3: a, b, c") {
				t.Fatalf("agreement %q", r.Agreement)
			}
		})
	}
}

func TestFieldWiseMerge(t *testing.T) {
	tests := []struct {
		desc        string
		format      Format
		resps       []Response
		wantMerged  bool
		wantAnswer  string
		wantChosen  int
		contributed []bool
		note        string
	}{
		{
			desc:   "each field won by its own majority: a merge none of them gave, satisfying the schema",
			format: Format{Type: FormatJSONSchema, Schema: citySchema},
			resps: []Response{
				resp("a", `{"city":"Paris","unit":"celsius","days":3}`, 0.5),
				resp("b", `{"city":"Paris","unit":"fahrenheit","days":5}`, 0.6),
				resp("c", `{"city":"Lyon","unit":"celsius","days":5}`, 0.7),
			},
			wantMerged:  true,
			wantAnswer:  `{"city":"Paris","days":5,"unit":"celsius"}`,
			wantChosen:  2, // every answer has two of three fields: the heaviest is the closest
			contributed: []bool{true, true, true},
		},
		{
			desc:   "nested objects are merged field by field, arrays as whole values",
			format: Format{Type: FormatJSONObject},
			resps: []Response{
				resp("a", `{"user":{"name":"Ada","age":36},"tags":["x","y"]}`, 0.5),
				resp("b", `{"user":{"name":"Ada","age":37},"tags":["y","x"]}`, 0.5),
				resp("c", `{"user":{"name":"Eve","age":37},"tags":["x","y"]}`, 0.5),
			},
			wantMerged:  true,
			wantAnswer:  `{"tags":["x","y"],"user":{"age":37,"name":"Ada"}}`,
			wantChosen:  0,
			contributed: []bool{true, true, true},
		},
		{
			desc:   "a merge that breaks the schema falls back to the best-supported whole answer",
			format: Format{Type: FormatJSONSchema, Schema: `{"type":"object","maxProperties":2}`},
			resps: []Response{
				resp("a", `{"x":1,"y":1}`, 0.5),
				resp("b", `{"x":1,"z":1}`, 0.9),
				resp("c", `{"y":1,"z":1}`, 0.5),
			},
			wantAnswer:  `{"x":1,"z":1}`,
			wantChosen:  1,
			contributed: []bool{false, true, false},
			note:        "the field-wise merge was dropped",
		},
		{
			desc:   "a whole answer with the quorum is taken as it is",
			format: Format{Type: FormatJSONObject},
			resps: []Response{
				resp("a", `{"x":1,"y":2}`, 0.5),
				resp("b", `{"y":2, "x":1}`, 0.5),
				resp("c", `{"x":9,"y":9}`, 0.9),
			},
			wantAnswer:  `{"x":1,"y":2}`,
			wantChosen:  0,
			contributed: []bool{true, true, false},
		},
		{
			desc:   "answers that are not all objects are not merged",
			format: Format{Type: FormatJSONSchema, Schema: `{"type":["object","array"]}`},
			resps: []Response{
				resp("a", `{"x":1}`, 0.5),
				resp("b", `[1]`, 0.9),
				resp("c", `{"x":2}`, 0.5),
			},
			wantAnswer:  `[1]`,
			wantChosen:  1,
			contributed: []bool{false, true, false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			st := mustCompile(t, tt.format)
			r, err := Decide(Input{Strategy: blueprints.Majority, Responses: tt.resps, Structure: st})
			if err != nil {
				t.Fatal(err)
			}
			if r.Merged != tt.wantMerged || r.Answer != tt.wantAnswer || r.Chosen != tt.wantChosen {
				t.Fatalf("answer %s (merged %v, chosen %d), want %s (merged %v, chosen %d)", r.Answer, r.Merged, r.Chosen,
					tt.wantAnswer, tt.wantMerged, tt.wantChosen)
			}
			if fmt.Sprint(r.Contributed) != fmt.Sprint(tt.contributed) {
				t.Fatalf("contributed %v, want %v", r.Contributed, tt.contributed)
			}
			if r.Merged {
				v, _ := ParseJSON(r.Answer)
				if st.schema != nil && st.schema.sch.Validate(v) != nil {
					t.Fatalf("the merge %s breaks the schema", r.Answer)
				}
			}
			if got := strings.Join(r.Disagreement, "\n"); !strings.Contains(got, tt.note) {
				t.Fatalf("disagreement %q lacks %q", r.Disagreement, tt.note)
			}
		})
	}
}

// With weighted voting a field goes to the heavier side.
func TestFieldWiseMergeWeighsVotes(t *testing.T) {
	st := mustCompile(t, Format{Type: FormatJSONObject})
	resps := []Response{
		resp("strong", `{"x":1,"y":1}`, 0.95),
		resp("weak1", `{"x":2,"y":2}`, 0.1),
		resp("weak2", `{"x":2,"y":3}`, 0.1),
		resp("mid", `{"x":4,"y":1}`, 0.5),
	}
	maj, _ := Decide(Input{Strategy: blueprints.Majority, Responses: resps, Structure: st})
	w, _ := Decide(Input{Strategy: blueprints.Weighted, Responses: resps, Structure: st})
	if !maj.Merged || maj.Answer != `{"x":2,"y":1}` {
		t.Fatalf("majority %s (merged %v): x by two votes, y by two", maj.Answer, maj.Merged)
	}
	if w.Merged || w.Answer != resps[0].Text {
		t.Fatalf("weighted %s (merged %v): want the strong answer, whose fields outweigh the rest", w.Answer, w.Merged)
	}
}

func TestInvalidAnswersNeverWin(t *testing.T) {
	tests := []struct {
		desc    string
		format  Format
		in      Input
		resps   []Response
		chosen  int
		problem string
	}{
		{
			desc:    "not JSON, even when the majority gives it",
			format:  Format{Type: FormatJSONObject},
			resps:   []Response{resp("a", "Sure! ```json {}```", 0.9), resp("b", "Sure! ```json {}```", 0.9), resp("c", `{"ok":true}`, 0.1)},
			chosen:  2,
			problem: "not JSON",
		},
		{
			desc:    "against the schema, even when the majority gives it",
			format:  Format{Type: FormatJSONSchema, Schema: citySchema},
			resps:   []Response{resp("a", `{"city":"Paris","unit":"kelvin"}`, 0.9), resp("b", `{"unit":"kelvin","city":"Paris"}`, 0.9), resp("c", `{"city":"Paris","unit":"celsius"}`, 0.1)},
			chosen:  2,
			problem: "does not match the schema: at /unit",
		},
		{
			desc:    "json_object wants an object",
			format:  Format{Type: FormatJSONObject},
			resps:   []Response{resp("a", `[1,2]`, 0.9), resp("b", `[1, 2]`, 0.9), resp("c", `{"n":[1,2]}`, 0.1)},
			chosen:  2,
			problem: "not a JSON object",
		},
		{
			desc:    "an arbiter model's choice of an invalid answer is not taken",
			format:  Format{Type: FormatJSONObject},
			in:      Input{Strategy: blueprints.Rotating, Arbiter: "a", Verdict: &Verdict{Choice: 0}},
			resps:   []Response{resp("a", `nope`, 0.9), resp("b", `{"k":1}`, 0.1), resp("c", `{"k": 1}`, 0.1)},
			chosen:  1,
			problem: "not JSON",
		},
		{
			desc:    "weighted: the weight of invalid answers counts for nothing",
			format:  Format{Type: FormatJSONObject},
			in:      Input{Strategy: blueprints.Weighted},
			resps:   []Response{resp("a", `{"k":`, 0.99), resp("b", `{"k":`, 0.99), resp("c", `{"k":2}`, 0.05)},
			chosen:  2,
			problem: "not JSON",
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			in := tt.in
			if in.Strategy == "" {
				in.Strategy = blueprints.Majority
			}
			in.Responses, in.Structure = tt.resps, mustCompile(t, tt.format)
			r, err := Decide(in)
			if err != nil {
				t.Fatal(err)
			}
			if r.Chosen != tt.chosen || r.Answer != tt.resps[tt.chosen].Text {
				t.Fatalf("chose %d %q, want %d", r.Chosen, r.Answer, tt.chosen)
			}
			for i, b := range r.Ballots {
				if b.Valid {
					continue
				}
				if r.Contributed[i] || r.Scores[i] != 0 || b.Group != -1 || !strings.Contains(b.Problem, tt.problem) {
					t.Fatalf("invalid ballot %d %+v: contributed %v, score %v; want nothing, and a problem naming %q",
						i, b, r.Contributed[i], r.Scores[i], tt.problem)
				}
			}
			if !strings.Contains(strings.Join(r.Disagreement, "\n"), "a: invalid: ") {
				t.Fatalf("disagreement %q does not name the invalid answer", r.Disagreement)
			}
		})
	}
}

func call(id, name, args string) ToolCall { return ToolCall{ID: id, Name: name, Arguments: args} }

func withCalls(r Response, calls ...ToolCall) Response {
	r.ToolCalls = calls
	return r
}

func TestToolCallBallots(t *testing.T) {
	weather := Tool{Name: "get_weather", Parameters: `{"type":"object","required":["city"],"properties":{"city":{"type":"string"},"unit":{"type":"string"}}}`}
	clock := Tool{Name: "get_time", Parameters: `{"type":"object"}`}
	tools := Format{Tools: []Tool{weather, clock}}
	tests := []struct {
		desc     string
		strategy blueprints.Strategy
		resps    []Response
		groups   []int
		chosen   int
		problem  string
	}{
		{
			desc:     "the same call with its argument keys reordered agrees",
			strategy: blueprints.Majority,
			resps: []Response{
				withCalls(resp("a", "", 0.5), call("call_1", "get_weather", `{"city":"Paris","unit":"c"}`)),
				withCalls(resp("b", "", 0.5), call("toolu_9", "get_weather", `{ "unit": "c", "city": "Paris" }`)),
				withCalls(resp("c", "", 0.9), call("x", "get_time", `{"city":"Paris","unit":"c"}`)),
			},
			groups: []int{0, 0, 1},
			chosen: 0,
		},
		{
			desc:     "a different function disagrees, whatever its arguments",
			strategy: blueprints.Majority,
			resps: []Response{
				withCalls(resp("a", "", 0.9), call("1", "get_weather", `{"city":"Paris"}`)),
				withCalls(resp("b", "", 0.1), call("2", "get_time", `{}`)),
				withCalls(resp("c", "", 0.1), call("3", "get_time", ``)),
			},
			groups: []int{0, 1, 1},
			chosen: 1,
		},
		{
			desc:     "a text answer never agrees with a call",
			strategy: blueprints.Majority,
			resps: []Response{
				resp("a", "get_weather Paris", 0.9),
				withCalls(resp("b", "", 0.1), call("2", "get_weather", `{"city":"Paris"}`)),
				withCalls(resp("c", "get_weather Paris", 0.1), call("3", "get_weather", `{"city":"Paris"}`)),
			},
			groups: []int{0, 1, 1},
			chosen: 1,
		},
		{
			desc:     "calls are a multiset: their order does not matter, their number does",
			strategy: blueprints.Majority,
			resps: []Response{
				withCalls(resp("a", "", 0.5), call("1", "get_time", `{}`), call("2", "get_weather", `{"city":"Rome"}`)),
				withCalls(resp("b", "", 0.5), call("1", "get_weather", `{"city":"Rome"}`), call("2", "get_time", `{}`)),
				withCalls(resp("c", "", 0.9), call("1", "get_weather", `{"city":"Rome"}`), call("2", "get_time", `{}`), call("3", "get_time", `{}`)),
			},
			groups: []int{0, 0, 1},
			chosen: 0,
		},
		{
			desc:     "weighted: a trusted minority's call wins",
			strategy: blueprints.Weighted,
			resps: []Response{
				withCalls(resp("strong1", "", 0.95), call("1", "get_weather", `{"city":"Oslo"}`)),
				withCalls(resp("strong2", "", 0.95), call("1", "get_weather", `{"city":"Oslo"}`)),
				withCalls(resp("weak1", "", 0.2), call("1", "get_weather", `{"city":"Bergen"}`)),
				withCalls(resp("weak2", "", 0.2), call("1", "get_weather", `{"city":"Bergen"}`)),
				withCalls(resp("weak3", "", 0.2), call("1", "get_weather", `{"city":"Bergen"}`)),
			},
			groups: []int{0, 0, 1, 1, 1},
			chosen: 0,
		},
		{
			desc:     "arguments that are not JSON make the ballot invalid",
			strategy: blueprints.Majority,
			resps: []Response{
				withCalls(resp("a", "", 0.9), call("1", "get_weather", `{"city":`)),
				withCalls(resp("b", "", 0.1), call("1", "get_weather", `{"city":"Paris"}`)),
			},
			groups:  []int{-1, 0},
			chosen:  1,
			problem: `arguments of "get_weather": not JSON`,
		},
		{
			desc:     "a function the request did not offer makes the ballot invalid",
			strategy: blueprints.Majority,
			resps: []Response{
				withCalls(resp("a", "", 0.9), call("1", "rm_rf", `{}`)),
				withCalls(resp("b", "", 0.1), call("1", "get_time", `{}`)),
			},
			groups:  []int{-1, 0},
			chosen:  1,
			problem: `calls "rm_rf", which is not one of the request's tools`,
		},
		{
			desc:     "arguments against the tool's parameters make the ballot invalid",
			strategy: blueprints.Majority,
			resps: []Response{
				withCalls(resp("a", "", 0.9), call("1", "get_weather", `{"unit":"c"}`)),
				withCalls(resp("b", "", 0.1), call("1", "get_weather", `{"city":"Paris"}`)),
			},
			groups:  []int{-1, 0},
			chosen:  1,
			problem: `arguments of "get_weather" do not match its parameters`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			r, err := Decide(Input{Strategy: tt.strategy, Responses: tt.resps, Structure: mustCompile(t, tools), QualityFromAgreement: true})
			if err != nil {
				t.Fatal(err)
			}
			var groups []int
			for _, b := range r.Ballots {
				groups = append(groups, b.Group)
				if !b.Valid && !strings.Contains(b.Problem, tt.problem) {
					t.Fatalf("problem %q, want %q", b.Problem, tt.problem)
				}
			}
			if fmt.Sprint(groups) != fmt.Sprint(tt.groups) {
				t.Fatalf("groups %v, want %v", groups, tt.groups)
			}
			if r.Chosen != tt.chosen {
				t.Fatalf("chose %d, want %d", r.Chosen, tt.chosen)
			}
			if fmt.Sprint(r.ToolCalls) != fmt.Sprint(tt.resps[tt.chosen].ToolCalls) {
				t.Fatalf("tool calls %v, want the chosen answer's %v", r.ToolCalls, tt.resps[tt.chosen].ToolCalls)
			}
			for i, b := range r.Ballots {
				if r.Contributed[i] != (b.Valid && b.Group == r.Ballots[r.Chosen].Group) {
					t.Fatalf("contributed %v for groups %v", r.Contributed, groups)
				}
			}
		})
	}
}

func TestNoValidAnswer(t *testing.T) {
	st := mustCompile(t, Format{Type: FormatJSONSchema, Schema: citySchema})
	resps := []Response{
		resp("a", "It is sunny in Paris.", 0.5),
		resp("b", `{"city":"Paris"}`, 0.5),
		withCalls(resp("c", "", 0.5), call("1", "get_weather", `{"city":`)),
	}
	_, err := Decide(Input{Strategy: blueprints.Majority, Responses: resps, Structure: st})
	var nv *NoValidAnswerError
	if !errors.Is(err, ErrNoValidAnswer) || !errors.As(err, &nv) {
		t.Fatalf("err %v, want a NoValidAnswerError", err)
	}
	want := []string{"not JSON", "does not match the schema: at /: missing property 'unit'", `arguments of "get_weather": not JSON`}
	for i, b := range nv.Ballots {
		if b.Valid || !strings.Contains(b.Problem, want[i]) || nv.Models[i] != resps[i].Model {
			t.Fatalf("ballot %d of %s: %+v, want the problem %q", i, nv.Models[i], b, want[i])
		}
	}
	if !strings.Contains(err.Error(), "a: not JSON") {
		t.Fatalf("error %q does not name each model's problem", err)
	}
}

func TestArbiterSeesOnlyValidAnswers(t *testing.T) {
	st := mustCompile(t, Format{Type: FormatJSONObject})
	resps := []Response{resp("a", `nope`, 0.5), resp("b", `{"k": 1}`, 0.5), withCalls(resp("c", "", 0.5), call("1", "f", `{"x":1}`))}
	shown, judged := ArbiterView(resps, Text, st)
	if fmt.Sprint(shown) != "[1 2]" || judged[0].Text != `{"k":1}` || judged[1].Text != `[{"arguments":{"x":1},"name":"f"}]` {
		t.Fatalf("shown %v %+v", shown, judged)
	}
	// Beside calls, a text answer is shown as written.
	if _, judged := ArbiterView([]Response{resp("a", "It is Sunny!", 0.5), resps[2]}, Text, nil); judged[0].Text != "It is Sunny!" {
		t.Fatalf("judged %+v", judged)
	}
	v := Verdict{Choice: 1, Scores: []float64{0.2, 0.8}, Prefer: [][]float64{{0.5, 0}, {1, 0.5}}}.Expand(shown, len(resps))
	if v.Choice != 2 || fmt.Sprint(v.Scores) != "[0 0.2 0.8]" || v.Prefer[2][1] != 1 || v.Prefer[0][2] != 0.5 {
		t.Fatalf("expanded %+v", v)
	}
	r, err := Decide(Input{Strategy: blueprints.Pairwise, Responses: resps, Structure: st, Arbiter: "a", Verdict: &v})
	if err != nil || r.Chosen != 2 || r.Arbiter != "a" || r.Scores[0] != 0 {
		t.Fatalf("pairwise %+v %v", r, err)
	}
	// Text answers: everyone is shown, as before.
	if shown, _ := ArbiterView([]Response{resp("a", "x", 1), resp("b", "y", 1)}, Text, nil); len(shown) != 2 {
		t.Fatalf("shown %v", shown)
	}
}

func TestLeadingReadsBallots(t *testing.T) {
	st := mustCompile(t, Format{Type: FormatJSONObject})
	resps := []Response{resp("a", `{"x":1}`, 0.5), resp("b", `{ "x" : 1 }`, 0.5), resp("c", `oops`, 0.5)}
	for i := range resps {
		resps[i].Accuracy = 0.8
	}
	p, ok := Leading(resps, Text, st)
	if !ok || p < 0.9 {
		t.Fatalf("posterior %v %v: two agreeing answers of 0.8 accuracy lead", p, ok)
	}
}
