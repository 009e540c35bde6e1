// Package alarm owns the one timer an actor or a concurrent object keeps for the earliest moment it
// must wake at: a request sets its alarm several times, and a timer made each time was an allocation
// and a closure each.
package alarm

import "time"

// Alarm rings (calls its ring function, on the timer's goroutine) no later than the earliest moment
// it was set for. It is not safe for concurrent use: its owner orders the calls (an actor's Receive,
// or the lock of the object that holds it). The zero value has no ring; make one with New.
type Alarm struct {
	at     time.Time
	timer  *time.Timer
	ring   func()
	closed bool
}

// New returns an alarm that calls ring when it rings.
func New(ring func()) Alarm { return Alarm{ring: ring} }

// By makes sure the alarm rings no later than at.
func (a *Alarm) By(at time.Time) {
	if !a.closed && (a.at.IsZero() || at.Before(a.at)) {
		a.Set(at)
	}
}

// Set makes the alarm ring at at, instead of whatever it was set for.
func (a *Alarm) Set(at time.Time) {
	if a.closed || at.Equal(a.at) {
		return
	}
	a.at = at
	d := max(time.Until(at), 0)
	if a.timer == nil {
		a.timer = time.AfterFunc(d, a.ring)
		return
	}
	a.timer.Reset(d)
}

// Due reports whether a ring is to be acted on, and forgets the moment: not after the alarm was
// stopped. A ring from a moment the alarm was moved away from is acted on too, early: its owner's
// passes are safe at any time and ask for their next moment again, whereas comparing the clock with
// a moment read from a message (wall time only) could drop the one ring that mattered.
func (a *Alarm) Due() bool {
	if a.at.IsZero() {
		return false
	}
	a.at = time.Time{}
	return true
}

// Stop cancels the timer.
func (a *Alarm) Stop() {
	if a.timer != nil {
		a.timer.Stop()
	}
	a.at = time.Time{}
}

// Close stops the alarm for good: it is set no more.
func (a *Alarm) Close() {
	a.Stop()
	a.closed = true
}
