// Package redislimit counts provider rate limits in Redis, shared by every controller on it: sliding
// windows of requests and tokens and leased concurrency slots, checked and taken atomically by Lua
// scripts on the Redis server's clock. Keys carry the provider as a hash tag, so a provider's keys
// live on one Redis Cluster slot.
package redislimit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/redis/go-redis/v9"
)

// Client is what the limiter needs of Redis: running scripts (EVALSHA, falling back to EVAL when the
// server has forgotten them, which runs nothing twice: NOSCRIPT means the script did not run).
type Client = redis.Scripter

//go:embed limits.lua
var source string

// The operations of the script, one entry point per call.
var (
	reserveScript = redis.NewScript(source + "\nreturn reserve()")
	releaseScript = redis.NewScript(source + "\nreturn release()")
	observeScript = redis.NewScript(source + "\nreturn observe()")
	usageScript   = redis.NewScript(source + "\nreturn usage()")
	renewScript   = redis.NewScript(source + "\nreturn renew()")
)

// ConcurrencyRecheck bounds the wait of a call refused for concurrency: another controller's call may
// end at any moment, and this one hears of it only by asking again.
const ConcurrencyRecheck = 250 * time.Millisecond

// Limiter is one provider's limits in Redis. It is safe for concurrent use.
type Limiter struct {
	client Client
	keys   []string
	limits ratelimit.Limits
	window time.Duration
	lease  time.Duration

	mu   sync.Mutex
	held map[string]bool // the slots this controller holds, which Renew keeps
}

// Options tune a limiter.
type Options struct {
	// Prefix starts every key ("conclave" when empty); controllers share counts when they share it.
	Prefix string
	// Window is what the limits count over (ratelimit.Window when zero; shorter in tests).
	Window time.Duration
	// Lease is how long a concurrency slot is held unless renewed (Renew, every SlotRenew): a dead
	// controller's slots are free again within it. SlotLease when zero.
	Lease time.Duration
}

// New returns the limiter of a provider.
func New(c Client, provider string, l ratelimit.Limits, o Options) *Limiter {
	if o.Prefix == "" {
		o.Prefix = "conclave"
	}
	if o.Window <= 0 {
		o.Window = ratelimit.Window
	}
	if o.Lease <= 0 {
		o.Lease = SlotLease
	}
	tag := fmt.Sprintf("%s:rl:{%s}:", o.Prefix, provider)
	return &Limiter{client: c, limits: l, window: o.Window, lease: o.Lease, held: map[string]bool{},
		keys: []string{tag + "window", tag + "tokens", tag + "slots", tag + "blocked", tag + "spent"}}
}

// Keys returns the limiter's Redis keys: the window, the tokens of its members, the slots, the block
// and the tokens' sum.
func (r *Limiter) Keys() []string { return r.keys }

func (r *Limiter) args(extra ...any) []any {
	return append([]any{r.limits.RequestsPerMinute, r.limits.TokensPerMinute, r.limits.Concurrency,
		r.window.Microseconds(), r.lease.Microseconds()}, extra...)
}

// run runs a script and reads the usage it returns after its own fields.
func (r *Limiter) run(ctx context.Context, s *redis.Script, own int, args ...any) ([]any, ratelimit.Usage, error) {
	res, err := s.Run(ctx, r.client, r.keys, r.args(args...)...).Slice()
	if err != nil {
		return nil, ratelimit.Usage{}, fmt.Errorf("redis: %w", err)
	}
	if len(res) != own+5 {
		return nil, ratelimit.Usage{}, fmt.Errorf("redis: the script answered %d values, want %d", len(res), own+5)
	}
	n := make([]int64, len(res))
	for i, v := range res {
		switch x := v.(type) {
		case int64:
			n[i] = x
		case string: // the reason
		default:
			return nil, ratelimit.Usage{}, fmt.Errorf("redis: unexpected %T in the script's answer", v)
		}
	}
	u := ratelimit.Usage{Requests: int(n[own]), Tokens: int(n[own+1]), InFlight: int(n[own+2]),
		Blocked: time.Duration(n[own+3]) * time.Microsecond, RoomIn: time.Duration(n[own+4]) * time.Microsecond, Shared: true}
	u.RequestsUse = share(u.Requests, r.limits.RequestsPerMinute)
	u.TokensUse = share(u.Tokens, r.limits.TokensPerMinute)
	u.ConcurrencyUse = share(u.InFlight, r.limits.Concurrency)
	return res, u, nil
}

