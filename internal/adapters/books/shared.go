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
// runs (Run); a dead controller's lapse within Lease and are charged at their amount.
//
// A settlement is sent with the next script of its key (a reservation, a read), or after
// SettleDelay: a key's calls in a row cost one round trip each, not two. Until it is sent, the
// account counts the call at its hold, never less than its cost. It is safe for concurrent use.
type Shared struct {
	client redis.Scripter
	prefix string
	lease  time.Duration

	mu     sync.Mutex
	held   map[string]map[string]bool // the calls this controller holds, by key id
	owed   map[string][]settlement    // settlements not sent yet, by key id
	timer  *time.Timer                // sends them; nil when none is set
	closed bool                       // Run ended: settlements are sent at once
}

// SettleDelay bounds how long a settlement waits for its key's next script before it is sent alone.
const SettleDelay = 20 * time.Millisecond

// settlement is a call's cost, to be charged in place of its hold.
type settlement struct {
	call string
	cost int64
	at   time.Time
}

// NewShared returns the ledger in Redis under prefix ("conclave" when empty).
func NewShared(c redis.Scripter, prefix string) *Shared {
	if prefix == "" {
		prefix = "conclave"
	}
	return &Shared{client: c, prefix: prefix, lease: Lease, held: map[string]map[string]bool{}, owed: map[string][]settlement{}}
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
	var opened, rechecked bool
	for {
		owed := s.take(r.Account.Key)
		status, a, err := s.run(ctx, reserveScript, keys, withSettlements(args, owed)...)
		if err != nil {
			s.giveBack(r.Account.Key, owed)
			return ledger.Account{}, err
		}
		s.sent(r.Account.Key, owed)
		a.Budget = r.Budget
		switch {
		case status == 1:
			s.track(r.Account.Key, r.Call, true)
			return a, nil
		case status == 0 && (rechecked || a.Held == 0):
			return a, ledger.ErrOverBudget
		case status == 0:
			// Calls other controllers settled may still count at their holds: ask once more after
			// their settlements are sent, so that a refusal does not count money already given back.
			rechecked = true
			select {
			case <-ctx.Done():
				return a, ledger.ErrOverBudget
			case <-time.After(2 * SettleDelay):
			}
			continue
		case opened:
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
		opened = true
	}
}

// Settle implements Budgets: the settlement goes with the key's next script, within SettleDelay.
func (s *Shared) Settle(ctx context.Context, account ledger.AccountID, call string, cost money.USD) error {
	owed := settlement{call: call, cost: int64(max(cost, 0)), at: time.Now()}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.send(ctx, account.Key, []settlement{owed})
	}
	s.owed[account.Key] = append(s.owed[account.Key], owed)
	if s.timer == nil {
		s.timer = time.AfterFunc(SettleDelay, s.sendOwed)
	}
	s.mu.Unlock()
	return nil
}

// Account implements Budgets.
func (s *Shared) Account(ctx context.Context, id ledger.AccountID) (ledger.Account, bool, error) {
	keys, base := s.keys(id)
	owed := s.take(id.Key)
	open, a, err := s.run(ctx, accountScript, keys, withSettlements([]any{base}, owed)...)
	if err != nil {
		s.giveBack(id.Key, owed)
	} else {
		s.sent(id.Key, owed)
	}
	return a, open == 1, err
}

// withSettlements appends settlements to a script's arguments: their count, then each call and cost.
func withSettlements(args []any, owed []settlement) []any {
	out := append(args[:len(args):len(args)], len(owed))
	for _, o := range owed {
		out = append(out, o.call, o.cost)
	}
	return out
}

// take removes a key's settlements not sent yet, for a script about to send them.
func (s *Shared) take(key string) []settlement {
	s.mu.Lock()
	defer s.mu.Unlock()
	owed := s.owed[key]
	delete(s.owed, key)
	return owed
}

// giveBack keeps settlements a script could not send, for the next; those older than a lease are
// dropped: their holds have lapsed, charged at their amounts, and sending them would change nothing.
func (s *Shared) giveBack(key string, owed []settlement) {
	cutoff := time.Now().Add(-s.lease)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range owed {
		if o.at.After(cutoff) {
			s.owed[key] = append(s.owed[key], o)
		}
	}
	if len(s.owed[key]) == 0 {
		delete(s.owed, key)
	} else if s.timer == nil && !s.closed {
		s.timer = time.AfterFunc(time.Second, s.sendOwed) // Redis failed: not sooner than a second
	}
}

// sent forgets the calls whose settlements Redis took.
func (s *Shared) sent(key string, owed []settlement) {
	for _, o := range owed {
		s.track(key, o.call, false)
	}
}

// send runs the settle script for a key's settlements.
func (s *Shared) send(ctx context.Context, key string, owed []settlement) error {
	keys, base := s.keys(ledger.AccountID{Key: key})
	if err := settleScript.Run(ctx, s.client, keys, withSettlements([]any{base}, owed)...).Err(); err != nil {
		s.giveBack(key, owed)
		return redisError{fmt.Errorf("redis: %w", err)}
	}
	s.sent(key, owed)
	return nil
}

// sendOwed sends every settlement waiting, a script per key.
func (s *Shared) sendOwed() {
	s.mu.Lock()
	owed := s.owed
	s.owed, s.timer = map[string][]settlement{}, nil
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), Renew)
	defer cancel()
	for key, o := range owed {
		_ = s.send(ctx, key, o)
	}
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
// again at the next tick: a hold lapses only after Lease without one. As it ends, the settlements
// waiting are sent, and later ones are sent at once.
func (s *Shared) Run(ctx context.Context) {
	t := time.NewTicker(Renew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.mu.Lock()
			s.closed = true
			s.mu.Unlock()
			s.sendOwed()
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
