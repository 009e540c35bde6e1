package admission

import (
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestQueueBound(t *testing.T) {
	at := func(s float64) time.Time { return epoch.Add(time.Duration(s * float64(time.Second))) }
	tests := []struct {
		desc              string
		queueBy, deadline time.Time
		want              time.Time
	}{
		{"the maximum queue from its arrival", time.Time{}, time.Time{}, at(15)},
		{"the request's own bound", at(12), at(60), at(12)},
		{"a deadline before the maximum queue", time.Time{}, at(11), at(11)},
		{"a deadline before the request's bound", at(14), at(13), at(13)},
	}
	for _, tt := range tests {
		if got := QueueBound(at(10), 5*time.Second, tt.queueBy, tt.deadline); !got.Equal(tt.want) {
			t.Errorf("%s: bound %v, want %v", tt.desc, got.Sub(epoch), tt.want.Sub(epoch))
		}
	}
}

func TestQueueWaitsOnlyForAWindowThatOpensInTime(t *testing.T) {
	at := func(s float64) time.Time { return epoch.Add(time.Duration(s * float64(time.Second))) }
	now, bound := at(0), at(5)
	tests := []struct {
		desc  string
		now   time.Time
		free  time.Time
		want  Wait
		bound time.Time
	}{
		{"the window frees within the bound: wait for it", now, at(3), Wait{Until: at(3)}, bound},
		{"the window frees at the bound: wait for it", now, at(5), Wait{Until: at(5)}, bound},
		{"the window frees after the bound: refused at once with the wait", now, at(60), Wait{Refuse: true, RetryAfter: 60 * time.Second}, bound},
		{"a deadline before the window frees", now, at(2), Wait{Refuse: true, RetryAfter: 2 * time.Second}, at(1)},
		{"no known moment (a concurrency slot): wait until the bound", now, time.Time{}, Wait{Until: bound}, bound},
		{"no known moment at the bound: refused, come back in a second", at(5), time.Time{}, Wait{Refuse: true, RetryAfter: UnknownWait}, bound},
		{"the bound passed while the window is shut", at(5), at(8), Wait{Refuse: true, RetryAfter: 3 * time.Second}, bound},
		{"a bound already past (late in the request): refused at once", at(7), at(7.5), Wait{Refuse: true, RetryAfter: 500 * time.Millisecond}, bound},
	}
	for _, tt := range tests {
		if got := Queue(tt.now, tt.free, tt.bound); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.desc, got, tt.want)
		}
	}
}