func share(n, limit int) float64 {
	if limit <= 0 {
		return 0
	}
	return min(float64(n)/float64(limit), 1)
}

// Reserve implements ratelimit.Limiter.
func (r *Limiter) Reserve(ctx context.Context, id string, estimate int) (ratelimit.Decision, error) {
	if l := r.limits.TokensPerMinute; l > 0 && estimate > l {
		return ratelimit.Decision{Reason: ratelimit.ReasonTokens}, ratelimit.ErrTooLarge
	}
	res, u, err := r.run(ctx, reserveScript, 4, id, estimate)
	if err != nil {
		return ratelimit.Decision{}, err
	}
	d := ratelimit.Decision{Allowed: res[0].(int64) == 1, At: time.UnixMicro(res[3].(int64)), Usage: u}
	if d.Allowed && r.limits.Concurrency > 0 {
		r.mu.Lock()
		r.held[id] = true
		r.mu.Unlock()
	}
	if !d.Allowed {
		d.Reason, _ = res[1].(string)
		d.RetryAfter = max(time.Duration(res[2].(int64))*time.Microsecond, time.Millisecond)
		if d.Reason == ratelimit.ReasonConcurrency {
			d.RetryAfter = min(d.RetryAfter, ConcurrencyRecheck)
		}
	}
	return d, nil
}

// Release implements ratelimit.Limiter.
func (r *Limiter) Release(ctx context.Context, id string, actual int) (ratelimit.Usage, error) {
	r.mu.Lock()
	delete(r.held, id)
	r.mu.Unlock()
	_, u, err := r.run(ctx, releaseScript, 0, id, actual)
	return u, err
}

// Observe implements ratelimit.Limiter: the provider's figures win when it has fewer left than the
// window counts, and its Retry-After or spent limits block every controller.
func (r *Limiter) Observe(ctx context.Context, up ratelimit.Upstream) (ratelimit.Usage, error) {
	_, u, err := r.run(ctx, observeScript, 0, up.RemainingRequests, up.RemainingTokens,
		resetWithin(up.ResetRequests, r.window).Microseconds(), resetWithin(up.ResetTokens, r.window).Microseconds(), up.Exhausted().Microseconds())
	return u, err
}

func resetWithin(d, window time.Duration) time.Duration {
	if d <= 0 || d > window {
		return window
	}
	return d
}

// Usage implements ratelimit.Limiter.
func (r *Limiter) Usage(ctx context.Context) (ratelimit.Usage, error) {
	_, u, err := r.run(ctx, usageScript, 0)
	return u, err
}

// Slot leases: a concurrency slot lasts SlotLease unless renewed, and a live controller renews its
// slots every SlotRenew, so a dead controller's slots are free within SlotLease, whatever the
// longest call a blueprint allows.
const (
	SlotLease = 15 * time.Second
	SlotRenew = 5 * time.Second
)

// Renew starts the leases of the slots this controller holds again from now. A renewal that fails is
// made again at the next one: a slot lapses only after SlotLease without one.
func (r *Limiter) Renew(ctx context.Context) error {
	r.mu.Lock()
	ids := make([]any, 0, len(r.held))
	for id := range r.held {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	if err := renewScript.Run(ctx, r.client, r.keys, r.args(ids...)...).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// ErrNoRedis is returned by Open for a URL that names no Redis.
var ErrNoRedis = errors.New("redis_url is not a Redis URL")

// Open connects to the Redis at url (redis:// or rediss://), with short timeouts: a Redis that does
// not answer within them is a lost Redis, and the local limiter takes over.
func Open(url string) (*redis.Client, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, ErrNoRedis
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, 500*time.Millisecond, 500*time.Millisecond
	o.MaxRetries = -1 // a failed call fails at once; Failover decides what follows
	return redis.NewClient(o), nil
}
