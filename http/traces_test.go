package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/platform/tracing"
	"github.com/conclave-ai/conclave/internal/testenv/otlptest"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The caller's trace: its id, and the id of the caller's span the request's span hangs from.
const (
	callerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan   = "00f067aa0ba902b7"
	callerParent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// withTracing gives the testbed's engine and server the tracer the environment describes, logging to
// log (nil: nowhere), shut down (its spans exported) after them.
func withTracing(t *testing.T, log *zap.Logger) (option, *tracing.Tracing) {
	t.Helper()
	tr, err := tracing.New(context.Background(), tracing.Options{Version: "test", NodeID: "node-1", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return func(_ *config.Config, o *engine.Options) { o.Tracing = tr }, tr
}

// postTraced sends a JSON body with the caller's traceparent (when given) and returns the answer, read whole.
func (tb *testbed) postTraced(path, body, traceparent string) (*http.Response, []byte) {
	tb.t.Helper()
	header := http.Header{}
	if traceparent != "" {
		header.Set("traceparent", traceparent)
	}
	return tb.send(http.MethodPost, path, strings.NewReader(body), header)
}

// jsonOf is a body as JSON.
func jsonOf(t *testing.T, body map[string]any) string {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// execution reads a request's record from the engine.
func (tb *testbed) execution(id string) *messages.Execution {
	tb.t.Helper()
	exec, found, err := tb.engine.Execution(context.Background(), id)
	if err != nil || !found {
		tb.t.Fatalf("record %s: found %v, %v", id, found, err)
	}
	return exec
}

// byName finds the one span of a name.
func byName(t *testing.T, spans []otlptest.Span, name string) otlptest.Span {
	t.Helper()
	var found []otlptest.Span
	for _, s := range spans {
		if s.GetName() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q in %v", len(found), name, names(spans))
	}
	return found[0]
}

func names(spans []otlptest.Span) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.GetName()
	}
	slices.Sort(out)
	return out
}

// TestASixWayRequestIsOneTraceUnderTheCallers: a request that asks six models, through the real server
// on the embedded default, exported over OTLP/HTTP to a loopback receiver, is one trace under the
// caller's traceparent: the request's span (a child of the caller's), its classify, select, collect and
// consensus spans, and under collect a span per model call with the GenAI attributes and the record's
// token counts. The record and the answer's headers name the caller's trace.
func TestASixWayRequestIsOneTraceUnderTheCallers(t *testing.T) {
	rcv := otlptest.Start(t)
	otlptest.Env(t, rcv.Endpoint())
	traced, tr := withTracing(t, nil)
	tb := newTestbed(t, nil, traced)

	resp, raw := tb.postTraced("/route-thompson", jsonOf(t, map[string]any{"task": mcq, "workers": 6, "min_responses": 6, "strategy": "majority"}), callerParent)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	if got := resp.Header.Get("X-Trace-Id"); got != callerTrace {
		t.Errorf("X-Trace-Id %q, want the caller's trace %s", got, callerTrace)
	}
	parent := resp.Header.Get("Traceparent")
	if !strings.HasPrefix(parent, "00-"+callerTrace+"-") || strings.Contains(parent, callerSpan) {
		t.Errorf("traceparent %q: want the caller's trace and the request's own span", parent)
	}
	var answer struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		t.Fatal(err)
	}
	exec := tb.execution(answer.RequestID)
	if exec.TraceId != callerTrace {
		t.Errorf("the record's trace_id %q, want %s", exec.TraceId, callerTrace)
	}
	if len(exec.Results) != 6 {
		t.Fatalf("%d calls, want 6", len(exec.Results))
	}
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}

	spans := rcv.Trace(t, callerTrace, 11)
	if len(spans) != 11 {
		t.Fatalf("%d spans in the trace, want the request's, 4 phases and 6 calls: %v", len(spans), names(spans))
	}
	request := byName(t, spans, "POST /route-thompson")
	if request.Parent() != callerSpan || !strings.Contains(parent, request.SpanID()) {
		t.Errorf("the request's span %s hangs from %q, want the caller's %s (and the answer's traceparent %s names it)",
			request.SpanID(), request.Parent(), callerSpan, parent)
	}
	ra := request.Attrs()
	if request.GetKind().String() != "SPAN_KIND_SERVER" || ra["http.response.status_code"] != int64(200) || ra["http.route"] != "/route-thompson" ||
		ra["conclave.request_id"] != answer.RequestID || ra["gen_ai.usage.input_tokens"] != int64(exec.Usage.InputTokens) {
		t.Errorf("the request's span: kind %v, attributes %v", request.GetKind(), ra)
	}
	if request.Resource["service.name"] != "conclave" || request.Resource["service.instance.id"] != "node-1" || request.Scope == "" {
		t.Errorf("resource %v, scope %q", request.Resource, request.Scope)
	}
	phases := map[string]otlptest.Span{}
	for _, name := range []string{"classify", "select", "collect", "consensus"} {
		phases[name] = byName(t, spans, name)
		if p := phases[name]; p.Parent() != request.SpanID() || p.GetKind().String() != "SPAN_KIND_INTERNAL" {
			t.Errorf("%s hangs from %s (kind %v), want the request's span %s", name, p.Parent(), p.GetKind(), request.SpanID())
		}
	}
	if a := phases["select"].Attrs(); a["conclave.strategy"] != "majority" || len(a["conclave.selection.models"].([]any)) != 6 {
		t.Errorf("select's attributes %v", a)
	}
	var calls []string
	for _, r := range exec.Results {
		call := byName(t, spans, "chat "+r.Model)
		a := call.Attrs()
		want := map[string]any{"gen_ai.operation.name": "chat", "gen_ai.provider.name": r.Provider, "gen_ai.request.model": r.Model,
			"gen_ai.usage.input_tokens": int64(r.GetUsage().GetInputTokens()), "gen_ai.usage.output_tokens": int64(r.GetUsage().GetOutputTokens()),
			"conclave.call.job_id": r.JobId}
		for k, v := range want {
			if a[k] != v {
				t.Errorf("%s: %s = %v, want %v (attributes %v)", call.GetName(), k, a[k], v, a)
			}
		}
		if r.GetUsage().GetInputTokens() == 0 || r.GetUsage().GetOutputTokens() == 0 {
			t.Errorf("call %s counted no tokens: %v", r.Model, r.Usage)
		}
		if call.Parent() != phases["collect"].SpanID() || call.GetKind().String() != "SPAN_KIND_CLIENT" {
			t.Errorf("%s hangs from %s (kind %v), want collect's span", call.GetName(), call.Parent(), call.GetKind())
		}
		if _, failed := a["error.type"]; failed {
			t.Errorf("%s says it failed: %v", call.GetName(), a)
		}
		calls = append(calls, r.Model)
	}
	if slices.Sort(calls); len(slices.Compact(calls)) != 6 {
		t.Errorf("the six calls are of %v", calls)
	}
}

