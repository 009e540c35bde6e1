package arms

import (
	"math"
	"runtime"
	"sync/atomic"

	"github.com/conclave-ai/conclave/internal/core/bandit"
)

// armCell holds what selection reads of one arm (alpha, beta, pulls) in place, beside the cells of
// the other models' arms in the same category: a selection reads every model's arm, and following a
// pointer per arm to memory scattered over the heap cost more than drawing from the arms. A cell is a
// sequence lock: a writer makes the sequence odd while it writes (the arms' writer is the only one, but
// a second would wait its turn), and a reader retries a read that overlapped a write.
type armCell struct {
	seq         atomic.Uint64 // even when still, odd while written; zero: never written (the prior)
	alpha, beta atomic.Uint64 // float64 bits
	pulls       atomic.Int64
}

func (c *armCell) store(a bandit.Arm) {
	s := c.seq.Load()
	for s&1 == 1 || !c.seq.CompareAndSwap(s, s+1) {
		runtime.Gosched() // another writer is between its stores
		s = c.seq.Load()
	}
	c.alpha.Store(math.Float64bits(a.Alpha))
	c.beta.Store(math.Float64bits(a.Beta))
	c.pulls.Store(a.Pulls)
	c.seq.Store(s + 2)
}

// load returns the arm's values, or ok false for an arm never published.
func (c *armCell) load() (alpha, beta float64, pulls int64, ok bool) {
	for {
		s := c.seq.Load()
		if s == 0 {
			return 0, 0, 0, false
		}
		if s&1 == 1 {
			runtime.Gosched() // its writer is between two stores
			continue
		}
		alpha, beta, pulls = math.Float64frombits(c.alpha.Load()), math.Float64frombits(c.beta.Load()), c.pulls.Load()
		if c.seq.Load() == s {
			return alpha, beta, pulls, true
		}
	}
}

// cellsPerPage is how many models' cells a page holds.
const cellsPerPage = 64

// cellPage holds the cells of cellsPerPage models, category by category: cell (category c, column
// j) is at c*cellsPerPage + j.
type cellPage []armCell

// armCells are the cells of every model ever on the board, by column: a model keeps its column for
// good, and pages are added, never moved, so a writer's cell stays where readers look.
type armCells struct {
	pages      atomic.Pointer[[]*cellPage]
	categories int
	columns    int // taken so far; only the board's mutex holder adds
}

func newArmCells(categories int) *armCells {
	t := &armCells{categories: categories}
	t.pages.Store(&[]*cellPage{})
	return t
}

// add takes a new model's column, adding a page when the last is full; the board's mutex is held.
func (t *armCells) add() int {
	col := t.columns
	t.columns++
	if pages := *t.pages.Load(); col/cellsPerPage >= len(pages) {
		page := make(cellPage, t.categories*cellsPerPage)
		grown := append(pages[:len(pages):len(pages)], &page)
		t.pages.Store(&grown)
	}
	return col
}

// cell is the cell of the arm in category ci of the model in column col.
func (t *armCells) cell(col, ci int) *armCell {
	page := (*t.pages.Load())[col/cellsPerPage]
	return &(*page)[ci*cellsPerPage+col%cellsPerPage]
}
