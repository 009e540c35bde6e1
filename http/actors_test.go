package httpapi_test

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/supervisors"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// crash makes the actor it is sent to panic (through crashOn), the way a bug in it would.
type crash struct{ why string }

func crashOn(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
		if c, ok := env.Message.(crash); ok {
			panic(c.why)
		}
		next(ctx, env)
	}
}

// withCrashes lets a test crash the actors with crash messages.
func withCrashes() option {
	return func(_ *config.Config, o *engine.Options) { o.Middleware = append(o.Middleware, crashOn) }
}

// providerOf is the provider actor of a catalog model.
func (tb *testbed) providerOf(model string) *actors.ProviderRef {
	tb.t.Helper()
	m, ok := tb.engine.Catalog().Get(model)
	if !ok {
		tb.t.Fatalf("no model %s", model)
	}
	return tb.engine.Directory().Provider(m.Provider)
}

// metric returns the line of GET /metrics that starts with prefix, or "".
func (tb *testbed) metric(prefix string) string {
	tb.t.Helper()
	_, raw := tb.do(http.MethodGet, "/metrics", nil, nil)
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

type readiness struct {
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// Eleven acquisitions without a reply address once crashed a provider until its supervisor gave up:
// every request answered 503 from then on. Now they, and other malformed messages sent straight to the
// actors, are dropped and counted, and requests are served.
func TestMalformedMessagesLeaveTheActorsServing(t *testing.T) {
	tb := newTestbed(t, nil)
	const model = "deepseek-chat"
	sys, ref, worker := tb.engine.System(), tb.providerOf(model), tb.engine.Directory().Workers[0]
	deadline := timestamppb.New(time.Now().Add(time.Minute))
	for i := range supervisors.MaxRestarts + 5 {
		sys.Root.Send(ref.PID, &messages.Acquire{JobId: fmt.Sprint("attack/", i), Model: model, Tokens: 10, Deadline: deadline})
	}
	for _, msg := range []any{
		&messages.Acquire{JobId: "invented/0", Model: "invented-model", Deadline: deadline},
		&messages.Outcome{JobId: "attack/0", BlockProviderSeconds: math.Inf(1)},
		&messages.PeerBreakerOpened{Provider: ref.Name},
		(*messages.Acquire)(nil),
	} {
		sys.Root.Send(ref.PID, msg)
	}
	for _, msg := range []any{&messages.Dispatch{}, &messages.Dispatch{Job: &messages.Job{JobId: "x", Model: model}}, &messages.CancelJob{}} {
		sys.Root.Send(worker.PID, msg)
	}
	sys.Root.Send(tb.engine.Directory().Recorder, &messages.GetExecution{RequestId: "no-one-asks"})

	status, resp, bad := tb.route(map[string]any{"task": mcq, "category": "general", "models": []string{model}, "strategy": "majority"})
	if status != http.StatusOK || resp.Responses[0].Status != "ok" {
		t.Fatalf("a request after the malformed messages: %d %+v", status, bad)
	}
	var ready readiness
	if resp, _ := tb.do(http.MethodGet, "/readyz", nil, &ready); resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz %d %+v", resp.StatusCode, ready)
	}
	if s := ref.Snapshot(); s.Stopped != "" {
		t.Fatalf("provider %+v", s)
	}
	// The invented model and the nil acquisition, without a reply address, are among them.
	if line := tb.metric(`conclave_actor_messages_dropped_total{actor="provider",reason="no_reply_to"}`); !strings.HasSuffix(line, fmt.Sprint(" ", supervisors.MaxRestarts+7)) {
		t.Fatalf("metric %q", line)
	}
	if line := tb.metric(`conclave_actor_messages_dropped_total{actor="provider",reason="no_time"}`); !strings.HasSuffix(line, " 1") {
		t.Fatalf("metric %q", line)
	}
	if line := tb.metric(`conclave_actor_messages_dropped_total{actor="worker",reason="malformed"}`); !strings.HasSuffix(line, " 2") {
		t.Fatalf("metric %q", line)
	}
	if line := tb.metric(`conclave_actor_messages_dropped_total{actor="recorder",reason="no_reply_to"}`); !strings.HasSuffix(line, " 1") {
		t.Fatalf("metric %q", line)
	}
	// Logged for the first drop of each kind and reason, not for every message.
	lines := tb.logs.FilterField(zap.String("event", "actor_message_dropped")).FilterField(zap.String("actor", "provider")).
		FilterField(zap.String("reason", actors.DropNoReplyTo)).Len()
	if lines != 1 {
		t.Fatalf("%d lines for %d drops", lines, supervisors.MaxRestarts+7)
	}
	if n := tb.logs.FilterField(zap.String("event", "actor_stopped")).Len(); n != 0 {
		t.Fatalf("%d actors stopped", n)
	}
}

// A provider whose actor crashes past its restart limit is stopped for good, and says so everywhere:
// one actor_stopped line, /readyz 503 naming it, /providers, the metric; its models are left out of
// selection, so requests go to other providers, or get a clear 503 at once when only it could serve.
func TestAProviderStoppedForGoodIsReported(t *testing.T) {
	tb := newTestbed(t, nil, withCrashes())
	const model = "deepseek-chat"
	ref := tb.providerOf(model)
	path := actors.RootName + "/" + actors.ProvidersName + "/" + ref.Name
	for range supervisors.MaxRestarts + 1 {
		tb.engine.System().Root.Send(ref.PID, crash{"provider bug: index out of range"})
	}
	waitFor(t, func() bool { return ref.Stopped() != "" })

	lines := tb.logs.FilterField(zap.String("event", "actor_stopped")).All()
	if len(lines) != 1 || lines[0].ContextMap()["actor"] != path || lines[0].ContextMap()["reason"] != "provider bug: index out of range" {
		t.Fatalf("actor_stopped lines %+v", lines)
	}
	var ready readiness
	resp, _ := tb.do(http.MethodGet, "/readyz", nil, &ready)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(ready.Reason, path) {
		t.Fatalf("/readyz %d %+v: want 503 naming %s", resp.StatusCode, ready, path)
	}
	if strings.Contains(ready.Reason, "index out of range") {
		t.Fatalf("/readyz %q tells anyone what the actor crashed on", ready.Reason)
	}
	var providers struct {
		Providers []struct {
			Name    string `json:"name"`
			Stopped string `json:"stopped"`
		} `json:"providers"`
	}
	tb.do(http.MethodGet, "/providers", nil, &providers)
	for _, p := range providers.Providers {
		if want := map[bool]string{true: "provider bug: index out of range"}[p.Name == ref.Name]; p.Stopped != want {
			t.Fatalf("/providers says %s stopped %q, want %q", p.Name, p.Stopped, want)
		}
	}
	if line := tb.metric(`conclave_actors_stopped{actor="provider"}`); !strings.HasSuffix(line, " 1") {
		t.Fatalf("metric %q", line)
	}

	// Only the stopped provider could serve it: a clear 503 now, not a wait for the deadline.
	status, _, bad := tb.route(map[string]any{"task": mcq, "category": "general", "models": []string{model}, "timeout": 60})
	if status != http.StatusServiceUnavailable || bad.Error.Code != "all_providers_down" || !strings.Contains(bad.Error.Message, "stopped") {
		t.Fatalf("a request for the stopped provider's model: %d %+v", status, bad)
	}
	// The others serve the rest.
	for range 3 {
		status, resp, bad := tb.route(map[string]any{"task": mcq, "category": "general", "workers": 6, "strategy": "majority"})
		if status != http.StatusOK {
			t.Fatalf("a request while a provider is stopped: %d %+v", status, bad)
		}
		for _, r := range resp.Responses {
			if r.Provider == ref.Name {
				t.Fatalf("the stopped provider was asked: %+v", r)
			}
		}
	}
}

func TestAWorkerStoppedForGoodIsReported(t *testing.T) {
	tb := newTestbed(t, nil, withCrashes())
	worker := tb.engine.Directory().Workers[0]
	for range supervisors.MaxRestarts + 1 {
		tb.engine.System().Root.Send(worker.PID, crash{"worker bug"})
	}
	waitFor(t, func() bool { return worker.Stopped() != "" })

	var ready readiness
	if resp, _ := tb.do(http.MethodGet, "/readyz", nil, &ready); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(ready.Reason, worker.PID.Id) {
		t.Fatalf("/readyz %d %+v", resp.StatusCode, ready)
	}
	var workers struct {
		Workers []struct {
			Name    string `json:"name"`
			Stopped string `json:"stopped"`
		} `json:"workers"`
	}
	tb.do(http.MethodGet, "/workers", nil, &workers)
	if w := workers.Workers[0]; w.Name != worker.Spec.Name || w.Stopped != "worker bug" {
		t.Fatalf("/workers %+v", workers.Workers)
	}
	if line := tb.metric(`conclave_actors_stopped{actor="worker"}`); !strings.HasSuffix(line, " 1") {
		t.Fatalf("metric %q", line)
	}
	for range 3 {
		status, resp, bad := tb.route(map[string]any{"task": mcq, "category": "general", "workers": 8, "strategy": "majority"})
		if status != http.StatusOK {
			t.Fatalf("a request while a worker is stopped: %d %+v", status, bad)
		}
		for _, r := range resp.Responses {
			if r.Worker == worker.Spec.Name {
				t.Fatalf("the stopped worker was given a job: %+v", r)
			}
		}
	}
}