// TestTheArbitersCallHangsUnderConsensus: a rotating arbiter's call is a model call of its own, under
// consensus, with the arbiter's role.
func TestTheArbitersCallHangsUnderConsensus(t *testing.T) {
	rcv := otlptest.Start(t)
	otlptest.Env(t, rcv.Endpoint())
	traced, tr := withTracing(t, nil)
	tb := newTestbed(t, nil, traced)
	resp, raw := tb.postTraced("/route-thompson", jsonOf(t, map[string]any{"task": mcq, "workers": 3, "strategy": "rotating"}), callerParent)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var answer struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		t.Fatal(err)
	}
	d := tb.execution(answer.RequestID).GetDecision()
	if d.GetArbiterModel() == "" || d.GetArbiterProvider() == "" || d.GetArbiterStartedMs() <= 0 {
		t.Fatalf("the record's arbiter: %v", d)
	}
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Trace(t, callerTrace, 1+4+3+1)
	consensus := byName(t, spans, "consensus")
	var arbiter []otlptest.Span
	for _, s := range spans {
		if s.Parent() == consensus.SpanID() {
			arbiter = append(arbiter, s)
		}
	}
	if len(arbiter) != 1 || arbiter[0].GetName() != "chat "+d.ArbiterModel || arbiter[0].Attrs()["conclave.call.role"] != "arbiter" ||
		arbiter[0].Attrs()["gen_ai.provider.name"] != d.ArbiterProvider {
		t.Fatalf("under consensus: %v", names(arbiter))
	}
}

// TestAStreamNamesItsTraceUpFront: a streamed answer's headers, which go out before its first piece,
// name its trace; a direct call's trace has no classify or consensus, and its call hangs under collect.
func TestAStreamNamesItsTraceUpFront(t *testing.T) {
	rcv := otlptest.Start(t)
	otlptest.Env(t, rcv.Endpoint())
	traced, tr := withTracing(t, nil)
	tb := newTestbed(t, nil, traced)
	model := groqModels[0]
	req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model": "`+model+`", "stream": true, "messages": [{"role": "user", "content": "Say hello"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", callerParent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Trace-Id") != callerTrace ||
		!strings.HasPrefix(resp.Header.Get("Traceparent"), "00-"+callerTrace+"-") {
		t.Fatalf("a stream's headers: %v", resp.Header)
	}
	var last string
	for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
		if sc.Text() != "" {
			last = sc.Text()
		}
	}
	if last != "data: [DONE]" {
		t.Fatalf("the stream ended with %q", last)
	}
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Trace(t, callerTrace, 4)
	if got := names(spans); !slices.Equal(got, []string{"POST /v1/chat/completions", "chat " + model, "collect", "select"}) {
		t.Fatalf("spans %v", got)
	}
	if byName(t, spans, "chat "+model).Parent() != byName(t, spans, "collect").SpanID() {
		t.Error("the call does not hang under collect")
	}
}

