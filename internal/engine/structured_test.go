package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// panel answers each model's answer call with the reply it holds for that model; an arbiter's call
// goes to the simulated models, which judge what they are shown.
type panel struct {
	sim     *providers.Sim
	replies map[string]providers.Reply
}

func (p panel) Complete(ctx context.Context, call providers.Call) (providers.Reply, error) {
	if call.Kind == providers.KindArbiter {
		return p.sim.Complete(ctx, call)
	}
	r, ok := p.replies[call.Model]
	if !ok {
		return providers.Reply{}, fmt.Errorf("no reply for %s", call.Model)
	}
	return r, nil
}

func panelEngine(t *testing.T, replies map[string]providers.Reply) *Engine {
	t.Helper()
	cfg := config.Default()
	for p := range cfg.RateLimits.Providers {
		cfg.RateLimits.Providers[p] = ratelimit.Limits{RequestsPerMinute: 5000, Concurrency: 128}
	}
	cfg.Sim.LatencyScale, cfg.Sim.Faults = 0, providers.Fault{}
	cat, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Config: cfg, Log: zap.NewNop(), Backend: panel{sim: providers.NewSim(cat.All(), cfg.Sim), replies: replies}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return e
}

// Three models answer the same JSON in their own spacing and key order, or the same call of a tool
// with its arguments in their own order: one answer, every ballot in one group, every model
// rewarded; answers that are not what the request asked for fail it with 502 no_valid_answer naming
// each model's problem, and penalise every model.
func TestStructuredAnswersEndToEnd(t *testing.T) {
	models := []string{"deepseek-chat", "llama3.1-8b", "gemini-2.0-flash"}
	schema := &messages.OutputFormat{Type: "json_schema", Name: "forecast", Strict: true,
		Schema: `{"type":"object","required":["city","high"],"properties":{"city":{"type":"string"},"high":{"type":"number"}}}`}
	weather := []*messages.Tool{{Name: "get_weather", Parameters: `{"type":"object","required":["city"],"properties":{"city":{"type":"string"},"unit":{"type":"string"}}}`}}
	text := func(s string) providers.Reply { return providers.Reply{Text: s, FinishReason: "stop"} }
	calls := func(id, args string) providers.Reply {
		return providers.Reply{FinishReason: "tool_calls", ToolCalls: []providers.ToolCall{{ID: id, Name: "get_weather", Arguments: args}}}
	}
	tests := []struct {
		desc     string
		strategy string
		ask      *messages.Ask
		replies  []providers.Reply
		status   int32
		// answer is the record's answer; empty, the answer is one of the replies' text.
		answer string
		// calls is true when the answer is the chosen model's calls of tools.
		calls    bool
		groups   string
		rewards  string
		problems []string
	}{
		{
			desc:     "JSON in three spellings, by majority",
			strategy: "majority",
			ask:      &messages.Ask{ResponseFormat: schema},
			replies: []providers.Reply{text(`{"city":"Oslo","high":4}`), text("{\n  \"high\": 4.0,\n  \"city\": \"Oslo\"\n}"),
				text(`{ "city" : "Oslo" , "high" : 4e0 }`)},
			status:  200,
			groups:  "[0 0 0]",
			rewards: "[contributed contributed contributed]",
		},
		{
			desc:     "JSON in three spellings, an arbiter model choosing among them",
			strategy: "rotating",
			ask:      &messages.Ask{ResponseFormat: schema},
			replies: []providers.Reply{text(`{"city":"Oslo","high":4}`), text("{\n  \"high\": 4.0,\n  \"city\": \"Oslo\"\n}"),
				text(`{ "city" : "Oslo" , "high" : 4e0 }`)},
			status:  200,
			groups:  "[0 0 0]",
			rewards: "[contributed contributed contributed]",
		},
		{
			desc:     "an invalid answer is never chosen, and its model is penalised",
			strategy: "weighted",
			ask:      &messages.Ask{ResponseFormat: schema},
			replies:  []providers.Reply{text(`{"city":"Oslo","high":4}`), text("```json\n{\"city\":\"Oslo\",\"high\":4}\n```"), text(`{"high":4, "city":"Oslo"}`)},
			status:   200,
			groups:   "[0 -1 0]",
			rewards:  "[contributed invalid contributed]",
		},
		{
			desc:     "no whole answer has a majority: the fields are merged",
			strategy: "majority",
			ask:      &messages.Ask{ResponseFormat: &messages.OutputFormat{Type: "json_object"}},
			replies:  []providers.Reply{text(`{"city":"Oslo","high":4,"low":-2}`), text(`{"city":"Oslo","high":5,"low":-3}`), text(`{"city":"Bergen","high":5,"low":-2}`)},
			status:   200,
			answer:   `{"city":"Oslo","high":5,"low":-2}`,
			groups:   "[0 1 2]",
			rewards:  "[contributed contributed contributed]",
		},
		{
			desc:     "the same call of a tool, its arguments in another order, beside a text answer",
			strategy: "weighted",
			ask:      &messages.Ask{Tools: weather},
			replies:  []providers.Reply{calls("call_a", `{"city":"Oslo","unit":"celsius"}`), calls("toolu_b", `{"unit":"celsius", "city":"Oslo"}`), text("I would need to look that up.")},
			status:   200,
			calls:    true,
			groups:   "[0 0 1]",
			rewards:  "[contributed contributed poor]",
		},
		{
			desc:     "no answer is valid",
			strategy: "majority",
			ask:      &messages.Ask{ResponseFormat: schema, Tools: weather},
			replies:  []providers.Reply{text("It will be 4 degrees in Oslo."), text(`{"city":"Oslo","high":"four"}`), calls("c", `{"town":"Oslo"}`)},
			status:   502,
			groups:   "[-1 -1 -1]",
			rewards:  "[invalid invalid invalid]",
			problems: []string{"deepseek-chat: not JSON", "llama3.1-8b: does not match the schema: at /high", `gemini-2.0-flash: arguments of "get_weather" do not match`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			replies := map[string]providers.Reply{}
			for i, m := range models {
				replies[m] = tt.replies[i]
			}
			e := panelEngine(t, replies)
			n := int32(len(models))
			strategy := tt.strategy
			exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: "s1", Category: "general", Task: "Tomorrow's weather in Oslo?",
				Models: models, Workers: &n, MinResponses: &n, Strategy: &strategy, Ask: tt.ask})
			if err != nil {
				t.Fatal(err)
			}
			if exec.StatusCode != tt.status {
				t.Fatalf("status %d (%v), want %d", exec.StatusCode, exec.GetError(), tt.status)
			}
			d := exec.GetDecision()
			ballot := map[string]*messages.Ballot{}
			for _, b := range d.GetBallots() {
				ballot[b.Model] = b
			}
			// Groups are numbered as the answers came; renumbered in the models' order, they compare.
			var groups, rewards []string
			reward := map[string]string{}
			for _, u := range exec.BanditUpdates {
				reward[u.Model] = u.Reason
			}
			renumber := map[int32]int{-1: -1}
			for _, m := range models {
				b := ballot[m]
				if b == nil {
					t.Fatalf("no ballot of %s in %v", m, d.GetBallots())
				}
				if _, seen := renumber[b.Group]; !seen {
					renumber[b.Group] = len(renumber) - 1
				}
				groups, rewards = append(groups, fmt.Sprint(renumber[b.Group])), append(rewards, reward[m])
			}
			if got := "[" + strings.Join(groups, " ") + "]"; got != tt.groups {
				t.Fatalf("groups %s, want %s (ballots %v)", got, tt.groups, d.GetBallots())
			}
			if got := "[" + strings.Join(rewards, " ") + "]"; got != tt.rewards {
				t.Fatalf("rewards %s, want %s", got, tt.rewards)
			}
			if tt.status != 200 {
				if exec.Error.Code != "no_valid_answer" || len(exec.Error.Details) != len(tt.problems) {
					t.Fatalf("error %v", exec.Error)
				}
				problem := map[string]string{}
				for _, p := range exec.Error.Details {
					problem[p.Field] = p.Field + ": " + p.Message
				}
				for i, want := range tt.problems {
					if got := problem[models[i]]; !strings.HasPrefix(got, want) {
						t.Fatalf("problem %q, want %q", got, want)
					}
				}
				return
			}
			switch {
			case tt.answer != "":
				if exec.Answer != tt.answer || !d.Merged {
					t.Fatalf("answer %q (merged %v), want %q", exec.Answer, d.Merged, tt.answer)
				}
			case exec.Answer != replies[d.ChosenModel].Text:
				t.Fatalf("answer %q, want the chosen %s's %q", exec.Answer, d.ChosenModel, replies[d.ChosenModel].Text)
			}
			if want := replies[d.ChosenModel].ToolCalls; tt.calls != (len(want) > 0) || len(exec.ToolCalls) != len(want) ||
				tt.calls && (exec.ToolCalls[0].Id != want[0].ID || exec.ToolCalls[0].Arguments != want[0].Arguments || exec.FinishReason != "tool_calls") {
				t.Fatalf("tool calls %v (%s), want %s's %v", exec.ToolCalls, exec.FinishReason, d.ChosenModel, want)
			}
			if tt.strategy == "rotating" && (d.Arbiter == "local" || d.ArbiterError != "") {
				t.Fatalf("decided by %q (%s): the arbiter model should have chosen", d.Arbiter, d.ArbiterError)
			}
		})
	}
}

// A schema that cannot be compiled is the caller's mistake: refused before any model is asked.
func TestASchemaThatDoesNotCompileIsRefusedBeforeAnyCall(t *testing.T) {
	e := panelEngine(t, nil)
	for i, schema := range []string{`{"type":`, `{"$ref":"file:///etc/passwd"}`} {
		// Each its own id: a finished request's id stays taken until its coordinator has stopped.
		exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: fmt.Sprint("bad-schema-", i), Category: "general", Task: "Weather?",
			Ask: &messages.Ask{ResponseFormat: &messages.OutputFormat{Type: "json_schema", Schema: schema}}})
		if err != nil {
			t.Fatal(err)
		}
		if exec.StatusCode != 400 || exec.Error.Code != "malformed_request" || len(exec.Error.Details) != 1 ||
			exec.Error.Details[0].Field != "response_format.schema" || len(exec.Results) != 0 {
			t.Fatalf("%s: status %d %v, %d calls", schema, exec.StatusCode, exec.Error, len(exec.Results))
		}
	}
}
