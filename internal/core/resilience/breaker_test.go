package resilience

import (
	"errors"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/platform/clock"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestBreaker(threshold int, openFor time.Duration) (*Breaker, *clock.Fake, *[]Transition) {
	clk := clock.NewFake(epoch)
	var transitions []Transition
	b := NewBreaker(Settings{
		Name: "test", Threshold: threshold, Window: time.Minute, OpenFor: openFor, Clock: clk,
		OnStateChange: func(t Transition) { transitions = append(transitions, t) },
	})
	return b, clk, &transitions
}

func fail(t *testing.T, b *Breaker) {
	t.Helper()
	tk, err := b.Allow()
	if err != nil {
		t.Fatalf("allow: %v", err)
	}
	b.Record(tk, false)
}

func TestBreakerZeroValueSettings(t *testing.T) {
	s := NewBreaker(Settings{}).Settings()
	if s.Threshold != 5 || s.Window != time.Minute || s.OpenFor != 30*time.Second || s.Clock == nil {
		t.Fatalf("defaults: %+v", s)
	}
}

func TestBreakerTripsAtThresholdWithinWindow(t *testing.T) {
	b, clk, trans := newTestBreaker(3, 30*time.Second)
	fail(t, b)
	clk.Advance(20 * time.Second)
	fail(t, b)
	if b.State() != Closed {
		t.Fatal("opened before the threshold")
	}
	clk.Advance(20 * time.Second)
	fail(t, b)
	if b.State() != Open {
		t.Fatalf("state %v, want open", b.State())
	}
	if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
		t.Fatalf("want ErrOpen, got %v", err)
	}
	if len(*trans) != 1 || (*trans)[0].From != Closed || (*trans)[0].To != Open || (*trans)[0].Name != "test" {
		t.Fatalf("transitions %+v", *trans)
	}
}

func TestBreakerForgetsErrorsOutsideWindow(t *testing.T) {
	b, clk, _ := newTestBreaker(3, 30*time.Second)
	for i := 0; i < 10; i++ {
		fail(t, b)
		clk.Advance(31 * time.Second) // at most two errors ever fall within one minute
	}
	if b.State() != Closed {
		t.Fatalf("state %v, want closed", b.State())
	}
	if got := b.Snapshot().ErrorsInWindow; got != 1 {
		t.Fatalf("errors in window %d, want 1", got)
	}
}

func TestBreakerSuccessesDoNotTrip(t *testing.T) {
	b, _, _ := newTestBreaker(2, 30*time.Second)
	for i := 0; i < 100; i++ {
		tk, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		b.Record(tk, true)
	}
	if b.State() != Closed {
		t.Fatal("successes opened the breaker")
	}
}

func TestBreakerHalfOpenAdmitsExactlyOneProbe(t *testing.T) {
	tests := []struct {
		desc         string
		probeSuccess bool
		want         State
	}{
		{"successful probe closes", true, Closed},
		{"failed probe reopens", false, Open},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			b, clk, trans := newTestBreaker(1, 30*time.Second)
			fail(t, b)
			clk.Advance(29 * time.Second)
			if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
				t.Fatalf("want ErrOpen before the open duration passed, got %v", err)
			}
			clk.Advance(time.Second)
			if b.State() != HalfOpen {
				t.Fatalf("state %v, want half-open", b.State())
			}
			probe, err := b.Allow()
			if err != nil {
				t.Fatalf("probe refused: %v", err)
			}
			for i := 0; i < 3; i++ {
				if _, err := b.Allow(); !errors.Is(err, ErrProbeInFlight) {
					t.Fatalf("second call admitted in half-open: %v", err)
				}
			}
			if !b.Record(probe, tt.probeSuccess) {
				t.Fatal("probe outcome dropped")
			}
			if got := b.State(); got != tt.want {
				t.Fatalf("state %v, want %v", got, tt.want)
			}
			wantTrans := []State{Open, HalfOpen, tt.want}
			if len(*trans) != len(wantTrans) {
				t.Fatalf("transitions %+v", *trans)
			}
			for i, s := range wantTrans {
				if (*trans)[i].To != s {
					t.Fatalf("transition %d to %v, want %v", i, (*trans)[i].To, s)
				}
			}
			if tt.want == Open {
				if until := b.Snapshot().OpenUntil; !until.Equal(clk.Now().Add(30 * time.Second)) {
					t.Fatalf("reopened until %v", until)
				}
			}
		})
	}
}

func TestBreakerDropsStaleOutcomes(t *testing.T) {
	b, clk, _ := newTestBreaker(2, 10*time.Second)
	slow, _ := b.Allow() // started while closed, in generation 0
	fail(t, b)
	fail(t, b) // opens
	clk.Advance(10 * time.Second)
	probe, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	if b.Record(slow, false) {
		t.Fatal("outcome from before the state change was counted")
	}
	if b.State() != HalfOpen {
		t.Fatalf("stale failure changed the state to %v", b.State())
	}
	b.Record(probe, true)
	if b.Record(slow, false) || b.State() != Closed {
		t.Fatal("stale failure counted against the new closed state")
	}
	if got := b.Snapshot().ErrorsInWindow; got != 0 {
		t.Fatalf("errors in window %d after closing, want 0", got)
	}
}

func TestBreakerReadmitsLostProbe(t *testing.T) {
	b, clk, _ := newTestBreaker(1, 10*time.Second)
	fail(t, b)
	clk.Advance(10 * time.Second)
	lost, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	probe, err := b.Allow()
	if err != nil {
		t.Fatalf("lost probe blocks the breaker: %v", err)
	}
	if b.Record(lost, true) {
		t.Fatal("the lost probe's late outcome was counted")
	}
	b.Record(probe, true)
	if b.State() != Closed {
		t.Fatalf("state %v, want closed", b.State())
	}
}

