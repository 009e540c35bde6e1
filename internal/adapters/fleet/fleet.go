// Package fleet owns the worker hosts: their specification, the transport that runs a job on one
// (in-process here, SSH for remote hosts) and its health.
package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// WorkerSpec describes one worker host.
type WorkerSpec struct {
	Name string `json:"name"`
	// Tier 1 hosts are preferred for compute-heavy tasks.
	Tier int `json:"tier"`
	// Slots is how many jobs the host runs at once; more are queued on it.
	Slots int `json:"slots"`
}

// DefaultSlots is a worker's capacity when not configured.
const DefaultSlots = 16

// DefaultWorkers returns n in-process workers: a quarter in tier 1, three eighths in tier 2 and the
// rest in tier 3 (at least one tier-1 worker), named worker-01, worker-02, ...
func DefaultWorkers(n, slots int) []WorkerSpec {
	if slots <= 0 {
		slots = DefaultSlots
	}
	tier1 := max(1, n/4)
	tier2 := n * 3 / 8
	out := make([]WorkerSpec, n)
	for i := range out {
		tier := 3
		switch {
		case i < tier1:
			tier = 1
		case i < tier1+tier2:
			tier = 2
		}
		out[i] = WorkerSpec{Name: fmt.Sprintf("worker-%02d", i+1), Tier: tier, Slots: slots}
	}
	return out
}

// Transport runs a job on a worker host and returns the provider's reply. Errors are classified
// (*resilience.Error); a transport failure of the host itself is SSHRefused or HostTimeout.
type Transport interface {
	Run(ctx context.Context, call providers.Call) (providers.Reply, error)
	Close() error
}

// Streamer is a Transport that relays a streamed call's pieces as they come (providers.Streamer).
type Streamer interface {
	Stream(ctx context.Context, call providers.Call, onDelta func(providers.Delta)) (providers.Reply, error)
}

// Stream runs a call through a transport, streaming when it can; otherwise the whole answer is one
// piece, reported when it comes.
func Stream(ctx context.Context, t Transport, call providers.Call, onDelta func(providers.Delta)) (providers.Reply, error) {
	if s, ok := t.(Streamer); ok {
		return s.Stream(ctx, call, onDelta)
	}
	return providers.Stream(ctx, runner{t}, call, onDelta)
}

// runner is a transport seen as a backend that cannot stream.
type runner struct{ t Transport }

func (r runner) Complete(ctx context.Context, call providers.Call) (providers.Reply, error) {
	return r.t.Run(ctx, call)
}

// InProcess runs jobs in the controller's own process against a backend: the embedded default.
type InProcess struct {
	Backend providers.Backend
}

// Run implements Transport.
func (t InProcess) Run(ctx context.Context, call providers.Call) (providers.Reply, error) {
	return t.Backend.Complete(ctx, call)
}

// Stream implements Streamer.
func (t InProcess) Stream(ctx context.Context, call providers.Call, onDelta func(providers.Delta)) (providers.Reply, error) {
	return providers.Stream(ctx, t.Backend, call, onDelta)
}

// Close implements Transport.
func (InProcess) Close() error { return nil }

// ClassifyError maps a job's error to a kind: a call that ran out of its deadline is an upstream
// timeout (the provider did not answer in time), a cancelled one cancelled, classified errors keep their
// kind, anything else is internal.
func ClassifyError(err error) resilience.Kind {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded):
		return resilience.UpstreamTimeout
	case errors.Is(err, context.Canceled):
		return resilience.Cancelled
	}
	return resilience.KindOf(err)
}
