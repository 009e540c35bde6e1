package httpapi_test

import (
	"net/http"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
)

// sharing points a controller at the test's Redis under the test's prefix, with its own node id.
func sharing(prefix, node string) func(*config.Config) {
	return func(c *config.Config) {
		c.RedisURL, c.RedisPrefix, c.NodeID = secret.String(redistest.URL()), prefix, node
	}
}

// A provider breaker opened by one controller is honoured by the other: it stops calling the provider
// too, and says so with the same 503.
func TestABreakerOpenedByOneControllerIsHonouredByAll(t *testing.T) {
	_, prefix := redistest.New(t)
	a := newTestbed(t, sharing(prefix, "ctl-a"))
	b := newTestbed(t, sharing(prefix, "ctl-b"))
	time.Sleep(100 * time.Millisecond) // both subscribed before the news
	a.engine.Sim.SetFault("groq", providers.Fault{ServerErrorRate: 1})
	body := map[string]any{"task": mcq, "category": "general", "models": append(append([]string{}, groqModels...), cerebrasModels...),
		"workers": 6, "min_responses": 3, "strategy": "majority"}
	for i := 0; i < 3 && a.providerState("groq") != "open"; i++ {
		a.route(body)
	}
	if state := a.providerState("groq"); state != "open" {
		t.Fatalf("groq on a: %s after the storm", state)
	}
	waitFor(t, func() bool { return b.providerState("groq") == "open" })
	if state := b.providerState("cerebras"); state != "closed" {
		t.Fatalf("cerebras on b: %s; only groq failed", state)
	}
	var bad errorResponse
	r, raw := b.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "category": "general", "models": groqModels, "min_responses": 1}, &bad)
	if r.StatusCode != http.StatusServiceUnavailable || bad.Error.Code != "all_providers_down" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("b asked for groq only: %d %s", r.StatusCode, raw)
	}
	// b's breaker stays open no longer than its own open period, and half-opens on its own after.
	for _, p := range b.engine.Providers() {
		if p.Name == "groq" && p.Breaker.OpenUntil.After(time.Now().Add(31*time.Second)) {
			t.Fatalf("b open until %v", p.Breaker.OpenUntil)
		}
	}
}

// The rotating arbiter's turns are one sequence across controllers.
func TestTheRotationIsSharedAcrossControllers(t *testing.T) {
	_, prefix := redistest.New(t)
	tbs := []*testbed{newTestbed(t, sharing(prefix, "ctl-a")), newTestbed(t, sharing(prefix, "ctl-b"))}
	var rounds []int
	for i := range 6 {
		tb := tbs[i%2]
		status, resp, e := tb.route(map[string]any{"task": mcq, "category": "general", "models": cerebrasModels, "strategy": "rotating", "min_responses": 3})
		if status != http.StatusOK {
			t.Fatalf("request %d: %d %+v", i, status, e)
		}
		round, _ := tb.record(resp.RequestID)["decision"].(map[string]any)["round"].(string)
		var n int
		for _, c := range round {
			n = n*10 + int(c-'0')
		}
		rounds = append(rounds, n)
	}
	sort.Ints(rounds)
	for i, r := range rounds {
		if r != i {
			t.Fatalf("rounds %v: want 0 to 5, one each, across both controllers", rounds)
		}
	}
}

// What one controller learns, the others sharing its database use: their arms fold its rewards in, each
// once, and keep their own.
func TestAnArmLearnedThroughOneControllerIsVisibleInTheOthers(t *testing.T) {
	db := newDatabase(t)
	on := func(node string) func(*config.Config) {
		return func(c *config.Config) {
			withDatabase(db.url, filepath.Join(t.TempDir(), "spool"))(c)
			c.NodeID, c.ArmsRefreshSeconds = node, 0.1
		}
	}
	a, b := newTestbed(t, on("ctl-a")), newTestbed(t, on("ctl-b"))
	model := cerebrasModels[0]
	for range 4 {
		if status, _, e := a.route(map[string]any{"task": mcq, "category": "testing", "models": []string{model}, "workers": 1, "min_responses": 1}); status != http.StatusOK {
			t.Fatalf("a: %d %+v", status, e)
		}
	}
	if status, _, e := b.route(map[string]any{"task": mcq, "category": "testing", "models": []string{model}, "workers": 1, "min_responses": 1}); status != http.StatusOK {
		t.Fatalf("b: %d %+v", status, e)
	}
	// Each controller ends with all five rewards: its own, and the other's from the database. The
	// category's arm and the all-categories arm are two actors: each gets there on its own.
	fiveEach := func(tb *testbed) bool {
		return tb.engine.Arms().Arm("testing", model).Pulls == 5 && tb.engine.Arms().Arm("*", model).Pulls == 5
	}
	waitFor(t, func() bool { return fiveEach(a) && fiveEach(b) })
	// and no more: nothing is folded twice.
	time.Sleep(300 * time.Millisecond)
	for name, tb := range map[string]*testbed{"a": a, "b": b} {
		if !fiveEach(tb) {
			t.Fatalf("%s: %d and %d pulls after more refreshes", name, tb.engine.Arms().Arm("testing", model).Pulls, tb.engine.Arms().Arm("*", model).Pulls)
		}
	}
}
