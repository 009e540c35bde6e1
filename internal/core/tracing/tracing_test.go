package tracing

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var received = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// panel is a record of a request whose models are named, each answering in turn.
func panel(models ...string) *messages.Execution {
	e := &messages.Execution{
		RequestId: "r1", ReceivedAt: timestamppb.New(received), StatusCode: 200,
		Classification: &messages.Classification{Category: "code_review", Confidence: 0.8},
		Blueprint:      &messages.Blueprint{Name: "code_review", Strategy: "majority", Workers: int32(len(models))},
		Selection:      &messages.Selection{Policy: "thompson", Eligible: 40},
		Phases: &messages.Phases{ClassifyStartMs: 1, ClassifyMs: 0.5, SelectStartMs: 1.6, SelectMs: 0.2, CollectStartMs: 2, CollectMs: 100,
			ConsensusStartMs: 102, ConsensusMs: 1, TotalMs: 104},
		Decision: &messages.ArbiterDecision{Strategy: "majority", Arbiter: "local", ChosenModel: models[0], Agreement: models},
		Quorum:   &messages.QuorumOutcome{Mode: "fixed", Asked: int32(len(models)), Stopped: "all_asked"},
	}
	for i, m := range models {
		e.Selection.Picks = append(e.Selection.Picks, &messages.Pick{Model: m, Provider: "sim"})
		e.Results = append(e.Results, &messages.WorkerResult{JobId: fmt.Sprintf("r1/%d", i), Model: m, Provider: "sim", Worker: "worker-01",
			Status: "ok", StartedMs: 2.5, LatencyMs: float64(10 * (i + 1)), Usage: &messages.Usage{InputTokens: 100, OutputTokens: int32(20 + i)},
			ServedModel: m + "-0601", Contributed: true})
	}
	return e
}

// shape is a span as the tests compare it: name, parent's name, and the window after the receipt.
func shape(spans []Span) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		parent := "request"
		if s.Parent != Root {
			parent = spans[s.Parent].Name
		}
		out[i] = fmt.Sprintf("%s<%s %v+%v %s", s.Name, parent, s.Start.Sub(received), s.End.Sub(s.Start), s.Error)
	}
	return out
}

