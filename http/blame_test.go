package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/platform/config"
)

// Tests of who is blamed for a fault: the provider only for what the provider did, a model only for its
// own answer, a host only for the host, and nobody for a caller's short deadline.

var allProviders = []string{"openrouter", "anthropic", "gemini", "groq", "cerebras", "deepseek"}

// results returns the worker results of a stored record.
func (tb *testbed) results(id string) []map[string]any {
	tb.t.Helper()
	var out []map[string]any
	for _, r := range tb.record(id)["results"].([]any) {
		out = append(out, r.(map[string]any))
	}
	return out
}

func (tb *testbed) assertNoBreakerMoved() {
	tb.t.Helper()
	for _, p := range tb.engine.Providers() {
		if p.Breaker.State != resilience.Closed || p.Breaker.ErrorsInWindow != 0 || p.Faults24h != 0 {
			tb.t.Fatalf("provider %s was blamed: %+v, %d faults", p.Name, p.Breaker, p.Faults24h)
		}
	}
}

func (tb *testbed) assertNoArmLearned() {
	tb.t.Helper()
	if arms := tb.engine.Arms().Published(); len(arms) != 0 {
		tb.t.Fatalf("arms learned from calls that never had a chance: %+v", arms[0])
	}
}

func TestCallersShortDeadlineBlamesNobody(t *testing.T) {
	// Simulated models take 12 to 45 ms; the caller gives a millisecond.
	tb := newTestbed(t, func(c *config.Config) { c.Sim.LatencyScale = 0.05 })
	for i := 0; i < 3; i++ {
		resp, raw := tb.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "timeout": 0.001}, nil)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d: %s", resp.StatusCode, raw)
		}
		rec := tb.record(resp.Header.Get("X-Request-ID"))
		if ups, _ := rec["bandit_updates"].([]any); len(ups) != 0 {
			t.Fatalf("bandit updates for calls cut by the caller's deadline: %v", ups)
		}
		for _, r := range tb.results(resp.Header.Get("X-Request-ID")) {
			if r["status"] != "cancelled" && r["status"] != "not_sent" {
				t.Fatalf("a call cut by the caller's deadline recorded as %v", r)
			}
		}
	}
	tb.assertNoBreakerMoved()
	tb.assertNoArmLearned()
}

func TestJobsNeverSentAreNotSent(t *testing.T) {
	tests := []struct {
		desc   string
		config func(*config.Config)
	}{
		{"queued on a busy worker", func(c *config.Config) { c.Workers, c.WorkerSlots = 1, 1 }},
		{"waiting for a permit", func(c *config.Config) { c.RateLimits.Providers["groq"] = ratelimit.Limits{Concurrency: 1} }},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			slow := &slowModels{Backend: simBackend(t), delay: time.Minute, models: allModels(t)}
			tb := newTestbed(t, tt.config, withBackend(slow))
			resp, raw := tb.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "category": "general", "models": groqModels,
				"min_responses": 1, "timeout": 0.2}, nil)
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("status %d: %s", resp.StatusCode, raw)
			}
			statuses := map[any]int{}
			for _, r := range tb.results(resp.Header.Get("X-Request-ID")) {
				statuses[r["status"]]++
			}
			if statuses["cancelled"] != 1 || statuses["not_sent"] != 2 {
				t.Fatalf("statuses %v: want the running call cancelled and the two others not sent", statuses)
			}
			tb.assertNoBreakerMoved()
			tb.assertNoArmLearned()
			tb.waitIdle("groq") // every permit given back, no acquisition left waiting
		})
	}
}

// waitIdle waits until a provider holds no permit and has no acquisition waiting.
func (tb *testbed) waitIdle(provider string) {
	tb.t.Helper()
	waitFor(tb.t, func() bool {
		for _, p := range tb.engine.Providers() {
			if p.Name == provider {
				return p.InFlight == 0 && p.Waiting == 0
			}
		}
		return false
	})
}

func allModels(t *testing.T) map[string]bool {
	cat, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range cat.All() {
		out[m.ID] = true
	}
	return out
}

// switchableHosts is a transport whose hosts can refuse connections or hang like a dead machine.
type switchableHosts struct {
	fleet.InProcess
	worker string
	state  *hostState
}

