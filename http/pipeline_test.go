package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// slowModels delays some models' answers; with ignoreDeadline it answers after the deadline, like a
// provider that does not honour cancellation.
type slowModels struct {
	providers.Backend
	delay          time.Duration
	models         map[string]bool
	ignoreDeadline bool
}

func (s *slowModels) Complete(ctx context.Context, call providers.Call) (providers.Reply, error) {
	if s.models[call.Model] && call.Kind == providers.KindAnswer {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		if s.ignoreDeadline {
			<-t.C
			ctx = context.WithoutCancel(ctx)
		} else {
			select {
			case <-t.C:
			case <-ctx.Done():
				return providers.Reply{}, ctx.Err()
			}
		}
	}
	return s.Backend.Complete(ctx, call)
}

func simBackend(t *testing.T) *providers.Sim {
	cat, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	return providers.NewSim(cat.All(), providers.SimConfig{Seed: 1})
}

func TestQuorumGraceEndsCollectionEarly(t *testing.T) {
	slow := &slowModels{Backend: simBackend(t), delay: time.Minute, models: map[string]bool{"deepseek-chat": true}}
	tb := newTestbed(t, nil, withBackend(slow))
	models := []string{"deepseek-chat", "llama3.1-8b", "gemini-2.0-flash", "claude-3-5-haiku-20241022"}
	status, resp, bad := tb.route(map[string]any{"task": mcq, "category": "general", "models": models, "min_responses": 3,
		"quorum_grace_seconds": 0.05, "timeout": 60, "strategy": "majority"})
	if status != http.StatusOK || resp.Degraded {
		t.Fatalf("status %d degraded %v: %+v", status, resp.Degraded, bad)
	}
	for _, r := range resp.Responses {
		want := "ok"
		if r.Model == "deepseek-chat" {
			want = "cancelled"
		}
		if r.Status != want {
			t.Fatalf("%s: status %s, want %s (the grace period should end collection long before the 60 s deadline)", r.Model, r.Status, want)
		}
	}
}

func TestAnAdaptiveQuorumAsksBestFirstUntilTheAnswerIsSettled(t *testing.T) {
	tb := newTestbed(t, nil)
	models := []string{"deepseek-chat", "llama3.1-8b", "gemini-2.0-flash", "claude-3-5-haiku-20241022"}
	stopped := map[string]int{}
	for i := range 40 {
		status, resp, bad := tb.route(map[string]any{"task": fmt.Sprintf("%s\n(%d)", mcq, i), "category": "general", "models": models,
			"workers": 4, "min_responses": 1, "quorum": "adaptive", "quorum_tau": 0.9})
		if status != http.StatusOK {
			t.Fatalf("status %d: %+v", status, bad)
		}
		q := resp.Quorum
		if q == nil || q.Mode != "adaptive" || q.Selected != 4 || q.Asked < 1 || q.Asked > 4 || len(resp.Responses) != q.Asked {
			t.Fatalf("quorum %+v with %d responses", q, len(resp.Responses))
		}
		switch q.Stopped {
		case "settled": // by tau, or (a plain majority) by three agreeing answers the fourth cannot outvote
			contributed := 0
			for _, r := range resp.Responses {
				if r.Contributed {
					contributed++
				}
			}
			if q.Posterior < 0.9 && (q.Asked != 3 || contributed != 3) {
				t.Fatalf("settled below tau without a decided majority: %+v", q)
			}
		case "cap", "audit":
			if q.Asked != 4 {
				t.Fatalf("stopped %s with %d asked", q.Stopped, q.Asked)
			}
		default:
			t.Fatalf("stopped %q", q.Stopped)
		}
		stopped[q.Stopped]++
		rec := tb.record(resp.RequestID)
		if rec["quorum"].(map[string]any)["stopped"] != q.Stopped {
			t.Fatalf("record quorum %v, response %+v", rec["quorum"], q)
		}
		// Each call says which wave asked it: waves of one, so the waves number the calls.
		waves := map[float64]bool{}
		for _, r := range rec["results"].([]any) {
			w, _ := r.(map[string]any)["wave"].(float64)
			waves[w] = true
		}
		if want := q.Waves; q.Stopped == "audit" {
			if len(waves) != 1 || !waves[0] {
				t.Fatalf("an audit asks everyone in one wave: waves %v", waves)
			}
		} else if len(waves) != int(want) || !waves[0] || !waves[float64(want-1)] {
			t.Fatalf("the calls' waves %v, want 0 to %d", waves, want-1)
		}
	}
	// Agreeing models settle some requests with fewer than all four.
	if stopped["settled"] == 0 {
		t.Fatalf("no request settled early: %v", stopped)
	}
	// A fixed quorum asks every model at once.
	_, resp, _ := tb.route(map[string]any{"task": mcq, "category": "general", "models": models, "workers": 4, "min_responses": 1})
	if q := resp.Quorum; q == nil || q.Mode != "fixed" || q.Asked != 4 || q.Waves != 1 || q.Stopped != "all_asked" {
		t.Fatalf("fixed quorum %+v", q)
	}
}

