package ratelimit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/platform/clock"
)

// Failover counts on a shared limiter while it answers, and on a local one while it does not: a lost
// Redis costs the sharing, not the service. After a failure the shared limiter is tried again after
// Retries (1 s, then 2 s, then every 2 s); the first call it answers resumes shared counting. Calls
// reserved on one side are released on the same side.
type Failover struct {
	shared Limiter
	local  *Local
	clock  clock.Clock
	// OnChange, when set, hears each switch: shared false with the error that caused it, then true.
	onChange func(shared bool, err error)

	mu       sync.Mutex
	down     bool
	failures int
	retryAt  time.Time
	onLocal  map[string]bool // calls reserved locally while the shared limiter was down
}

// Retries are the waits before the shared limiter is tried again after a failure: the first, then the
// second and every later one.
var Retries = [2]time.Duration{time.Second, 2 * time.Second}

// NewFailover returns a limiter over shared with local as its fallback.
func NewFailover(shared Limiter, local *Local, c clock.Clock, onChange func(shared bool, err error)) *Failover {
	return &Failover{shared: shared, local: local, clock: clock.Or(c), onChange: onChange, onLocal: map[string]bool{}}
}

// useShared says whether to try the shared limiter now.
func (f *Failover) useShared() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.down || !f.clock.Now().Before(f.retryAt)
}

// result records how the shared limiter answered; it reports whether to fall back for this call.
func (f *Failover) result(err error) bool {
	if err != nil && isContext(err) {
		return true // the caller gave up: no word on the shared limiter
	}
	f.mu.Lock()
	var changed, shared bool
	if err == nil {
		changed, shared = f.down, true
		f.down, f.failures = false, 0
	} else {
		changed = !f.down
		f.down = true
		f.retryAt = f.clock.Now().Add(Retries[min(f.failures, len(Retries)-1)])
		f.failures++
	}
	f.mu.Unlock()
	if changed && f.onChange != nil {
		f.onChange(shared, err)
	}
	return err != nil
}

func isContext(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Shared reports whether the counts are shared now.
func (f *Failover) Shared() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.down
}

// Reserve implements Limiter.
func (f *Failover) Reserve(ctx context.Context, id string, estimate int) (Decision, error) {
	if f.useShared() {
		d, err := f.shared.Reserve(ctx, id, estimate)
		if errors.Is(err, ErrTooLarge) || !f.result(err) {
			return d, err
		}
	}
	d, err := f.local.Reserve(ctx, id, estimate)
	if d.Allowed {
		f.mu.Lock()
		f.onLocal[id] = true
		f.mu.Unlock()
	}
	return d, err
}

// Release implements Limiter.
func (f *Failover) Release(ctx context.Context, id string, actual int) (Usage, error) {
	f.mu.Lock()
	local := f.onLocal[id]
	delete(f.onLocal, id)
	f.mu.Unlock()
	if !local && f.useShared() {
		u, err := f.shared.Release(ctx, id, actual)
		if !f.result(err) {
			return u, nil
		}
		// Its slot expires with its lease in the shared limiter.
	}
	return f.local.Release(ctx, id, actual)
}

// Observe implements Limiter: the provider's word goes to both sides, so a switch loses none of it.
func (f *Failover) Observe(ctx context.Context, up Upstream) (Usage, error) {
	lu, _ := f.local.Observe(ctx, up)
	if f.useShared() {
		u, err := f.shared.Observe(ctx, up)
		if !f.result(err) {
			return u, nil
		}
	}
	return lu, nil
}

// Usage implements Limiter.
func (f *Failover) Usage(ctx context.Context) (Usage, error) {
	if f.useShared() {
		u, err := f.shared.Usage(ctx)
		if !f.result(err) {
			return u, nil
		}
	}
	return f.local.Usage(ctx)
}
