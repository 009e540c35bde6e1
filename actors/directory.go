// Package actors owns the actor shell around the decision core: the coordinator that runs one request
// through the pipeline, the consensus actor, and the worker, provider, arm and recorder actors that own
// state. Actors sequence messages and own state; decisions are calls into the pure packages; I/O runs
// in goroutines whose results come back as messages.
package actors

import (
	"github.com/conclave-ai/conclave/internal/arms"
	"sort"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/core/assign"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/plan"
	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/messages"
)

// Directory is the fixed map of the actor system: where each long-lived actor lives and the immutable
// snapshots it publishes. Hot-path reads (selection, assignment) read snapshots here instead of
// messaging hundreds of actors; updates go through the owning actor. It is built before the actors
// start and not changed afterwards, except through the atomic snapshot pointers.
type Directory struct {
	Workers   []*WorkerRef
	workers   map[string]*WorkerRef
	workerAt  map[string]*WorkerRef // by PID id
	Providers []*ProviderRef
	providers map[string]*ProviderRef
	Arms      *arms.Board
	Requests  *actor.PID
	Bandit    *actor.PID
	Recorder  *actor.PID
	rotation  map[string]*atomic.Uint64
	// SharedRound, when set, takes a category's next turn of the rotation every controller shares
	// (a Redis counter); an error falls back to the local one. Set before the first request.
	SharedRound func(category string) (uint64, error)
	requestSeqs atomic.Uint64
	// drops counts the messages actors dropped; stopped holds the actors stopped for good.
	drops   drops
	stopped stoppedActors
}

// WorkerRef is a worker actor's address and published state: a snapshot of its breaker and
// connection, replaced when they change, and its job counters, which change with every job and are
// published by themselves.
type WorkerRef struct {
	Spec fleet.WorkerSpec
	PID  *actor.PID
	snap atomic.Pointer[assign.Worker]
	// inFlight and queued are the jobs running and waiting for a slot; completed and failed count the
	// jobs finished. Only the worker's actor writes them.
	inFlight, queued  atomic.Int32
	completed, failed atomic.Int64
	// stopped is why its supervisor stopped the actor for good, or nil.
	stopped atomic.Pointer[string]
	// live is the way in to the worker's slots while its actor is up.
	live atomic.Pointer[workerParts]
}

// Dispatch gives a job to the worker: to its slots directly while its actor is up (the provider's
// grant then costs no message), else through its mailbox (a restart in progress).
func (w *WorkerRef) Dispatch(sender sender, d *messages.Dispatch) {
	if live := w.live.Load(); live != nil {
		defer live.crashOnPanic()
		live.dispatch(d)
		return
	}
	sender.Send(w.PID, d)
}

// Cancel stops a job its sender no longer wants, in the worker's slots while its actor is up.
func (w *WorkerRef) Cancel(sender sender, jobID string) {
	if live := w.live.Load(); live != nil {
		live.host.Cancel(jobID)
		return
	}
	sender.Send(w.PID, &messages.CancelJob{JobId: jobID})
}

// Snapshot returns the worker's latest published state.
func (w *WorkerRef) Snapshot() assign.Worker {
	s := *w.snap.Load()
	s.InFlight, s.Queued = int(w.inFlight.Load()), int(w.queued.Load())
	s.Completed, s.Failed = w.completed.Load(), w.failed.Load()
	s.Stopped = w.Stopped()
	return s
}

// publishJobs sets the worker's job counters and, when its breaker changed, a new snapshot.
func (w *WorkerRef) publishJobs(running, queued int, breaker resilience.Snapshot) {
	w.inFlight.Store(int32(running))
	w.queued.Store(int32(queued))
	for prev := w.snap.Load(); prev.Breaker != breaker; prev = w.snap.Load() {
		next := *prev
		next.Breaker = breaker
		if w.snap.CompareAndSwap(prev, &next) {
			return
		}
	}
}

// publishHealth publishes what the transport said of its connection. The slots (the breaker) and the
// actor (the connection) publish from their own goroutines: each changes only its part of the
// snapshot it read, and stores it only if that is still the latest.
func (w *WorkerRef) publishHealth(health fleet.Health, err error) {
	why := ""
	if err != nil {
		why = err.Error()
	}
	for prev := w.snap.Load(); prev.Transport != string(health) || prev.TransportError != why; prev = w.snap.Load() {
		next := *prev
		next.Transport, next.TransportError = string(health), why
		if w.snap.CompareAndSwap(prev, &next) {
			return
		}
	}
}

// ProviderRef is a provider actor's address and published snapshot.
type ProviderRef struct {
	Name string
	PID  *actor.PID
	snap atomic.Pointer[providerstate.Snapshot]
	// stopped is why its supervisor stopped the actor for good, or nil.
	stopped atomic.Pointer[string]
	// live is the way to the provider's gate while its actor is up.
	live atomic.Pointer[providerFront]
}

// Acquire asks the provider for a permit: through its gate while its actor is up, else through its
// mailbox (a restart in progress). The answer is a message either way: the Dispatch on a grant with a
// dispatch, else a Permit.
func (p *ProviderRef) Acquire(sender sender, a *messages.Acquire) {
	if live := p.live.Load(); live != nil {
		defer p.crashOnPanic(live)
		live.acquire(a)
		return
	}
	sender.Send(p.PID, a)
}

// Live reports whether the provider's gate is up, so that acquisitions and settlements go through it
// directly; it is not yet right after the start, nor during a restart.
func (p *ProviderRef) Live() bool { return p.live.Load() != nil }