func TestLateRepliesAreDiscarded(t *testing.T) {
	// deepseek-chat answers after 100 ms whatever happens, like a provider that does not honour
	// cancellation; the quorum grace ends collection long before.
	slow := &slowModels{Backend: simBackend(t), delay: 100 * time.Millisecond, models: map[string]bool{"deepseek-chat": true}, ignoreDeadline: true}
	tb := newTestbed(t, nil, withBackend(slow))
	models := []string{"deepseek-chat", "llama3.1-8b", "gemini-2.0-flash"}
	status, resp, bad := tb.route(map[string]any{"task": mcq, "category": "general", "models": models, "min_responses": 2,
		"quorum_grace_seconds": 0.01, "timeout": 5, "strategy": "majority"})
	if status != http.StatusOK || resp.Degraded {
		t.Fatalf("status %d degraded %v: %+v", status, resp.Degraded, bad)
	}
	for _, r := range resp.Responses {
		if r.Model == "deepseek-chat" && r.Status != "cancelled" {
			t.Fatalf("%+v: want the slow call cancelled", r)
		}
	}
	waitFor(t, func() bool { return tb.logs.FilterField(zap.String("event", "late_reply")).Len() > 0 })
	// The answer given and the record kept do not change when the late reply comes.
	if got := len(tb.results(resp.RequestID)); got != len(resp.Responses) {
		t.Fatalf("the record has %d results, the answer had %d", got, len(resp.Responses))
	}
}

