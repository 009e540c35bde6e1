package inflight

import (
	"sync"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/resilience"
)

func TestAnAccountGivesBackAllItHeld(t *testing.T) {
	in := New(100)
	a, ok := in.Open("r", 30)
	if !ok || in.Total() != 30 {
		t.Fatalf("open: %v, total %d", ok, in.Total())
	}
	if _, ok := in.Open("big", 71); ok || in.Total() != 30 {
		t.Fatalf("a request past the bound was let in (total %d)", in.Total())
	}
	if in.Account("r") != a {
		t.Fatal("the account is not found by its request")
	}
	if k := a.Hold(70); k != "" {
		t.Fatalf("an answer within the bound: %q", k)
	}
	if k := a.Hold(1); k != resilience.Overloaded || in.Total() != 100 {
		t.Fatalf("an answer past the bound: %q, total %d", k, in.Total())
	}
	// A second request of the same id counts its size, but takes no answers of the first.
	twin, ok := in.Open("r", 0)
	if !ok || in.Account("r") != a {
		t.Fatal("a twin took the account's name")
	}
	twin.Close()
	if in.Account("r") != a {
		t.Fatal("a twin's close took the account's name away")
	}
	a.Close()
	a.Close()
	if in.Total() != 0 || in.Peak() != 100 || in.Account("r").Hold(1) != resilience.Cancelled {
		t.Fatalf("after close: total %d, peak %d, account %v", in.Total(), in.Peak(), in.Account("r"))
	}
	if k := a.Hold(1); k != resilience.Cancelled || in.Total() != 0 {
		t.Fatalf("an answer after its request ended: %q, total %d", k, in.Total())
	}
	// Without a bound nothing is counted.
	var none *Inflight
	if a, ok := none.Open("x", 1<<40); !ok || a.Hold(1<<40) != "" || New(0).Account("x") != nil {
		t.Fatal("no bound refused something")
	}
}

func TestAccountsUnderContentionStayWithinTheBoundAndLeakNothing(t *testing.T) {
	in := New(1000)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				a, ok := in.Open("r", 10)
				if !ok {
					continue
				}
				for j := 0; j < 5; j++ {
					a.Hold(int64(40 + j))
				}
				a.Close()
				a.Hold(5) // late
			}
		}()
	}
	wg.Wait()
	if in.Total() != 0 || in.Peak() > 1000 {
		t.Fatalf("total %d, peak %d: want 0 and at most the bound", in.Total(), in.Peak())
	}
}

// A streamed answer counts its pieces as they come and its whole once: what the pieces held is not
// counted again, and a piece past the bound stops the answer.
func TestAnAnswerCountsItsPiecesAndItsWholeOnce(t *testing.T) {
	in := New(100)
	acct, _ := in.Open("r", 10)
	ans := acct.Answer()
	if !ans.Piece(40) || !ans.Piece(40) || in.Total() != 90 {
		t.Fatalf("pieces within the bound: total %d", in.Total())
	}
	if k := ans.Result(true, 85); k != "" || in.Total() != 95 {
		t.Fatalf("the whole answer beyond its pieces: %q, total %d", k, in.Total())
	}
	if ans.Piece(1) {
		t.Fatal("a piece after the result was counted")
	}
	over := acct.Answer()
	if over.Piece(10) || over.Result(true, 10) != resilience.Overloaded {
		t.Fatal("an answer past the bound was let through")
	}
	acct.Close()
	if in.Total() != 0 {
		t.Fatalf("total %d after the request", in.Total())
	}
	var none *Inflight
	if a := none.Account("x").Answer(); !a.Piece(1<<40) || a.Result(true, 1<<40) != "" {
		t.Fatal("no bound refused an answer")
	}
}