type hostState struct {
	mu      sync.Mutex
	refuse  bool
	hang    bool
	release chan struct{}
}

func (h *hostState) set(refuse, hang bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refuse, h.hang = refuse, hang
}

func (s switchableHosts) Run(ctx context.Context, call providers.Call) (providers.Reply, error) {
	s.state.mu.Lock()
	refuse, hang := s.state.refuse, s.state.hang
	s.state.mu.Unlock()
	switch {
	case refuse:
		return providers.Reply{}, &resilience.Error{Kind: resilience.SSHRefused, Worker: s.worker, Err: errors.New("connection refused")}
	case hang:
		<-s.state.release // a host that stopped answering does not notice cancellation either
		return providers.Reply{}, errors.New("host came back")
	}
	return s.InProcess.Run(ctx, call)
}

func withSwitchableHosts(backend providers.Backend, state *hostState) option {
	return func(_ *config.Config, o *engine.Options) {
		o.Transport = func(w fleet.WorkerSpec) fleet.Transport {
			return switchableHosts{InProcess: fleet.InProcess{Backend: backend}, worker: w.Name, state: state}
		}
	}
}

// failing answers some models with an error, and every other model through the backend.
type failing struct {
	providers.Backend
	mu  sync.Mutex
	err map[string]error
}

func (f *failing) set(model string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = map[string]error{}
	}
	if err == nil {
		delete(f.err, model)
	} else {
		f.err[model] = err
	}
}

func (f *failing) Complete(ctx context.Context, call providers.Call) (providers.Reply, error) {
	f.mu.Lock()
	err := f.err[call.Model]
	f.mu.Unlock()
	if err != nil && call.Kind == providers.KindAnswer {
		return providers.Reply{}, err
	}
	return f.Backend.Complete(ctx, call)
}

func serverError(model string) error {
	return &resilience.Error{Kind: resilience.ProviderUnavailable, Model: model, Status: 503, Err: errors.New("upstream overloaded")}
}

func TestHostFaultsNeverCloseAHalfOpenProvider(t *testing.T) {
	clk := clock.NewFake(time.Now())
	hosts := &hostState{release: make(chan struct{})}
	backend := &failing{Backend: simBackend(t)}
	tb := newTestbed(t, nil, withClock(clk), withSwitchableHosts(backend, hosts))
	body := map[string]any{"task": mcq, "category": "general", "models": groqModels, "min_responses": 1, "strategy": "majority"}

	// Every groq model fails: groq's breaker opens.
	for _, m := range groqModels {
		backend.set(m, serverError(m))
	}
	tb.route(body)
	if state := tb.settledState("groq", "open"); state != "open" {
		t.Fatalf("groq breaker %s after every model failed, want open", state)
	}
	for _, m := range groqModels {
		backend.set(m, nil)
	}
	clk.Advance(16 * time.Second) // groq opens for 15 s

	// The probe never reaches groq: every host refuses the connection.
	hosts.set(true, false)
	tb.route(body)
	if state := tb.providerState("groq"); state != "half_open" {
		t.Fatalf("groq breaker %s after a probe the hosts refused, want half_open", state)
	}

	// The hosts come back (their own breakers half-open too): the probe reaches groq and closes it.
	hosts.set(false, false)
	clk.Advance(31 * time.Second)
	if status, _, bad := tb.route(body); status != http.StatusOK {
		t.Fatalf("status %d: %+v", status, bad)
	}
	if state := tb.settledState("groq", "closed"); state != "closed" {
		t.Fatalf("groq breaker %s after a good probe, want closed", state)
	}
}

// quickBlueprints adds a blueprint with a short timeout, so calls get the blueprint's full timeout without
// a caller's deadline.
func quickBlueprints(t *testing.T, timeout float64) option {
	set, err := blueprints.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	set, err = set.With(blueprints.Blueprint{Name: "quick", Workers: 1, TimeoutSeconds: timeout, Strategy: blueprints.Majority, MinResponses: 1})
	if err != nil {
		t.Fatal(err)
	}
	return func(_ *config.Config, o *engine.Options) { o.Blueprints = set }
}

