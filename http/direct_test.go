// The fuzzing build (make fuzz, -tags fuzz) leaves this file out: it calls Conclave with openai-go, a
// large library the fuzzer would instrument on every cold build.

//go:build !fuzz

package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/messages"
	"github.com/google/uuid"
	"github.com/openai/openai-go/v3"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A direct call asks the model it names, and only it: nothing is classified, no bandit chooses, no
// consensus merges, and a good answer teaches no arm. A fault of the model's provider moves the call to
// the next fallback, and the record lists every attempt.
func TestADirectCallAsksItsModelThenItsFallbacks(t *testing.T) {
	byProvider := map[string]string{}
	for _, m := range newTestbed(t, nil).engine.Catalog().All() {
		if _, ok := byProvider[m.Provider]; !ok {
			byProvider[m.Provider] = m.ID
		}
	}
	first, fallback, last := byProvider["groq"], byProvider["cerebras"], byProvider["deepseek"]
	route := func(tb *testbed, fallbacks ...string) *messages.Execution {
		t.Helper()
		req := &messages.RouteRequest{RequestId: uuid.NewString(), Task: "What is 2 + 2?", Models: []string{first}, Fallbacks: fallbacks, Direct: true,
			ReceivedAt: timestamppb.Now()}
		exec, err := tb.engine.Route(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return exec
	}
	for _, tc := range []struct {
		desc      string
		down      []string // providers failing every call
		fallbacks []string
		// configured are the configuration's fallbacks of the model
		configured []string
		status     int32
		answered   string
	}{
		{"the model answers", nil, []string{fallback}, nil, 200, first},
		{"its provider fails: the first fallback answers", []string{"groq"}, []string{fallback, last}, nil, 200, fallback},
		{"the first fallback fails too: the next answers", []string{"groq", "cerebras"}, []string{fallback, last}, nil, 200, last},
		{"every one fails", []string{"groq", "cerebras", "deepseek"}, []string{fallback, last}, nil, 503, ""},
		{"the configuration's fallbacks", []string{"groq"}, nil, []string{last}, 200, last},
		{"the request's fallbacks replace the configuration's", []string{"groq"}, []string{fallback}, []string{last}, 200, fallback},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			tb := newTestbed(t, func(c *config.Config) { c.Fallbacks = map[string][]string{first: tc.configured} })
			for _, p := range tc.down {
				tb.engine.Sim.SetFault(p, providers.Fault{ServerErrorRate: 1, ProviderWide: true})
			}
			exec := route(tb, tc.fallbacks...)
			if exec.StatusCode != tc.status {
				t.Fatalf("status %d (%v), want %d", exec.StatusCode, exec.GetError(), tc.status)
			}
			if exec.Classification != nil || exec.GetBlueprint().GetName() != "direct" {
				t.Fatalf("classified %v, blueprint %v: a direct call is neither", exec.Classification, exec.GetBlueprint())
			}
			asked := map[string]bool{}
			for _, r := range exec.Results {
				asked[r.Model] = true
				if r.Model == tc.answered && r.Status != "ok" {
					t.Fatalf("%s: %s", r.Model, r.Status)
				}
			}
			for _, p := range tc.down {
				if !asked[byProvider[p]] {
					t.Fatalf("the record lists no attempt of %s: %v", byProvider[p], exec.Results)
				}
			}
			if tc.status == 200 {
				if exec.GetDecision().GetChosenModel() != tc.answered || exec.Answer == "" || exec.GetDecision().GetStrategy() != "direct" {
					t.Fatalf("decision %v", exec.GetDecision())
				}
				for _, u := range exec.BanditUpdates {
					if u.Reward > 0 {
						t.Fatalf("a direct answer rewarded %s: %v", u.Model, u)
					}
				}
			}
		})
	}
}

// breaksMidStream streams the simulated answer, but cuts one model's stream after its first piece.
type breaksMidStream struct {
	*providers.Sim
	model string
	// kind is the failure after the first piece (empty: the provider unavailable, which a retry could cure)
	kind resilience.Kind
}

func (b breaksMidStream) Stream(ctx context.Context, call providers.Call, onDelta func(providers.Delta)) (providers.Reply, error) {
	if call.Model != b.model {
		return b.Sim.Stream(ctx, call, onDelta)
	}
	onDelta(providers.Delta{Text: "The answer is "})
	if b.kind != "" {
		return providers.Reply{}, &resilience.Error{Kind: b.kind, Provider: call.Provider, Model: call.Model, Status: 400, Err: errors.New("refused mid-stream")}
	}
	return providers.Reply{}, &resilience.Error{Kind: resilience.ProviderUnavailable, Scope: resilience.ScopeProvider, Provider: call.Provider,
		Model: call.Model, Status: 502, Err: errors.New("the connection dropped")}
}

