package ledger

import (
	"errors"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
)

func TestOutputBound(t *testing.T) {
	for _, c := range []struct {
		desc                 string
		maxTokens, maxOutput int
		want                 int
	}{
		{"the request's max_tokens first", 100, 8000, 100},
		{"else the model's max_output", 0, 8000, 8000},
		{"else the default", 0, 0, DefaultOutputBound},
	} {
		if got := OutputBound(c.maxTokens, c.maxOutput); got != c.want {
			t.Errorf("%s: %d, want %d", c.desc, got, c.want)
		}
	}
	r := money.Rates{In: money.PerMillionDollar, Out: 4 * money.PerMillionDollar}
	if got := WorstCase(r, 1000, 500); got != 3000*money.NanoDollar*1000 {
		t.Errorf("1000 tokens in at $1/M and 500 out at $4/M: %d nano-dollars", got)
	}
	// A cache write may cost more than plain input: the worst case holds every prompt token at it.
	r.CacheWrite, r.HasCacheWrite = 5*money.PerMillionDollar/4, true
	if got := WorstCase(r, 1000, 500); got != 3250*money.NanoDollar*1000 {
		t.Errorf("1000 tokens in at a $1.25/M cache write and 500 out at $4/M: %d nano-dollars", got)
	}
}

func TestBook(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	id := AccountID{Key: "key_a", Period: t0.UnixMilli()}
	b := NewBook()
	if _, err := b.Reserve(id, 100, "c0", 10, t0, t0.Add(time.Minute)); err == nil {
		t.Fatal("a reservation against an account not open")
	}
	b.Open(id, 20)
	b.Open(id, 99) // opened once
	for _, step := range []struct {
		desc   string
		call   string
		amount money.USD
		refuse bool
		want   Account
	}{
		{"a hold within the budget", "c1", 50, false, Account{Budget: 100, Spent: 20, Held: 50}},
		{"the same call again holds once", "c1", 50, false, Account{Budget: 100, Spent: 20, Held: 50}},
		{"exactly the room left", "c2", 30, false, Account{Budget: 100, Spent: 20, Held: 80}},
		{"a nano-dollar more than the room", "c3", 1, true, Account{Budget: 100, Spent: 20, Held: 80}},
	} {
		a, err := b.Reserve(id, 100, step.call, step.amount, t0, t0.Add(time.Minute))
		if step.refuse != errors.Is(err, ErrOverBudget) || a != step.want {
			t.Fatalf("%s: %+v, %v; want %+v (refused %v)", step.desc, a, err, step.want, step.refuse)
		}
	}
	if !b.Settle("c1", 7) || b.Settle("c1", 7) {
		t.Fatal("a hold settles once")
	}
	if a, _ := b.Account(id); a != (Account{Budget: 100, Spent: 27, Held: 30}) {
		t.Fatalf("after settling c1 at 7: %+v", a)
	}
	// c2's controller died: its hold lapses and is charged in full at the next reservation.
	b.Renew(t0.Add(2*time.Minute), "nobody")
	if a, err := b.Reserve(id, 100, "c4", 10, t0.Add(time.Minute), t0.Add(2*time.Minute)); err != nil || a != (Account{Budget: 100, Spent: 57, Held: 10}) {
		t.Fatalf("after c2 lapsed: %+v, %v", a, err)
	}
	b.Renew(t0.Add(5*time.Minute), "c4")
	b.Lapse(t0.Add(3 * time.Minute))
	if b.Holds() != 1 {
		t.Fatal("a renewed hold lapsed")
	}
	b.Raise(id, 40) // lower than this book's count: ignored
	b.Raise(id, 70)
	if a, _ := b.Account(id); a.Spent != 70 {
		t.Fatalf("raised to %d", a.Spent)
	}
	// A budget lowered below what is spent refuses everything, and settles still release.
	if _, err := b.Reserve(id, 50, "c5", 0, t0, t0.Add(time.Minute)); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("a zero hold over budget: %v", err)
	}
	b.Settle("c4", 3)
	b.Forget(func(AccountID) bool { return true })
	if b.Has(id) {
		t.Fatal("an ended period without holds is forgotten")
	}
}