// Settle settles a permit with its call's outcome, through the gate while the provider's actor is up.
func (p *ProviderRef) Settle(sender sender, o *messages.Outcome) {
	if live := p.live.Load(); live != nil {
		defer p.crashOnPanic(live)
		live.settle(o)
		return
	}
	sender.Send(p.PID, o)
}

// crashOnPanic, deferred by an acquisition or a settlement made on the asker's goroutine, makes a
// panic in the gate the provider actor's crash too, since the gate's state may be half changed,
// before it goes on up to the asker.
func (p *ProviderRef) crashOnPanic(live *providerFront) {
	if v := recover(); v != nil {
		p.crashed(live, v)
		panic(v)
	}
}

// crashed hands a panic in the provider's gate to its actor, which crashes with it and is restarted
// with a new gate; nothing goes through the old one meanwhile.
func (p *ProviderRef) crashed(live *providerFront, reason any) {
	p.live.CompareAndSwap(live, nil)
	live.shell.root.Send(live.shell.self, crashed{reason: reason})
}

// Snapshot returns the provider's latest published state, stopped when its actor is.
func (p *ProviderRef) Snapshot() *providerstate.Snapshot {
	s := p.snap.Load()
	if r := p.stopped.Load(); r != nil && s.Stopped == "" {
		c := *s
		c.Stopped = *r
		return &c
	}
	return s
}

// world is the plan's view of the actor system: the arm board and the snapshots the actors publish,
// read on the clock their times are on.
type world struct {
	dir   *Directory
	clock clock.Clock
}

func (w world) Now() time.Time { return w.clock.Now() }
func (w world) Candidates(category string) *[]bandit.Candidate {
	return w.dir.Arms.Candidates(category)
}
func (w world) Release(buf *[]bandit.Candidate)  { w.dir.Arms.Release(buf) }
func (w world) TotalPulls(category string) int64 { return w.dir.Arms.TotalPulls(category) }
func (w world) Workers() []assign.Worker         { return w.dir.WorkerSnapshots() }

func (w world) Provider(name string, now time.Time) bandit.ProviderStatus {
	if ref := w.dir.Provider(name); ref != nil {
		return ref.Snapshot().Status(now)
	}
	return bandit.ProviderStatus{}
}

func (w world) Model(model, provider string, now time.Time) (bandit.SkipReason, time.Time) {
	if ref := w.dir.Provider(provider); ref != nil {
		return ref.Snapshot().ModelStatus(model, now)
	}
	return 0, time.Time{}
}

// World returns the plan's view of the actor system.
func (d *Deps) World() plan.World { return world{d.Dir, d.Clock} }

// NewDirectory lays out the actor system's addresses. Actor ids are fixed names under the root, so the
// addresses are known before the actors are spawned.
func NewDirectory(system *actor.ActorSystem, workers []fleet.WorkerSpec, providers []string, arms *arms.Board, categories []string) *Directory {
	pid := func(path string) *actor.PID { return actor.NewPID(system.Address(), RootName+"/"+path) }
	d := &Directory{
		workers:   map[string]*WorkerRef{},
		workerAt:  map[string]*WorkerRef{},
		providers: map[string]*ProviderRef{},
		Arms:      arms,
		Requests:  pid(RequestsName),
		Bandit:    pid(BanditName),
		Recorder:  pid(RecorderName),
		rotation:  map[string]*atomic.Uint64{},
	}
	for _, w := range workers {
		ref := &WorkerRef{Spec: w, PID: pid(FleetName + "/" + w.Name)}
		ref.snap.Store(&assign.Worker{Name: w.Name, Tier: w.Tier, Slots: w.Slots, Breaker: resilience.Snapshot{Name: w.Name}})
		d.Workers = append(d.Workers, ref)
		d.workers[w.Name] = ref
		d.workerAt[ref.PID.Id] = ref
	}
	sorted := append([]string(nil), providers...)
	sort.Strings(sorted)
	for _, p := range sorted {
		ref := &ProviderRef{Name: p, PID: pid(ProvidersName + "/" + p)}
		ref.snap.Store(&providerstate.Snapshot{Name: p, Breaker: resilience.Snapshot{Name: p}, Reliability: 0.5})
		d.Providers = append(d.Providers, ref)
		d.providers[p] = ref
	}
	for _, c := range categories {
		d.rotation[c] = new(atomic.Uint64)
	}
	return d
}

// Names of the actors under the root.
const (
	RootName      = "conclave"
	FleetName     = "fleet"
	ProvidersName = "providers"
	BanditName    = "bandit"
	RequestsName  = "requests"
	RecorderName  = "recorder"
)

// Worker returns a worker by name.
func (d *Directory) Worker(name string) *WorkerRef { return d.workers[name] }

// Provider returns a provider by name.
func (d *Directory) Provider(name string) *ProviderRef { return d.providers[name] }

// WorkerSnapshots returns every worker's latest snapshot.
func (d *Directory) WorkerSnapshots() []assign.Worker {
	out := make([]assign.Worker, len(d.Workers))
	for i, w := range d.Workers {
		out[i] = w.Snapshot()
	}
	return out
}

// NextRound returns the rotating-arbiter round for a category and advances it: the rotation shared by
// every controller when there is one and it answers, else this controller's own.
func (d *Directory) NextRound(category string) uint64 {
	if d.SharedRound != nil {
		if n, err := d.SharedRound(category); err == nil {
			return n
		}
	}
	if r, ok := d.rotation[category]; ok {
		return r.Add(1) - 1
	}
	return 0
}

// NextSequence numbers requests in arrival order; with the configured seed it derives each request's
// random source, so any selection can be replayed.
func (d *Directory) NextSequence() uint64 { return d.requestSeqs.Add(1) - 1 }
