package admission

import (
	"testing"
	"time"
)

func TestTakeTurn(t *testing.T) {
	now := epoch
	at := func(s float64) time.Time { return now.Add(time.Duration(s * float64(time.Second))) }
	clk := epoch.Add(time.Hour) // the injected clock need not read the wall clock
	free := Provider{Now: now, Clock: clk, RoomIn: 7 * time.Second}
	limited := free
	limited.Limited, limited.WindowFree = true, at(2)
	unknownWindow := free
	unknownWindow.Limited = true // a concurrency slot comes back when a call ends
	busy := free
	busy.Busy = true
	disabled := free
	disabled.Disabled = true
	within := Acquisition{Bound: at(5)}
	tests := []struct {
		desc string
		p    Provider
		m    Model
		a    Acquisition
		want Turn
	}{
		{"room and nothing in the way: try", free, Model{}, within, Turn{Verdict: Try}},
		{"a deadline passed is refused with when the limits have room", free, Model{}, Acquisition{Deadline: now, Bound: at(5)},
			Turn{Verdict: Refuse, Reason: ReasonRateLimited, RetryAfter: 7 * time.Second}},
		{"a disabled provider refuses before anything else is asked", disabled, Model{}, within, Turn{Verdict: Refuse, Reason: ReasonDisabled}},
		{"a removed model is refused", free, Model{Removed: true}, within, Turn{Verdict: Refuse, Reason: ReasonModelRemoved}},
		{"a model's own 429 that resets within the bound holds it until the reset, read on the injected clock", free,
			Model{BlockedUntil: clk.Add(3 * time.Second)}, within, Turn{Verdict: Hold, Until: at(3)}},
		{"a model's own 429 that resets past the bound refuses it with the wait", free,
			Model{BlockedUntil: clk.Add(9 * time.Second)}, within, Turn{Verdict: Refuse, Reason: ReasonModelRateLimited, RetryAfter: 9 * time.Second}},
		{"a model blocked and the provider limited: the model's reset decides", limited,
			Model{BlockedUntil: clk.Add(4 * time.Second)}, within, Turn{Verdict: Hold, Until: at(4)}},
		{"limits that free within the bound hold it until they free", limited, Model{}, within, Turn{Verdict: Hold, Until: at(2)}},
		{"limits that free past the bound refuse it at once with the wait", limited, Model{}, Acquisition{Bound: at(1)},
			Turn{Verdict: Refuse, Reason: ReasonRateLimited, RetryAfter: 2 * time.Second}},
		{"limits with no known free moment hold it until its bound", unknownWindow, Model{}, within, Turn{Verdict: Hold, Until: at(5)}},
		{"at its bound with no known free moment: refused, come back in a second", unknownWindow, Model{}, Acquisition{Bound: now},
			Turn{Verdict: Refuse, Reason: ReasonRateLimited, RetryAfter: UnknownWait}},
		{"the limiter answering another holds it without a wake-up of its own: that answer serves it", busy, Model{}, within, Turn{Verdict: Hold}},
		{"limited beats busy: a held acquisition needs the window's wake-up", Provider{Now: now, Clock: clk, Busy: true, Limited: true, WindowFree: at(2)},
			Model{}, within, Turn{Verdict: Hold, Until: at(2)}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if got := TakeTurn(tt.p, tt.m, tt.a); got != tt.want {
				t.Fatalf("turn %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestWakeAt holds the wake-up cases that once left acquisitions waiting for their deadlines.
func TestWakeAt(t *testing.T) {
	now := epoch
	at := func(s float64) time.Time { return now.Add(time.Duration(s * float64(time.Second))) }
	tests := []struct {
		desc         string
		next         time.Time
		waiting      int
		limitedUntil time.Time
		want         time.Time
	}{
		{"nothing held, nothing limited: no wake-up", time.Time{}, 0, time.Time{}, time.Time{}},
		{"a held acquisition's moment", at(3), 1, time.Time{}, at(3)},
		{"acquisitions held behind the limiter's answer still wake for the window", time.Time{}, 2, at(4), at(4)},
		{"the window before a held moment wakes first", at(9), 1, at(4), at(4)},
		{"a held moment before the window wakes first", at(1), 1, at(4), at(1)},
		{"a window already past asks for nothing more", time.Time{}, 1, at(-1), time.Time{}},
		{"nothing waiting: the window alone wakes nobody", time.Time{}, 0, at(4), time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if got := WakeAt(tt.next, tt.waiting, now, tt.limitedUntil); !got.Equal(tt.want) {
				t.Fatalf("wake at %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSoonest(t *testing.T) {
	a, b := epoch, epoch.Add(time.Second)
	for _, tt := range []struct{ x, y, want time.Time }{{a, b, a}, {b, a, a}, {time.Time{}, b, b}, {b, time.Time{}, b}, {time.Time{}, time.Time{}, time.Time{}}} {
		if got := Soonest(tt.x, tt.y); !got.Equal(tt.want) {
			t.Errorf("Soonest(%v, %v) = %v, want %v", tt.x, tt.y, got, tt.want)
		}
	}
}
