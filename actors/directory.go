// Package actors owns the actor shell around the decision core: the coordinator that runs one request
// through the pipeline, the consensus actor, and the worker, provider, arm and recorder actors that own
// state. Actors sequence messages and own state; decisions are calls into the pure packages; I/O runs
// in goroutines whose results come back as messages.
package actors

import (
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/core/accuracy"
	"github.com/conclave-ai/conclave/internal/core/assign"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
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
	Providers []*ProviderRef
	providers map[string]*ProviderRef
	Arms      *ArmBoard
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
}

// Snapshot returns the worker's latest published state.
func (w *WorkerRef) Snapshot() assign.Worker {
	s := *w.snap.Load()
	s.InFlight, s.Queued = int(w.inFlight.Load()), int(w.queued.Load())
	s.Completed, s.Failed = w.completed.Load(), w.failed.Load()
	s.Stopped = w.Stopped()
	return s
}

// ProviderRef is a provider actor's address and published snapshot.
type ProviderRef struct {
	Name string
	PID  *actor.PID
	snap atomic.Pointer[providerstate.Snapshot]
	// stopped is why its supervisor stopped the actor for good, or nil.
	stopped atomic.Pointer[string]
	// live is the actor while it is up: acquisitions and outcomes are applied in place.
	live atomic.Pointer[ProviderActor]
}

// Acquire asks the provider for a permit: in place while its actor is up, else through its mailbox
// (a restart in progress). The answer is a message either way: the Dispatch on a grant with a
// dispatch, else a Permit.
func (p *ProviderRef) Acquire(sender actor.SenderContext, a *messages.Acquire) {
	if live := p.live.Load(); live != nil {
		defer live.crashOnPanic()
		live.acquire(a)
		return
	}
	sender.Send(p.PID, a)
}

// Live reports whether the provider's actor is up, so that acquisitions and settlements happen in
// place; it is not yet right after the start, nor during a restart.
func (p *ProviderRef) Live() bool { return p.live.Load() != nil }

