package arms

import (
	"sync"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/bandit"
)

// A reader never sees an arm half written: alpha, beta and pulls come from the same store.
func TestArmCellReadsAreWhole(t *testing.T) {
	var c armCell
	if _, _, _, ok := c.load(); ok {
		t.Fatal("a cell never written reads as published")
	}
	const writes = 20000
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 1; n <= writes; n++ {
			c.store(bandit.Arm{Alpha: float64(n), Beta: 2 * float64(n), Pulls: int64(n)})
		}
	})
	for range 2 {
		wg.Go(func() {
			for range writes {
				alpha, beta, pulls, ok := c.load()
				if ok && (beta != 2*alpha || pulls != int64(alpha)) {
					t.Errorf("torn read: alpha %v, beta %v, pulls %d", alpha, beta, pulls)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Models added past a page keep their cells where they were, and each reads its own arm.
func TestArmCellsGrowWithoutMoving(t *testing.T) {
	cells := newArmCells(3)
	first := cells.add()
	before := cells.cell(first, 2)
	before.store(bandit.Arm{Alpha: 7, Beta: 1})
	var cols []int
	for range 3 * cellsPerPage {
		cols = append(cols, cells.add())
	}
	if cells.cell(first, 2) != before {
		t.Fatal("a new page moved an existing cell")
	}
	for i, col := range cols {
		cells.cell(col, 1).store(bandit.Arm{Alpha: float64(i + 1), Beta: 1, Pulls: int64(i)})
	}
	for i, col := range cols {
		if a, _, p, ok := cells.cell(col, 1).load(); !ok || a != float64(i+1) || p != int64(i) {
			t.Fatalf("column %d reads %v %d %v", col, a, p, ok)
		}
	}
	if a, _, _, _ := cells.cell(first, 2).load(); a != 7 {
		t.Fatalf("the first model's arm reads %v", a)
	}
}

// Writers of one cell take turns: readers never see a torn arm and never wait for ever.
func TestArmCellWritersTakeTurns(t *testing.T) {
	var c armCell
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for n := 1; n <= 5000; n++ {
				v := float64(w*10000 + n)
				c.store(bandit.Arm{Alpha: v, Beta: 2 * v, Pulls: int64(v)})
				if alpha, beta, pulls, ok := c.load(); !ok || beta != 2*alpha || pulls != int64(alpha) {
					t.Errorf("torn read: %v %v %d %v", alpha, beta, pulls, ok)
					return
				}
			}
		})
	}
	wg.Wait()
	if s := c.seq.Load(); s&1 == 1 || s != 2*4*5000 {
		t.Fatalf("sequence %d after 20000 writes", s)
	}
}
