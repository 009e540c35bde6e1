// Package otlptest is an OTLP/HTTP trace receiver on loopback: it takes POST /v1/traces as a
// collector does, decodes the official protobuf (ExportTraceServiceRequest, gzip or not) and keeps
// every span, so that a test reads the traces a server exported over the wire, as a collector would.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span with what it came with.
type Span struct {
	*tracepb.Span
	// Resource and Scope are the attributes of the resource and the scope's name the span came under.
	Resource map[string]any
	Scope    string
}

// TraceID and SpanID are the span's ids in hex; Parent is its parent's ("" for a root).
func (s Span) TraceID() string { return hex.EncodeToString(s.GetTraceId()) }
func (s Span) SpanID() string  { return hex.EncodeToString(s.GetSpanId()) }
func (s Span) Parent() string  { return hex.EncodeToString(s.GetParentSpanId()) }

// Attrs are the span's attributes as Go values: string, int64, float64, bool or []any.
func (s Span) Attrs() map[string]any { return values(s.GetAttributes()) }

// Receiver is a running receiver.
type Receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	spans    []Span
	requests int
	failWith int  // a status to answer instead of taking the spans (0: take them)
	discard  bool // read each export and answer it, without decoding or keeping it
}

// Start starts a receiver, closed when the test ends.
func Start(t testing.TB) *Receiver { return start(t, &Receiver{}) }

// StartDiscarding starts a receiver that takes every export and keeps nothing but their count: a
// benchmark's, which measures the exporting side, not the collector.
func StartDiscarding(t testing.TB) *Receiver { return start(t, &Receiver{discard: true}) }

func start(t testing.TB, r *Receiver) *Receiver {
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// Env sets the environment as an operator would to export traces to endpoint ("" for none), and
// clears the other OTEL_* variables the SDK reads. Tests that call it cannot run in parallel.
func Env(t testing.TB, endpoint string) {
	t.Helper()
	for _, name := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(name, "")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
}

// Endpoint is the receiver's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it.
func (r *Receiver) Endpoint() string { return r.srv.URL }

// FailWith makes the receiver answer every export with status (0 takes them again).
func (r *Receiver) FailWith(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failWith = status
}

// Requests counts the exports received, taken or not.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces of application/x-protobuf", http.StatusNotFound)
		return
	}
	if r.discard {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.requests++
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.requests++
	fail := r.failWith
	if fail == 0 {
		for _, rs := range export.ResourceSpans {
			resource := values(rs.GetResource().GetAttributes())
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					r.spans = append(r.spans, Span{Span: s, Resource: resource, Scope: ss.GetScope().GetName()})
				}
			}
		}
	}
	r.mu.Unlock()
	if fail != 0 {
		http.Error(w, "refused by the test", fail)
		return
	}
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans are the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Trace waits until at least n spans of the trace have come (at most 10 s), and returns them.
func (r *Receiver) Trace(t testing.TB, traceID string, n int) []Span {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got []Span
		for _, s := range r.Spans() {
			if s.TraceID() == traceID {
				got = append(got, s)
			}
		}
		if len(got) >= n || time.Now().After(deadline) {
			if len(got) < n {
				t.Fatalf("trace %s: %d spans came, want %d", traceID, len(got), n)
			}
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func values(kvs []*commonpb.KeyValue) map[string]any {
	out := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		out[kv.Key] = value(kv.GetValue())
	}
	return out
}

func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_ArrayValue:
		out := make([]any, len(x.ArrayValue.GetValues()))
		for i, e := range x.ArrayValue.GetValues() {
			out[i] = value(e)
		}
		return out
	}
	return nil
}
