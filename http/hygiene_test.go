package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// Tests of the actor shell's hygiene: shutdown, panics, starvation.

// TestShutdownTimeoutAnswers503AndKeepsTheRecords stops panels (coordinator actors) and a direct call
// (run by its caller) still running when the shutdown's timeout ends.
func TestShutdownTimeoutAnswers503AndKeepsTheRecords(t *testing.T) {
	cfg := testConfig()
	cfg.Sim.Faults = providers.Fault{}
	mem := store.NewMemory(100, 0)
	slow := &seen{Backend: &slowModels{Backend: simBackend(t), delay: time.Minute, models: allModels(t)}}
	e, err := engine.New(engine.Options{Config: cfg, Backend: slow, Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	answers := make(chan *messages.Execution, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			timeout := 60.0
			req := &messages.RouteRequest{RequestId: fmt.Sprint("req-", i), Task: mcq, Category: "general", TimeoutSeconds: &timeout}
			if i == n-1 {
				req.Direct, req.Models, req.Category = true, []string{"llama3.1-8b"}, ""
			}
			exec, err := e.Route(context.Background(), req)
			if err != nil {
				exec = &messages.Execution{RequestId: fmt.Sprint("req-", i), Error: &messages.Failure{Message: err.Error()}}
			}
			answers <- exec
		}(i)
	}
	waitFor(t, func() bool { return slow.requests() >= n }) // every request is running
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- e.Shutdown(ctx) }()
	for i := 0; i < n; i++ {
		select {
		case exec := <-answers:
			if exec.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("%s: status %d %v, want 503 when the shutdown timeout ends", exec.RequestId, exec.StatusCode, exec.GetError())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a request still running after the shutdown timeout got no answer")
		}
	}
	<-shut
	for i := 0; i < n; i++ {
		if rec, err := mem.Get(context.Background(), fmt.Sprint("req-", i)); err != nil || rec.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("record of req-%d: %v %v", i, rec.GetStatusCode(), err)
		}
	}
}

// panicking panics in some models' calls.
type panicking struct {
	providers.Backend
	models map[string]bool
}

func (p *panicking) Complete(ctx context.Context, call providers.Call) (providers.Reply, error) {
	if p.models[call.Model] {
		panic("adapter bug")
	}
	return p.Backend.Complete(ctx, call)
}

func TestPanickingCallsAreInternalErrors(t *testing.T) {
	bad := "deepseek-chat"
	tb := newTestbed(t, nil, withBackend(&panicking{Backend: simBackend(t), models: map[string]bool{bad: true}}))
	status, resp, e := tb.route(map[string]any{"task": mcq, "category": "general", "models": []string{bad, "llama3.1-8b", "gemini-2.0-flash"}, "min_responses": 1})
	if status != http.StatusOK {
		t.Fatalf("status %d: %+v", status, e)
	}
	for _, r := range resp.Responses {
		if r.Model == bad && (r.Status != "error" || r.ErrorKind != "internal") {
			t.Fatalf("%+v: a panicking call is an internal error", r)
		}
	}
	for _, u := range tb.record(resp.RequestID)["bandit_updates"].([]any) {
		if u.(map[string]any)["model"] == bad {
			t.Fatalf("the model was blamed for Conclave's own fault: %v", u)
		}
	}
	tb.assertNoBreakerMoved()
}

// TestHotMailboxesDoNotStarveARequest keeps several actors' mailboxes busy without pause, as a burst of
// traffic does, and checks that a request still gets its turn: actors run on the same props as the
// engine's own.
func TestHotMailboxesDoNotStarveARequest(t *testing.T) {
	tb := newTestbed(t, nil)
	sys := tb.engine.System()
	var stop atomic.Bool
	var hot []*actor.PID
	for i := 0; i < 8; i++ {
		pid := sys.Root.Spawn(tb.engine.Props(func() actor.Actor {
			return actor.ReceiveFunc(func(ctx actor.Context) {
				if _, ok := ctx.Message().(string); ok && !stop.Load() {
					ctx.Send(ctx.Self(), "again") // a mailbox that never runs dry
				}
			})
		}))
		for j := 0; j < 4; j++ {
			sys.Root.Send(pid, "go")
		}
		hot = append(hot, pid)
	}
	defer func() {
		stop.Store(true)
		for _, pid := range hot {
			_ = sys.Root.PoisonFuture(pid).Wait()
		}
	}()
	done := make(chan int, 1)
	go func() {
		status, _, _ := tb.route(map[string]any{"task": mcq, "category": "general", "timeout": 5})
		done <- status
	}()
	select {
	case status := <-done:
		if status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the request never got a turn while other mailboxes were busy")
	}
}

// seen remembers the requests whose calls reached the backend.
type seen struct {
	providers.Backend
	ids sync.Map
}

func (s *seen) Complete(ctx context.Context, call providers.Call) (providers.Reply, error) {
	s.ids.Store(call.RequestID, true)
	return s.Backend.Complete(ctx, call)
}

