package logging

import (
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/platform/clock"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A tally writes the first event at once, then at most one line an interval with the counts by code
// since the last line, the counts left when the interval ends, and the rest at Flush: the lines' counts
// add up to the events.
func TestATallyWritesOneLineAnInterval(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	clk := clock.NewFake(time.Now())
	tally := NewTally(zap.New(core).With(zap.String("event", "requests_shed")), "shed", 10*time.Second, clk.Now)
	defer tally.Flush() // stops its timer

	counts := func(i int) map[string]any {
		t.Helper()
		all := logs.All()
		if i >= len(all) {
			t.Fatalf("%d lines, want line %d", len(all), i)
		}
		f := all[i].ContextMap()
		c, _ := f["counts"].(map[string]any)
		var sum int64
		for _, n := range c {
			sum += n.(int64)
		}
		if f["event"] != "requests_shed" || f["since_last_line"] != sum {
			t.Fatalf("line %d: %v", i, f)
		}
		return f
	}

	tally.Add("rate_limited")
	if f := counts(0); f["total"] != int64(1) {
		t.Fatalf("first line %v", f)
	}
	for i := range 1000 {
		tally.Add([]string{"rate_limited", "overloaded"}[i%2])
		clk.Advance(time.Millisecond)
	}
	if logs.Len() != 1 {
		t.Fatalf("%d lines within an interval, want 1", logs.Len())
	}
	clk.Advance(8 * time.Second)
	tally.due() // the interval has not ended: nothing yet
	if logs.Len() != 1 {
		t.Fatalf("%d lines before the interval ended, want 1", logs.Len())
	}
	clk.Advance(time.Second)
	tally.due() // the interval ended with counts left
	if f := counts(1); f["total"] != int64(1001) || f["counts"].(map[string]any)["overloaded"] != int64(500) {
		t.Fatalf("second line %v", f)
	}
	tally.Add("overloaded") // within the new interval: kept for the next line
	tally.Flush()
	if f := counts(2); f["total"] != int64(1002) || f["since_last_line"] != int64(1) {
		t.Fatalf("flushed line %v", f)
	}
	tally.Flush() // nothing left: no line
	clk.Advance(time.Minute)
	tally.Add("rate_limited") // after a quiet spell: at once
	if f := counts(3); f["total"] != int64(1003) || f["since_last_line"] != int64(1) || logs.Len() != 4 {
		t.Fatalf("%d lines, the last %v", logs.Len(), f)
	}
}