// Settle settles a permit with its call's outcome, in place while the provider's actor is up.
func (p *ProviderRef) Settle(sender actor.SenderContext, o *messages.Outcome) {
	if live := p.live.Load(); live != nil {
		defer live.crashOnPanic()
		live.settle(o)
		return
	}
	sender.Send(p.PID, o)
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
func NewDirectory(system *actor.ActorSystem, workers []fleet.WorkerSpec, providers []string, arms *ArmBoard, categories []string) *Directory {
	pid := func(path string) *actor.PID { return actor.NewPID(system.Address(), RootName+"/"+path) }
	d := &Directory{
		workers:   map[string]*WorkerRef{},
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

// ArmBoard holds the published state of every (category, model) arm, plus each model's arm across all
// categories (bandit.AllCategories). An arm without a published state is at the prior; its actor is spawned on
// its first reward. The set of models changes when discovery finds new ones or loses old ones: a model
// that leaves keeps its arms, so it comes back with what was learned of it.
type ArmBoard struct {
	layout     atomic.Pointer[armLayout]
	mu         sync.Mutex // serialises SetModels
	categories map[string]int
	pulls      []atomic.Int64 // per category
	prior      bandit.Prior
	// sharing is the most pseudo-observations a model's record across all categories lends to its
	// arm in a category; zero keeps categories independent.
	sharing float64
	scratch sync.Pool // *[]bandit.Candidate, reused by selections
	// cells hold every arm's values for selection, side by side per category.
	cells *armCells
	// estimates are the reliability estimator's latest, nil until its first vote; votesSent and
	// votesObserved count the votes sent to it and taken in, so that a replay can wait for them.
	estimates     atomic.Pointer[accuracy.View]
	votesSent     atomic.Int64
	votesObserved atomic.Int64
}

// armLayout is one immutable set of models, with the publication slots of every model ever on the
// board.
type armLayout struct {
	models []catalog.Model
	active []*armSlots // per model of models
	slots  map[string]*armSlots
}

// armSlots are one model's publication slots, by category index, and the column of its cells.
type armSlots struct {
	arms []atomic.Pointer[bandit.Arm]
	col  int
}

// newSlots makes the slots of a model new to the board; the board's mutex is held.
func (b *ArmBoard) newSlots() *armSlots {
	return &armSlots{arms: make([]atomic.Pointer[bandit.Arm], len(b.categories)), col: b.cells.add()}
}

// store publishes an arm in its slot and its cell.
func (b *ArmBoard) store(s *armSlots, ci int, a bandit.Arm) {
	s.arms[ci].Store(&a)
	b.cells.cell(s.col, ci).store(a)
}

// DefaultSharing is how many pseudo-observations of its overall record a model brings into a category
// where it has no record yet.
const DefaultSharing = 10

// NewArmBoard makes an empty board for the models and categories. sharing is the strength of the
// empirical-Bayes prior a model's overall record lends its category arms (see Candidates).
func NewArmBoard(models []catalog.Model, categories []string, prior bandit.Prior, sharing float64) *ArmBoard {
	categories = append(append([]string(nil), categories...), bandit.AllCategories)
	b := &ArmBoard{categories: map[string]int{}, prior: prior, sharing: sharing, pulls: make([]atomic.Int64, len(categories)),
		cells: newArmCells(len(categories))}
	for i, c := range categories {
		b.categories[c] = i
	}
	b.layout.Store(&armLayout{slots: map[string]*armSlots{}})
	b.SetModels(models)
	return b
}

// SetModels makes models the board's set. Arms of models that stay keep their state; a new model's
// arms start at the prior. An embeddings model answers no task, so it has no arm and no selection
// sees it.
func (b *ArmBoard) SetModels(models []catalog.Model) {
	models = slices.DeleteFunc(slices.Clone(models), func(m catalog.Model) bool { return m.Has(catalog.Embeddings) })
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.layout.Load()
	next := &armLayout{models: slices.Clone(models), active: make([]*armSlots, len(models)), slots: make(map[string]*armSlots, len(old.slots)+len(models))}
	maps.Copy(next.slots, old.slots)
	for i, m := range models {
		s, ok := next.slots[m.ID]
		if !ok {
			s = b.newSlots()
			next.slots[m.ID] = s
		}
		next.active[i] = s
	}
	b.layout.Store(next)
}

// Slots is how many models the board keeps arms for: every model ever in the catalog or seeded from
// the store. Reading an arm, or a reward for a name outside the catalog, never adds one.
func (b *ArmBoard) Slots() int { return len(b.layout.Load().slots) }

// Models returns the board's models.
func (b *ArmBoard) Models() []catalog.Model { return b.layout.Load().models }

// Prior returns the prior arms start from.
func (b *ArmBoard) Prior() bandit.Prior { return b.prior }

// HasCategory reports whether the board has arms for a category: a blueprint's, or bandit.AllCategories.
func (b *ArmBoard) HasCategory(category string) bool {
	_, ok := b.categories[category]
	return ok
}

// Handle returns the publication slot of an arm, or nil for a model never on the board or an unknown
// category.
func (b *ArmBoard) Handle(category, model string) *atomic.Pointer[bandit.Arm] {
	ci, ok1 := b.categories[category]
	s, ok2 := b.layout.Load().slots[model]
	if !ok1 || !ok2 {
		return nil
	}
	return &s.arms[ci]
}

// Arm returns an arm's published state, or the prior.
func (b *ArmBoard) Arm(category, model string) bandit.Arm {
	if h := b.Handle(category, model); h != nil {
		if a := h.Load(); a != nil {
			return *a
		}
	}
	return bandit.NewArm(model, category, b.prior)
}

// Publish stores an arm's new state; only the arms' writer calls it.
func (b *ArmBoard) Publish(a bandit.Arm) {
	ci, ok1 := b.categories[a.Category]
	s, ok2 := b.layout.Load().slots[a.Model]
	if ok1 && ok2 {
		b.store(s, ci, a)
		b.pulls[ci].Add(1)
	}
}

// TotalPulls is the number of rewards a category's arms received.
func (b *ArmBoard) TotalPulls(category string) int64 {
	if ci, ok := b.categories[category]; ok {
		return b.pulls[ci].Load()
	}
	return 0
}

// Candidates returns a selection candidate per model for the category, in a buffer to hand back with
// Release once the selection is done.
func (b *ArmBoard) Candidates(category string) *[]bandit.Candidate {
	buf, _ := b.scratch.Get().(*[]bandit.Candidate)
	if buf == nil {
		buf = new([]bandit.Candidate)
	}
	*buf = b.appendCandidates(category, (*buf)[:0])
	return buf
}

// Release returns a candidates buffer for reuse.
func (b *ArmBoard) Release(buf *[]bandit.Candidate) { b.scratch.Put(buf) }

// appendCandidates builds the candidates of a category. A model's arm there starts from an
// empirical-Bayes prior: its mean across all categories, worth min(pulls across all categories,
// sharing) observations, on top of the base prior. Evidence in the category itself adds to that, so a
// model that proved itself elsewhere starts ahead in a new category, and the category's own record
// soon outweighs the loan.
func (b *ArmBoard) appendCandidates(category string, dst []bandit.Candidate) []bandit.Candidate {
	ci, ok := b.categories[category]
	all := b.categories[bandit.AllCategories]
	l := b.layout.Load()
	est := b.estimates.Load()
	for i, m := range l.models {
		c := bandit.Candidate{Model: m.ID, Provider: m.Provider, Family: m.Family, ContextWindow: m.ContextWindow, Alpha: b.prior.Alpha, Beta: b.prior.Beta}
		if ok && category != bandit.AllCategories {
			c.Alpha, c.Beta, c.Pulls = b.pooled(l.active[i].col, ci, all)
			if est != nil {
				// The estimator's refitted accuracy, worth the answers it rests on, replaces the arm's
				// running credit; models it has not seen in the category keep their arms.
				if e, seen := est.Get(category, m.ID); seen {
					c.Alpha = b.prior.Alpha + e.Accuracy*e.Answers
					c.Beta = b.prior.Beta + (1-e.Accuracy)*e.Answers
				}
			}
		}
		dst = append(dst, c)
	}
	return dst
}

// pooled is a model's arm in a category with the loan of its overall record (see appendCandidates).
func (b *ArmBoard) pooled(col, ci, all int) (alpha, beta float64, pulls int64) {
	alpha, beta = b.prior.Alpha, b.prior.Beta
	if b.sharing > 0 {
		if ga, gb, gp, ok := b.cells.cell(col, all).load(); ok {
			w, mean := math.Min(float64(gp), b.sharing), ga/(ga+gb)
			alpha += w * mean
			beta += w * (1 - mean)
		}
	}
	if a, bt, p, ok := b.cells.cell(col, ci).load(); ok {
		alpha += a - b.prior.Alpha
		beta += bt - b.prior.Beta
		pulls = p
	}
	return alpha, beta, pulls
}

// Dependence is how far two models' votes in a category are not independent, by the reliability
// estimator (accuracy.View.Dependence); zero before its first vote or when it does not model it.
func (b *ArmBoard) Dependence(category, model, other string) float64 {
	if est := b.estimates.Load(); est != nil {
		return est.Dependence(category, model, other)
	}
	return 0
}

// Accuracy is the estimated probability that a model answers a category right: the reliability
// estimator's when it has one, else the mean of the model's pooled arm there.
func (b *ArmBoard) Accuracy(category, model string) float64 {
	if est := b.estimates.Load(); est != nil {
		if e, ok := est.Get(category, model); ok {
			return e.Accuracy
		}
	}
	ci, ok := b.categories[category]
	s, known := b.layout.Load().slots[model]
	if !ok || !known {
		return b.prior.Alpha / (b.prior.Alpha + b.prior.Beta)
	}
	alpha, beta, _ := b.pooled(s.col, ci, b.categories[bandit.AllCategories])
	return alpha / (alpha + beta)
}

// Anchored reports whether callers' truth anchors a model's estimated accuracy in a category
// (accuracy.View.Anchored); false without a reliability estimator.
func (b *ArmBoard) Anchored(category, model string) bool {
	est := b.estimates.Load()
	return est != nil && est.Anchored(category, model)
}

// SetEstimates publishes the reliability estimator's latest estimates; only its actor calls it.
func (b *ArmBoard) SetEstimates(v *accuracy.View) { b.estimates.Store(v) }

// VoteSent counts a vote sent to the reliability estimator.
func (b *ArmBoard) VoteSent() { b.votesSent.Add(1) }

// VoteObserved counts a vote the reliability estimator took in; only its actor calls it.
func (b *ArmBoard) VoteObserved() { b.votesObserved.Add(1) }

// VotesPending reports whether votes sent to the reliability estimator are not yet taken in.
func (b *ArmBoard) VotesPending() bool { return b.votesObserved.Load() < b.votesSent.Load() }

// Published returns every arm with a published state, by category then model.
func (b *ArmBoard) Published() []bandit.Arm {
	var out []bandit.Arm
	cats := make([]string, 0, len(b.categories))
	for c := range b.categories {
		cats = append(cats, c)
	}
	sort.Strings(cats)
	l := b.layout.Load()
	for _, c := range cats {
		for _, s := range l.active {
			if a := s.arms[b.categories[c]].Load(); a != nil {
				out = append(out, *a)
			}
		}
	}
	return out
}

// Seed publishes arms learned before this start. A model the board does not have yet keeps its arms
// for when discovery adds it; arms of unknown categories are dropped.
func (b *ArmBoard) Seed(arms []bandit.Arm) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.layout.Load()
	next := &armLayout{models: old.models, active: old.active, slots: maps.Clone(old.slots)}
	for _, a := range arms {
		ci, ok := b.categories[a.Category]
		if !ok {
			continue
		}
		s, ok := next.slots[a.Model]
		if !ok {
			s = b.newSlots()
			next.slots[a.Model] = s
		}
		b.store(s, ci, a)
		b.pulls[ci].Add(a.Pulls)
	}
	b.layout.Store(next)
}
