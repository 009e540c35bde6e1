package feedback

import (
	"fmt"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

func TestRewards(t *testing.T) {
	answer := func(model, text string, contributed bool, score float64) Call {
		return Call{Model: model, Arm: resilience.Judged, Text: text, Contributed: contributed, Score: score}
	}
	fault := func(model string, timedOut bool) Call {
		return Call{Model: model, Arm: resilience.Penalty, TimedOut: timedOut}
	}
	quiet := func(model string) Call { return Call{Model: model, Arm: resilience.NoReward} }
	invalid := func(model string) Call {
		c := answer(model, "not JSON", false, 0.9)
		c.Invalid = true
		return c
	}
	later := func(c Call) Call { c.Later = true; return c }
	voted := func(model string, contributed bool, posterior float64) Call {
		c := answer(model, "B", contributed, posterior)
		c.Posterior = &posterior
		return c
	}
	tests := []struct {
		desc  string
		calls []Call
		mode  Mode
		want  string
	}{
		{"reliability: the posterior", []Call{voted("a", true, 0.9), voted("b", false, 0.08)}, Reliability, "[{a 0.9 posterior} {b 0.08 posterior}]"},
		{"reliability without a vote: agreement", []Call{answer("a", "B", true, 0.7), answer("b", "C", false, 0.3)}, Reliability, "[{a 1 contributed} {b 0 poor}]"},
		{"agreement", []Call{answer("a", "B", true, 0.7), answer("b", "C", false, 0.3)}, Agreement, "[{a 1 contributed} {b 0 poor}]"},
		{"arbiter scores", []Call{answer("a", "B", true, 0.7), answer("b", "C", false, 0.3)}, Arbiter, "[{a 0.7 arbiter_score} {b 0.3 arbiter_score}]"},
		{"external leaves answers alone but not faults", []Call{answer("a", "B", true, 0.7), fault("b", true)}, External, "[{b 0 timeout}]"},
		{"a model once, by its best outcome", []Call{fault("a", false), fault("a", true), answer("a", "B", true, 1)}, Agreement, "[{a 1 contributed}]"},
		{"a timeout ranks above an error", []Call{fault("a", false), fault("a", true)}, Agreement, "[{a 0 timeout}]"},
		{"calls that say nothing of the model", []Call{quiet("a"), quiet("b"), fault("b", false)}, Agreement, "[{b 0 error}]"},
		{"an invalid answer is poor, whatever its score", []Call{answer("a", "{}", true, 0.7), invalid("b")}, Arbiter, "[{a 0.7 arbiter_score} {b 0 invalid}]"},
		{"an invalid answer is poor even when answers wait for the truth", []Call{answer("a", "{}", true, 0.7), invalid("b")}, External, "[{b 0 invalid}]"},
		{"an invalid answer ranks above an error of the same model", []Call{fault("b", false), invalid("b")}, Agreement, "[{b 0 invalid}]"},
		{"a later wave's answer is not judged, but its fault is", []Call{voted("a", true, 0.9), later(voted("b", true, 0.9)), later(fault("c", false))}, Reliability, "[{a 0.9 posterior} {c 0 error}]"},
		{"a later wave's answer clears its earlier fault", []Call{later(fault("b", false)), later(answer("b", "B", true, 1))}, Agreement, "[]"},
		{"a later wave's invalid answer is still poor", []Call{later(invalid("b"))}, Agreement, "[{b 0 invalid}]"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if got := fmt.Sprint(Rewards(tt.calls, ByConsensus(tt.mode))); got != tt.want {
				t.Fatalf("rewards %s, want %s", got, tt.want)
			}
		})
	}
}

func TestFromCaller(t *testing.T) {
	calls := []Call{
		{Model: "a", Arm: resilience.Judged, Text: "[1, 2]"},
		{Model: "b", Arm: resilience.Judged, Text: "(1, 2)"},
		{Model: "c", Arm: resilience.Penalty, TimedOut: true},
	}
	truth := "[1, 2]"
	got, err := FromCaller(calls, &truth, nil, consensus.Exact)
	if err != nil || fmt.Sprint(got) != "[{a 1 feedback_correct} {b 0 feedback_wrong}]" {
		t.Fatalf("truth: %v %v", got, err)
	}
	got, err = FromCaller(calls, nil, map[string]float64{"b": 0.8}, consensus.Text)
	if err != nil || fmt.Sprint(got) != "[{b 0.8 feedback_score}]" {
		t.Fatalf("scores: %v %v", got, err)
	}
	// An invalid answer was penalised when the request ran: the truth does not judge it again.
	withInvalid := append(calls[:2:2], Call{Model: "d", Arm: resilience.Judged, Text: "[1, 2", Invalid: true})
	if got, err := FromCaller(withInvalid, &truth, nil, consensus.Exact); err != nil || fmt.Sprint(got) != "[{a 1 feedback_correct} {b 0 feedback_wrong}]" {
		t.Fatalf("truth with an invalid answer: %v %v", got, err)
	}
	for desc, bad := range map[string]func() error{
		"both": func() error {
			_, err := FromCaller(calls, &truth, map[string]float64{"a": 1}, consensus.Text)
			return err
		},
		"neither":         func() error { _, err := FromCaller(calls, nil, nil, consensus.Text); return err },
		"a silent model":  func() error { _, err := FromCaller(calls, nil, map[string]float64{"c": 1}, consensus.Text); return err },
		"a score above 1": func() error { _, err := FromCaller(calls, nil, map[string]float64{"a": 2}, consensus.Text); return err },
		"no answer":       func() error { _, err := FromCaller(calls[2:], &truth, nil, consensus.Text); return err },
	} {
		if bad() == nil {
			t.Errorf("%s: accepted", desc)
		}
	}
}