// TestEveryDoorToThePipelineNamesItsTrace: each door that reaches the pipeline takes the caller's
// traceparent and names the trace in its answer, whatever the answer; a caller that is not
// authenticated makes no span, and the endpoints that only read are not traced.
func TestEveryDoorToThePipelineNamesItsTrace(t *testing.T) {
	rcv := otlptest.Start(t)
	otlptest.Env(t, rcv.Endpoint())
	traced, _ := withTracing(t, nil)
	tb := newTestbed(t, func(c *config.Config) { c.APIToken = secret.String("trace-token-0123456") }, traced)
	doors := []struct{ path, body string }{
		{"/route-thompson", `{"task": "Is 2^10 larger than 10^3?", "workers": 2}`},
		{"/v1/chat/completions", `{"model": "conclave/auto", "messages": [{"role": "user", "content": "Is 2^10 larger than 10^3?"}]}`},
		{"/v1/responses", `{"model": "conclave/auto", "input": "Is 2^10 larger than 10^3?"}`},
		{"/v1/messages", `{"model": "conclave/auto", "max_tokens": 64, "messages": [{"role": "user", "content": "Is 2^10 larger than 10^3?"}]}`},
		{"/v1/embeddings", `{"model": "no-such-embedder", "input": "hi"}`}, // refused: the trace is named all the same
		{"/route-thompson", `{"task": ""}`},
	}
	for _, d := range doors {
		resp, raw := tb.postTraced(d.path, d.body, callerParent)
		if got := resp.Header.Get("X-Trace-Id"); got != callerTrace || !strings.HasPrefix(resp.Header.Get("Traceparent"), "00-"+callerTrace+"-") {
			t.Errorf("POST %s (%d %.80s): X-Trace-Id %q, traceparent %q", d.path, resp.StatusCode, raw, got, resp.Header.Get("Traceparent"))
		}
	}
	token := tb.token
	tb.token = "not-the-token-0123456789"
	if resp, _ := tb.postTraced("/route-thompson", doors[0].body, callerParent); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("X-Trace-Id") != "" {
		t.Errorf("an unauthenticated caller: %d, X-Trace-Id %q", resp.StatusCode, resp.Header.Get("X-Trace-Id"))
	}
	tb.token = token
	resp, _ := tb.do(http.MethodGet, "/executions", nil, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Trace-Id") != "" {
		t.Errorf("GET /executions: %d, X-Trace-Id %q", resp.StatusCode, resp.Header.Get("X-Trace-Id"))
	}
}

// TestWithoutAnEndpointNothingIsTraced: without OTEL_EXPORTER_OTLP_ENDPOINT there is no tracer: the
// answer names no trace, the record keeps none, and the caller's traceparent is not taken up.
func TestWithoutAnEndpointNothingIsTraced(t *testing.T) {
	otlptest.Env(t, "")
	tr, err := tracing.New(context.Background(), tracing.Options{})
	if err != nil || tr != nil {
		t.Fatalf("without an endpoint: tracing %v, %v", tr, err)
	}
	tb := newTestbed(t, nil)
	resp, raw := tb.postTraced("/route-thompson", jsonOf(t, map[string]any{"task": mcq, "workers": 3}), callerParent)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	for _, h := range []string{"X-Trace-Id", "Traceparent"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("%s: %q", h, v)
		}
	}
	var answer struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		t.Fatal(err)
	}
	if exec := tb.execution(answer.RequestID); exec.TraceId != "" {
		t.Errorf("the record names trace %q", exec.TraceId)
	}
	// A caller inside the process that sets trace_parent itself is not traced either.
	exec, err := tb.engine.Route(context.Background(), &messages.RouteRequest{RequestId: "in-process", Task: mcq, TraceParent: callerParent})
	if err != nil || exec.TraceId != "" {
		t.Errorf("an in-process request: %v, trace %q", err, exec.GetTraceId())
	}
}

// TestExportFailuresAreLoggedAndBounded: a receiver that refuses the spans costs the requests nothing;
// the failures are logged as trace_export_failed, once for a burst.
func TestExportFailuresAreLoggedAndBounded(t *testing.T) {
	rcv := otlptest.Start(t)
	rcv.FailWith(http.StatusBadRequest) // not retried: each export fails at once
	otlptest.Env(t, rcv.Endpoint())
	core, logs := observer.New(zap.InfoLevel)
	traced, tr := withTracing(t, zap.New(core))
	tb := newTestbed(t, nil, traced)
	for i := range 3 {
		if resp, raw := tb.postTraced("/route-thompson", jsonOf(t, map[string]any{"task": fmt.Sprint(mcq, i), "workers": 2}), ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, raw)
		}
		if err := tr.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if rcv.Requests() < 3 {
		t.Fatalf("%d exports reached the receiver", rcv.Requests())
	}
	lines := logs.FilterField(zap.String("event", "trace_export_failed")).All()
	if len(lines) != 1 {
		t.Fatalf("%d trace_export_failed lines for 3 failures in a row, want 1", len(lines))
	}
	if f := lines[0].ContextMap(); f["failures"] != int64(1) || f["spans"] == nil || f["error"] == nil {
		t.Errorf("the line: %v", f)
	}
}
