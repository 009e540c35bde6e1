// Package tracing exports Conclave's traces over OTLP/HTTP with the OpenTelemetry SDK, configured by
// the standard OTEL_* variables. Without an endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), or with OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none,
// there is no tracer at all: New returns nil, and every caller checks for nil before it does anything,
// so a request makes no span, no trace id and no allocation for them.
//
// A request's own span is live (the door that took it starts and ends it); the spans below it are
// built from its finished record by internal/core/tracing and emitted here with their explicit times,
// so that nothing on the actors' path touches a tracer.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	coretracing "github.com/conclave-ai/conclave/internal/core/tracing"
	"github.com/conclave-ai/conclave/messages"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// TraceIDHeader names the response header that carries a request's trace id (32 hex digits), beside
// its traceparent.
const TraceIDHeader = "X-Trace-Id"

// ScopeName is the instrumentation scope of Conclave's spans.
const ScopeName = "github.com/conclave-ai/conclave"

// Options are what the tracer provider says of the process beyond the environment.
type Options struct {
	Log     *zap.Logger
	Version string // service.version
	NodeID  string // service.instance.id
}

// Tracing is a running tracer provider and its tracer.
type Tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// Enabled reads the environment (getenv) as OpenTelemetry's SDKs do and says whether traces are
// exported: an OTLP endpoint is set, the SDK is not disabled and the traces' exporter is OTLP (or
// unset). An exporter or a protocol Conclave does not have is an error, not a silent default.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "none":
		return false, nil
	case "", "otlp":
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: traces are exported with otlp only (or none)", exporter)
	}
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return false, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch protocol := strings.TrimSpace(getenv(name)); protocol {
		case "":
			continue
		case "http/protobuf", "http/json":
		default:
			return false, fmt.Errorf("%s=%q: traces are exported over OTLP/HTTP (http/protobuf or http/json)", name, protocol)
		}
		break // the traces' own variable takes precedence
	}
	return true, nil
}

// New starts the tracer provider the environment describes: an OTLP/HTTP exporter (which reads the
// OTEL_EXPORTER_OTLP_* variables itself) behind a batch processor (OTEL_BSP_*), the sampler of
// OTEL_TRACES_SAMPLER (parent-based, always on by default), and a resource named conclave unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise. It returns nil when traces are off.
func New(ctx context.Context, opts Options) (*Tracing, error) {
	on, err := Enabled(os.Getenv)
	if err != nil || !on {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = zap.NewNop()
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("traces: OTLP exporter: %w", err)
	}
	own := []attribute.KeyValue{attribute.String("service.name", "conclave")}
	if opts.Version != "" {
		own = append(own, attribute.String("service.version", opts.Version))
	}
	if opts.NodeID != "" {
		own = append(own, attribute.String("service.instance.id", opts.NodeID))
	}
	// Later detectors win: the environment's names over Conclave's defaults.
	res, err := resource.New(ctx, resource.WithAttributes(own...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && res == nil {
		return nil, fmt.Errorf("traces: resource: %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(&logged{SpanExporter: exp, log: log}), sdktrace.WithResource(res))
	log.Info("traces exported", zap.String("event", "traces_exporting"), zap.String("endpoint", endpoint(os.Getenv)))
	return &Tracing{provider: provider, tracer: provider.Tracer(ScopeName)}, nil
}

// endpoint is where the traces go, as the log names it: the URL without user information.
func endpoint(getenv func(string) string) string {
	e := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if e == "" {
		e = strings.TrimSuffix(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "/") + "/v1/traces"
	}
	u, err := url.Parse(e)
	if err != nil {
		return "(not a URL)"
	}
	u.User = nil
	return u.String()
}

// Shutdown exports the spans still queued and stops the provider; nil does nothing.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("traces: shutdown: %w", err)
	}
	return nil
}

// ForceFlush exports the spans ended so far (tests read them at once).
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.provider.ForceFlush(ctx); err != nil {
		return fmt.Errorf("traces: flush: %w", err)
	}
	return nil
}

// propagator reads and writes W3C traceparent headers.
var propagator = propagation.TraceContext{}

// StartHTTP starts the span of a request that came in over HTTP (name is its method and route), as a
// child of the caller's traceparent when it sent a valid one.
func (t *Tracing) StartHTTP(r *http.Request, method, route string) (context.Context, trace.Span) {
	ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	return t.tracer.Start(ctx, method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", method), attribute.String("http.route", route)))
}

// EndHTTP ends a request's span with its answer's status: a 5xx is an error of the server's, a 4xx
// is the caller's and not the span's (OpenTelemetry's HTTP conventions).
func EndHTTP(span trace.Span, status int) {
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(status))
	}
	span.End()
}

