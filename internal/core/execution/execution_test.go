package execution

import (
	"fmt"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/collect"
	"github.com/conclave-ai/conclave/internal/core/feedback"
	"github.com/conclave-ai/conclave/internal/core/plan"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestFailureSaysWhyThereIsNoAnswer(t *testing.T) {
	failed := []*collect.Record{{Job: &collect.Job{Slot: &collect.Slot{Model: "m", Provider: "p"}}, Status: collect.Error,
		Kind: resilience.ConnectionRefused, Ref: &messages.JobResult{ErrorKind: string(resilience.ConnectionRefused), ErrorMessage: "connection_refused provider=p model=m: 127.0.0.1:1"}}}
	tests := []struct {
		desc       string
		done       collect.Done
		broken     bool
		failed     bool
		kind       resilience.Kind
		says       string
		retryAfter time.Duration
		details    int
	}{
		{desc: "answers: no failure", done: collect.Done{Answers: []*collect.Job{{}}}},
		{desc: "a stream broken after its first piece says what its call said", done: collect.Done{Failure: resilience.ProviderUnavailable}, broken: true,
			failed: true, kind: resilience.ProviderUnavailable, says: "the answer's stream broke after it began: connection_refused provider=p model=m: 127.0.0.1:1"},
		{desc: "a caller who left is told so, without details", done: collect.Done{Failure: resilience.ClientClosed}, failed: true,
			kind: resilience.ClientClosed, says: "the caller went away before the answer"},
		{desc: "rate limits say when to come back", done: collect.Done{Failure: resilience.RateLimited, RetryAfter: 3 * time.Second}, failed: true,
			kind: resilience.RateLimited, says: "every call met a provider's rate limit", retryAfter: 3 * time.Second, details: 1},
		{desc: "providers down name each model's cause", done: collect.Done{Failure: resilience.AllProvidersDown}, failed: true,
			kind: resilience.AllProvidersDown, says: "no model could answer", details: 1},
		{desc: "anything else is a deadline without answers", done: collect.Done{Failure: resilience.NoResponses}, failed: true,
			kind: resilience.NoResponses, says: "no worker returned an answer before the deadline", details: 1},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			kind, says, retryAfter, why, failed := Failure(tt.done, tt.broken, failed, func(string) string { return "" })
			if failed != tt.failed || kind != tt.kind || retryAfter != tt.retryAfter || len(why) != tt.details {
				t.Fatalf("failed %v kind %q retry after %v details %v", failed, kind, retryAfter, why)
			}
			if len(says) < len(tt.says) || says[:len(tt.says)] != tt.says {
				t.Fatalf("says %q, want it to begin %q", says, tt.says)
			}
		})
	}
}

type fixedWeights struct{ reads map[string]int }

func (w fixedWeights) Reliability(provider string) float64 { w.reads[provider]++; return 0.9 }
func (fixedWeights) Capability(string) float64             { return 0.5 }
func (fixedWeights) Accuracy(string) float64               { return 0.8 }
func (fixedWeights) Recency(string) float64                { return 0.7 }
func (fixedWeights) Anchored(model string) bool            { return model == "b" }
func (fixedWeights) Dependence(a, b string) float64 {
	if a+b == "ac" || a+b == "ca" { // a and c err together
		return 0.4
	}
	return 0
}

