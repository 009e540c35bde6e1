package gate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/admission"
	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/clock"
)

// inbox is a shell that keeps what the gate decided, by job id.
type inbox struct {
	mu       sync.Mutex
	granted  []string
	denied   map[string]string
	cancels  []string
	dupes    int
	grantsCh chan string
}

func newInbox() *inbox { return &inbox{denied: map[string]string{}, grantsCh: make(chan string, 1024)} }

func (b *inbox) Grant(ask any, _ bool) {
	b.mu.Lock()
	b.granted = append(b.granted, ask.(string))
	b.mu.Unlock()
	b.grantsCh <- ask.(string)
}

func (b *inbox) Deny(ask any, reason string, _ time.Duration) {
	b.mu.Lock()
	b.denied[ask.(string)] = reason
	b.mu.Unlock()
}

func (b *inbox) Cancel(ask any) {
	b.mu.Lock()
	b.cancels = append(b.cancels, ask.(string))
	b.mu.Unlock()
}

func (b *inbox) Duplicate(any) {
	b.mu.Lock()
	b.dupes++
	b.mu.Unlock()
}

// grant waits for the next grant.
func (b *inbox) grant(t *testing.T) string {
	t.Helper()
	select {
	case id := <-b.grantsCh:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("no grant")
		return ""
	}
}

func newGate(t *testing.T, lim ratelimit.Limiter, limits ratelimit.Limits, shell Shell, onPanic func(any)) (*Gate, *atomic.Pointer[providerstate.Snapshot]) {
	t.Helper()
	var pub atomic.Pointer[providerstate.Snapshot]
	pub.Store(&providerstate.Snapshot{Name: "p"})
	g := New(Config{Name: "p", Limiter: lim, Limits: limits, Shell: shell, Published: &pub, OnPanic: onPanic,
		Machine: admission.Config{Breaker: resilience.ProviderBreakerSettings("p")}})
	t.Cleanup(g.Close)
	return g, &pub
}

func request(id string) admission.Request {
	return admission.Request{ID: id, Model: "m", Tokens: 10, Deadline: time.Now().Add(time.Minute), Ask: id}
}

func success(id string) admission.Outcome {
	return admission.Outcome{ID: id, ProviderEffect: resilience.Success, ModelEffect: resilience.Success, Tokens: 10}
}

// blocking is a limiter that may block: the gate calls it off its lock and applies its answers when
// they come.
type blocking struct {
	ratelimit.Limiter
	reservations atomic.Int64
}

func (l *blocking) Reserve(ctx context.Context, id string, estimate int) (ratelimit.Decision, error) {
	l.reservations.Add(1)
	return l.Limiter.Reserve(ctx, id, estimate)
}

// Many goroutines acquiring and settling at once never hold more permits than the concurrency limit,
// and every acquisition is granted once a permit comes back: the lock orders them as a mailbox would.
func TestConcurrentAskersStayWithinTheLimit(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		limiter func(ratelimit.Limits) ratelimit.Limiter
	}{
		{"a limiter that never blocks, called in place", func(l ratelimit.Limits) ratelimit.Limiter {
			return ratelimit.NewLocal(l, clock.Real{}, 0)
		}},
		{"a limiter that may block, called off the lock", func(l ratelimit.Limits) ratelimit.Limiter {
			return &blocking{Limiter: ratelimit.NewLocal(l, clock.Real{}, 0)}
		}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			limits := ratelimit.Limits{Concurrency: 3}
			box := newInbox()
			g, _ := newGate(t, tc.limiter(limits), limits, box, nil)
			const askers = 40
			var held, most atomic.Int64
			var wg sync.WaitGroup
			for i := range askers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					g.Acquire(request(fmt.Sprint("j", i)))
				}()
			}
			for range askers {
				id := box.grant(t)
				if n := held.Add(1); n > most.Load() {
					most.Store(n)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					held.Add(-1)
					g.Settle("m", success(id))
				}()
			}
			wg.Wait()
			if most.Load() > int64(limits.Concurrency) {
				t.Fatalf("%d permits held at once, limit %d", most.Load(), limits.Concurrency)
			}
			if len(box.denied) != 0 {
				t.Fatalf("denied: %v", box.denied)
			}
			if lim, ok := g.limiter.(*blocking); ok && lim.reservations.Load() < askers {
				t.Fatalf("%d reservations for %d askers", lim.reservations.Load(), askers)
			}
		})
	}
}

