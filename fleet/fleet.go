// Package fleet owns the worker hosts: their specification, the transport that runs a job on one
// (in-process here, SSH for remote hosts), and the assignment of selected models to workers.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conclave-ai/conclave/providers"
	"github.com/conclave-ai/conclave/resilience"
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

// Snapshot is an immutable view of a worker, published by its actor for assignment.
type Snapshot struct {
	Name     string              `json:"name"`
	Tier     int                 `json:"tier"`
	Slots    int                 `json:"slots"`
	InFlight int                 `json:"in_flight"`
	Queued   int                 `json:"queued"`
	Breaker  resilience.Snapshot `json:"breaker"`
	// Completed and Failed count the jobs the worker finished since it started.
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	// Transport is the connection to a remote host (connected, reconnecting, down; empty in process)
	// and TransportError the last failure.
	Transport      Health `json:"transport,omitempty"`
	TransportError string `json:"transport_error,omitempty"`
	// Stopped, when not empty, is the last crash of the worker's actor, which its supervisor stopped for
	// good after too many: the worker takes no job until Conclave restarts.
	Stopped string `json:"stopped,omitempty"`
}

// Available reports whether the worker takes jobs at now: its actor runs and its breaker is not open,
// or its open period has passed (so the breaker admits a probe).
func (s Snapshot) Available(now time.Time) bool {
	return s.Stopped == "" && (s.Breaker.State != resilience.Open || !now.Before(s.Breaker.OpenUntil))
}

func (s Snapshot) load() float64 {
	return float64(s.InFlight+s.Queued) / float64(max(s.Slots, 1))
}

// Rejection records why a worker was not considered.
type Rejection struct {
	Worker string `json:"worker"`
	Reason string `json:"reason"`
}

// ErrNoWorkers is returned when no worker can take a job.
var ErrNoWorkers = errors.New("all workers offline")

// Assign maps n jobs to workers. Heavy tasks go to the lowest tier with a free slot (tier 1 first);
// light tasks spread evenly, each to the least loaded worker. Workers with an open breaker or a stopped
// actor, and those excluded (the workers a retry must avoid), are rejected with the reason recorded. When every
// remaining worker is full the least loaded still gets the job, which queues on it.
func Assign(workers []Snapshot, n int, heavy bool, now time.Time, exclude func(string) bool) ([]string, []Rejection, error) {
	var candidates []Snapshot
	var rejected []Rejection
	for _, w := range workers {
		switch {
		case exclude != nil && exclude(w.Name):
			rejected = append(rejected, Rejection{w.Name, "excluded"})
		case w.Stopped != "":
			rejected = append(rejected, Rejection{w.Name, "stopped"})
		case !w.Available(now):
			rejected = append(rejected, Rejection{w.Name, "breaker_open"})
		default:
			candidates = append(candidates, w)
		}
	}
	if len(candidates) == 0 {
		return nil, rejected, ErrNoWorkers
	}
	out := make([]string, n)
	for i := range out {
		best := 0
		for c := 1; c < len(candidates); c++ {
			if less(candidates[c], candidates[best], heavy) {
				best = c
			}
		}
		out[i] = candidates[best].Name
		candidates[best].InFlight++
	}
	return out, rejected, nil
}

func less(a, b Snapshot, heavy bool) bool {
	aFree, bFree := a.InFlight+a.Queued < a.Slots, b.InFlight+b.Queued < b.Slots
	if aFree != bFree {
		return aFree
	}
	if heavy && a.Tier != b.Tier {
		return a.Tier < b.Tier
	}
	if la, lb := a.load(), b.load(); la != lb {
		return la < lb
	}
	return a.Name < b.Name
}
