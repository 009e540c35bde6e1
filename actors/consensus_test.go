package actors

import (
	"fmt"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
)

// A decision that panics (here on a candidate missing from its list) fails its request, and the next
// decision is made as before.
func TestADecisionThatPanicsFailsOnlyItsRequest(t *testing.T) {
	broken := &messages.ConsensusInput{RequestId: "r1", Strategy: "majority", Candidates: []*messages.Candidate{{Model: "a", Text: "B"}, nil}}
	if r := decision(broken, nil, nil); !strings.Contains(r.Failure, "panicked") || r.Decision != nil {
		t.Fatalf("decision = %+v, want a failure naming the panic", r)
	}
	ok := &messages.ConsensusInput{RequestId: "r2", Strategy: "majority", AnswerKind: "choice",
		Candidates: []*messages.Candidate{{Model: "a", Text: "B"}, {Model: "b", Text: "B"}, {Model: "c", Text: "C"}}}
	r := decision(ok, nil, nil)
	if r.Failure != "" || r.Decision.GetChosenModel() == "c" || r.Answer == "" {
		t.Fatalf("decision = %+v, want the majority's answer", r)
	}
}

func TestStructuredDecisions(t *testing.T) {
	format := &messages.OutputFormat{Type: "json_schema", Schema: `{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}`}
	weather := []*messages.Tool{{Name: "get_weather", Parameters: `{"type":"object","required":["city"]}`}}
	call := func(args string) []*messages.ToolCall {
		return []*messages.ToolCall{{Id: "c", Name: "get_weather", Arguments: args}}
	}
	tests := []struct {
		desc     string
		in       *messages.ConsensusInput
		answer   string
		chosen   string
		merged   bool
		valid    []bool
		failure  string
		problems []string
	}{
		{
			desc: "JSON answers vote with their canonical form; the invalid one is in the ballots",
			in: &messages.ConsensusInput{ResponseFormat: format, Candidates: []*messages.Candidate{
				{Model: "a", Text: `{"n": 1}`}, {Model: "b", Text: `{"n":1.0}`}, {Model: "c", Text: `{"n":"one"}`}}},
			answer: `{"n": 1}`,
			chosen: "a",
			valid:  []bool{true, true, false},
		},
		{
			desc: "a merged object is answered as its canonical JSON",
			in: &messages.ConsensusInput{ResponseFormat: &messages.OutputFormat{Type: "json_object"}, Candidates: []*messages.Candidate{
				{Model: "a", Text: `{"x":1,"y":1,"z":1}`}, {Model: "b", Text: `{"x":1,"y":2,"z":2}`}, {Model: "c", Text: `{"x":2,"y":2,"z":3}`}}},
			answer: `{"x":1,"y":2,"z":1}`,
			chosen: "a",
			merged: true,
			valid:  []bool{true, true, true},
		},
		{
			desc: "tool calls vote with their calls",
			in: &messages.ConsensusInput{Tools: weather, Candidates: []*messages.Candidate{
				{Model: "a", ToolCalls: call(`{"city":"Oslo","unit":"c"}`)}, {Model: "b", ToolCalls: call(`{"unit":"c","city":"Oslo"}`)},
				{Model: "c", Text: "It is cold in Oslo."}}},
			chosen: "a",
			valid:  []bool{true, true, true},
		},
		{
			desc: "no valid answer: no_valid_answer, each model's problem, and the ballots",
			in: &messages.ConsensusInput{ResponseFormat: format, Tools: weather, Candidates: []*messages.Candidate{
				{Model: "a", Text: "n is 1"}, {Model: "b", Text: `{}`}, {Model: "c", ToolCalls: call(`{"town":"Oslo"}`)}}},
			valid:    []bool{false, false, false},
			failure:  string(resilience.NoValidAnswer),
			problems: []string{"a: not JSON", "b: does not match the schema: at /: missing property 'n'", `c: arguments of "get_weather" do not match`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			tt.in.RequestId, tt.in.Strategy = "r", "majority"
			st, err := structureOf(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			r := decision(tt.in, st, nil)
			if r.FailureCode != tt.failure || (tt.failure == "") != (r.Failure == "") {
				t.Fatalf("failure %q (%s), want %q", r.Failure, r.FailureCode, tt.failure)
			}
			if why := checkConsensusResult(r, len(tt.in.Candidates)); why != "" {
				t.Fatalf("the coordinator would drop the result: %s", why)
			}
			var valid []bool
			for i, b := range r.Decision.Ballots {
				valid = append(valid, b.Valid)
				if b.Model != tt.in.Candidates[i].Model || (b.Digest == "") != (b.Canonical == "") || b.Valid != (b.Group >= 0) || b.Valid == (b.Problem != "") {
					t.Fatalf("ballot %d %+v", i, b)
				}
			}
			if fmt.Sprint(valid) != fmt.Sprint(tt.valid) {
				t.Fatalf("valid %v, want %v", valid, tt.valid)
			}
			for i, p := range tt.problems {
				if got := r.FailureDetails[i].Field + ": " + r.FailureDetails[i].Message; !strings.HasPrefix(got, p) {
					t.Fatalf("problem %q, want %q", got, p)
				}
			}
			if tt.failure != "" {
				return
			}
			if r.Answer != tt.answer || r.Decision.ChosenModel != tt.chosen || r.Decision.Merged != tt.merged {
				t.Fatalf("answer %q by %s (merged %v), want %q by %s (merged %v)", r.Answer, r.Decision.ChosenModel, r.Decision.Merged,
					tt.answer, tt.chosen, tt.merged)
			}
		})
	}
}