func TestProviderBreakerSettings(t *testing.T) {
	tests := []struct {
		provider  string
		threshold int
		openFor   time.Duration
	}{
		{"openrouter", 5, 30 * time.Second},
		{"anthropic", 3, 60 * time.Second},
		{"gemini", 5, 30 * time.Second},
		{"groq", 5, 15 * time.Second},
		{"cerebras", 5, 30 * time.Second},
		{"deepseek", 5, 30 * time.Second},
		{"sim", 5, 30 * time.Second},
	}
	for _, tt := range tests {
		s := ProviderBreakerSettings(tt.provider)
		if s.Name != tt.provider || s.Threshold != tt.threshold || s.Window != time.Minute || s.OpenFor != tt.openFor {
			t.Errorf("%s: %+v", tt.provider, s)
		}
	}
}

func BenchmarkBreakerAllowRecord(b *testing.B) {
	clk := clock.NewFake(epoch)
	br := NewBreaker(Settings{Clock: clk})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		clk.Advance(time.Second) // one error in 20 s stays below 5 a minute
		tk, err := br.Allow()
		if err != nil {
			b.Fatal(err)
		}
		br.Record(tk, i%20 != 0)
	}
}

func TestBreakerReleaseFreesAnUnusedProbe(t *testing.T) {
	b, clk, _ := newTestBreaker(1, 10*time.Second)
	fail(t, b)
	clk.Advance(10 * time.Second)
	probe, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	b.Release(probe)
	next, err := b.Allow()
	if err != nil {
		t.Fatalf("released probe still blocks: %v", err)
	}
	if TicketFrom(next.Generation(), next.Probe()) != next || !next.Probe() {
		t.Fatal("ticket does not survive a message round trip")
	}
	b.Record(next, true)
	if b.State() != Closed {
		t.Fatalf("state %v", b.State())
	}
}

func TestBreakerConsecutiveIgnoresScatteredErrors(t *testing.T) {
	clk := clock.NewFake(epoch)
	b := NewBreaker(Settings{Name: "model", Threshold: 3, Consecutive: true, OpenFor: 10 * time.Second, Clock: clk})
	ok := func() {
		tk, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		b.Record(tk, true)
	}
	// A hundred errors, never three in a row: a busy model's scattered faults do not eject it.
	for i := 0; i < 100; i++ {
		fail(t, b)
		fail(t, b)
		ok()
	}
	if b.State() != Closed {
		t.Fatalf("state %s after scattered errors", b.State())
	}
	fail(t, b)
	fail(t, b)
	if got := b.Snapshot().ErrorsInWindow; got != 2 {
		t.Fatalf("snapshot counts %d consecutive errors, want 2", got)
	}
	fail(t, b)
	if b.State() != Open {
		t.Fatalf("state %s after 3 consecutive errors", b.State())
	}
	clk.Advance(10 * time.Second)
	tk, err := b.Allow()
	if err != nil || !tk.Probe() {
		t.Fatalf("half-open probe: %v %+v", err, tk)
	}
}

func TestBreakerTrip(t *testing.T) {
	b, clk, trans := newTestBreaker(5, 30*time.Second)
	stale, _ := b.Allow()
	b.Trip()
	if b.State() != Open || len(*trans) != 1 {
		t.Fatalf("state %s, transitions %v", b.State(), *trans)
	}
	b.Trip() // already open: nothing happens
	if len(*trans) != 1 {
		t.Fatalf("tripping an open breaker moved it: %v", *trans)
	}
	if b.Record(stale, true) {
		t.Fatal("an outcome from before the trip counted")
	}
	clk.Advance(30 * time.Second)
	probe, _ := b.Allow()
	b.Trip() // a half-open breaker told of a spreading fault reopens
	if b.State() != Open || b.Record(probe, true) {
		t.Fatalf("state %s after tripping half-open", b.State())
	}
}

func TestResumeBreakerContinuesAPublishedState(t *testing.T) {
	tests := []struct {
		desc  string
		setup func(b *Breaker, clk *clock.Fake)
		want  State
	}{
		{"closed", func(*Breaker, *clock.Fake) {}, Closed},
		{"open", func(b *Breaker, _ *clock.Fake) { b.Trip() }, Open},
		{"half-open", func(b *Breaker, clk *clock.Fake) { b.Trip(); clk.Advance(31 * time.Second); b.State() }, HalfOpen},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			b, clk, _ := newTestBreaker(2, 30*time.Second)
			tt.setup(b, clk)
			stale, _ := b.Allow()
			snap := b.Snapshot()
			resumed := ResumeBreaker(b.Settings(), snap)
			got := resumed.Snapshot()
			if got.State != tt.want || got.Generation <= snap.Generation || !got.OpenUntil.Equal(snap.OpenUntil) {
				t.Fatalf("resumed %+v from %+v", got, snap)
			}
			if resumed.Record(stale, false) {
				t.Fatal("a ticket from before the restart counted in the resumed breaker")
			}
		})
	}
}

func TestBreakerThresholdIsBounded(t *testing.T) {
	b := NewBreaker(Settings{Threshold: 100_000_000})
	if got := b.Settings().Threshold; got != MaxThreshold {
		t.Fatalf("threshold %d, want the cap %d", got, MaxThreshold)
	}
}