func (s *seen) requests() int {
	n := 0
	s.ids.Range(func(any, any) bool { n++; return true })
	return n
}

// panickingStore panics on its first write and on every read of an unknown record.
type panickingStore struct {
	*store.Memory
	writes atomic.Int32
}

func (p *panickingStore) Write(ctx context.Context, b store.Batch) error {
	if p.writes.Add(1) == 1 {
		panic("store bug")
	}
	return p.Memory.Write(ctx, b)
}

func (p *panickingStore) Get(ctx context.Context, id string) (*messages.Execution, error) {
	if rec, err := p.Memory.Get(ctx, id); err == nil {
		return rec, nil
	}
	panic("store bug")
}

func TestAPanickingStoreDoesNotTakeTheServiceDown(t *testing.T) {
	tb := newTestbed(t, nil, func(_ *config.Config, o *engine.Options) { o.Store = &panickingStore{Memory: store.NewMemory(10, 0)} })
	status, resp, bad := tb.route(map[string]any{"task": mcq, "category": "general"})
	if status != http.StatusOK {
		t.Fatalf("status %d: %+v", status, bad)
	}
	// The record the store failed to take stays with the recorder, is read from there, and is written
	// again later.
	waitFor(t, func() bool { return tb.logs.FilterField(zap.String("event", "record_write_failed")).Len() > 0 })
	if rec := tb.record(resp.RequestID); rec["request_id"] != resp.RequestID {
		t.Fatalf("record %v", rec)
	}
	// A store that fails is no proof that a record does not exist: 503, not 404.
	if r, _ := tb.do(http.MethodGet, "/executions/00000000-0000-0000-0000-000000000000", nil, nil); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a lookup the store panicked on: %d", r.StatusCode)
	}
}

// TestALeavingCallerIsRecorded: a panel's caller and a direct call's leave while their calls run;
// each answers 499 and is recorded, and no model is blamed.
func TestALeavingCallerIsRecorded(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprint("direct=", direct), func(t *testing.T) { leaveWhileRunning(t, direct) })
	}
}

func leaveWhileRunning(t *testing.T, direct bool) {
	mem := store.NewMemory(10, 0)
	slow := &slowModels{Backend: simBackend(t), delay: time.Minute, models: allModels(t)}
	cfg := testConfig()
	e, err := engine.New(engine.Options{Config: cfg, Backend: slow, Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitFor(t, func() bool { return busy(e) })
		cancel()
	}()
	timeout := 60.0
	req := &messages.RouteRequest{RequestId: "gone", Task: mcq, Category: "general", TimeoutSeconds: &timeout}
	if direct {
		req.Direct, req.Models, req.Category = true, []string{"llama3.1-8b"}, ""
	}
	exec, err := e.Route(ctx, req)
	if err != nil || exec.StatusCode != 499 || exec.Error.Code != "client_closed_request" {
		t.Fatalf("%v %v", exec, err)
	}
	waitFor(t, func() bool { _, err := mem.Get(context.Background(), "gone"); return err == nil })
	rec, _ := mem.Get(context.Background(), "gone")
	for _, r := range rec.Results {
		if r.Status != "cancelled" && r.Status != "not_sent" {
			t.Fatalf("result %v of a request whose caller left", r)
		}
	}
	if len(rec.BanditUpdates) != 0 {
		t.Fatalf("the caller leaving blamed models: %v", rec.BanditUpdates)
	}
}

// TestARequestIDIsInProgressOnce: while a request runs, another with its id is refused with 409,
// whether either is a panel (a coordinator actor) or a direct call (run by its caller); once it has
// answered, the id is free again.
func TestARequestIDIsInProgressOnce(t *testing.T) {
	slow := &seen{Backend: &slowModels{Backend: simBackend(t), delay: time.Minute, models: allModels(t)}}
	e, err := engine.New(engine.Options{Config: testConfig(), Backend: slow, Store: store.NewMemory(10, 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	timeout := 60.0
	request := func(direct bool) *messages.RouteRequest {
		req := &messages.RouteRequest{RequestId: "once", Task: mcq, Category: "general", TimeoutSeconds: &timeout}
		if direct {
			req.Direct, req.Models, req.Category = true, []string{"llama3.1-8b"}, ""
		}
		return req
	}
	for _, first := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan *messages.Execution, 1)
		go func() { exec, _ := e.Route(ctx, request(first)); done <- exec }()
		waitFor(t, func() bool { return busy(e) })
		for _, second := range []bool{false, true} {
			exec, err := e.Route(context.Background(), request(second))
			if err != nil || exec.StatusCode != http.StatusConflict || exec.Error.Code != "duplicate_request" {
				t.Fatalf("direct=%v while direct=%v runs: %v %v", second, first, exec, err)
			}
		}
		cancel()
		if exec := <-done; exec.StatusCode != 499 {
			t.Fatalf("the first request: %d %v", exec.StatusCode, exec.GetError())
		}
		waitFor(t, func() bool { return !busy(e) })
	}
}
