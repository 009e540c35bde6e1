// Package ratelimit owns provider rate limits: requests per minute, tokens per minute and concurrent
// calls, as sliding windows. A Limiter reserves capacity for one call by its id and releases it with
// the tokens the call really used; Local counts in the process, redislimit counts in Redis for every
// controller sharing it, and Failover uses a shared limiter while it answers and a local one while it
// does not. Limiters may block on I/O: the provider actor calls them off its goroutine.
package ratelimit

import (
	"context"
	"errors"
	"time"

	"github.com/conclave-ai/conclave/internal/core/providerstate"
)

// Limits are one provider's limits; zero means unlimited. The value type lives with the provider's
// published state, which carries it.
type Limits = providerstate.Limits

// Defaults are the providers' limits unless the configuration says otherwise
// (providerstate.DefaultLimits).
var Defaults = providerstate.DefaultLimits

// Window is the span every limit counts over.
const Window = time.Minute

// Reasons a reservation is refused.
const (
	ReasonRequests    = "requests"
	ReasonTokens      = "tokens"
	ReasonConcurrency = "concurrency"
	// ReasonUpstream is the provider's own word: a Retry-After, or headers saying a limit is spent.
	ReasonUpstream = "upstream"
)

// ErrTooLarge is returned for a reservation of more tokens than the token limit: no wait makes it fit.
var ErrTooLarge = errors.New("the call needs more tokens than the provider's limit per minute")

// Decision is the answer to a reservation.
type Decision struct {
	Allowed bool
	// RetryAfter is when to ask again, when not allowed: the window's next free moment. Zero means a
	// slot comes back when a call of this controller ends.
	RetryAfter time.Duration
	// Reason names the exhausted limit when not allowed.
	Reason string
	// At is when the limiter decided, on its own clock (the Redis server's for a shared limiter).
	At time.Time
	// Usage is the limits' use after the decision.
	Usage Usage
}

// Usage is how much of each limit is in use (providerstate.Usage, which the doors read too).
type Usage = providerstate.Usage

// Limiter reserves capacity for calls to one provider. Implementations are safe for concurrent use.
type Limiter interface {
	// Reserve takes a request, estimate tokens and a concurrency slot for call id when every limit has
	// room; ErrTooLarge when estimate can never fit.
	Reserve(ctx context.Context, id string, estimate int) (Decision, error)
	// Release ends call id: its slot is freed and its tokens become what it used (actual < 0: unknown,
	// the estimate stands). Releasing an unknown or expired id does nothing.
	Release(ctx context.Context, id string, actual int) (Usage, error)
	// Observe applies what the provider's headers said: when it has fewer left than counted, its figure
	// wins until its reset; a Retry-After or a spent limit blocks every call until then.
	Observe(ctx context.Context, u Upstream) (Usage, error)
	// Usage reports the limits' use now.
	Usage(ctx context.Context) (Usage, error)
}

// Immediate reports whether a limiter answers at once, without I/O, so that its caller may call it in
// place rather than on a goroutine of its own.
func Immediate(l Limiter) bool {
	_, ok := l.(interface{ NeverBlocks() })
	return ok
}

// Factory makes the limiter of one provider.
type Factory func(provider string, l Limits) Limiter

// Upstream is a provider's own view of its limits, read from response headers.
type Upstream struct {
	RemainingRequests int64 // -1 when unknown
	RemainingTokens   int64 // -1 when unknown
	LimitRequests     int64
	LimitTokens       int64
	ResetRequests     time.Duration
	ResetTokens       time.Duration
	RetryAfter        time.Duration
	// PerModel is true when the limits are the model's own, not the provider's.
	PerModel bool
}

// MaxUpstreamWait bounds any wait a provider's headers ask for, and MaxUpstreamCount any count they
// give: a figure beyond them is a misread header (a reset in epoch seconds taken for a duration), and
// carried on it would hold a provider for years.
const (
	MaxUpstreamWait  = 24 * time.Hour
	MaxUpstreamCount = 1 << 40
)

// Bounded returns u with every wait within [0, MaxUpstreamWait] and every count within [-1,
// MaxUpstreamCount].
func (u Upstream) Bounded() Upstream {
	wait := func(d time.Duration) time.Duration { return min(max(d, 0), MaxUpstreamWait) }
	count := func(n int64) int64 { return min(max(n, -1), MaxUpstreamCount) }
	u.ResetRequests, u.ResetTokens, u.RetryAfter = wait(u.ResetRequests), wait(u.ResetTokens), wait(u.RetryAfter)
	u.RemainingRequests, u.RemainingTokens = count(u.RemainingRequests), count(u.RemainingTokens)
	u.LimitRequests, u.LimitTokens = max(count(u.LimitRequests), 0), max(count(u.LimitTokens), 0)
	return u
}

// Exhausted is how long the headers say no call will be taken: until the reset of a limit with nothing
// remaining, or the Retry-After; zero when a call may go.
func (u Upstream) Exhausted() time.Duration {
	d := u.RetryAfter
	if u.RemainingRequests == 0 {
		d = max(d, u.ResetRequests)
	}
	if u.RemainingTokens == 0 {
		d = max(d, u.ResetTokens)
	}
	return d
}

// Resync is what a provider's headers take from this window: how many of the requests and tokens
// still counted as free to treat as spent, and until when (the provider's reset, at most a window).
// counted are the window's current requests and tokens.
func Resync(l Limits, u Upstream, requests, tokens int) (phantomRequests, phantomTokens int, requestsFor, tokensFor time.Duration) {
	if l.RequestsPerMinute > 0 && u.RemainingRequests >= 0 {
		if free := l.RequestsPerMinute - requests; int64(free) > u.RemainingRequests {
			phantomRequests, requestsFor = free-int(u.RemainingRequests), resetWithin(u.ResetRequests)
		}
	}
	if l.TokensPerMinute > 0 && u.RemainingTokens >= 0 {
		if free := l.TokensPerMinute - tokens; int64(free) > u.RemainingTokens {
			phantomTokens, tokensFor = free-int(u.RemainingTokens), resetWithin(u.ResetTokens)
		}
	}
	return
}

// resetWithin bounds a provider's reset to the window (an unknown reset counts as the whole window).
func resetWithin(d time.Duration) time.Duration {
	if d <= 0 || d > Window {
		return Window
	}
	return d
}

func share(n, limit int) float64 {
	if limit <= 0 {
		return 0
	}
	return min(float64(n)/float64(limit), 1)
}
