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

func TestPosteriorsDependent(t *testing.T) {
	w := func(p float64) float64 { return math.Exp(Weight(p)) } // a voter's likelihood ratio
	tests := []struct {
		desc       string
		accuracy   []float64
		groupOf    []int
		groups     int
		dependence [][]float64
		// want is each group's posterior.
		want []float64
	}{
		{"without dependence it is Posteriors: three weak that agree outvote one strong",
			[]float64{0.9, 0.6, 0.6, 0.6}, []int{0, 1, 1, 1}, 2, nil,
			[]float64{w(0.9) / (w(0.9) + math.Pow(w(0.6), 3) + 1), math.Pow(w(0.6), 3) / (w(0.9) + math.Pow(w(0.6), 3) + 1)}},
		{"a clique of three correlated weak models no longer outvotes one independent strong model",
			[]float64{0.9, 0.6, 0.6, 0.6}, []int{0, 1, 1, 1}, 2,
			[][]float64{{0, 0, 0, 0}, {0, 0, 0.8, 0.8}, {0, 0.8, 0, 0.8}, {0, 0.8, 0.8, 0}},
			// each weak vote weighs 1/(1+0.8+0.8) of its own
			[]float64{w(0.9) / (w(0.9) + math.Pow(w(0.6), 3/2.6) + 1), math.Pow(w(0.6), 3/2.6) / (w(0.9) + math.Pow(w(0.6), 3/2.6) + 1)}},
		{"three clones count as one voter",
			[]float64{0.6, 0.6, 0.6}, []int{0, 0, 0}, 1,
			[][]float64{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}},
			[]float64{w(0.6) / (w(0.6) + 2)}},
		{"dependent models that disagree are not discounted",
			[]float64{0.7, 0.7, 0.7}, []int{0, 1, 1}, 2,
			[][]float64{{0, 0.9, 0.9}, {0.9, 0, 0}, {0.9, 0, 0}},
			[]float64{w(0.7) / (w(0.7) + w(0.7)*w(0.7) + 1), w(0.7) * w(0.7) / (w(0.7) + w(0.7)*w(0.7) + 1)}},
		{"agreeing less than independence predicts is no bonus",
			[]float64{0.7, 0.7, 0.7}, []int{0, 0, 1}, 2,
			[][]float64{{0, -0.5, 0}, {-0.5, 0, 0}, {0, 0, 0}},
			[]float64{w(0.7) * w(0.7) / (w(0.7)*w(0.7) + w(0.7) + 1), w(0.7) / (w(0.7)*w(0.7) + w(0.7) + 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got := PosteriorsDependent(tt.accuracy, tt.groupOf, tt.groups, tt.dependence)
			for g := range tt.want {
				if math.Abs(got[g]-tt.want[g]) > 1e-9 {
					t.Fatalf("posteriors %v, want %v", got, tt.want)
				}
			}
		})
	}
}