func TestSpans(t *testing.T) {
	cases := []struct {
		name string
		edit func(e *messages.Execution)
		want []string
	}{
		{
			name: "a panel: the phases under the request, each call under collect, in the record's order",
			edit: func(*messages.Execution) {},
			want: []string{"classify<request 1ms+500µs ", "select<request 1.6ms+200µs ", "collect<request 2ms+100ms ",
				"consensus<request 102ms+1ms ", "chat a<collect 2.5ms+10ms ", "chat b<collect 2.5ms+20ms "},
		},
		{
			name: "a failed call names its error class; one without a class, its status",
			edit: func(e *messages.Execution) {
				e.Results[0].Status, e.Results[0].ErrorKind = "timeout", "upstream_timeout"
				e.Results[1].Status = "error"
			},
			want: []string{"classify<request 1ms+500µs ", "select<request 1.6ms+200µs ", "collect<request 2ms+100ms ",
				"consensus<request 102ms+1ms ", "chat a<collect 2.5ms+10ms upstream_timeout", "chat b<collect 2.5ms+20ms error"},
		},
		{
			name: "a call that never started has no span, nor a late answer (its call has one)",
			edit: func(e *messages.Execution) {
				e.Results[0].Status, e.Results[0].StartedMs, e.Results[0].ErrorKind = "not_sent", 0, "rate_limited"
				e.Results = append(e.Results, &messages.WorkerResult{Model: "b", Status: "late", StartedMs: 2.5, LatencyMs: 300})
			},
			want: []string{"classify<request 1ms+500µs ", "select<request 1.6ms+200µs ", "collect<request 2ms+100ms ",
				"consensus<request 102ms+1ms ", "chat b<collect 2.5ms+20ms "},
		},
		{
			name: "a call cut without a result lasts until collection ended",
			edit: func(e *messages.Execution) {
				e.Results[1].Status, e.Results[1].ErrorKind, e.Results[1].LatencyMs = "cancelled", "cancelled", 0
			},
			want: []string{"classify<request 1ms+500µs ", "select<request 1.6ms+200µs ", "collect<request 2ms+100ms ",
				"consensus<request 102ms+1ms ", "chat a<collect 2.5ms+10ms ", "chat b<collect 2.5ms+99.5ms cancelled"},
		},
		{
			name: "a direct call: neither classified nor merged",
			edit: func(e *messages.Execution) {
				e.Blueprint.Name, e.Classification = "direct", nil
				e.Phases.ClassifyStartMs, e.Phases.ConsensusStartMs = 0, 0
				e.Results = e.Results[:1]
			},
			want: []string{"select<request 1.6ms+200µs ", "collect<request 2ms+100ms ", "chat a<collect 2.5ms+10ms "},
		},
		{
			name: "the arbiter's call hangs under consensus, placed from the consensus's start",
			edit: func(e *messages.Execution) {
				e.Phases.ConsensusMs = 50
				d := e.Decision
				d.Strategy, d.Arbiter, d.ArbiterModel, d.ArbiterProvider, d.ArbiterStartedMs, d.ArbiterLatencyMs = "rotating", "a", "a", "sim", 0.3, 40
			},
			want: []string{"classify<request 1ms+500µs ", "select<request 1.6ms+200µs ", "collect<request 2ms+100ms ",
				"consensus<request 102ms+50ms ", "chat a<collect 2.5ms+10ms ", "chat b<collect 2.5ms+20ms ", "chat a<consensus 102.3ms+40ms "},
		},
		{
			name: "an arbiter cut by the deadline lasts until the decision and says so",
			edit: func(e *messages.Execution) {
				e.Phases.ConsensusMs = 50
				d := e.Decision
				d.ArbiterModel, d.ArbiterProvider, d.ArbiterStartedMs, d.ArbiterErrorKind = "b", "sim", 1, "cancelled"
			},
			want: []string{"classify<request 1ms+500µs ", "select<request 1.6ms+200µs ", "collect<request 2ms+100ms ",
				"consensus<request 102ms+50ms ", "chat a<collect 2.5ms+10ms ", "chat b<collect 2.5ms+20ms ", "chat b<consensus 103ms+49ms cancelled"},
		},
		{
			name: "an arbiter never asked (its permit refused) has no span",
			edit: func(e *messages.Execution) {
				e.Decision.ArbiterModel, e.Decision.ArbiterError = "b", "permit refused: rate_limited"
			},
			want: []string{"classify<request 1ms+500µs ", "select<request 1.6ms+200µs ", "collect<request 2ms+100ms ",
				"consensus<request 102ms+1ms ", "chat a<collect 2.5ms+10ms ", "chat b<collect 2.5ms+20ms "},
		},
		{
			name: "a request refused by selection: what ran, and nothing after",
			edit: func(e *messages.Execution) {
				e.Phases.CollectStartMs, e.Phases.CollectMs, e.Phases.ConsensusStartMs, e.Phases.ConsensusMs = 0, 0, 0, 0
				e.Results, e.Decision = nil, nil
			},
			want: []string{"classify<request 1ms+500µs ", "select<request 1.6ms+200µs "},
		},
		{
			name: "an embeddings request: its one call under the request",
			edit: func(e *messages.Execution) {
				e.Blueprint.Name, e.Classification, e.Decision = "embeddings", nil, nil
				e.Phases = &messages.Phases{DispatchMs: 1, CollectMs: 11}
				e.Results = e.Results[:1]
				e.Results[0].StartedMs = 1
			},
			want: []string{"embeddings a<request 1ms+10ms "},
		},
		{
			name: "a record without its receipt has no moments to place",
			edit: func(e *messages.Execution) { e.ReceivedAt = nil },
			want: []string{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := panel("a", "b")
			tc.edit(e)
			if got := shape(Spans(e)); !slices.Equal(got, tc.want) {
				t.Errorf("spans\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// attrs reads a span's attributes as key=value.
func attrs(s Span) map[string]string {
	out := map[string]string{}
	for _, a := range s.Attrs {
		switch a.Type {
		case String:
			out[a.Key] = a.Str
		case Int:
			out[a.Key] = fmt.Sprint(a.Int)
		case Float:
			out[a.Key] = fmt.Sprint(a.Float)
		case Bool:
			out[a.Key] = fmt.Sprint(a.Bool)
		case Strings:
			out[a.Key] = strings.Join(a.Strs, ",")
		}
	}
	return out
}

func TestCallAttributesFollowGenAIConventions(t *testing.T) {
	e := panel("a", "b")
	e.Results[1].UpstreamRequestId, e.Results[1].FinishReason, e.Results[1].CostNanos = "up-1", "stop", 2_000_000
	e.Results[0].Attempt, e.Results[0].Status, e.Results[0].ErrorKind, e.Results[0].Contributed = 2, "error", "upstream_5xx", false
	e.Decision.ArbiterModel, e.Decision.ArbiterProvider, e.Decision.ArbiterStartedMs, e.Decision.ArbiterLatencyMs = "a", "sim", 0.1, 0.5
	e.Decision.ArbiterUsage, e.Decision.ArbiterErrorKind = &messages.Usage{InputTokens: 400, OutputTokens: 9}, "upstream_5xx"
	spans := Spans(e)
	cases := []struct {
		name string
		span Span
		want map[string]string
	}{
		{"a panel's call", spans[5], map[string]string{
			OperationName: "chat", ProviderName: "sim", RequestModel: "b", ResponseModel: "b-0601", InputTokens: "100", OutputTokens: "21",
			ResponseID: "up-1", FinishReasons: "stop", JobID: "r1/1", Worker: "worker-01", Contributed: "true", Cost: "2000000"}},
		{"the arbiter's call", spans[6], map[string]string{
			OperationName: "chat", ProviderName: "sim", RequestModel: "a", InputTokens: "400", OutputTokens: "9", Role: "arbiter", Cost: "0",
			ErrorType: "upstream_5xx"}},
		{"a retried call that failed", spans[4], map[string]string{
			OperationName: "chat", ProviderName: "sim", RequestModel: "a", ResponseModel: "a-0601", InputTokens: "100", OutputTokens: "20",
			JobID: "r1/0", Worker: "worker-01", Attempt: "2", Status: "error", Cost: "0", ErrorType: "upstream_5xx"}},
		{"select", spans[1], map[string]string{Blueprint: "code_review", Strategy: "majority", Policy: "thompson", Eligible: "40", Picked: "a,b"}},
		{"collect", spans[2], map[string]string{Degraded: "false", Asked: "2", Stopped: "all_asked"}},
		{"consensus", spans[3], map[string]string{Strategy: "majority", Chosen: "a", DecidedBy: "local", Agreement: "2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := attrs(tc.span); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("attributes\n got %v\nwant %v", got, tc.want)
			}
		})
	}
	if spans[4].Kind != Client || spans[2].Kind != Internal || spans[6].Error != "upstream_5xx" {
		t.Errorf("kinds %v %v, arbiter's error %q", spans[4].Kind, spans[2].Kind, spans[6].Error)
	}
}

func TestRequest(t *testing.T) {
	e := panel("a")
	e.Usage, e.CostNanos, e.KeyId, e.ClientRequestId = &messages.Usage{InputTokens: 7, OutputTokens: 3}, 500_000_000, "key1", "mine"
	got, failed := Request(e)
	want := map[string]string{RequestID: "r1", StatusCode: "200", ClientRequestID: "mine", KeyID: "key1", Category: "code_review",
		Blueprint: "code_review", Strategy: "majority", InputTokens: "7", OutputTokens: "3", Cost: "500000000"}
	if fmt.Sprint(attrs(Span{Attrs: got})) != fmt.Sprint(want) || failed != "" {
		t.Errorf("request attributes %v, error %q; want %v", attrs(Span{Attrs: got}), failed, want)
	}
	e.StatusCode, e.Error = 503, &messages.Failure{Code: "no_responses"}
	if got, failed := Request(e); failed != "no_responses" || attrs(Span{Attrs: got})[ErrorType] != "no_responses" {
		t.Errorf("a failed request's error.type = %q, attributes %v", failed, attrs(Span{Attrs: got}))
	}
}

func TestTraceID(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	cases := []struct {
		name, traceparent, want string
	}{
		{"version 00", "00-" + id + "-00f067aa0ba902b7-01", id},
		{"not sampled", "00-" + id + "-00f067aa0ba902b7-00", id},
		{"a later version with more fields", "01-" + id + "-00f067aa0ba902b7-01-extra", id},
		{"a later version as long as 00", "cc-" + id + "-00f067aa0ba902b7-01", id},
		{"version 00 with more fields", "00-" + id + "-00f067aa0ba902b7-01-extra", ""},
		{"a later version, more without a dash", "01-" + id + "-00f067aa0ba902b7-01x", ""},
		{"version ff", "ff-" + id + "-00f067aa0ba902b7-01", ""},
		{"upper case", "00-" + strings.ToUpper(id) + "-00f067aa0ba902b7-01", ""},
		{"a zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"a zero parent id", "00-" + id + "-0000000000000000-01", ""},
		{"short", "00-" + id[:31] + "-00f067aa0ba902b7-01", ""},
		{"a wrong separator", "00_" + id + "-00f067aa0ba902b7-01", ""},
		{"not hex", "00-" + id[:31] + "g-00f067aa0ba902b7-01", ""},
		{"empty", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := TraceID(tc.traceparent); got != tc.want {
				t.Errorf("TraceID(%q) = %q, want %q", tc.traceparent, got, tc.want)
			}
		})
	}
}
