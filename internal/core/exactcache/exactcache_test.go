package exactcache

import (
	"testing"
	"time"

	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestChoose(t *testing.T) {
	for _, c := range []struct {
		desc        string
		caller      *messages.CacheChoice
		key         time.Duration
		byBlueprint bool
		want        Choice
	}{
		{"nothing asks for the cache", nil, 0, false, Choice{}},
		{"the caller's ttl", &messages.CacheChoice{TtlSeconds: 60}, time.Hour, true, Choice{Read: true, TTL: time.Minute}},
		{"no_cache wins over the key's", &messages.CacheChoice{NoCache: true}, time.Hour, true, Choice{}},
		{"the key's ttl", nil, time.Hour, false, Choice{Read: true, TTL: time.Hour}},
		{"a blueprint's: read, kept for the blueprint's ttl once known", nil, 0, true, Choice{Read: true}},
		{"a ttl past the most is the most", &messages.CacheChoice{TtlSeconds: 1 << 30}, 0, false, Choice{Read: true, TTL: MaxTTL}},
	} {
		if got := Choose(c.caller, c.key, c.byBlueprint); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.desc, got, c.want)
		}
	}
}

func TestKeepFor(t *testing.T) {
	ok := &messages.Execution{StatusCode: 200}
	for _, c := range []struct {
		desc      string
		choice    Choice
		exec      *messages.Execution
		blueprint time.Duration
		want      time.Duration
	}{
		{"the request's ttl", Choice{Read: true, TTL: time.Minute}, ok, time.Hour, time.Minute},
		{"else its blueprint's", Choice{Read: true}, ok, time.Hour, time.Hour},
		{"a failure is not kept", Choice{Read: true, TTL: time.Minute}, &messages.Execution{StatusCode: 503}, 0, 0},
		{"an answer from the cache is not kept again", Choice{Read: true, TTL: time.Minute}, &messages.Execution{StatusCode: 200, CachedFrom: "a"}, 0, 0},
		{"no_cache keeps nothing", Choice{}, ok, time.Hour, 0},
	} {
		if got := KeepFor(c.choice, c.exec, c.blueprint); got != c.want {
			t.Errorf("%s: %v, want %v", c.desc, got, c.want)
		}
	}
}

func TestKeyIsTheQuestionNotTheRequest(t *testing.T) {
	temp := 0.2
	base := &messages.RouteRequest{RequestId: "a", Task: "2+2?", Models: []string{"m"}, Direct: true,
		Ask: &messages.Ask{Sampling: &messages.Sampling{Temperature: &temp}}}
	same := proto.Clone(base).(*messages.RouteRequest)
	same.RequestId, same.ReceivedAt, same.KeyId, same.ClientRequestId, same.PromptTokens = "b", timestamppb.Now(), "key_x", "mine", 7
	if Key(base, "team") != Key(same, "team") {
		t.Error("ids, times and counts changed the key")
	}
	hotter := proto.Clone(base).(*messages.RouteRequest)
	*hotter.Ask.Sampling.Temperature = 0.9
	other := proto.Clone(base).(*messages.RouteRequest)
	other.Models = []string{"n"}
	for desc, k := range map[string]string{"another scope": Key(base, "other"), "another temperature": Key(hotter, "team"),
		"another model": Key(other, "team")} {
		if k == Key(base, "team") {
			t.Errorf("%s has the same key", desc)
		}
	}
}

func TestAHitIsTheAnswerWithoutItsCalls(t *testing.T) {
	original := &messages.Execution{RequestId: "first", StatusCode: 200, Answer: "4", CostNanos: 900, FinishReason: "stop",
		Results: []*messages.WorkerResult{{Model: "m", CostNanos: 900}}, Usage: &messages.Usage{InputTokens: 5}, Decision: &messages.ArbiterDecision{ChosenModel: "m"}}
	hit := Hit(&messages.RouteRequest{RequestId: "second", KeyId: "key_x"}, original, "node-1")
	if hit.RequestId != "second" || hit.CachedFrom != "first" || hit.Answer != "4" || hit.KeyId != "key_x" || hit.StatusCode != 200 ||
		hit.CostNanos != 0 || len(hit.Results) != 0 || hit.Usage != nil || hit.GetDecision().GetChosenModel() != "m" || hit.NodeId != "node-1" {
		t.Fatalf("hit %+v", hit)
	}
}
