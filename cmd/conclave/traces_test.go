package main

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/conclave-ai/conclave/internal/testenv/otlptest"
	"github.com/conclave-ai/conclave/internal/testenv/sshtest"
)

// TestARemoteCallersTraceParentsTheRequest: conclave serve, told by the OTEL_* variables to export
// traces to a loopback OTLP receiver, takes a route request from another node over the remote door
// (conclave route --remote --traceparent): the request's span hangs from the caller's span, in the
// caller's trace, with its phases and calls below it, and the record names the trace.
func TestARemoteCallersTraceParentsTheRequest(t *testing.T) {
	const (
		trace  = "0af7651916cd43dd8448eb211c80319c"
		parent = "b7ad6b7169203331"
	)
	rcv := otlptest.Start(t)
	bin := sshtest.BuildConclave(t, t.TempDir())
	srv := serveProcess(t, bin, []string{"CONCLAVE_API_TOKEN=" + remoteToken, "OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.Endpoint(),
		"OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SDK_DISABLED=", "OTEL_TRACES_EXPORTER=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=",
		"OTEL_EXPORTER_OTLP_PROTOCOL=", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=", "OTEL_TRACES_SAMPLER=", "OTEL_SERVICE_NAME="},
		io.Discard, "--remote", "127.0.0.1:0", "--sim-latency-scale", "0")
	out, err := remoteClient(bin, srv.remote, "--json", "--token", remoteToken, "--category", "general", "--workers", "3",
		"--traceparent", "00-"+trace+"-"+parent+"-01", "Which is larger?\nA) 2^10\nB) 10^3")
	if err != nil {
		t.Fatal(err)
	}
	spans := rcv.Trace(t, trace, 1+4+3) // the request's, its four phases (a named category is still measured), its three calls
	var request otlptest.Span
	for _, s := range spans {
		if s.GetName() == "route" {
			request = s
		}
	}
	if request.Span == nil || request.Parent() != parent || request.Resource["service.name"] != "conclave" {
		t.Fatalf("the request's span %v (resource %v) in %d spans: want one named route under the caller's %s", request.Span, request.Resource, len(spans), parent)
	}
	below := map[string]int{}
	for _, s := range spans {
		if s.Parent() == request.SpanID() {
			below[s.GetName()]++
		}
	}
	for _, phase := range []string{"classify", "select", "collect", "consensus"} {
		if below[phase] != 1 {
			t.Errorf("%d %s spans under the request's: %v", below[phase], phase, below)
		}
	}
	var record struct {
		TraceID string `json:"trace_id"`
	}
	if err := json.Unmarshal([]byte(out), &record); err != nil || record.TraceID != trace {
		t.Errorf("the record's trace_id %q (%v), want %s", record.TraceID, err, trace)
	}
}