// Start starts the span of a request that came in without one (through the remote door, or a caller
// inside the process): a child of traceparent when it is a valid one, a new trace otherwise.
func (t *Tracing) Start(ctx context.Context, name, traceparent string) (context.Context, trace.Span) {
	if traceparent != "" {
		ctx = propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
}

// End ends a span that Start started with its request's status.
func End(span trace.Span, status int) {
	if status >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(status))
	}
	span.End()
}

// TraceParent is a span's context as a W3C traceparent header (version 00).
func TraceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// Headers sets a response's traceparent and X-Trace-Id to the request's span, so that a caller
// finds its trace whatever the answer, and a stream's headers name it before the first byte.
func Headers(h http.Header, sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	h.Set("Traceparent", TraceParent(sc))
	h.Set(TraceIDHeader, sc.TraceID().String())
}

// Record tells the request's span (the one in ctx) what its record says, and emits the spans below
// it that the record describes (internal/core/tracing), with their own times. A span that is not
// sampled is left alone.
func (t *Tracing) Record(ctx context.Context, exec *messages.Execution) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() || exec == nil {
		return
	}
	attrs, _ := coretracing.Request(exec)
	span.SetAttributes(kvs(attrs)...)
	spans := coretracing.Spans(exec)
	parents := make([]context.Context, len(spans))
	for i, s := range spans {
		parent := ctx
		if s.Parent != coretracing.Root {
			parent = parents[s.Parent]
		}
		kind := trace.SpanKindInternal
		if s.Kind == coretracing.Client {
			kind = trace.SpanKindClient
		}
		c, child := t.tracer.Start(parent, s.Name, trace.WithTimestamp(s.Start), trace.WithSpanKind(kind), trace.WithAttributes(kvs(s.Attrs)...))
		if s.Error != "" {
			child.SetStatus(codes.Error, s.Error)
		}
		child.End(trace.WithTimestamp(s.End))
		parents[i] = c
	}
}

// kvs are attributes as OpenTelemetry's.
func kvs(attrs []coretracing.Attr) []attribute.KeyValue {
	out := make([]attribute.KeyValue, len(attrs))
	for i, a := range attrs {
		switch a.Type {
		case coretracing.Int:
			out[i] = attribute.Int64(a.Key, a.Int)
		case coretracing.Float:
			out[i] = attribute.Float64(a.Key, a.Float)
		case coretracing.Bool:
			out[i] = attribute.Bool(a.Key, a.Bool)
		case coretracing.Strings:
			out[i] = attribute.StringSlice(a.Key, a.Strs)
		default:
			out[i] = attribute.String(a.Key, a.Str)
		}
	}
	return out
}

// logged is the exporter whose failures are logged as trace_export_failed: the first, then at most one
// line every FailureLogInterval with the failures since. The failure goes no further (the batch is
// dropped, as the SDK would drop it), so that OpenTelemetry's own handler does not print it again.
type logged struct {
	sdktrace.SpanExporter
	log *zap.Logger

	mu       sync.Mutex
	failures int64 // all so far
	unlogged int64 // since the last line
	lastLine time.Time
}

// FailureLogInterval is the least time between two trace_export_failed lines.
const FailureLogInterval = 10 * time.Second

func (l *logged) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := l.SpanExporter.ExportSpans(ctx, spans)
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	now := time.Now()
	l.mu.Lock()
	l.failures++
	l.unlogged++
	logIt := l.lastLine.IsZero() || now.Sub(l.lastLine) >= FailureLogInterval
	failures, since := l.failures, l.unlogged
	if logIt {
		l.lastLine, l.unlogged = now, 0
	}
	l.mu.Unlock()
	if logIt {
		l.log.Warn("spans not exported", zap.String("event", "trace_export_failed"), zap.Int("spans", len(spans)),
			zap.Int64("failures", failures), zap.Int64("since_last_line", since), zap.Error(err))
	}
	return nil
}
