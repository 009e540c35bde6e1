package accuracy

import (
	"math"
	"testing"
)

func TestAVoteWeightIsBounded(t *testing.T) {
	if w, top := Weight(1), Weight(maxAccuracy); w != top || math.IsInf(w, 0) {
		t.Fatalf("a certain model weighs %v, want the bound %v", w, top)
	}
	if w := Weight(1.0 / EffectiveOptions); math.Abs(w) > 1e-12 {
		t.Fatalf("a model at chance weighs %v, want 0", w)
	}
}