func TestConsensusInputWeighsEachAnswer(t *testing.T) {
	answer := func(model, provider, text string) *collect.Job {
		return &collect.Job{Slot: &collect.Slot{Model: model, Provider: provider}, Worker: "w", Record: &collect.Record{Ref: &messages.JobResult{Text: text}}}
	}
	answers := []*collect.Job{answer("a", "p", "A"), answer("b", "p", "B"), answer("c", "q", "A")}
	p := &plan.Plan{Category: "math", Blueprint: blueprints.Blueprint{Strategy: blueprints.Majority, MinResponses: 2}}
	for _, accuracyVotes := range []bool{false, true} {
		w := fixedWeights{reads: map[string]int{}}
		in := ConsensusInput(&messages.RouteRequest{RequestId: "r", Task: "t"}, p, answers, w, accuracyVotes)
		if len(in.Candidates) != 3 || in.Category != "math" || in.Strategy != string(blueprints.Majority) {
			t.Fatalf("input %v", in)
		}
		if in.Deciders != 2 {
			t.Errorf("a plain majority decided by %d answers, want the blueprint's min_responses 2", in.Deciders)
		}
		if w.reads["p"] != 1 || w.reads["q"] != 1 {
			t.Errorf("a provider's reliability was read %v times: once per provider keeps its candidates alike", w.reads)
		}
		c := in.Candidates[1]
		if c.Model != "b" || c.Text != "B" || c.Reliability != 0.9 || c.Capability != 0.5 || c.Learned != 0.8 || c.Recency != 0.7 {
			t.Errorf("candidate %v", c)
		}
		if want := map[bool]float64{false: 0, true: 0.8}[accuracyVotes]; c.Accuracy != want || c.Anchored != accuracyVotes || in.Candidates[0].Anchored {
			t.Errorf("accuracy votes %v: candidate accuracy %v (anchored %v), want %v", accuracyVotes, c.Accuracy, c.Anchored, want)
		}
		// Votes by accuracy carry each model's dependence on the others; other votes none.
		want := map[bool]string{false: "[] [] []", true: "[0 0 0.4] [0 0 0] [0.4 0 0]"}[accuracyVotes]
		if got := fmt.Sprint(in.Candidates[0].Dependence, " ", in.Candidates[1].Dependence, " ", in.Candidates[2].Dependence); got != want {
			t.Errorf("accuracy votes %v: dependence %s, want %s", accuracyVotes, got, want)
		}
	}
}

func TestOnlyAPlainMajorityHasDeciders(t *testing.T) {
	for _, s := range []blueprints.Strategy{blueprints.Weighted, blueprints.Rotating, blueprints.Pairwise} {
		p := &plan.Plan{Blueprint: blueprints.Blueprint{Strategy: s, MinResponses: 2}}
		if in := ConsensusInput(&messages.RouteRequest{}, p, nil, fixedWeights{reads: map[string]int{}}, false); in.Deciders != 0 {
			t.Errorf("%s: deciders %d, want none (every answer weighs in)", s, in.Deciders)
		}
	}
}

func TestResultsSumTheCallsAndTheArbiter(t *testing.T) {
	job := func(seq int, model string) *collect.Job {
		return &collect.Job{Seq: seq, Slot: &collect.Slot{Model: model, Provider: "p"}, Worker: "w"}
	}
	a, b, c := job(0, "a"), job(1, "b"), job(2, "c")
	usage := func(in, out int32) *messages.Usage { return &messages.Usage{InputTokens: in, OutputTokens: out} }
	records := []*collect.Record{
		{Job: a, Status: collect.OK, Ref: &messages.JobResult{Ok: true, CostNanos: 10_000_000, Usage: usage(10, 5), FinishReason: "stop", DroppedParameters: []string{"seed"}}},
		{Job: b, Status: collect.OK, Ref: &messages.JobResult{Ok: true, CostNanos: 20_000_000, Usage: usage(20, 5), FinishReason: "tool_calls",
			ToolCalls: []*messages.ToolCall{{Name: "f"}}, DroppedParameters: []string{"seed", "user"}}},
		{Job: c, Status: collect.Error, Kind: resilience.UpstreamTimeout, Ref: &messages.JobResult{}},
	}
	exec := &messages.Execution{Decision: &messages.ArbiterDecision{Chosen: 1, ArbiterCostNanos: 5_000_000, ArbiterUsage: usage(100, 10)}}
	r := &messages.ConsensusResult{Weighted: []float64{0.4, 0.6}, Contributed: []bool{false, true}, Deciders: []bool{true, false}, Decision: exec.Decision}
	retries := []collect.Retry{{Model: "c", Kind: resilience.UpstreamTimeout, Delay: 1500 * time.Microsecond, Outcome: "scheduled"}}
	Results(exec, records, retries, []*collect.Job{a, b}, r, func(j *collect.Job) string { return fmt.Sprintf("r/%d", j.Seq) })
	if len(exec.Results) != 3 || exec.Results[2].JobId != "r/2" || exec.Results[2].Status != string(collect.Error) {
		t.Fatalf("results %v", exec.Results)
	}
	if exec.CostNanos != 35_000_000 {
		t.Errorf("cost %d nano-dollars, want the calls' and the arbiter's 35,000,000", exec.CostNanos)
	}
	if exec.Usage.InputTokens != 130 || exec.Usage.OutputTokens != 20 {
		t.Errorf("usage %v", exec.Usage)
	}
	if fmt.Sprint(exec.DroppedParameters) != "[seed user]" {
		t.Errorf("dropped parameters %v, want each once", exec.DroppedParameters)
	}
	if exec.FinishReason != "tool_calls" || len(exec.ToolCalls) != 1 || !exec.Results[1].Contributed || exec.Results[1].WeightedScore != 0.6 {
		t.Errorf("the chosen answer's finish %q and tool calls %v; result %v", exec.FinishReason, exec.ToolCalls, exec.Results[1])
	}
	if !exec.Results[0].Decider || exec.Results[1].Decider || exec.Results[2].Decider {
		t.Errorf("deciders %v %v %v, want the first answer's alone", exec.Results[0].Decider, exec.Results[1].Decider, exec.Results[2].Decider)
	}
	if len(exec.Retries) != 1 || exec.Retries[0].DelayMs != 1.5 {
		t.Errorf("retries %v", exec.Retries)
	}
}

