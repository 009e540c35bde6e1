package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/platform/config"
)

var groqModels = []string{"llama-3.1-8b-instant", "llama-3.3-70b-versatile", "gemma2-9b-it"}
var cerebrasModels = []string{"llama3.1-8b", "llama-3.3-70b", "qwen-3-32b"}

func TestTimeoutStormAnswers503AndKeepsTheRecord(t *testing.T) {
	tb := newTestbed(t, func(c *config.Config) { c.Retry = config.Retry{Scale: 0.001, Rounds: 2} }, quickBlueprints(t, 0.2))
	for _, p := range allProviders {
		tb.engine.Sim.SetFault(p, providers.Fault{TimeoutRate: 1})
	}
	// No caller's timeout: every call has the blueprint's full 0.2 s, so each timeout is a fault.
	body := map[string]any{"task": mcq, "category": "quick", "workers": 3, "min_responses": 2}
	resp, raw := tb.do(http.MethodPost, "/route-thompson", body, nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var bad errorResponse
	tb.do(http.MethodPost, "/route-thompson", body, &bad)
	if bad.Error.Code != "no_responses" || len(bad.Error.Retries) == 0 {
		t.Fatalf("error %+v: want no_responses with the retry history", bad.Error)
	}
	timedOut := 0
	for _, r := range bad.Error.Retries {
		switch {
		case r.Kind == "upstream_timeout":
			timedOut++
		case r.Kind == "" && strings.HasPrefix(r.Outcome, "quorum round"):
			// A model asked in place of one whose provider's breaker the storm opened: it failed
			// nothing before, so its entry names no kind.
		default:
			t.Fatalf("retry %+v of a timeout storm", r)
		}
	}
	if timedOut == 0 {
		t.Fatalf("no retry of a timed-out call: %+v", bad.Error.Retries)
	}
	id := resp.Header.Get("X-Request-ID")
	rec := tb.record(id)
	if rec["status_code"] != float64(503) {
		t.Fatalf("record of the failed request: %v", rec["status_code"])
	}
	timeouts := 0
	for _, r := range tb.results(id) {
		switch r["status"] {
		case "timeout":
			timeouts++
			if r["error_kind"] != "upstream_timeout" {
				t.Fatalf("result %v", r)
			}
		case "cancelled", "not_sent": // the last attempts, cut by the end of collection, or refused once breakers opened
		default:
			t.Fatalf("result %v", r)
		}
	}
	if timeouts == 0 {
		t.Fatal("no timeout recorded")
	}
	for _, u := range rec["bandit_updates"].([]any) {
		if u.(map[string]any)["reason"] != "timeout" {
			t.Fatalf("update %v: models that timed out after the full timeout earn beta + 1", u)
		}
	}
	// The storm passes; the system answers again, from the providers its breakers still trust.
	tb.engine.Sim.ClearFaults()
	status, ok, e := tb.route(map[string]any{"task": mcq, "timeout": 5})
	if status != http.StatusOK || ok.Degraded {
		t.Fatalf("after the storm: %d %+v %+v", status, ok, e)
	}
}

func TestQuorumFailureDegradesOrFails(t *testing.T) {
	tb := newTestbed(t, func(c *config.Config) { c.Retry = config.Retry{Scale: 0.001, Rounds: 1} }, quickBlueprints(t, 0.2))
	tb.engine.Sim.SetFault("groq", providers.Fault{TimeoutRate: 1})
	models := append(append([]string{}, groqModels...), cerebrasModels[:2]...)
	status, resp, bad := tb.route(map[string]any{"task": mcq, "category": "quick", "models": models, "workers": 5, "min_responses": 4})
	if status != http.StatusOK || !resp.Degraded {
		t.Fatalf("status %d degraded %v: %+v", status, resp.Degraded, bad)
	}
	ok := 0
	for _, r := range resp.Responses {
		if r.Status == "ok" {
			ok++
			if r.Provider != "cerebras" {
				t.Fatalf("an answer from %s", r.Provider)
			}
		}
	}
	if ok != 2 || len(resp.Retries) == 0 {
		t.Fatalf("%d answers, %d retries; want 2 answers and the retries", ok, len(resp.Retries))
	}
	// Timeouts after the full timeout, of one groq model after another, are groq's: they open its
	// breaker. Then asking only groq models finds no provider up, and the 503 says when to come back.
	for i := 0; i < 3 && tb.providerState("groq") != "open"; i++ {
		tb.route(map[string]any{"task": mcq, "category": "quick", "models": groqModels, "workers": 3, "min_responses": 1})
	}
	r, raw := tb.do(http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "category": "quick", "models": groqModels, "min_responses": 1}, &bad)
	if r.StatusCode != http.StatusServiceUnavailable || bad.Error.Code != "all_providers_down" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d: %s", r.StatusCode, raw)
	}
	// Nothing at all comes back from a provider that is still closed: 503 with the retry history.
	tb.engine.Sim.SetFault("gemini", providers.Fault{TimeoutRate: 1})
	status, _, bad = tb.route(map[string]any{"task": mcq, "category": "quick", "models": []string{"gemini-2.0-flash", "gemini-1.5-pro-002"}, "min_responses": 1})
	if status != http.StatusServiceUnavailable || bad.Error.Code != "no_responses" || len(bad.Error.Retries) == 0 {
		t.Fatalf("status %d: %+v", status, bad)
	}
}

