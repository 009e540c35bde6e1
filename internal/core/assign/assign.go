// Package assign owns step 5 of a request: which worker host runs each selected model's job. It reads
// the workers' published snapshots and decides; it does no I/O.
package assign

import (
	"errors"
	"time"

	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// Worker is an immutable view of a worker, published by its actor for assignment.
type Worker struct {
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
	Transport      string `json:"transport,omitempty"`
	TransportError string `json:"transport_error,omitempty"`
	// Stopped, when not empty, is the last crash of the worker's actor, which its supervisor stopped for
	// good after too many: the worker takes no job until Conclave restarts.
	Stopped string `json:"stopped,omitempty"`
}

// Available reports whether the worker takes jobs at now: its actor runs and its breaker is not open,
// or its open period has passed (so the breaker admits a probe).
func (s Worker) Available(now time.Time) bool {
	return s.Stopped == "" && (s.Breaker.State != resilience.Open || !now.Before(s.Breaker.OpenUntil))
}

func (s Worker) load() float64 {
	return float64(s.InFlight+s.Queued) / float64(max(s.Slots, 1))
}

// Rejection records why a worker was not considered.
type Rejection struct {
	Worker string `json:"worker"`
	Reason string `json:"reason"`
}

// ErrNoWorkers is returned when no worker can take a job.
var ErrNoWorkers = errors.New("all workers offline")

// Jobs maps n jobs to workers. Heavy tasks go to the lowest tier with a free slot (tier 1 first);
// light tasks spread evenly, each to the least loaded worker. Workers with an open breaker or a stopped
// actor, and those excluded (the workers a retry must avoid), are rejected with the reason recorded. When every
// remaining worker is full the least loaded still gets the job, which queues on it.
func Jobs(workers []Worker, n int, heavy bool, now time.Time, exclude func(string) bool) ([]string, []Rejection, error) {
	var candidates []Worker
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

func less(a, b Worker, heavy bool) bool {
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
