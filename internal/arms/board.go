// Package arms owns the arm board: the published state of every (category, model) arm that model
// selection reads, side by side in place (cells), and the reliability estimator's latest estimates. It
// is a plain concurrent object: selections on any goroutine read it without locks; the arms' actor,
// the only writer of an arm, publishes into it; the catalog's changes and the arms learned before a
// start are laid out under its lock.
package arms

import (
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/conclave-ai/conclave/internal/core/accuracy"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
)

// Board holds the published state of every (category, model) arm, plus each model's arm across all
// categories (bandit.AllCategories). An arm without a published state is at the prior; its actor is spawned on
// its first reward. The set of models changes when discovery finds new ones or loses old ones: a model
// that leaves keeps its arms, so it comes back with what was learned of it.
type Board struct {
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
func (b *Board) newSlots() *armSlots {
	return &armSlots{arms: make([]atomic.Pointer[bandit.Arm], len(b.categories)), col: b.cells.add()}
}

// store publishes an arm in its slot and its cell.
func (b *Board) store(s *armSlots, ci int, a bandit.Arm) {
	s.arms[ci].Store(&a)
	b.cells.cell(s.col, ci).store(a)
}

// DefaultSharing is how many pseudo-observations of its overall record a model brings into a category
// where it has no record yet.
const DefaultSharing = 10

// NewBoard makes an empty board for the models and categories. sharing is the strength of the
// empirical-Bayes prior a model's overall record lends its category arms (see Candidates).
func NewBoard(models []catalog.Model, categories []string, prior bandit.Prior, sharing float64) *Board {
	categories = append(append([]string(nil), categories...), bandit.AllCategories)
	b := &Board{categories: map[string]int{}, prior: prior, sharing: sharing, pulls: make([]atomic.Int64, len(categories)),
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
func (b *Board) SetModels(models []catalog.Model) {
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
func (b *Board) Slots() int { return len(b.layout.Load().slots) }

// Models returns the board's models.
func (b *Board) Models() []catalog.Model { return b.layout.Load().models }

// Prior returns the prior arms start from.
func (b *Board) Prior() bandit.Prior { return b.prior }

// HasCategory reports whether the board has arms for a category: a blueprint's, or bandit.AllCategories.
func (b *Board) HasCategory(category string) bool {
	_, ok := b.categories[category]
	return ok
}

// Handle returns the publication slot of an arm, or nil for a model never on the board or an unknown
// category.
func (b *Board) Handle(category, model string) *atomic.Pointer[bandit.Arm] {
	ci, ok1 := b.categories[category]
	s, ok2 := b.layout.Load().slots[model]
	if !ok1 || !ok2 {
		return nil
	}
	return &s.arms[ci]
}

// Arm returns an arm's published state, or the prior.
func (b *Board) Arm(category, model string) bandit.Arm {
	if h := b.Handle(category, model); h != nil {
		if a := h.Load(); a != nil {
			return *a
		}
	}
	return bandit.NewArm(model, category, b.prior)
}

// Publish stores an arm's new state; only the arms' writer calls it.
func (b *Board) Publish(a bandit.Arm) {
	ci, ok1 := b.categories[a.Category]
	s, ok2 := b.layout.Load().slots[a.Model]
	if ok1 && ok2 {
		b.store(s, ci, a)
		b.pulls[ci].Add(1)
	}
}

// TotalPulls is the number of rewards a category's arms received.
func (b *Board) TotalPulls(category string) int64 {
	if ci, ok := b.categories[category]; ok {
		return b.pulls[ci].Load()
	}
	return 0
}

// Candidates returns a selection candidate per model for the category, in a buffer to hand back with
// Release once the selection is done.
func (b *Board) Candidates(category string) *[]bandit.Candidate {
	buf, _ := b.scratch.Get().(*[]bandit.Candidate)
	if buf == nil {
		buf = new([]bandit.Candidate)
	}
	*buf = b.appendCandidates(category, (*buf)[:0])
	return buf
}

// Release returns a candidates buffer for reuse.
func (b *Board) Release(buf *[]bandit.Candidate) { b.scratch.Put(buf) }

// appendCandidates builds the candidates of a category. A model's arm there starts from an
// empirical-Bayes prior: its mean across all categories, worth min(pulls across all categories,
// sharing) observations, on top of the base prior. Evidence in the category itself adds to that, so a
// model that proved itself elsewhere starts ahead in a new category, and the category's own record
// soon outweighs the loan.
func (b *Board) appendCandidates(category string, dst []bandit.Candidate) []bandit.Candidate {
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
func (b *Board) pooled(col, ci, all int) (alpha, beta float64, pulls int64) {
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
func (b *Board) Dependence(category, model, other string) float64 {
	if est := b.estimates.Load(); est != nil {
		return est.Dependence(category, model, other)
	}
	return 0
}

// Accuracy is the estimated probability that a model answers a category right: the reliability
// estimator's when it has one, else the mean of the model's pooled arm there.
func (b *Board) Accuracy(category, model string) float64 {
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
func (b *Board) Anchored(category, model string) bool {
	est := b.estimates.Load()
	return est != nil && est.Anchored(category, model)
}

// Estimates are the reliability estimator's latest, nil before its first vote.
func (b *Board) Estimates() *accuracy.View { return b.estimates.Load() }

// SetEstimates publishes the reliability estimator's latest estimates; only its actor calls it.
func (b *Board) SetEstimates(v *accuracy.View) { b.estimates.Store(v) }

// VoteSent counts a vote sent to the reliability estimator.
func (b *Board) VoteSent() { b.votesSent.Add(1) }

// VoteObserved counts a vote the reliability estimator took in; only its actor calls it.
func (b *Board) VoteObserved() { b.votesObserved.Add(1) }

// VotesPending reports whether votes sent to the reliability estimator are not yet taken in.
func (b *Board) VotesPending() bool { return b.votesObserved.Load() < b.votesSent.Load() }

// Published returns every arm with a published state, by category then model.
func (b *Board) Published() []bandit.Arm {
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
func (b *Board) Seed(arms []bandit.Arm) {
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