func TestQuorumRoundAsksAgain(t *testing.T) {
	backend := &failing{Backend: simBackend(t)}
	bad := groqModels[0]
	backend.set(bad, serverError(bad))
	tb := newTestbed(t, func(c *config.Config) { c.Retry = config.Retry{Scale: 0.001, Rounds: 1} }, withBackend(backend))
	models := []string{bad, cerebrasModels[0], cerebrasModels[1]}
	status, resp, e := tb.route(map[string]any{"task": mcq, "category": "general", "models": models, "min_responses": 3, "timeout": 10})
	if status != http.StatusOK || !resp.Degraded {
		t.Fatalf("status %d degraded %v: %+v", status, resp.Degraded, e)
	}
	rounds := 0
	for _, r := range resp.Retries {
		if r.Outcome == "quorum round 1" && r.Model == bad {
			rounds++
		}
	}
	if rounds != 1 {
		t.Fatalf("retries %+v: want the failing model asked again in a quorum round", resp.Retries)
	}
}

func TestServerErrorStormOpensTheBreakerAndRecovers(t *testing.T) {
	clk := clock.NewFake(time.Now())
	tb := newTestbed(t, nil, withClock(clk))
	tb.engine.Sim.SetFault("groq", providers.Fault{ServerErrorRate: 1})
	models := append(append([]string{}, groqModels...), cerebrasModels...)
	body := map[string]any{"task": mcq, "category": "general", "models": models, "workers": 6, "min_responses": 3, "strategy": "majority"}

	// Three groq models, each tried three times (two retries for 5xx): the breaker opens at 5 errors.
	status, resp, bad := tb.route(body)
	if status != http.StatusOK {
		t.Fatalf("status %d: %+v", status, bad)
	}
	if state := tb.settledState("groq", "open"); state != "open" {
		t.Fatalf("groq breaker %s after the storm, want open", state)
	}
	retried := 0
	for _, r := range resp.Retries {
		if r.Kind == "provider_unavailable" && r.Outcome == "scheduled" {
			retried++
		}
	}
	if retried == 0 {
		t.Fatalf("no same-provider retry of the 5xx: %+v", resp.Retries)
	}

	// While open, selection skips groq and says why.
	status, resp, _ = tb.route(body)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	rec := tb.record(resp.RequestID)
	skips := rec["selection"].(map[string]any)["skipped"].([]any)
	if len(skips) != 3 {
		t.Fatalf("skipped %v, want the three groq models", skips)
	}
	for _, s := range skips {
		if s.(map[string]any)["reason"] != "provider_breaker_open" {
			t.Fatalf("skip reason %v", s)
		}
	}
	for _, r := range resp.Responses {
		if r.Provider == "groq" {
			t.Fatal("a groq model was asked while its breaker was open")
		}
	}

	// The storm ends and the open period passes: exactly one probe goes through and closes the breaker.
	tb.engine.Sim.ClearFaults()
	clk.Advance(31 * time.Second)
	status, resp, _ = tb.route(body)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	probes, refused := 0, 0
	for _, r := range resp.Responses {
		if r.Provider != "groq" {
			continue
		}
		switch {
		case r.Status == "ok":
			probes++
		case r.ErrorKind == "permit_probe_in_flight":
			refused++
		}
	}
	if probes != 1 || refused != 2 {
		t.Fatalf("half-open: %d calls went through, %d were refused; want 1 and 2", probes, refused)
	}
	if state := tb.settledState("groq", "closed"); state != "closed" {
		t.Fatalf("groq breaker %s after a good probe, want closed", state)
	}
	status, resp, _ = tb.route(body)
	groq := 0
	for _, r := range resp.Responses {
		if r.Provider == "groq" && r.Status == "ok" {
			groq++
		}
	}
	if status != http.StatusOK || groq != 3 {
		t.Fatalf("after recovery %d groq answers (status %d), want 3", groq, status)
	}
}

// settledState waits up to 10 s for a provider's breaker to reach want and returns its state: the
// provider's actor settles a request's last call just after the coordinator answers.
func (tb *testbed) settledState(name, want string) string {
	for deadline := time.Now().Add(10 * time.Second); tb.providerState(name) != want && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	return tb.providerState(name)
}

