package admission

import "time"

// Provider is what a provider's admission knows when it serves its queue. Times on the wall clock are
// the acquisitions' deadlines and the limits' windows; the model's own block reads the injected clock
// (Clock), as its breaker does.
type Provider struct {
	Now, Clock time.Time
	// Disabled says the provider takes no call until its key changes.
	Disabled bool
	// Limited says the limiter or the provider said no; WindowFree is when its window frees (zero when
	// unknown: a concurrency slot comes back when a call ends).
	Limited    bool
	WindowFree time.Time
	// Busy says the limiter is answering another acquisition: the rest wait their turn, in order.
	Busy bool
	// RoomIn is when the limits have room, as the limiter last said.
	RoomIn time.Duration
}

// Model is what the provider knows of the model an acquisition is for.
type Model struct {
	Removed bool
	// BlockedUntil is the end of the model's own 429, on the injected clock.
	BlockedUntil time.Time
}

// Acquisition is one waiting acquisition: its deadline (zero when none) and its queue bound
// (QueueBound).
type Acquisition struct {
	Deadline, Bound time.Time
}

// Verdict is what an acquisition's turn decides.
type Verdict int

const (
	// Try asks the breakers and then the limiter.
	Try Verdict = iota
	// Hold keeps it waiting, until Until when that is not zero (a wake-up is due then).
	Hold
	// Refuse answers it now with Reason and RetryAfter.
	Refuse
)

// Turn is an acquisition's turn in its provider's queue.
type Turn struct {
	Verdict    Verdict
	Reason     string
	RetryAfter time.Duration
	Until      time.Time
}

// Refusals a turn answers with.
const (
	ReasonRateLimited      = "rate_limited"
	ReasonModelRateLimited = "model_rate_limited"
	ReasonDisabled         = "provider_disabled"
	ReasonModelRemoved     = "model_removed"
)

// TakeTurn decides an acquisition's turn, in the order the checks cost the caller least: a deadline
// already passed, a disabled provider and a removed model are refused at once; a model blocked by its
// own 429 waits for its reset within its queue bound without holding up the others; while the limits
// say no it waits for their window within its bound; while the limiter answers another it waits its
// turn; otherwise it may try.
func TakeTurn(p Provider, m Model, a Acquisition) Turn {
	switch {
	case !a.Deadline.IsZero() && !p.Now.Before(a.Deadline):
		return Turn{Verdict: Refuse, Reason: ReasonRateLimited, RetryAfter: p.RoomIn}
	case p.Disabled:
		return Turn{Verdict: Refuse, Reason: ReasonDisabled}
	case m.Removed:
		return Turn{Verdict: Refuse, Reason: ReasonModelRemoved}
	case p.Clock.Before(m.BlockedUntil):
		return queued(p.Now, p.Now.Add(m.BlockedUntil.Sub(p.Clock)), a.Bound, ReasonModelRateLimited)
	case p.Limited:
		return queued(p.Now, p.WindowFree, a.Bound, ReasonRateLimited)
	case p.Busy:
		return Turn{Verdict: Hold}
	}
	return Turn{Verdict: Try}
}

// queued is Queue's answer as a turn.
func queued(now, free, bound time.Time, reason string) Turn {
	q := Queue(now, free, bound)
	if q.Refuse {
		return Turn{Verdict: Refuse, Reason: reason, RetryAfter: q.RetryAfter}
	}
	return Turn{Verdict: Hold, Until: q.Until}
}

// WakeAt is when a provider must look at its queue again after a pass: the soonest moment a held
// acquisition named (next), and while acquisitions wait and the limits said no until limitedUntil,
// that moment too. The window's wake-up is made on every pass, so that one coming first (a lease's
// end, a deadline) cannot leave the waiting acquisitions to their deadlines. Zero: nothing to wake for.
func WakeAt(next time.Time, waiting int, now, limitedUntil time.Time) time.Time {
	if waiting > 0 && now.Before(limitedUntil) {
		next = Soonest(next, limitedUntil)
	}
	return next
}

// Soonest is the earlier of two moments, zero standing for none.
func Soonest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
