package books

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/core/ledger"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/redis/go-redis/v9"
)

//go:embed budgets.lua
var script string

// The operations of the script, one entry point per call.
var (
	reserveScript = redis.NewScript(script + "\nreturn reserve()")
	settleScript  = redis.NewScript(script + "\nreturn settle()")
	openScript    = redis.NewScript(script + "\nreturn open()")
	renewScript   = redis.NewScript(script + "\nreturn renew()")
	accountScript = redis.NewScript(script + "\nreturn account()")
	addScript     = redis.NewScript(script + "\nreturn add()")
)

// Shared holds accounts in Redis, for every controller sharing its prefix: each operation is one
// script that checks and takes atomically. Its holds are leases this controller renews while it
// runs (Run); a dead controller's lapse within Lease and are charged at their amount. It is safe for
// concurrent use.
type Shared struct {
	client redis.Scripter
	prefix string
	lease  time.Duration

	mu   sync.Mutex
	held map[string]map[string]bool // the calls this controller holds, by key id
}

// NewShared returns the ledger in Redis under prefix ("conclave" when empty).
func NewShared(c redis.Scripter, prefix string) *Shared {
	if prefix == "" {
		prefix = "conclave"
	}
	return &Shared{client: c, prefix: prefix, lease: Lease, held: map[string]map[string]bool{}}
}

// keys are an account's key, its key's holds and amounts, and the account key without its period.
func (s *Shared) keys(id ledger.AccountID) (keys []string, base string) {
	tag := s.prefix + ":bk:{" + id.Key + "}:"
	base = tag + "acct:"
	return []string{base + strconv.FormatInt(id.Period, 10), tag + "holds", tag + "amounts"}, base
}

// Reserve implements Budgets.
func (s *Shared) Reserve(ctx context.Context, r Reservation) (ledger.Account, error) {
	amount := min(max(r.Amount, 0), ledger.MaxHold)
	keys, base := s.keys(r.Account)
	args := []any{base, int64(r.Budget), r.Call, int64(amount), s.lease.Microseconds(), r.Account.Period}
	for attempt := 0; ; attempt++ {
		status, a, err := s.run(ctx, reserveScript, keys, args...)
		if err != nil {
			return ledger.Account{}, err
		}
		a.Budget = r.Budget
		switch {
		case status == 1:
			s.track(r.Account.Key, r.Call, true)
			return a, nil
		case status == 0:
			return a, ledger.ErrOverBudget
		case attempt > 0:
			return a, fmt.Errorf("redis: the account %s did not open", r.Account)
		}
		// Not open: its spend so far comes from the store, once for every controller.
		spent, err := r.Spent(ctx)
		if err != nil {
			return ledger.Account{}, err
		}
		var ttl time.Duration
		if !r.PeriodEnd.IsZero() {
			ttl = time.Until(r.PeriodEnd) + 24*time.Hour
		}
		if err := openScript.Run(ctx, s.client, keys, base, int64(spent), max(ttl.Milliseconds(), 0)).Err(); err != nil {
			return ledger.Account{}, redisError{fmt.Errorf("redis: %w", err)}
		}
	}
}

// Settle implements Budgets.
func (s *Shared) Settle(ctx context.Context, account ledger.AccountID, call string, cost money.USD) error {
	keys, base := s.keys(account)
	s.track(account.Key, call, false)
	if err := settleScript.Run(ctx, s.client, keys, base, call, int64(max(cost, 0))).Err(); err != nil {
		return redisError{fmt.Errorf("redis: %w", err)}
	}
	return nil
}

// Account implements Budgets.
func (s *Shared) Account(ctx context.Context, id ledger.AccountID) (ledger.Account, bool, error) {
	keys, base := s.keys(id)
	open, a, err := s.run(ctx, accountScript, keys, base)
	return a, open == 1, err
}

// Add charges an open account an amount counted elsewhere (locally, while Redis was lost).
func (s *Shared) Add(ctx context.Context, id ledger.AccountID, amount money.USD) error {
	keys, base := s.keys(id)
	if err := addScript.Run(ctx, s.client, keys, base, int64(amount)).Err(); err != nil {
		return redisError{fmt.Errorf("redis: %w", err)}
	}
	return nil
}

// run runs a script answering {status, spent, held}.
func (s *Shared) run(ctx context.Context, sc *redis.Script, keys []string, args ...any) (int64, ledger.Account, error) {
	res, err := sc.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return 0, ledger.Account{}, redisError{fmt.Errorf("redis: %w", err)}
	}
	if len(res) != 3 {
		return 0, ledger.Account{}, redisError{fmt.Errorf("redis: the script answered %d values, want 3", len(res))}
	}
	status, ok := res[0].(int64)
	spent, err1 := amountOf(res[1])
	held, err2 := amountOf(res[2])
	if !ok || err1 != nil || err2 != nil {
		return 0, ledger.Account{}, redisError{fmt.Errorf("redis: unexpected answer %v", res)}
	}
	return status, ledger.Account{Spent: spent, Held: held}, nil
}

func amountOf(v any) (money.USD, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("%T is not an amount", v)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return money.USD(n), err
}

// redisError is a failure to reach Redis or to run a script there, which Failover falls back from.
type redisError struct{ error }

func (e redisError) Unwrap() error { return e.error }

// track remembers the calls this controller holds, for Run to renew.
func (s *Shared) track(key, call string, held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls := s.held[key]
	switch {
	case held && calls == nil:
		s.held[key] = map[string]bool{call: true}
	case held:
		calls[call] = true
	case calls != nil:
		delete(calls, call)
		if len(calls) == 0 {
			delete(s.held, key)
		}
	}
}

// Run renews this controller's holds every Renew until ctx ends. A renewal that fails is tried
// again at the next tick: a hold lapses only after Lease without one.
func (s *Shared) Run(ctx context.Context) {
	t := time.NewTicker(Renew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.renew(ctx)
		}
	}
}

func (s *Shared) renew(ctx context.Context) {
	s.mu.Lock()
	batch := make(map[string][]any, len(s.held))
	for key, calls := range s.held {
		for c := range calls {
			batch[key] = append(batch[key], c)
		}
	}
	s.mu.Unlock()
	for key, calls := range batch {
		keys, base := s.keys(ledger.AccountID{Key: key})
		args := append([]any{base, s.lease.Microseconds()}, calls...)
		rctx, cancel := context.WithTimeout(ctx, Renew)
		_ = renewScript.Run(rctx, s.client, keys, args...).Err()
		cancel()
	}
}