func TestLearningTeachesEveryCallersArm(t *testing.T) {
	job := func(model string) *collect.Job { return &collect.Job{Slot: &collect.Slot{Model: model}} }
	a, b, c := job("a"), job("b"), job("c")
	records := []*collect.Record{
		{Job: a, Status: collect.OK, Verdict: resilience.Verdict{Arm: resilience.Judged}},
		{Job: b, Status: collect.OK, Verdict: resilience.Verdict{Arm: resilience.Judged}},
		{Job: c, Status: collect.Error, Verdict: resilience.Verdict{Arm: resilience.Penalty}},
	}
	judged := &messages.ConsensusResult{Contributed: []bool{true, false}, Decision: &messages.ArbiterDecision{Scores: []float64{1, 0}}}
	arm := func(category, model string) bandit.Arm {
		return bandit.Arm{Model: model, Category: category, Alpha: 3, Beta: 2}
	}
	tests := []struct {
		desc     string
		category string
		r        *messages.ConsensusResult
		want     map[string]float64 // reward by model
		arm      string
	}{
		{"a judged request rewards the contributors and penalises the fault", "math", judged, map[string]float64{"a": 1, "b": 0, "c": 0}, "math"},
		{"a request that failed before consensus penalises only the fault", "math", nil, map[string]float64{"c": 0}, "math"},
		{"a consensus that judged nobody penalises only the fault", "math", &messages.ConsensusResult{Unjudged: true,
			Contributed: []bool{true, true}, Decision: &messages.ArbiterDecision{Scores: []float64{1, 1}}}, map[string]float64{"c": 0}, "math"},
		{"a direct call learns on the arm over all categories", "", judged, map[string]float64{"a": 1, "b": 0, "c": 0}, bandit.AllCategories},
		{"a vote its deciders decided rewards agreement with the vote of all", "math", &messages.ConsensusResult{Contributed: []bool{true, false},
			InMajority: []bool{false, true}, Decision: &messages.ArbiterDecision{Scores: []float64{0.5, 0.5}}}, map[string]float64{"a": 0, "b": 1, "c": 0}, "math"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			sent, kept := Learning("r1", tt.category, feedback.Agreement, records, []*collect.Job{a, b}, nil, tt.r, arm)
			if len(sent) != len(tt.want) || len(kept) != len(sent) {
				t.Fatalf("sent %v, kept %v", sent, kept)
			}
			for i, r := range sent {
				if want, ok := tt.want[r.Model]; !ok || r.Reward != want || r.Category != tt.arm || r.RequestId != "r1" {
					t.Errorf("reward %v", r)
				}
				if k := kept[i]; k.Model != r.Model || k.Reward != r.Reward || k.AlphaBefore != 3 || k.BetaBefore != 2 || k.Category != tt.arm {
					t.Errorf("record %v for reward %v", k, r)
				}
			}
		})
	}
}

