package tracing

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/testenv/otlptest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestEnabled(t *testing.T) {
	const endpoint = "http://127.0.0.1:4318"
	cases := []struct {
		name    string
		env     map[string]string
		on      bool
		problem string // in the error, when there is one
	}{
		{"nothing set: off", nil, false, ""},
		{"an endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, true, ""},
		{"the traces' own endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint + "/v1/traces"}, true, ""},
		{"the SDK disabled wins over an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "TRUE"}, false, ""},
		{"OTEL_SDK_DISABLED other than true is not disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "no"}, true, ""},
		{"the exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "none"}, false, ""},
		{"the exporter otlp", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"an exporter Conclave has not", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER"},
		{"gRPC is not spoken", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"the traces' protocol wins over the general one", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, true, ""},
		{"JSON over HTTP", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, true, ""},
		{"a protocol without an endpoint is off", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			on, err := Enabled(func(name string) string { return tc.env[name] })
			switch {
			case tc.problem == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)):
				t.Fatalf("error %v, want one naming %s", err, tc.problem)
			case on != tc.on:
				t.Fatalf("on %v, want %v", on, tc.on)
			}
		})
	}
}

func TestTheLogNamesTheEndpointWithoutItsCredentials(t *testing.T) {
	cases := []struct{ name, base, traces, want string }{
		{"the base URL gets the traces' path", "https://collector:4318/", "", "https://collector:4318/v1/traces"},
		{"the traces' own URL as it is", "https://a:4318", "https://b:4318/custom", "https://b:4318/custom"},
		{"user information left out", "https://user:secret@collector:4318", "", "https://collector:4318/v1/traces"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": tc.base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": tc.traces}
			if got := endpoint(func(name string) string { return env[name] }); got != tc.want {
				t.Errorf("endpoint %q, want %q", got, tc.want)
			}
		})
	}
}

// TestARequestJoinsItsCallersTraceOrStartsOne: a valid traceparent parents the request's span, in the
// caller's trace; anything else starts a new trace. The answer's headers name the span.
func TestARequestJoinsItsCallersTraceOrStartsOne(t *testing.T) {
	rcv := otlptest.Start(t)
	otlptest.Env(t, rcv.Endpoint())
	tr, err := New(context.Background(), Options{})
	if err != nil || tr == nil {
		t.Fatalf("tracing %v, %v", tr, err)
	}
	defer tr.Shutdown(context.Background())
	const caller = "4bf92f3577b34da6a3ce929d0e0e4736"
	cases := []struct {
		name, traceparent string
		joins             bool
	}{
		{"a caller's span", "00-" + caller + "-00f067aa0ba902b7-01", true},
		{"a caller's span not sampled", "00-" + caller + "-00f067aa0ba902b7-00", true},
		{"nothing", "", false},
		{"a malformed one", "00-" + caller + "-00f067aa0ba902b7", false},
		{"a zero trace", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, span := tr.Start(context.Background(), "route", tc.traceparent)
			defer span.End()
			sc := span.SpanContext()
			joins := sc.TraceID().String() == caller
			if ro, recorded := span.(sdktrace.ReadOnlySpan); recorded { // a span not sampled records no parent
				joins = joins && ro.Parent().SpanID().String() == "00f067aa0ba902b7"
			}
			if joins != tc.joins || !sc.IsValid() {
				t.Fatalf("span %v: joins %v, want %v", sc, joins, tc.joins)
			}
			h := http.Header{}
			Headers(h, sc)
			if h.Get(TraceIDHeader) != sc.TraceID().String() || h.Get("Traceparent") != TraceParent(sc) ||
				!strings.HasPrefix(TraceParent(sc), "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-") {
				t.Fatalf("headers %v for %v", h, sc)
			}
		})
	}
	h := http.Header{}
	Headers(h, trace.SpanContext{})
	if TraceParent(trace.SpanContext{}) != "" || len(h) != 0 {
		t.Errorf("an invalid span context named in %v", h)
	}
}

// TestOffIsNil: without an endpoint New makes nothing, and shutting nothing down is no error.
func TestOffIsNil(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, err := New(context.Background(), Options{})
	if tr != nil || err != nil {
		t.Fatalf("tracing %v, %v", tr, err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
