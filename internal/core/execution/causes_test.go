package execution

import (
	"testing"

	"github.com/conclave-ai/conclave/internal/core/collect"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
)

func TestCausesNameEachModelsLastFailure(t *testing.T) {
	slot := func(i int, model, provider string) *collect.Slot {
		return &collect.Slot{Index: i, Model: model, Provider: provider}
	}
	a, b, c, d, e := slot(0, "qwen-a", "local"), slot(1, "qwen-b", "local"), slot(2, "gpt", "openrouter"), slot(3, "haiku", "anthropic"), slot(4, "flash", "gemini")
	result := func(kind resilience.Kind, msg string) *messages.JobResult {
		return &messages.JobResult{ErrorKind: string(kind), ErrorMessage: msg}
	}
	rec := func(s *collect.Slot, st collect.Status, kind resilience.Kind, ref any) *collect.Record {
		return &collect.Record{Job: &collect.Job{Slot: s}, Status: st, Kind: kind, Ref: ref}
	}
	records := []*collect.Record{
		// qwen-a failed twice: its last call is named.
		rec(a, collect.Error, resilience.ProviderUnavailable, result(resilience.ProviderUnavailable, "provider_unavailable provider=local model=qwen-a status=503: overloaded")),
		rec(b, collect.Error, resilience.ConnectionRefused, result(resilience.ConnectionRefused, "connection_refused provider=local model=qwen-b: 127.0.0.1:9999")),
		rec(a, collect.Error, resilience.ConnectionRefused, result(resilience.ConnectionRefused, "connection_refused provider=local model=qwen-a: 127.0.0.1:9999")),
		rec(d, collect.NotSent, "permit_breaker_open", nil),
		rec(c, collect.OK, "", &messages.JobResult{Ok: true, Text: "B"}),
		rec(e, collect.Timeout, resilience.HostTimeout, result(resilience.HostTimeout, "the worker host did not return the call within its budget")),
	}
	fault := func(p string) string {
		if p == "anthropic" {
			return "connection_refused: 10.0.0.9:443"
		}
		return ""
	}
	tests := []struct{ model, cause string }{
		{"qwen-a", "connection_refused: 127.0.0.1:9999"},
		{"qwen-b", "connection_refused: 127.0.0.1:9999"},
		{"haiku", "provider_breaker_open after connection_refused: 10.0.0.9:443"},
		{"flash", "host_timeout: the worker host did not return the call within its budget"},
	}
	got := Causes(records, fault)
	if len(got) != len(tests) {
		t.Fatalf("causes %v: want one per model without an answer", got)
	}
	for i, tt := range tests {
		if got[i].Field != tt.model || got[i].Message != tt.cause {
			t.Errorf("cause %d: %s %q, want %s %q", i, got[i].Field, got[i].Message, tt.model, tt.cause)
		}
	}
}
