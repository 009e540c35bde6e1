// Package resilience owns the failure-handling decisions: the circuit breaker state machine shared by
// providers and worker hosts, the classes of errors with the retry table, and the backoff schedule.
// Nothing here does I/O or sleeps; time comes from an injected clock and jitter from an injected source.
package resilience

import (
	"errors"
	"fmt"
	"time"

	"github.com/conclave-ai/conclave/internal/platform/clock"
)

// State is a circuit breaker state.
type State uint8

// The breaker states.
const (
	Closed State = iota
	Open
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText renders the state by name in JSON and logs.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Breaker errors.
var (
	// ErrOpen is returned by Allow while the breaker fails fast.
	ErrOpen = errors.New("circuit breaker is open")
	// ErrProbeInFlight is returned by Allow in HALF-OPEN while the single probe is outstanding.
	ErrProbeInFlight = errors.New("circuit breaker is half-open and its probe is in flight")
)

// Settings configure a breaker. The zero value is usable: 5 errors within 60 s open the breaker for 30 s,
// on the real clock.
type Settings struct {
	// Name identifies the breaker in transitions (a provider, a model or a worker host).
	Name string
	// Threshold is the number of errors within Window that opens the breaker; zero means 5, and it is
	// capped at MaxThreshold.
	Threshold int
	// Window is the sliding window in which errors are counted; zero means 60 s.
	Window time.Duration
	// Consecutive counts consecutive errors instead: Threshold errors with no success between them open
	// the breaker, however long they take (Window is unused). This is outlier ejection for one busy
	// model, whose occasional errors would add up in any window.
	Consecutive bool
	// OpenFor is how long the breaker fails fast before admitting a probe; zero means 30 s. A probe that
	// reports nothing within OpenFor is presumed lost and another probe is admitted.
	OpenFor time.Duration
	// Clock tells time; nil means the real clock.
	Clock clock.Clock
	// OnStateChange, when set, is called synchronously on every transition.
	OnStateChange func(Transition)
}

// MaxThreshold bounds Threshold: the breaker remembers that many error times.
const MaxThreshold = 1000

func (s Settings) withDefaults() Settings {
	if s.Threshold <= 0 {
		s.Threshold = 5
	}
	s.Threshold = min(s.Threshold, MaxThreshold)
	if s.Window <= 0 {
		s.Window = 60 * time.Second
	}
	if s.OpenFor <= 0 {
		s.OpenFor = 30 * time.Second
	}
	s.Clock = clock.Or(s.Clock)
	return s
}

// Transition describes one change of state.
type Transition struct {
	Name       string
	From, To   State
	Generation uint64 // the generation of the new state
	At         time.Time
}

// Ticket is handed out by Allow and given back to Record. It carries the generation it was issued in, so
// an outcome that started before a state change cannot corrupt the new state.
type Ticket struct {
	generation uint64
	probe      bool
}

// Snapshot is an immutable view of a breaker for readers that do not own it.
type Snapshot struct {
	Name       string `json:"name"`
	State      State  `json:"state"`
	Generation uint64 `json:"generation"`
	// ErrorsInWindow counts the errors in the window (the consecutive errors in Consecutive mode).
	ErrorsInWindow int       `json:"errors_in_window"`
	OpenUntil      time.Time `json:"open_until,omitzero"`
}

// Breaker is a circuit breaker: CLOSED until Threshold errors fall within Window, then OPEN (failing fast)
// for OpenFor, then HALF-OPEN admitting exactly one probe whose success closes it and whose failure
// reopens it. It is not safe for concurrent use: one owner (an actor) drives it and publishes snapshots.
type Breaker struct {
	s          Settings
	state      State
	generation uint64
	errs       []time.Time // ring of the most recent error times, capacity Threshold
	next       int         // ring write position
	run        int         // consecutive errors, in Consecutive mode
	openedAt   time.Time
	probeAt    time.Time // when the outstanding probe was admitted; zero when none
}

// NewBreaker returns a closed breaker.
func NewBreaker(s Settings) *Breaker {
	s = s.withDefaults()
	b := &Breaker{s: s}
	if !s.Consecutive {
		b.errs = make([]time.Time, 0, s.Threshold)
	}
	return b
}

// ResumeBreaker returns a breaker that continues from a published snapshot, for an owner restarted
// after a crash: the same state and open period, in a generation past the snapshot's, so the outcome of
// a call admitted before the crash cannot count in the resumed state. Errors counted in the window are
// lost with the crashed owner.
func ResumeBreaker(s Settings, snap Snapshot) *Breaker {
	b := NewBreaker(s)
	b.generation = snap.Generation + 1
	switch snap.State {
	case Open:
		b.state, b.openedAt = Open, snap.OpenUntil.Add(-b.s.OpenFor)
	case HalfOpen:
		b.state = HalfOpen
	}
	return b
}

// Settings returns the effective settings (defaults filled in).
func (b *Breaker) Settings() Settings { return b.s }

// State returns the current state, moving OPEN to HALF-OPEN when the open duration has passed.
func (b *Breaker) State() State {
	b.expire(b.s.Clock.Now())
	return b.state
}

// Allow asks to make one call. It returns a ticket to pass to Record, or ErrOpen / ErrProbeInFlight.
func (b *Breaker) Allow() (Ticket, error) {
	if b.state == Closed { // a closed breaker admits every call, whatever the time
		return Ticket{generation: b.generation}, nil
	}
	now := b.s.Clock.Now()
	b.expire(now)
	switch b.state {
	case Open:
		return Ticket{}, ErrOpen
	case HalfOpen:
		if !b.probeAt.IsZero() {
			if now.Sub(b.probeAt) < b.s.OpenFor {
				return Ticket{}, ErrProbeInFlight
			}
			// The probe was lost; start a new generation so its late outcome is ignored.
			b.generation++
		}
		b.probeAt = now
		return Ticket{generation: b.generation, probe: true}, nil
	}
	return Ticket{generation: b.generation}, nil
}

// Record reports the outcome of a call admitted by Allow. Outcomes from an earlier generation are
// dropped; it reports whether the outcome was counted.
func (b *Breaker) Record(t Ticket, success bool) bool {
	if b.state == Closed && success && t.generation == b.generation { // no time to read: nothing ages or trips
		b.run = 0
		return true
	}
	now := b.s.Clock.Now()
	b.expire(now)
	if t.generation != b.generation {
		return false
	}
	switch b.state {
	case Closed:
		b.recordClosed(success, now)
	case HalfOpen:
		return b.recordProbe(t, success, now)
	case Open:
		return false
	}
	return true
}

// recordClosed counts an outcome while the breaker is closed, and trips it when the failures reach
// the threshold: in a row, or within the window.
func (b *Breaker) recordClosed(success bool, now time.Time) {
	switch {
	case b.s.Consecutive && success:
		b.run = 0
	case b.s.Consecutive:
		if b.run++; b.run >= b.s.Threshold {
			b.trip(now)
		}
	case !success:
		b.addError(now)
		if b.errorsSince(now.Add(-b.s.Window)) >= b.s.Threshold {
			b.trip(now)
		}
	}
}

// recordProbe applies a half-open breaker's probe outcome: a success closes it, a failure opens it
// again. It reports whether the ticket was the probe's.
func (b *Breaker) recordProbe(t Ticket, success bool, now time.Time) bool {
	if !t.probe {
		return false
	}
	if success {
		b.transition(Closed, now)
	} else {
		b.trip(now)
	}
	return true
}

// Trip opens the breaker now, whatever its counts: its owner learned of a failure no single outcome
// shows (faults spreading across a provider's models). It does nothing to an open breaker.
func (b *Breaker) Trip() {
	now := b.s.Clock.Now()
	b.expire(now)
	if b.state != Open {
		b.trip(now)
	}
}

// Settle ends a ticket with its call's effect: success and failure are counted, neutral gives the
// ticket back.
func (b *Breaker) Settle(t Ticket, e Effect) {
	switch e {
	case Success:
		b.Record(t, true)
	case Failure:
		b.Record(t, false)
	default:
		b.Release(t)
	}
}

// Release gives back a ticket whose call was never made (the caller gave up before using its permit),
// so that an unused HALF-OPEN probe slot is freed at once instead of when the probe is presumed lost.
func (b *Breaker) Release(t Ticket) {
	if t.probe && t.generation == b.generation && b.state == HalfOpen {
		b.probeAt = time.Time{}
	}
}

// Generation is the ticket's generation, for carrying it in a message.
func (t Ticket) Generation() uint64 { return t.generation }

// Probe reports whether the ticket is the HALF-OPEN probe.
func (t Ticket) Probe() bool { return t.probe }

// TicketFrom rebuilds a ticket carried in a message.
func TicketFrom(generation uint64, probe bool) Ticket {
	return Ticket{generation: generation, probe: probe}
}

// Snapshot returns an immutable view of the breaker.
func (b *Breaker) Snapshot() Snapshot {
	// The time matters only to an open breaker (its period may be over) and to errors in the window.
	var now time.Time
	if b.state == Open || len(b.errs) > 0 {
		now = b.s.Clock.Now()
		b.expire(now)
	}
	snap := Snapshot{Name: b.s.Name, State: b.state, Generation: b.generation}
	if b.state == Closed {
		if len(b.errs) > 0 {
			snap.ErrorsInWindow = b.errorsSince(now.Add(-b.s.Window))
		}
		if b.s.Consecutive {
			snap.ErrorsInWindow = b.run
		}
	}
	if b.state == Open {
		snap.OpenUntil = b.openedAt.Add(b.s.OpenFor)
	}
	return snap
}

func (b *Breaker) expire(now time.Time) {
	if b.state == Open && now.Sub(b.openedAt) >= b.s.OpenFor {
		b.transition(HalfOpen, now)
	}
}

func (b *Breaker) trip(now time.Time) {
	b.openedAt = now
	b.transition(Open, now)
}

func (b *Breaker) transition(to State, now time.Time) {
	from := b.state
	b.state = to
	b.generation++
	b.probeAt = time.Time{}
	b.errs = b.errs[:0]
	b.next = 0
	b.run = 0
	if b.s.OnStateChange != nil {
		b.s.OnStateChange(Transition{Name: b.s.Name, From: from, To: to, Generation: b.generation, At: now})
	}
}

func (b *Breaker) addError(now time.Time) {
	if len(b.errs) < cap(b.errs) {
		b.errs = append(b.errs, now)
		return
	}
	b.errs[b.next] = now
	b.next = (b.next + 1) % len(b.errs)
}

// errorsSince counts the remembered errors after since. Only the last Threshold errors are kept, which
// is all the trip decision needs.
func (b *Breaker) errorsSince(since time.Time) int {
	n := 0
	for _, t := range b.errs {
		if t.After(since) {
			n++
		}
	}
	return n
}
