// Package books owns what Conclave does with money at run time: keys' budget accounts, held in this
// process (Local) or in Redis for every controller sharing it (Shared, with Failover between the
// two), and Meter, the transport every provider call goes through: reserved against its key before it
// leaves, journaled, priced from its usage (or, cut short, from what the provider had sent, counted by
// the tokenizer) and settled. The arithmetic is internal/core/ledger's.
package books

import (
	"context"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/core/ledger"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/platform/clock"
)

// Reservation asks to hold a call's worst case against its key's account of a period.
type Reservation struct {
	Account ledger.AccountID
	Budget  money.USD
	Call    string
	Amount  money.USD
	// PeriodEnd is when the account's period ends (zero for a key's whole life): the shared account
	// lives a while past it, for late settlements.
	PeriodEnd time.Time
	// Spent reads what the key spent in the period so far from the store, once, when its account is
	// not open yet.
	Spent func(context.Context) (money.USD, error)
}

// Budgets hold keys' accounts. Implementations are safe for concurrent use.
type Budgets interface {
	// Reserve holds the call's amount, or refuses with ledger.ErrOverBudget; the account as it stands
	// either way.
	Reserve(ctx context.Context, r Reservation) (ledger.Account, error)
	// Settle charges a held call its cost and releases the rest of its hold.
	Settle(ctx context.Context, account ledger.AccountID, call string, cost money.USD) error
	// Account reads an account as it stands; ok is false when it is not open.
	Account(ctx context.Context, id ledger.AccountID) (ledger.Account, bool, error)
}

// Lease is how long a hold lasts unless its controller renews it, and Renew how often a live
// controller renews its holds: a dead controller's holds lapse, charged at their amount, within Lease.
const (
	Lease = 15 * time.Second
	Renew = 5 * time.Second
)

// Local holds accounts in this process: exact for one controller; with several, each counts its own
// calls over the spend the store had when the account opened, raised as the key's spend is read again.
type Local struct {
	clock clock.Clock
	mu    sync.Mutex
	book  *ledger.Book
}

// NewLocal returns an empty local ledger; a nil clock is the real one.
func NewLocal(c clock.Clock) *Local { return &Local{clock: clock.Or(c), book: ledger.NewBook()} }

// localLease is a local hold's lease: it dies with its process, so it lapses only when a call was never
// settled, which Meter never lets happen.
const localLease = 24 * time.Hour

// Reserve implements Budgets.
func (l *Local) Reserve(ctx context.Context, r Reservation) (ledger.Account, error) {
	l.mu.Lock()
	open := l.book.Has(r.Account)
	l.mu.Unlock()
	if !open {
		spent, err := r.Spent(ctx)
		if err != nil {
			return ledger.Account{}, err
		}
		l.mu.Lock()
		l.book.Open(r.Account, spent)
		l.mu.Unlock()
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.book.Reserve(r.Account, r.Budget, r.Call, r.Amount, now, now.Add(localLease))
}

// Settle implements Budgets.
func (l *Local) Settle(_ context.Context, _ ledger.AccountID, call string, cost money.USD) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.book.Settle(call, cost)
	return nil
}

// Account implements Budgets.
func (l *Local) Account(_ context.Context, id ledger.AccountID) (ledger.Account, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.book.Account(id)
	return a, ok, nil
}

// Raise lifts an open account's spend to what the store says the key spent: other controllers'
// settled calls, when several count locally.
func (l *Local) Raise(id ledger.AccountID, spent money.USD) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.book.Raise(id, spent)
}
