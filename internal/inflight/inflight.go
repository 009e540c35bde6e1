// Package inflight owns the bound on the bytes the requests in flight hold (max_inflight_bytes): a
// plain concurrent object that doors and workers share without messages. A request holds its bytes in
// an Account from its admission to its end; its calls' answers count in it as their workers get them.
package inflight

import (
	"sync"
	"sync/atomic"

	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// Inflight counts the bytes the requests in flight hold (max_inflight_bytes): a request's task and ask
// when it is let in, then its calls' answers as their workers get them. Each request holds its bytes in
// an Account, which gives them all back when the request ends, so that no answer, however late, is
// counted after it. The total never passes the limit: what would take it past is refused.
type Inflight struct {
	limit    int64 // 0 bounds nothing, and nothing is counted
	total    atomic.Int64
	peak     atomic.Int64
	accounts sync.Map // request id → *Account
}

// NewInflight returns the count of a limit; 0 (or less) bounds nothing.
func New(limit int64) *Inflight { return &Inflight{limit: max(limit, 0)} }

// Limit is the bound, 0 for none.
func (in *Inflight) Limit() int64 {
	if in == nil {
		return 0
	}
	return in.limit
}

// Total is the bytes the requests in flight hold now.
func (in *Inflight) Total() int64 { return in.total.Load() }

// Peak is the most they held at once.
func (in *Inflight) Peak() int64 { return in.peak.Load() }

// take adds n to the total unless that would pass the limit.
func (in *Inflight) take(n int64) bool {
	for {
		cur := in.total.Load()
		if cur+n > in.limit {
			return false
		}
		if in.total.CompareAndSwap(cur, cur+n) {
			for p := in.peak.Load(); cur+n > p && !in.peak.CompareAndSwap(p, cur+n); p = in.peak.Load() {
			}
			return true
		}
	}
}

// Open lets a request in with size bytes (its task and ask), or reports false when they do not fit.
// The account's answers are found by the request's id until Close; a second request of an id already
// open (which its coordinator refuses) counts its own size only. A nil Inflight, or one without a
// limit, counts nothing and returns a nil account, whose methods accept everything.
func (in *Inflight) Open(requestID string, size int64) (*Account, bool) {
	if in == nil || in.limit == 0 {
		return nil, true
	}
	if !in.take(size) {
		return nil, false
	}
	a := &Account{in: in, id: requestID, held: size}
	if _, taken := in.accounts.LoadOrStore(requestID, a); taken {
		a.id = ""
	}
	return a, true
}

// Account is the account of a request in flight: nil when nothing is counted, and a closed one when
// the request has ended (with a bound, every request in flight has one from before its first call), so
// that a call started after its request answers nobody and holds nothing.
func (in *Inflight) Account(requestID string) *Account {
	if in == nil || in.limit == 0 {
		return nil
	}
	if a, ok := in.accounts.Load(requestID); ok {
		return a.(*Account)
	}
	return ended
}

// ended is the account of every request that has ended.
var ended = &Account{closed: true}

// Account is what one request holds of the in-flight total.
type Account struct {
	in     *Inflight
	id     string // "" when another request of its id holds the name
	mu     sync.Mutex
	held   int64
	closed bool
}

// Hold counts n more bytes of the request's answers: "" when they fit, Overloaded when the total
// would pass the limit, Cancelled when the request has ended (a late answer nobody reads).
func (a *Account) Hold(n int64) resilience.Kind {
	if a == nil || n <= 0 {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return resilience.Cancelled
	case !a.in.take(n):
		return resilience.Overloaded
	}
	a.held += n
	return ""
}

// Close gives back everything the request held; nothing is held for it afterwards. It may be called
// more than once.
func (a *Account) Close() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	a.in.total.Add(-a.held)
	a.held = 0
	if a.id != "" {
		a.in.accounts.CompareAndDelete(a.id, a)
	}
}

// Answer counts one call's answer against its request's account: the pieces of a streamed answer as
// they come, then what the whole answer holds beyond them. A transport may hand over pieces on a
// goroutine of its own (SSH's reader), hence mu.
type Answer struct {
	acct *Account
	mu   sync.Mutex
	held int64
	// refused is why a piece was refused ("" while none was): the call is stopped, and its answer
	// refused with it.
	refused resilience.Kind
	done    bool // the result is counted: a piece the transport hands over after it is nobody's
}

// Answer starts counting one call's answer in the account.
func (a *Account) Answer() *Answer { return &Answer{acct: a} }

// Piece counts n bytes of a streamed piece, and reports whether it may go on to the call's sender.
func (h *Answer) Piece(n int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refused != "" || h.done {
		return false
	}
	if h.refused = h.acct.Hold(n); h.refused != "" {
		return false
	}
	h.held += n
	return true
}

// Result counts the whole answer of n bytes (ok: the call answered), beyond the pieces counted
// already, and returns why the answer is refused: "" when it fits or the call failed, Overloaded when
// the requests in flight hold the bound already, Cancelled when its request has ended.
func (h *Answer) Result(ok bool, n int64) resilience.Kind {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = true
	if h.refused == "" && ok {
		return h.acct.Hold(n - h.held)
	}
	return h.refused
}
