package messages

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Every message that may cross a node must survive the wire: protoactor remote serialises with proto.
func TestMessagesRoundTrip(t *testing.T) {
	in := &Dispatch{
		Job:     &Job{RequestId: "r1", JobId: "j1", Kind: "answer", Model: "m", Provider: "p", Prompt: "2+2?", Attempt: 1},
		ReplyTo: actor.NewPID("node-a:8090", "requests/r1"),
	}
	raw, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := &Dispatch{}
	if err := proto.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, out) || out.ReplyTo.Id != "requests/r1" {
		t.Fatalf("round trip changed the message: %v", out)
	}
}

// The stores encode records with the generated MarshalVT and decode them with UnmarshalVT: both must
// read and write what proto does, for every kind of field a record holds.
func TestRecordsEncodeAsProtoDoes(t *testing.T) {
	meta, err := structpb.NewStruct(map[string]any{"team": "billing", "n": 3, "tags": []any{"a", true}, "nested": map[string]any{"x": nil}})
	if err != nil {
		t.Fatal(err)
	}
	timeout := 12.5
	in := &Execution{
		RequestId: "r1", ClientRequestId: "c1", Task: "Which gas? é", Metadata: meta, TimeoutSeconds: &timeout, NodeId: "node-a",
		ReceivedAt: timestamppb.New(time.Unix(1700000000, 123456789)), StatusCode: 200, Degraded: true, CostNanos: 123_456_789,
		Classification: &Classification{Category: "qa", Confidence: 0.87, Signals: []*Signal{{Category: "qa", Keyword: "which"}}},
		Selection:      &Selection{Policy: "thompson", Eligible: 215, SkipCounts: map[string]int32{"breaker_open": 2, "rate_limited": 1}, Picks: []*Pick{{Model: "m1", Sampled: 0.7, Alpha: 3, Beta: 1.5}}},
		Results: []*WorkerResult{{JobId: "r1/0", Model: "m1", Status: "ok", LatencyMs: 1.25, Usage: &Usage{InputTokens: 10, OutputTokens: 5}, Contributed: true},
			{JobId: "r1/1", Model: "m2", Status: "error", ErrorKind: "timeout", HttpStatus: 504}},
		Retries: []*Retry{{Model: "m2", Attempt: 2, Kind: "timeout", DelayMs: 250}},
		Decision: &ArbiterDecision{Strategy: "majority", Scores: []float64{0.9, 0.1}, Agreement: []string{"x (2 of 2)"}, Chosen: 0, Merged: true,
			Ballots: []*Ballot{{Model: "m1", Form: "json", Canonical: `{"a":1}`, Digest: "0a1b", Valid: true}, {Model: "m2", Form: "json", Group: -1, Problem: "not JSON"}}},
		Phases: &Phases{ClassifyMs: 0.01, TotalMs: 3.5}, Error: &Failure{Code: "c", Details: []*Problem{{Field: "f", Message: "m"}}},
	}
	vt, err := in.MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	viaProto := &Execution{}
	if err := proto.Unmarshal(vt, viaProto); err != nil || !proto.Equal(in, viaProto) {
		t.Fatalf("proto reads MarshalVT's bytes as %v (%v)", viaProto, err)
	}
	raw, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	viaVT := &Execution{}
	if err := viaVT.UnmarshalVT(raw); err != nil || !proto.Equal(in, viaVT) {
		t.Fatalf("UnmarshalVT reads proto's bytes as %v (%v)", viaVT, err)
	}
	if err := viaVT.UnmarshalVT(raw[:len(raw)-3]); err == nil {
		t.Fatal("UnmarshalVT took a record cut short")
	}
}