func TestHostAndUpstreamTimeoutsAreTold(t *testing.T) {
	t.Run("a host that stops answering", func(t *testing.T) {
		hosts := &hostState{release: make(chan struct{})}
		hosts.set(false, true)
		tb := newTestbed(t, nil, quickBlueprints(t, 0.2), withSwitchableHosts(simBackend(t), hosts))
		t.Cleanup(func() { close(hosts.release) })
		resp, raw := tb.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "category": "quick", "models": []string{"deepseek-chat"}}, nil)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d: %s", resp.StatusCode, raw)
		}
		kinds := map[any]int{}
		for _, r := range tb.results(resp.Header.Get("X-Request-ID")) {
			kinds[r["error_kind"]]++
		}
		if kinds["host_timeout"] == 0 || kinds["upstream_timeout"] != 0 {
			t.Fatalf("error kinds %v: want host timeouts only", kinds)
		}
		tb.assertNoBreakerMoved()
		tb.assertNoArmLearned()
	})
	t.Run("a provider that stops answering", func(t *testing.T) {
		slow := &slowModels{Backend: simBackend(t), delay: time.Minute, models: map[string]bool{"deepseek-chat": true}}
		tb := newTestbed(t, nil, quickBlueprints(t, 0.2), withBackend(slow))
		resp, raw := tb.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "category": "quick", "models": []string{"deepseek-chat"}}, nil)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d: %s", resp.StatusCode, raw)
		}
		results := tb.results(resp.Header.Get("X-Request-ID"))
		if results[0]["error_kind"] != "upstream_timeout" || results[0]["status"] != "timeout" {
			t.Fatalf("first call %v: want an upstream timeout", results[0])
		}
		for _, w := range tb.engine.Workers() {
			if w.Breaker.State != resilience.Closed || w.Breaker.ErrorsInWindow != 0 {
				t.Fatalf("worker %s blamed for the provider's timeout: %+v", w.Name, w.Breaker)
			}
		}
		// The call had the blueprint's full timeout: the model is penalised.
		if a := tb.engine.Arms().Arm("quick", "deepseek-chat"); a.Beta < 2 {
			t.Fatalf("arm %+v: a timeout after the full timeout earns beta + 1", a)
		}
	})
}

func TestOneModelsFaultsEjectOnlyThatModel(t *testing.T) {
	backend := &failing{Backend: simBackend(t)}
	bad := groqModels[0]
	backend.set(bad, serverError(bad))
	tb := newTestbed(t, nil, withBackend(backend))
	body := map[string]any{"task": mcq, "category": "general", "models": groqModels, "min_responses": 1, "strategy": "majority"}
	ejected := false
	for i := 0; i < 6; i++ {
		status, resp, e := tb.route(body)
		if status != http.StatusOK {
			t.Fatalf("request %d: status %d %+v", i, status, e)
		}
		answered := 0
		for _, r := range resp.Responses {
			if r.Model != bad && r.Status == "ok" {
				answered++
			}
		}
		if answered != 2 {
			t.Fatalf("request %d: %d answers from the healthy groq models, want 2: %+v", i, answered, resp.Responses)
		}
		for _, s := range tb.record(resp.RequestID)["selection"].(map[string]any)["skipped"].([]any) {
			skip := s.(map[string]any)
			if skip["reason"] == "model_ejected" && skip["model"] == bad {
				ejected = true
			}
		}
	}
	if !ejected {
		t.Fatal("the failing model was never ejected")
	}
	if state := tb.providerState("groq"); state != "closed" {
		t.Fatalf("groq breaker %s: one model's faults are not groq's", state)
	}
}

