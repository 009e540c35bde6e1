package books

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit/redislimit"
	"github.com/conclave-ai/conclave/internal/core/ledger"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
)

// ledgers runs a test against each ledger: in the process, in Redis, and Redis behind a failover.
func ledgers(t *testing.T, test func(t *testing.T, b Budgets)) {
	t.Run("local", func(t *testing.T) { test(t, NewLocal(nil)) })
	t.Run("redis", func(t *testing.T) {
		c, prefix := redistest.New(t)
		test(t, NewShared(c, prefix))
	})
	t.Run("failover", func(t *testing.T) {
		c, prefix := redistest.New(t)
		test(t, NewFailover(NewShared(c, prefix), NewLocal(nil), nil, nil))
	})
}

func spent(amount money.USD) func(context.Context) (money.USD, error) {
	return func(context.Context) (money.USD, error) { return amount, nil }
}

func TestLedgersKeepTheRule(t *testing.T) {
	ledgers(t, func(t *testing.T, b Budgets) {
		ctx := context.Background()
		id := ledger.AccountID{Key: "key_a", Period: 1}
		reserve := func(call string, amount money.USD) (ledger.Account, error) {
			return b.Reserve(ctx, Reservation{Account: id, Budget: 100, Call: call, Amount: amount, Spent: spent(20)})
		}
		for _, step := range []struct {
			desc   string
			call   string
			amount money.USD
			refuse bool
			want   ledger.Account
		}{
			{"the first hold opens the account with the store's spend", "c1", 50, false, ledger.Account{Budget: 100, Spent: 20, Held: 50}},
			{"the same call again holds once", "c1", 50, false, ledger.Account{Budget: 100, Spent: 20, Held: 50}},
			{"exactly the room left", "c2", 30, false, ledger.Account{Budget: 100, Spent: 20, Held: 80}},
			{"a nano-dollar past it", "c3", 1, true, ledger.Account{Budget: 100, Spent: 20, Held: 80}},
		} {
			a, err := reserve(step.call, step.amount)
			if step.refuse != errors.Is(err, ledger.ErrOverBudget) || a != step.want || (!step.refuse && err != nil) {
				t.Fatalf("%s: %+v, %v; want %+v (refused %v)", step.desc, a, err, step.want, step.refuse)
			}
		}
		if err := b.Settle(ctx, id, "c1", 7); err != nil {
			t.Fatal(err)
		}
		if err := b.Settle(ctx, id, "c1", 7); err != nil { // settled already: nothing changes
			t.Fatal(err)
		}
		a, open, err := b.Account(ctx, id)
		if err != nil || !open || a.Spent != 27 || a.Held != 30 {
			t.Fatalf("after settling c1 at 7: %+v %v %v", a, open, err)
		}
		if _, open, _ := b.Account(ctx, ledger.AccountID{Key: "key_a", Period: 2}); open {
			t.Fatal("another period's account is open")
		}
	})
}

// TestConcurrentHoldsNeverPassTheBudget is 200 calls at once against a budget of 10 of them: exactly
// 10 are held, and the spend never passes the budget.
func TestConcurrentHoldsNeverPassTheBudget(t *testing.T) {
	ledgers(t, func(t *testing.T, b Budgets) {
		ctx := context.Background()
		id := ledger.AccountID{Key: "key_b", Period: 7}
		var held atomic.Int64
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				call := fmt.Sprint("call-", i)
				_, err := b.Reserve(ctx, Reservation{Account: id, Budget: 1000, Call: call, Amount: 100, Spent: spent(0)})
				switch {
				case err == nil:
					held.Add(1)
					if err := b.Settle(ctx, id, call, 60); err != nil {
						t.Error(err)
					}
				case !errors.Is(err, ledger.ErrOverBudget):
					t.Error(err)
				}
			})
		}
		wg.Wait()
		a, _, _ := b.Account(ctx, id)
		// Each call holds 100 and costs 60: the holds released let later calls in, up to the budget.
		if a.Held != 0 || a.Spent > 1000 || money.USD(held.Load())*60 != a.Spent {
			t.Fatalf("%d calls held; account %+v", held.Load(), a)
		}
	})
}

