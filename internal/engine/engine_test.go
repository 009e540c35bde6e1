package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

func newEngine(t *testing.T, seed uint64, change ...func(*config.Config)) *Engine {
	t.Helper()
	cfg := config.Default()
	for p := range cfg.RateLimits.Providers { // far above what the tests send
		cfg.RateLimits.Providers[p] = ratelimit.Limits{RequestsPerMinute: 5000, Concurrency: 128}
	}
	cfg.Seed, cfg.Sim.Seed = seed, seed
	cfg.NodeID = "node-a"
	for _, c := range change {
		c(&cfg)
	}
	cfg.Sim.LatencyScale = 0
	cfg.Sim.Faults = providers.Fault{}
	e, err := New(Options{Config: cfg, Log: zap.NewNop()})
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

// run routes a sequence of tasks, waiting after each for its rewards to reach the arms, and returns the
// selections and answers.
func run(t *testing.T, e *Engine, n int) []string {
	t.Helper()
	var out []string
	var rewards int64
	for i := 0; i < n; i++ {
		exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: fmt.Sprint("r", i), Category: "general",
			Task: fmt.Sprintf("Question %d\nA) one\nB) two\nC) three\nD) four", i)})
		if err != nil || exec.StatusCode != 200 {
			t.Fatalf("request %d: %v %v", i, err, exec.GetError())
		}
		var picks []string
		for _, p := range exec.Selection.Picks {
			picks = append(picks, fmt.Sprintf("%s:%.6f", p.Model, p.Sampled))
		}
		out = append(out, fmt.Sprint(picks, exec.Answer))
		rewards += int64(len(exec.BanditUpdates))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for _, c := range []string{"general", bandit.AllCategories} {
			if err := e.Settle(ctx, c, rewards); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
	}
	return out
}

func TestSameSeedSameDecisions(t *testing.T) {
	a := run(t, newEngine(t, 42), 30)
	b := run(t, newEngine(t, 42), 30)
	c := run(t, newEngine(t, 43), 30)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("request %d differs between runs with the same seed:\n%s\n%s", i, a[i], b[i])
		}
	}
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Fatal("a different seed made the same decisions")
	}
}

func TestNodesWithOneSeedPickApart(t *testing.T) {
	a := run(t, newEngine(t, 42), 20)
	b := run(t, newEngine(t, 42, func(c *config.Config) { c.NodeID = "node-b" }), 20)
	same := 0
	for i := range a {
		if a[i] == b[i] {
			same++
		}
	}
	if same > 2 {
		t.Fatalf("%d of 20 selections alike on two nodes with one seed: the node id is not in the random streams", same)
	}
}

func TestInflightBytesAreBounded(t *testing.T) {
	e := newEngine(t, 1, func(c *config.Config) { c.MaxInflightBytes = 4096; c.MaxBodyBytes = 4096 })
	timeout := 5.0
	exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: "big", Category: "general", TimeoutSeconds: &timeout,
		Task: strings.Repeat("x", 5000)})
	if err != nil || exec.StatusCode != 503 || exec.Error.Code != "overloaded" || exec.Error.RetryAfterSeconds <= 0 {
		t.Fatalf("a request beyond the in-flight budget: %v %v", exec, err)
	}
	// A small task whose ask holds a large image is as large as its ask.
	image := &messages.ContentPart{Type: "image_url", ImageUrl: "data:image/png;base64," + strings.Repeat("A", 5000)}
	exec, err = e.Route(context.Background(), &messages.RouteRequest{RequestId: "image", Category: "general", TimeoutSeconds: &timeout, Task: "[image]",
		Ask: &messages.Ask{Messages: []*messages.ChatMessage{{Role: "user", Content: []*messages.ContentPart{image}}}}})
	if err != nil || exec.StatusCode != 503 || exec.Error.Code != "overloaded" {
		t.Fatalf("a request whose ask is beyond the in-flight budget: %v %v", exec, err)
	}
	if exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: "small", Category: "general", Task: "Summarize: the cache ran out of memory."}); err != nil || exec.StatusCode != 200 {
		t.Fatalf("a request within the budget: %v %v", exec.GetError(), err)
	}
}
