package engine

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestDiscoveryRetryDoublesFromOneSecondToSixty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		desc     string
		interval time.Duration
		// steps are the waits after the 1st, 2nd... failure in a row, before jitter.
		steps []time.Duration
	}{
		{"an hourly listing", time.Hour, []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}},
		{"a listing every 10 s: never a longer wait than the interval", 10 * time.Second, []time.Duration{1, 2, 4, 8, 10, 10}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			for i, s := range tt.steps {
				want := s * time.Second
				for range 50 { // the jitter is random: try it
					wait, step := discoveryWait(DiscoveryRetry, tt.interval, i+1, rng)
					if step != want || wait < step || wait > step+DiscoveryRetry/2 || wait > min(DiscoveryRetrySteps*DiscoveryRetry, tt.interval) {
						t.Fatalf("failure %d: wait %v on step %v, want the step %v plus at most 0.5 s of jitter, within the ceiling", i+1, wait, step, want)
					}
				}
			}
		})
	}
	if _, step := discoveryWait(DiscoveryRetry, time.Hour, 1000, rng); step != time.Minute {
		t.Fatalf("after 1000 failures the step is %v", step)
	}
}
