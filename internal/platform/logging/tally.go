package logging

import (
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Tally logs events that would flood the log with a line each (requests refused under overload) as
// one warning at a time with their counts by code: the first event of a quiet spell at once, then at
// most one line every interval with the counts since the last line. Counts left when the events stop
// are written once the interval has passed, or at Flush, so the lines' counts add up to every event.
// Each line has `counts` (by code, since the last line), `since_last_line` and `total` (all so far).
type Tally struct {
	log   *zap.Logger
	msg   string
	every time.Duration
	now   func() time.Time

	mu     sync.Mutex
	counts map[string]int64 // since the last line
	total  int64
	last   time.Time   // of the last line; zero before the first
	timer  *time.Timer // armed while counts wait for the interval to end
}

// NewTally returns a tally writing msg to log (whose fields name the event) at most once every every,
// by the time now tells.
func NewTally(log *zap.Logger, msg string, every time.Duration, now func() time.Time) *Tally {
	return &Tally{log: log, msg: msg, every: every, now: now, counts: map[string]int64{}}
}

// Add counts one event of code.
func (t *Tally) Add(code string) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[code]++
	t.total++
	if t.last.IsZero() || now.Sub(t.last) >= t.every {
		t.write(now)
		return
	}
	if t.timer == nil {
		t.timer = time.AfterFunc(t.last.Add(t.every).Sub(now), t.due)
	}
}

// Flush writes the counts not yet written, at once: before the process ends.
func (t *Tally) Flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	if len(t.counts) > 0 {
		t.write(t.now())
	}
}

// due writes the counts left when the interval ends. The timer runs on the wall clock; an injected
// clock that has not reached the end yet (a test's) is waited for, so lines keep to its interval.
func (t *Tally) due() {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timer = nil
	if len(t.counts) == 0 {
		return
	}
	if wait := t.last.Add(t.every).Sub(now); wait > 0 {
		t.timer = time.AfterFunc(wait, t.due)
		return
	}
	t.write(now)
}

// write logs the counts since the last line and starts a new interval; t.mu is held, so lines come
// in order.
func (t *Tally) write(now time.Time) {
	var since int64
	for _, n := range t.counts {
		since += n
	}
	if ce := t.log.Check(zapcore.WarnLevel, t.msg); ce != nil {
		ce.Write(zap.Object("counts", tallyCounts(t.counts)), zap.Int64("since_last_line", since), zap.Int64("total", t.total))
	}
	t.counts = map[string]int64{} // the line may keep the old one: a core can encode it later
	t.last = now
}

// tallyCounts encodes counts by code in the codes' order, so that lines compare.
type tallyCounts map[string]int64

func (c tallyCounts) MarshalLogObject(o zapcore.ObjectEncoder) error {
	codes := make([]string, 0, len(c))
	for code := range c {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	for _, code := range codes {
		o.AddInt64(code, c[code])
	}
	return nil
}
