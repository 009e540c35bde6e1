package alarm

import (
	"testing"
	"time"
)

// An alarm rings once for the earliest moment set, and a ring after Stop is not due.
func TestAlarm(t *testing.T) {
	rang := make(chan time.Time, 4)
	a := New(func() { rang <- time.Now() })
	start := time.Now()
	a.By(start.Add(time.Hour))
	a.By(start.Add(20 * time.Millisecond)) // earlier: it moves the alarm
	a.By(start.Add(time.Hour))             // later: it does not
	select {
	case at := <-rang:
		if at.Sub(start) > 30*time.Minute {
			t.Fatalf("rang after %v", at.Sub(start))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the alarm did not ring")
	}
	if !a.Due() || a.Due() {
		t.Fatal("a ring is due once")
	}
	a.Set(time.Now().Add(time.Hour))
	a.Stop()
	if a.Due() {
		t.Fatal("a stopped alarm is not due")
	}
	a.Close()
	a.By(time.Now())
	if a.Due() {
		t.Fatal("a closed alarm was set again")
	}
}