// TestTwoControllersShareOneBudget holds from two controllers' ledgers on one Redis.
func TestTwoControllersShareOneBudget(t *testing.T) {
	c, prefix := redistest.New(t)
	a, b := NewShared(c, prefix), NewShared(c, prefix)
	ctx := context.Background()
	id := ledger.AccountID{Key: "key_c", Period: 3}
	r := Reservation{Account: id, Budget: 100, Amount: 60, Spent: spent(0)}
	r.Call = "on-a"
	if _, err := a.Reserve(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.Call = "on-b"
	if _, err := b.Reserve(ctx, r); !errors.Is(err, ledger.ErrOverBudget) {
		t.Fatalf("the second controller took past the budget: %v", err)
	}
	if err := a.Settle(ctx, id, "on-a", 10); err != nil {
		t.Fatal(err)
	}
	// B counts A's call at its hold until A sends the settlement, within SettleDelay.
	deadline := time.Now().Add(5 * time.Second)
	for {
		acct, _, err := b.Account(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if acct.Held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's settlement never reached the shared account: %+v", acct)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if acct, _ := b.Reserve(ctx, r); acct.Held != 60 || acct.Spent != 10 {
		t.Fatalf("after the first settled: %+v", acct)
	}
	// A controller's next reservation of the key carries its settlement: the account it answers has it.
	r.Call, r.Amount = "next-on-b", 10
	if err := b.Settle(ctx, id, "on-b", 25); err != nil {
		t.Fatal(err)
	}
	if acct, err := b.Reserve(ctx, r); err != nil || acct.Spent != 35 || acct.Held != 10 {
		t.Fatalf("a reservation after a settlement: %+v, %v", acct, err)
	}
}

// TestADeadControllersHoldsLapse is a controller that stops renewing: its holds lapse within the
// lease, charged at their amount, and the budget's room comes back to what that leaves.
func TestADeadControllersHoldsLapse(t *testing.T) {
	c, prefix := redistest.New(t)
	dead := NewShared(c, prefix)
	dead.lease = 300 * time.Millisecond
	alive := NewShared(c, prefix)
	ctx := context.Background()
	id := ledger.AccountID{Key: "key_d", Period: 4}
	if _, err := dead.Reserve(ctx, Reservation{Account: id, Budget: 100, Call: "lost", Amount: 40, Spent: spent(0)}); err != nil {
		t.Fatal(err)
	}
	live := Reservation{Account: id, Budget: 100, Call: "alive", Amount: 70, Spent: spent(0)}
	if _, err := alive.Reserve(ctx, live); !errors.Is(err, ledger.ErrOverBudget) {
		t.Fatalf("the dead controller's hold did not count: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		a, _, err := alive.Account(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if a.Held == 0 {
			if a.Spent != 40 {
				t.Fatalf("the lapsed hold was charged %d, want its amount 40", a.Spent)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hold never lapsed: %+v", a)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A live controller renews: its hold outlasts the lease.
	alive.lease = 300 * time.Millisecond
	live.Amount = 10
	if _, err := alive.Reserve(ctx, live); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		time.Sleep(150 * time.Millisecond)
		alive.renew(ctx)
	}
	if a, _, _ := alive.Account(ctx, id); a.Held != 10 {
		t.Fatalf("a renewed hold lapsed: %+v", a)
	}
	// Its late settlement, after a lapse, would change nothing: the hold is charged once.
	if err := dead.Settle(ctx, id, "lost", 1); err != nil {
		t.Fatal(err)
	}
	if a, _, _ := alive.Account(ctx, id); a.Spent != 40 {
		t.Fatalf("a lapsed hold was charged again: %+v", a)
	}
}

// TestFailoverCountsLocallyAndCatchesUp loses Redis: holds go on locally, with the store's spend, and
// what they charged reaches the shared account once Redis answers.
func TestFailoverCountsLocallyAndCatchesUp(t *testing.T) {
	proxy, url := redistest.NewProxy(t)
	c, prefix := redistest.New(t)
	through, err := redislimit.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer through.Close()
	clk := clock.NewFake(time.Now())
	var switches []bool
	f := NewFailover(NewShared(through, prefix), NewLocal(clk), clk, func(shared bool, _ error) { switches = append(switches, shared) })
	ctx := context.Background()
	id := ledger.AccountID{Key: "key_e", Period: 5}
	r := Reservation{Account: id, Budget: 1000, Amount: 100, Spent: spent(0)}
	r.Call = "one"
	if _, err := f.Reserve(ctx, r); err != nil {
		t.Fatal(err)
	}
	f.Settle(ctx, id, "one", 50)
	proxy.Cut()
	r.Call = "two"
	r.Spent = spent(50) // the store has the first charge
	a, err := f.Reserve(ctx, r)
	if err != nil || a.Spent != 50 || a.Held != 100 {
		t.Fatalf("held locally: %+v, %v", a, err)
	}
	f.Settle(ctx, id, "two", 30)
	proxy.Restore()
	clk.Advance(3 * time.Second)
	r.Call = "three"
	if a, err := f.Reserve(ctx, r); err != nil || a.Spent != 80 {
		t.Fatalf("back on Redis: %+v, %v", a, err)
	}
	if len(switches) != 2 || switches[0] || !switches[1] {
		t.Fatalf("switches %v", switches)
	}
	shared := NewShared(c, prefix)
	if a, _, _ := shared.Account(ctx, id); a.Spent != 80 || a.Held != 100 {
		t.Fatalf("the shared account: %+v", a)
	}
}
