// Package admission owns the decisions of a provider's admission: how long a call may wait for its
// provider's limits, each waiting acquisition's turn in its provider's queue (refused, held until a
// moment, or tried), and when the queue must be looked at again. It does no I/O; the provider actor
// holds the queue, the breakers and the limiter and acts on what these decide.
package admission

import "time"

// DefaultMaxQueue is how long a call waits at most for a provider's window (rate_limits.max_queue_seconds):
// a request held longer than a few seconds for a limit is better told when to come back.
const DefaultMaxQueue = 5 * time.Second

// UnknownWait is the Retry-After of a refusal whose limit has no known free moment (a concurrency slot
// comes back when a call ends): come back in a second.
const UnknownWait = time.Second

// QueueBound is the latest moment an acquisition that arrived at arrived may wait for its provider's
// limits: its request's own bound (queueBy: the request's receipt plus the maximum queue), or else
// maxQueue from its arrival, and never past its deadline. Zero times are absent.
func QueueBound(arrived time.Time, maxQueue time.Duration, queueBy, deadline time.Time) time.Time {
	bound := queueBy
	if bound.IsZero() {
		bound = arrived.Add(maxQueue)
	}
	if !deadline.IsZero() && deadline.Before(bound) {
		bound = deadline
	}
	return bound
}

// Wait is what becomes of an acquisition its provider's limits cannot admit now.
type Wait struct {
	// Refuse says it is refused now, with RetryAfter: when the limit should have room.
	Refuse     bool
	RetryAfter time.Duration
	// Until is when to ask again while it waits.
	Until time.Time
}

// Queue decides for an acquisition the limits cannot admit at now. free is the limit's next free
// moment (zero when unknown: a concurrency slot comes back when a call ends), bound the latest moment
// the acquisition may wait (QueueBound). It waits for free when free comes by its bound, and for an
// unknown moment until its bound; otherwise it is refused at once, so that nobody waits for a window
// it cannot see open: the caller hears when to come back instead of being held.
func Queue(now, free, bound time.Time) Wait {
	retry := UnknownWait
	if free.After(now) {
		retry = free.Sub(now)
	}
	switch {
	case !now.Before(bound):
		return Wait{Refuse: true, RetryAfter: retry}
	case free.IsZero():
		return Wait{Until: bound}
	case free.After(bound):
		return Wait{Refuse: true, RetryAfter: retry}
	}
	return Wait{Until: free}
}