// A direct call streamed: the caller hears each piece as the provider writes it, and the pieces are the
// record's answer. A model that fails before its first piece gives way to its fallback; one that fails
// after it ends the request with that failure, since its caller holds part of an answer already.
func TestADirectCallStreamsItsAnswer(t *testing.T) {
	cat := newTestbed(t, nil).engine.Catalog()
	var first, fallback string
	for _, m := range cat.All() {
		switch {
		case m.Provider == "groq" && first == "":
			first = m.ID
		case m.Provider == "cerebras" && fallback == "":
			fallback = m.ID
		}
	}
	for _, tc := range []struct {
		desc     string
		breaks   string // the model whose stream is cut after one piece
		kind     resilience.Kind
		down     string // a provider failing every call
		status   int32
		answered string
	}{
		{"the model streams", "", "", "", 200, first},
		{"it fails before its first piece: the fallback streams", "", "", "groq", 200, fallback},
		{"it fails after its first piece: the request fails", first, "", "", 502, ""},
		{"it is refused after its first piece: the request fails", first, resilience.MalformedRequest, "", 400, ""},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			sim := providers.NewSim(cat.All(), providers.SimConfig{Seed: 1})
			if tc.down != "" {
				sim.SetFault(tc.down, providers.Fault{ServerErrorRate: 1, ProviderWide: true})
			}
			tb := newTestbed(t, nil, withBackend(breaksMidStream{Sim: sim, model: tc.breaks, kind: tc.kind}))
			var mu sync.Mutex
			var pieces []string
			req := &messages.RouteRequest{RequestId: uuid.NewString(), Task: "Name a colour.", Models: []string{first}, Fallbacks: []string{fallback},
				Direct: true, ReceivedAt: timestamppb.Now()}
			exec, err := tb.engine.RouteStreaming(context.Background(), req, func(d *messages.Delta) {
				mu.Lock()
				pieces = append(pieces, d.Text)
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
			if exec.StatusCode != tc.status {
				t.Fatalf("status %d (%v), want %d", exec.StatusCode, exec.GetError(), tc.status)
			}
			streamed := strings.Join(pieces, "")
			if tc.status != 200 {
				if streamed != "The answer is " || !strings.Contains(exec.GetError().GetMessage(), "stream broke") {
					t.Fatalf("streamed %q, error %v", streamed, exec.GetError())
				}
				return
			}
			if len(pieces) < 2 || streamed != exec.Answer || exec.GetDecision().GetChosenModel() != tc.answered {
				t.Fatalf("streamed %d pieces %q; answer %q by %s", len(pieces), streamed, exec.Answer, exec.GetDecision().GetChosenModel())
			}
		})
	}
}

// synthesizer is the simulated provider whose arbiters write a synthesis, streamed in small pieces: the
// first half of the verdict goes at once, the rest once gate is closed.
type synthesizer struct {
	*providers.Sim
	synthesis string
	gate      chan struct{}
}

func (s synthesizer) Stream(ctx context.Context, call providers.Call, onDelta func(providers.Delta)) (providers.Reply, error) {
	if call.Kind != providers.KindArbiter {
		return s.Sim.Stream(ctx, call, onDelta)
	}
	scores := make([]float64, len(call.Candidates))
	raw, _ := json.Marshal(map[string]any{"choice": 1, "answer": s.synthesis, "scores": scores, "agreement": []string{}, "disagreement": []string{}})
	verdict := string(raw)
	half := strings.Index(verdict, s.synthesis) + len(s.synthesis)/2
	for i := 0; i < len(verdict); i += 5 {
		if i >= half && i-5 < half {
			select {
			case <-s.gate:
			case <-ctx.Done():
				return providers.Reply{}, ctx.Err()
			}
		}
		onDelta(providers.Delta{Text: verdict[i:min(i+5, len(verdict))]})
	}
	return providers.Reply{Text: verdict, Usage: providers.Usage{InputTokens: 50, OutputTokens: 30}}, nil
}

// A rotating arbiter's synthesis streams as the arbiter writes it: the caller reads its beginning
// while the arbiter still writes, and the pieces are the answer.
func TestARotatingArbitersSynthesisStreams(t *testing.T) {
	const synthesis = "Nitrogen, at about seventy-eight percent of the air, by volume."
	cat := newTestbed(t, nil).engine.Catalog()
	gate := make(chan struct{})
	tb := newTestbed(t, nil, withBackend(synthesizer{Sim: providers.NewSim(cat.All(), providers.SimConfig{Seed: 1}), synthesis: synthesis, gate: gate}))
	client := sdkClient(tb, "")
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "conclave/general",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Which gas makes up most of the air, and how much of it?")}})
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	first := ""
	for first == "" && stream.Next() {
		acc.AddChunk(stream.Current())
		if len(stream.Current().Choices) > 0 {
			first = stream.Current().Choices[0].Delta.Content
		}
	}
	if first == "" || !strings.HasPrefix(synthesis, first) {
		t.Fatalf("first piece %q: want the synthesis's beginning while the arbiter still writes", first)
	}
	close(gate)
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	rec := tb.record(acc.ID)
	if got := acc.Choices[0].Message.Content; got != synthesis || rec["answer"] != synthesis {
		t.Fatalf("streamed %q, recorded %v", got, rec["answer"])
	}
	if d, _ := rec["decision"].(map[string]any); d["strategy"] != "rotating" || d["synthesis"] != true {
		t.Fatalf("decision %v", d)
	}
}
