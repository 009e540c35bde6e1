package fleet

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/resilience"
)

func TestDefaultWorkers(t *testing.T) {
	ws := DefaultWorkers(8, 0)
	tiers := map[int]int{}
	for _, w := range ws {
		tiers[w.Tier]++
		if w.Slots != DefaultSlots {
			t.Fatalf("slots %d", w.Slots)
		}
	}
	if tiers[1] != 2 || tiers[2] != 3 || tiers[3] != 3 || ws[0].Name != "worker-01" {
		t.Fatalf("tiers %v, first %s", tiers, ws[0].Name)
	}
	if one := DefaultWorkers(1, 4); one[0].Tier != 1 {
		t.Fatal("a single worker must be tier 1")
	}
}

var now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func snaps() []Snapshot {
	return []Snapshot{
		{Name: "t3a", Tier: 3, Slots: 2},
		{Name: "t1a", Tier: 1, Slots: 2},
		{Name: "t2a", Tier: 2, Slots: 2},
		{Name: "t1b", Tier: 1, Slots: 2, InFlight: 1},
	}
}

func TestAssign(t *testing.T) {
	openUntil := now.Add(time.Minute)
	tests := []struct {
		desc     string
		workers  []Snapshot
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
			workers:  append(snaps(), Snapshot{Name: "down", Tier: 1, Slots: 9, Breaker: resilience.Snapshot{State: resilience.Open, OpenUntil: openUntil}}),
			n:        1,
			heavy:    true,
			exclude:  map[string]bool{"t1a": true},
			want:     "[t1b]",
			rejected: "[{t1a excluded} {down breaker_open}]",
		},
		{
			desc:    "a breaker whose open period passed admits work again",
			workers: []Snapshot{{Name: "probe", Tier: 2, Slots: 1, Breaker: resilience.Snapshot{State: resilience.Open, OpenUntil: now}}},
			n:       1,
			want:    "[probe]",
		},
		{
			desc:     "no worker left",
			workers:  []Snapshot{{Name: "down", Slots: 1, Breaker: resilience.Snapshot{State: resilience.Open, OpenUntil: openUntil}}},
			n:        1,
			rejected: "[{down breaker_open}]",
			err:      ErrNoWorkers,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got, rejected, err := Assign(tt.workers, tt.n, tt.heavy, now, func(w string) bool { return tt.exclude[w] })
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

func TestClassifyError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()
	if ClassifyError(ctx.Err()) != resilience.UpstreamTimeout {
		t.Fatal("deadline is not a worker timeout")
	}
	if ClassifyError(&resilience.Error{Kind: resilience.RateLimited}) != resilience.RateLimited {
		t.Fatal("classified error lost its kind")
	}
	if ClassifyError(errors.New("boom")) != resilience.Internal || ClassifyError(nil) != "" {
		t.Fatal("unclassified errors")
	}
}
