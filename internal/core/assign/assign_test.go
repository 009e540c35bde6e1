package assign

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/resilience"
)

var now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func snaps() []Worker {
	return []Worker{
		{Name: "t3a", Tier: 3, Slots: 2},
		{Name: "t1a", Tier: 1, Slots: 2},
		{Name: "t2a", Tier: 2, Slots: 2},
		{Name: "t1b", Tier: 1, Slots: 2, InFlight: 1},
	}
}

func TestJobs(t *testing.T) {
	openUntil := now.Add(time.Minute)
	tests := []struct {
		desc     string
		workers  []Worker
		n        int
		heavy    bool
		exclude  map[string]bool
		want     string
		rejected string
		err      error
	}{
		{desc: "heavy tasks fill tier 1 first", workers: snaps(), n: 4, heavy: true, want: "[t1a t1a t1b t2a]"},
		{desc: "light tasks spread evenly", workers: snaps(), n: 4, want: "[t1a t2a t3a t1a]"},
		{desc: "full workers still queue the overflow on the least loaded", workers: snaps()[:1], n: 3, want: "[t3a t3a t3a]"},
		{
			desc:     "open breakers and exclusions are rejected with a reason",
			workers:  append(snaps(), Worker{Name: "down", Tier: 1, Slots: 9, Breaker: resilience.Snapshot{State: resilience.Open, OpenUntil: openUntil}}),
			n:        1,
			heavy:    true,
			exclude:  map[string]bool{"t1a": true},
			want:     "[t1b]",
			rejected: "[{t1a excluded} {down breaker_open}]",
		},
		{
			desc:    "a breaker whose open period passed admits work again",
			workers: []Worker{{Name: "probe", Tier: 2, Slots: 1, Breaker: resilience.Snapshot{State: resilience.Open, OpenUntil: now}}},
			n:       1,
			want:    "[probe]",
		},
		{
			desc:     "no worker left",
			workers:  []Worker{{Name: "down", Slots: 1, Breaker: resilience.Snapshot{State: resilience.Open, OpenUntil: openUntil}}},
			n:        1,
			rejected: "[{down breaker_open}]",
			err:      ErrNoWorkers,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got, rejected, err := Jobs(tt.workers, tt.n, tt.heavy, now, func(w string) bool { return tt.exclude[w] })
			if !errors.Is(err, tt.err) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if tt.err == nil && fmt.Sprint(got) != tt.want {
				t.Fatalf("assigned %v, want %s", got, tt.want)
			}
			if tt.rejected != "" && fmt.Sprint(rejected) != tt.rejected {
				t.Fatalf("rejected %v, want %s", rejected, tt.rejected)
			}
		})
	}
}
