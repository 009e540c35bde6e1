package books

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/core/ledger"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/platform/clock"
)

// Failover holds accounts in Redis while it answers and in this process while it does not: a lost
// Redis costs the sharing, not the budgets. Local accounts open with what the store says the key
// spent; what they charge while Redis is lost is added to the shared accounts when it answers again.
// After a failure Redis is tried again after 1 s, then every 2 s. A call is settled where it was held.
type Failover struct {
	shared *Shared
	local  *Local
	clock  clock.Clock
	// onChange hears each switch: shared false with the error that caused it, then true.
	onChange func(shared bool, err error)

	mu       sync.Mutex
	down     bool
	failures int
	retryAt  time.Time
	onLocal  map[string]bool                // calls held locally
	owed     map[ledger.AccountID]money.USD // charged locally, not yet added to the shared account
}

// retries are the waits before Redis is tried again after a failure: the first, then every later one.
var retries = [2]time.Duration{time.Second, 2 * time.Second}

// NewFailover returns the ledger over shared with local as its fallback.
func NewFailover(shared *Shared, local *Local, c clock.Clock, onChange func(shared bool, err error)) *Failover {
	return &Failover{shared: shared, local: local, clock: clock.Or(c), onChange: onChange, onLocal: map[string]bool{},
		owed: map[ledger.AccountID]money.USD{}}
}

// Reserve implements Budgets.
func (f *Failover) Reserve(ctx context.Context, r Reservation) (ledger.Account, error) {
	if f.useShared(ctx) {
		a, err := f.shared.Reserve(ctx, r)
		if !f.result(ctx, err) {
			return a, err
		}
	}
	a, err := f.local.Reserve(ctx, r)
	if err == nil {
		f.mu.Lock()
		f.onLocal[r.Call] = true
		f.mu.Unlock()
	}
	return a, err
}

// Settle implements Budgets.
func (f *Failover) Settle(ctx context.Context, account ledger.AccountID, call string, cost money.USD) error {
	f.mu.Lock()
	local := f.onLocal[call]
	delete(f.onLocal, call)
	f.mu.Unlock()
	if !local {
		// A settlement Redis does not take leaves the hold to lapse there, charged at its amount. It is
		// sent with the key's next script, whose answer tells how Redis is; only one sent at once
		// (after Run ended) has news of it.
		err := f.shared.Settle(ctx, account, call, cost)
		if err != nil {
			f.result(ctx, err)
		}
		return err
	}
	if err := f.local.Settle(ctx, account, call, cost); err != nil {
		return err
	}
	f.mu.Lock()
	f.owed[account] += cost
	f.mu.Unlock()
	return nil
}

// Account implements Budgets.
func (f *Failover) Account(ctx context.Context, id ledger.AccountID) (ledger.Account, bool, error) {
	if f.useShared(ctx) {
		a, ok, err := f.shared.Account(ctx, id)
		if !f.result(ctx, err) {
			return a, ok, err
		}
	}
	return f.local.Account(ctx, id)
}

// Run renews the shared holds until ctx ends.
func (f *Failover) Run(ctx context.Context) { f.shared.Run(ctx) }

// useShared says whether to try Redis now. Coming back to it, what was charged locally meanwhile is
// added to the shared accounts first, so that the shared account is whole before it decides again.
func (f *Failover) useShared(ctx context.Context) bool {
	f.mu.Lock()
	if f.down && f.clock.Now().Before(f.retryAt) {
		f.mu.Unlock()
		return false
	}
	owed := f.owed
	f.owed = map[ledger.AccountID]money.USD{}
	f.mu.Unlock()
	var err error
	for id, amount := range owed {
		if err == nil && amount > 0 {
			err = f.shared.Add(ctx, id, amount)
		}
		if err != nil {
			f.mu.Lock()
			f.owed[id] += amount
			f.mu.Unlock()
		}
	}
	return !f.result(ctx, err)
}

// result records how Redis answered and reports whether to fall back for this operation.
func (f *Failover) result(ctx context.Context, err error) bool {
	if err != nil && (!errors.As(err, new(redisError)) || ctx.Err() != nil) {
		return false // an answer, the store's failure, or the caller gave up: no word on Redis
	}
	f.mu.Lock()
	changed := f.down != (err != nil)
	if err == nil {
		f.down, f.failures = false, 0
	} else {
		f.down = true
		f.retryAt = f.clock.Now().Add(retries[min(f.failures, len(retries)-1)])
		f.failures++
	}
	f.mu.Unlock()
	if changed && f.onChange != nil {
		f.onChange(err == nil, err)
	}
	return err != nil
}