func TestOneModels429BlocksOnlyThatModel(t *testing.T) {
	limited := simBackend(t)
	limited.SetFault("groq", providers.Fault{RateLimitRate: 1, RetryAfter: 30 * time.Second})
	bad := groqModels[0]
	backend := &routed{Backend: simBackend(t), special: map[string]providers.Backend{bad: limited}}
	tb := newTestbed(t, nil, withBackend(backend))

	status, resp, e := tb.route(map[string]any{"task": mcq, "category": "general", "models": groqModels, "min_responses": 1, "timeout": 2})
	if status != http.StatusOK {
		t.Fatalf("status %d: %+v", status, e)
	}
	for _, r := range resp.Responses {
		if r.Model == bad && r.ErrorKind != "rate_limited" {
			t.Fatalf("%+v: want the 429", r)
		}
	}
	// The other groq models answer at once.
	status, resp, e = tb.route(map[string]any{"task": mcq, "category": "general", "models": groqModels[1:2], "timeout": 2})
	if status != http.StatusOK || resp.Responses[0].Status != "ok" {
		t.Fatalf("another groq model after one model's 429: %d %+v %+v", status, resp.Responses, e)
	}
	// The limited model alone: 503 with the wait that cures it.
	r, raw := tb.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "category": "general", "models": []string{bad}, "timeout": 2}, nil)
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("the rate-limited model alone: %d Retry-After %q %s", r.StatusCode, r.Header.Get("Retry-After"), raw)
	}
}

// routed sends some models to their own backend.
type routed struct {
	providers.Backend
	special map[string]providers.Backend
}

func (r *routed) Complete(ctx context.Context, call providers.Call) (providers.Reply, error) {
	if b, ok := r.special[call.Model]; ok {
		return b.Complete(ctx, call)
	}
	return r.Backend.Complete(ctx, call)
}

func TestWaitCurable503sCarryRetryAfter(t *testing.T) {
	clk := clock.NewFake(time.Now())
	backend := &failing{Backend: simBackend(t)}
	tb := newTestbed(t, nil, withClock(clk), withBackend(backend))
	var models []string
	for _, m := range tb.engine.Catalog().All() {
		if count(models, m.Provider, tb) < 3 {
			models = append(models, m.ID)
			backend.set(m.ID, serverError(m.ID))
		}
	}
	tb.route(map[string]any{"task": mcq, "category": "general", "models": models, "workers": len(models), "min_responses": 1})
	for _, p := range allProviders {
		if state := tb.settledState(p, "open"); state != "open" {
			t.Fatalf("%s breaker %s after all its models failed", p, state)
		}
	}
	r, raw := tb.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq}, nil)
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("every provider down: %d Retry-After %q %s", r.StatusCode, r.Header.Get("Retry-After"), raw)
	}
}

func count(models []string, provider string, tb *testbed) int {
	n := 0
	for _, id := range models {
		if m, _ := tb.engine.Catalog().Get(id); m.Provider == provider {
			n++
		}
	}
	return n
}

// TestSustainedLoadOpensNoBreaker drives the embedded default, simulated faults included, with 32
// concurrent callers: the only refusals are the rate limits', and they say when to come back.
func TestSustainedLoadOpensNoBreaker(t *testing.T) {
	tb := newTestbed(t, func(c *config.Config) {
		d := config.Default()
		c.Sim.Faults, c.Retry = d.Sim.Faults, d.Retry
	})
	const callers, each = 32, 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := map[string]int{}
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var bad errorResponse
				resp, _ := tb.do(http.MethodPost, "/route-thompson", map[string]any{"task": tasks[i%len(tasks)]}, &bad)
				if resp.StatusCode == http.StatusOK {
					continue
				}
				key := resp.Status + " " + bad.Error.Code
				if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" && bad.Error.Code == "rate_limited" {
					key = "rate limited"
				}
				mu.Lock()
				refused[key]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for k, n := range refused {
		if k != "rate limited" {
			t.Errorf("%d requests refused with %s", n, k)
		}
	}
	for _, p := range tb.engine.Providers() {
		if p.Breaker.State != resilience.Closed {
			t.Errorf("provider %s breaker %s under load", p.Name, p.Breaker.State)
		}
	}
}

var tasks = []string{
	mcq,
	"Review this Go handler before I merge it: func h(w http.ResponseWriter, r *http.Request) { u, _ := db.User(r.URL.Query().Get(\"id\")); json.NewEncoder(w).Encode(u) }",
	"Summarize the key points of this incident: the cache cluster ran out of memory, evictions spiked, and p99 latency tripled.",
	"Our Kubernetes pods are stuck in CrashLoopBackOff after the last deploy; the logs say the config map is missing.",
}
