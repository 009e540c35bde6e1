package actors

import (
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/messages"
)

// A decision that panics (here on a candidate missing from its list) fails its request and leaves
// the shared decider serving the next one.
func TestADecisionThatPanicsFailsOnlyItsRequest(t *testing.T) {
	broken := &messages.ConsensusInput{RequestId: "r1", Strategy: "majority", Candidates: []*messages.Candidate{{Model: "a", Text: "B"}, nil}}
	if r := decision(broken, nil); !strings.Contains(r.Failure, "panicked") || r.Decision != nil {
		t.Fatalf("decision = %+v, want a failure naming the panic", r)
	}
	ok := &messages.ConsensusInput{RequestId: "r2", Strategy: "majority", AnswerKind: "choice",
		Candidates: []*messages.Candidate{{Model: "a", Text: "B"}, {Model: "b", Text: "B"}, {Model: "c", Text: "C"}}}
	r := decision(ok, nil)
	if r.Failure != "" || r.Decision.GetChosenModel() == "c" || r.Answer == "" {
		t.Fatalf("decision = %+v, want the majority's answer", r)
	}
}