// An acquisition that waits for a block to end is granted by the gate's own timer, without anyone
// calling it again.
func TestTheWakeUpGrantsWhatWaits(t *testing.T) {
	limits := ratelimit.Limits{Concurrency: 1}
	box := newInbox()
	g, pub := newGate(t, ratelimit.NewLocal(limits, clock.Real{}, 0), limits, box, nil)
	g.Acquire(request("a"))
	if id := box.grant(t); id != "a" {
		t.Fatalf("granted %s", id)
	}
	// The provider asks for 200 ms of rest: b waits for it, then its timer lets it go.
	g.Settle("m", admission.Outcome{ID: "a", ProviderEffect: resilience.Neutral, ModelEffect: resilience.Neutral, ProviderWait: 200 * time.Millisecond})
	g.Acquire(request("b"))
	if pub.Load().Waiting != 1 {
		t.Fatalf("waiting %d, want b", pub.Load().Waiting)
	}
	if id := box.grant(t); id != "b" {
		t.Fatalf("granted %s", id)
	}
}

// A settlement naming another model than its permit's changes nothing and is refused.
func TestASettlementForAnotherModelIsRefused(t *testing.T) {
	box := newInbox()
	g, _ := newGate(t, ratelimit.NewLocal(ratelimit.Limits{}, clock.Real{}, 0), ratelimit.Limits{}, box, nil)
	g.Acquire(request("a"))
	box.grant(t)
	if g.Settle("other", success("a")) {
		t.Fatal("a settlement for another model was taken")
	}
	if !g.Settle("m", success("a")) {
		t.Fatal("its own settlement was refused")
	}
}

// panicky panics on its first reservation, on the gate's goroutine.
type panicky struct {
	ratelimit.Limiter
	once atomic.Bool
}

func (l *panicky) Reserve(ctx context.Context, id string, estimate int) (ratelimit.Decision, error) {
	if l.once.CompareAndSwap(false, true) {
		panic("a limiter's bug")
	}
	return l.Limiter.Reserve(ctx, id, estimate)
}

// A panic on one of the gate's own goroutines goes to OnPanic, whose owner remakes the gate, rather
// than ending the process.
func TestAPanicOnTheGatesGoroutineGoesToItsOwner(t *testing.T) {
	got := make(chan any, 1)
	box := newInbox()
	g, _ := newGate(t, &panicky{Limiter: ratelimit.NewLocal(ratelimit.Limits{}, clock.Real{}, 0)}, ratelimit.Limits{}, box,
		func(v any) { got <- v })
	g.Acquire(request("a"))
	select {
	case v := <-got:
		if v != "a limiter's bug" {
			t.Fatalf("panic %v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the panic was not handed over")
	}
}

// Stop refuses what waits, and every acquisition after it.
func TestStopRefusesWhatWaits(t *testing.T) {
	limits := ratelimit.Limits{Concurrency: 1}
	box := newInbox()
	g, _ := newGate(t, ratelimit.NewLocal(limits, clock.Real{}, 0), limits, box, nil)
	g.Acquire(request("a"))
	box.grant(t)
	g.Acquire(request("b"))
	g.Stop()
	g.Acquire(request("c"))
	box.mu.Lock()
	defer box.mu.Unlock()
	if box.denied["b"] != admission.ReasonStopped || box.denied["c"] != admission.ReasonStopped {
		t.Fatalf("denied %v", box.denied)
	}
}
