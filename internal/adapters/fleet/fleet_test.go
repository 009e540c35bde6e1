package fleet

import (
	"context"
	"errors"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/resilience"
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