func TestArbiterEndsWithTheRequest(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	candidates := func() *messages.ConsensusInput {
		return &messages.ConsensusInput{Candidates: []*messages.Candidate{{Model: "a", Provider: "p", Worker: "w1"}, {Model: "b", Provider: "q", Worker: "w2"}}}
	}
	tests := []struct {
		desc     string
		round    uint64
		deadline time.Time
		want     time.Time
	}{
		{"the arbiter's timeout ends first", 0, now.Add(time.Minute), now.Add(20 * time.Second)},
		{"the request's deadline ends first", 1, now.Add(5 * time.Second), now.Add(5 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			in := candidates()
			Arbiter(in, []string{"a", "b"}, tt.round, now, 20*time.Second, tt.deadline, nil, true)
			var want *messages.Candidate
			for _, c := range in.Candidates {
				if c.Model == in.ArbiterModel {
					want = c
				}
			}
			if want == nil || in.ArbiterProvider != want.Provider || in.ArbiterWorker != want.Worker || in.Round != tt.round || !in.Stream {
				t.Fatalf("arbiter %q on %q/%q, round %d", in.ArbiterModel, in.ArbiterProvider, in.ArbiterWorker, in.Round)
			}
			if !in.Deadline.AsTime().Equal(tt.want) {
				t.Fatalf("deadline %v, want %v", in.Deadline.AsTime(), tt.want)
			}
		})
	}
}

func TestResultsPlaceStartedCallsAfterTheReceipt(t *testing.T) {
	received := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	started := &collect.Job{Seq: 0, Slot: &collect.Slot{Model: "a"}, StartedAt: received.Add(2500 * time.Microsecond)}
	never := &collect.Job{Seq: 1, Slot: &collect.Slot{Model: "b"}}
	early := &collect.Job{Seq: 2, Slot: &collect.Slot{Model: "c"}, StartedAt: received.Add(-time.Millisecond)} // a clock stepped back
	records := []*collect.Record{{Job: started, Status: collect.OK}, {Job: never, Status: collect.NotSent}, {Job: early, Status: collect.OK}}
	exec := &messages.Execution{ReceivedAt: timestamppb.New(received)}
	Results(exec, records, nil, nil, nil, func(j *collect.Job) string { return fmt.Sprint(j.Seq) })
	if got := []float64{exec.Results[0].StartedMs, exec.Results[1].StartedMs, exec.Results[2].StartedMs}; fmt.Sprint(got) != "[2.5 0 0.001]" {
		t.Errorf("started at %v ms: want 2.5, 0 for the call that never started, and the receipt's first microsecond", got)
	}
}

func TestVotesMarkTheModelsAskedOnHardPromptsAlone(t *testing.T) {
	answers := func(waves ...int) []*collect.Job {
		out := make([]*collect.Job, len(waves))
		for i, w := range waves {
			out[i] = &collect.Job{Slot: &collect.Slot{Model: fmt.Sprint("m", i), Wave: w}}
		}
		return out
	}
	tests := []struct {
		desc  string
		waves []int
		want  string // Votes.Later
	}{
		{"one wave (a fixed quorum, an audit, a settled first wave): nobody", []int{0, 0, 0}, "[]"},
		{"a first wave and a later one", []int{0, 0, 0, 1, 1}, "[false false false true true]"},
		{"two waves of two", []int{0, 0, 1, 1}, "[false false true true]"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			a := answers(tt.waves...)
			r := &messages.ConsensusResult{Groups: make([]int32, len(a))}
			if got := fmt.Sprint(Votes("req", "quiz", a, r).Later); got != tt.want {
				t.Fatalf("later %s, want %s", got, tt.want)
			}
		})
	}
}
