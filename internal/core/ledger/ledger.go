// Package ledger owns the arithmetic of a key's budget: what a call may cost at worst (its
// reservation), whether a key may take it, and how a reservation becomes a charge. A key's period is
// an Account: what its settled calls cost (Spent) and what its calls in flight hold (Held). A call
// reserves its worst case before it leaves; its real cost settles it, and the rest of its hold is
// released. So a key can spend past its budget by at most one call's hold less its cost.
//
// Book is the rule as a data structure, for one controller's memory; the shared ledger in Redis runs
// the same rule in a Lua script (internal/adapters/ledger), and a table test holds both to it.
package ledger

import (
	"errors"
	"fmt"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
)

// DefaultOutputBound is a call's output bound when neither the request (max_tokens) nor the model
// (its max_output) gives one: generous, so that a reservation covers what most answers write.
const DefaultOutputBound = 4096

// OutputBound is the most output tokens a call may be charged for: the request's max_tokens, else the
// model's max_output, else DefaultOutputBound.
func OutputBound(maxTokens, modelMaxOutput int) int {
	switch {
	case maxTokens > 0:
		return maxTokens
	case modelMaxOutput > 0:
		return modelMaxOutput
	}
	return DefaultOutputBound
}

// WorstCase is what a call may cost at worst: its prompt and its output bound at the model's prices,
// every prompt token at the highest an input token may pay (a cache write may cost more than input).
func WorstCase(r money.Rates, promptTokens, outputBound int) money.USD {
	return money.Rates{In: r.MaxInput(), Out: r.Out}.Cost(int64(promptTokens), int64(outputBound))
}

// MaxHold bounds one call's hold: the shared ledger's arithmetic is exact below 2^53.
const MaxHold = money.USD(1 << 53)

// Account is a key's budget in one period.
type Account struct {
	Budget money.USD
	Spent  money.USD
	Held   money.USD
}

// Room is what the account may still hold: its budget less what is spent and held (negative when over).
func (a Account) Room() money.USD { return a.Budget - a.Spent - a.Held }

// Admits reports whether the account may hold amount more.
func (a Account) Admits(amount money.USD) bool { return amount <= a.Room() }

// ErrOverBudget is a reservation refused: the key's budget, less what it spent and holds, is smaller
// than the call's worst case.
var ErrOverBudget = errors.New("the key's budget has no room for the call")

// Hold is one call's reservation.
type Hold struct {
	Account AccountID
	Amount  money.USD
	// Until is when the hold lapses unless renewed: its controller stopped renewing (it died), and the
	// call is charged at its hold.
	Until time.Time
}

// AccountID names an account: a key and the start of its budget period (unix microseconds).
type AccountID struct {
	Key    string
	Period int64
}

func (id AccountID) String() string { return fmt.Sprintf("%s@%d", id.Key, id.Period) }

// Book is one controller's accounts and holds. It is not safe for concurrent use; its owner locks it.
type Book struct {
	accounts map[AccountID]*Account
	holds    map[string]Hold // by call id
}

// NewBook returns an empty book.
func NewBook() *Book {
	return &Book{accounts: map[AccountID]*Account{}, holds: map[string]Hold{}}
}

// Open makes an account with what its key spent in the period so far, unless it exists: the first
// reservation of a period reads the key's spend from the store once.
func (b *Book) Open(id AccountID, spent money.USD) {
	if _, ok := b.accounts[id]; !ok {
		b.accounts[id] = &Account{Spent: spent}
	}
}

// Has reports whether an account is open.
func (b *Book) Has(id AccountID) bool {
	_, ok := b.accounts[id]
	return ok
}

// Raise makes an open account's spend at least spent: another controller's charges, read from the
// store, that this book has not seen.
func (b *Book) Raise(id AccountID, spent money.USD) {
	if a, ok := b.accounts[id]; ok && spent > a.Spent {
		a.Spent = spent
	}
}

// Reserve holds amount for call against an open account of budget, at now, until until. A call that
// holds already is held once (asking twice takes once). Lapsed holds are charged first.
func (b *Book) Reserve(id AccountID, budget money.USD, call string, amount money.USD, now, until time.Time) (Account, error) {
	b.Lapse(now)
	a, ok := b.accounts[id]
	if !ok {
		return Account{}, fmt.Errorf("account %s is not open", id)
	}
	a.Budget = budget
	if _, held := b.holds[call]; held {
		return *a, nil
	}
	amount = min(max(amount, 0), MaxHold)
	if !a.Admits(amount) {
		return *a, ErrOverBudget
	}
	a.Held += amount
	b.holds[call] = Hold{Account: id, Amount: amount, Until: until}
	return *a, nil
}

// Settle ends a call's hold: its cost is charged and the rest released. A call without a hold (it
// lapsed and was charged at its hold already, or never held) changes nothing; it reports whether the
// call held.
func (b *Book) Settle(call string, cost money.USD) bool {
	h, ok := b.holds[call]
	if !ok {
		return false
	}
	delete(b.holds, call)
	if a, ok := b.accounts[h.Account]; ok {
		a.Held -= h.Amount
		a.Spent = money.Add(a.Spent, max(cost, 0))
	}
	return true
}

// Renew extends the holds of calls still running.
func (b *Book) Renew(until time.Time, calls ...string) {
	for _, c := range calls {
		if h, ok := b.holds[c]; ok && h.Until.Before(until) {
			h.Until = until
			b.holds[c] = h
		}
	}
}

// Lapse charges the holds whose time ended at their full amount: their controller stopped renewing
// them, and its journal settles those calls at their reservation too.
func (b *Book) Lapse(now time.Time) {
	for call, h := range b.holds {
		if !h.Until.After(now) {
			b.Settle(call, h.Amount)
		}
	}
}

// Account returns an account as it stands, and whether it is open.
func (b *Book) Account(id AccountID) (Account, bool) {
	a, ok := b.accounts[id]
	if !ok {
		return Account{}, false
	}
	return *a, true
}

// Holds is the number of holds.
func (b *Book) Holds() int { return len(b.holds) }

// Forget closes the accounts of periods that ended before now, with no holds left.
func (b *Book) Forget(ended func(AccountID) bool) {
	for id, a := range b.accounts {
		if a.Held == 0 && ended(id) {
			delete(b.accounts, id)
		}
	}
}