func (tb *testbed) providerState(name string) string {
	for _, p := range tb.engine.Providers() {
		if p.Name == name {
			return p.Breaker.State.String()
		}
	}
	return ""
}

// refusingHosts is a transport whose hosts refuse connections, like an SSH host that is down.
type refusingHosts struct {
	fleet.InProcess
	worker string
	down   func(worker string) bool
}

func (r refusingHosts) Run(ctx context.Context, call providers.Call) (providers.Reply, error) {
	if r.down(r.worker) {
		return providers.Reply{}, &resilience.Error{Kind: resilience.SSHRefused, Worker: r.worker, Err: errors.New("connection refused")}
	}
	return r.InProcess.Run(ctx, call)
}

func withRefusingHosts(t *testing.T, down func(string) bool) option {
	sim := simBackend(t)
	return func(_ *config.Config, o *engine.Options) {
		o.Transport = func(w fleet.WorkerSpec) fleet.Transport {
			return refusingHosts{InProcess: fleet.InProcess{Backend: sim}, worker: w.Name, down: down}
		}
	}
}

func TestRefusedHostsAreRetriedElsewhereAndTakenOut(t *testing.T) {
	var mu sync.Mutex
	downSet := map[string]bool{"worker-01": true, "worker-02": true, "worker-03": true}
	down := func(w string) bool { mu.Lock(); defer mu.Unlock(); return downSet[w] }
	tb := newTestbed(t, nil, withRefusingHosts(t, down))

	body := map[string]any{"task": mcq, "category": "general", "workers": 8, "min_responses": 8, "strategy": "majority"}
	status, resp, bad := tb.route(body)
	if status != http.StatusOK || resp.Degraded {
		t.Fatalf("status %d degraded %v: %+v", status, resp.Degraded, bad)
	}
	moved := 0
	for _, r := range resp.Retries {
		if r.Kind == "ssh_refused" && r.Outcome == "scheduled" {
			moved++
		}
	}
	if moved == 0 {
		t.Fatalf("no retry of a refused job on another worker: %+v", resp.Retries)
	}
	for _, r := range resp.Responses {
		if r.Status == "ok" && down(r.Worker) {
			t.Fatalf("an answer from a refusing host: %+v", r)
		}
	}
	// Enough refusals open the hosts' breakers; assignment then leaves them out.
	for i := 0; i < 3; i++ {
		tb.route(body)
	}
	for _, w := range tb.engine.Workers() {
		if down(w.Name) != (w.Breaker.State.String() == "open") {
			t.Fatalf("worker %s breaker %s", w.Name, w.Breaker.State)
		}
	}
	status, resp, _ = tb.route(body)
	for _, r := range resp.Responses {
		if down(r.Worker) {
			t.Fatalf("job assigned to %s while its breaker is open", r.Worker)
		}
	}

	// Every host down: 503 all_workers_offline.
	mu.Lock()
	for i := 1; i <= 8; i++ {
		downSet[fmt.Sprintf("worker-%02d", i)] = true
	}
	mu.Unlock()
	// First the refusals come back as no answer at all; once the last hosts' breakers open, the request
	// is refused before dispatch.
	for i := 0; i < 10 && bad.Error.Code != "all_workers_offline"; i++ {
		status, _, bad = tb.route(body)
	}
	if status != http.StatusServiceUnavailable || bad.Error.Code != "all_workers_offline" {
		t.Fatalf("status %d: %+v", status, bad)
	}
	if resp, _ := tb.do(http.MethodGet, "/readyz", nil, nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz %d with every worker offline", resp.StatusCode)
	}
}

func TestRateLimitedCallsWaitForRetryAfter(t *testing.T) {
	tb := newTestbed(t, nil)
	tb.engine.Sim.SetFault("groq", providers.Fault{RateLimitRate: 1, RetryAfter: 20 * time.Millisecond})
	models := append(append([]string{}, groqModels...), cerebrasModels...)
	status, resp, bad := tb.route(map[string]any{"task": mcq, "category": "general", "models": models, "workers": 6, "min_responses": 3, "strategy": "majority"})
	if status != http.StatusOK || resp.Degraded {
		t.Fatalf("status %d: %+v", status, bad)
	}
	waits := 0
	for _, r := range resp.Retries {
		if r.Kind == "rate_limited" {
			waits++
			if r.Outcome == "scheduled" && r.DelayMs != 20 {
				t.Fatalf("retry %+v does not wait the Retry-After of 20 ms", r)
			}
		}
	}
	if waits != 9 {
		t.Fatalf("%d rate-limit retries, want 3 for each of 3 groq models: %+v", waits, resp.Retries)
	}
	if state := tb.providerState("groq"); state != "closed" {
		t.Fatalf("429s opened the breaker: %s", state)
	}
}