// TestBestModelsComeToDominate runs a seeded stream of multiple-choice tasks: the simulated models that
// are truly best at the category end up selected far more often than chance.
func TestBestModelsComeToDominate(t *testing.T) {
	tb := newTestbed(t, nil)
	cat := tb.engine.Catalog()
	var models []string
	for i, m := range cat.All() {
		if i%13 == 0 && len(models) < 16 {
			models = append(models, m.ID)
		}
	}
	byskill := append([]string(nil), models...)
	sort.Slice(byskill, func(i, j int) bool {
		return tb.engine.Sim.Skill(byskill[i], "general") > tb.engine.Sim.Skill(byskill[j], "general")
	})
	best := map[string]bool{}
	for _, m := range byskill[:4] {
		best[m] = true
	}
	const requests, window = 400, 100
	share := func(from, to int, picks [][]string) float64 {
		hits, all := 0, 0
		for _, ps := range picks[from:to] {
			for _, p := range ps {
				all++
				if best[p] {
					hits++
				}
			}
		}
		return float64(hits) / float64(all)
	}
	var picks [][]string
	var rewards int64
	for i := 0; i < requests; i++ {
		task := fmt.Sprintf("Item %d. Which option is right?\nA) one\nB) two\nC) three\nD) four\nE) five\nF) six\nG) seven\nH) eight", i)
		status, resp, bad := tb.route(map[string]any{"task": task, "category": "general", "models": models, "workers": 4, "min_responses": 3, "strategy": "majority"})
		if status != http.StatusOK {
			t.Fatalf("request %d: %d %+v", i, status, bad)
		}
		var ps []string
		for _, r := range resp.Responses {
			ps = append(ps, r.Model)
		}
		picks = append(picks, ps)
		// Each selection sees the rewards of the requests before it, however busy the machine.
		updates, _ := tb.record(resp.RequestID)["bandit_updates"].([]any)
		rewards += int64(len(updates))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := tb.engine.Settle(ctx, "general", rewards); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	early, late := share(0, 25, picks), share(requests-window, requests, picks)
	t.Logf("share of picks among the 4 best of 16: first 25 requests %.2f, last %d requests %.2f (chance 0.25)", early, window, late)
	if late < 0.6 || late <= early {
		t.Fatalf("the best models did not come to dominate: %.2f -> %.2f", early, late)
	}
}

func TestCrashedActorsAreRestarted(t *testing.T) {
	tb := newTestbed(t, nil, withCrashes())
	sys, dir := tb.engine.System(), tb.engine.Directory()
	body := map[string]any{"task": mcq, "category": "general", "models": []string{"deepseek-chat"}, "strategy": "majority"}
	if status, _, _ := tb.route(body); status != http.StatusOK {
		t.Fatalf("status %d", status)
	}

	// The arm exists once its first reward arrived.
	if err := tb.engine.Settle(context.Background(), "general", 1); err != nil {
		t.Fatal(err)
	}
	// A bug crashes a worker and an arm.
	worker := dir.Workers[0]
	before := worker.Snapshot().Completed
	sys.Root.Send(worker.PID, crash{"a worker's bug"})
	armPID := actor.NewPID(sys.Address(), actors.RootName+"/"+actors.BanditName+"/"+actors.ArmsName)
	sys.Root.Send(armPID, crash{"an arm's bug"})

	waitFor(t, func() bool { return tb.logs.FilterMessage("[ACTOR] Recovering").Len() >= 2 })

	// Both keep serving, with their state: the worker its counters, the arm its learning.
	rewards := int64(1)
	for i := 0; i < 8; i++ {
		status, resp, bad := tb.route(map[string]any{"task": mcq, "category": "general", "workers": 8, "strategy": "majority"})
		if status != http.StatusOK {
			t.Fatalf("after the crash: %d %+v", status, bad)
		}
		rewards += int64(len(tb.record(resp.RequestID)["bandit_updates"].([]any)))
	}
	if err := tb.engine.Settle(context.Background(), "general", rewards); err != nil { // those requests' rewards have landed
		t.Fatal(err)
	}
	armBefore := tb.engine.Arms().Arm("general", "deepseek-chat")
	if status, _, _ := tb.route(body); status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	waitFor(t, func() bool { return tb.engine.Arms().Arm("general", "deepseek-chat").Pulls == armBefore.Pulls+1 })
	if got := worker.Snapshot().Completed; got <= before {
		t.Fatalf("restarted worker completed %d jobs, had %d before the crash", got, before)
	}
	a := tb.engine.Arms().Arm("general", "deepseek-chat")
	if a.Alpha+a.Beta != armBefore.Alpha+armBefore.Beta+1 {
		t.Fatalf("arm lost its learning across the restart: %+v then %+v", armBefore, a)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShutdownFinishesInFlightAndFlushesRecords stops the engine while requests are running: they all
// get their answer and every record reaches the store.
func TestShutdownFinishesInFlightAndFlushesRecords(t *testing.T) {
	cfg := testConfig()
	cfg.Sim.Faults = providers.Fault{}
	mem := store.NewMemory(100, 0)
	slow := &slowModels{Backend: simBackend(t), delay: 100 * time.Millisecond, models: map[string]bool{"deepseek-chat": true}}
	e, err := engine.New(engine.Options{Config: cfg, Backend: slow, Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: fmt.Sprint("req-", i), Task: mcq, Category: "general", Models: []string{"deepseek-chat", "llama3.1-8b"}})
			// A request that comes after shutdown began is refused (and has no record); the others answer.
			if err == nil && exec.StatusCode != 200 && exec.GetError().GetCode() != "shutting_down" {
				err = fmt.Errorf("status %d", exec.StatusCode)
			}
			errs <- err
		}(i)
	}
	waitFor(t, func() bool { return len(e.Workers()) > 0 && busy(e) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: "late", Task: mcq}); err != nil || exec.StatusCode != 503 || exec.Error.Code != "shutting_down" {
		t.Fatalf("a request after shutdown: %v %v", exec, err)
	}
	answered := n
	for i := 0; i < n; i++ {
		if _, err := mem.Get(context.Background(), fmt.Sprint("req-", i)); err != nil {
			answered--
		}
	}
	if answered == 0 || mem.Len() != answered {
		t.Fatalf("%d records stored for %d answered requests", mem.Len(), answered)
	}
}

func busy(e *engine.Engine) bool {
	for _, w := range e.Workers() {
		if w.InFlight > 0 {
			return true
		}
	}
	return false
}
