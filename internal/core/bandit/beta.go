// Package bandit owns model selection by Thompson Sampling: one Beta(alpha, beta) arm per (model,
// category), top-N selection over the eligible arms with filters that record why a model was left out,
// reward updates with optional discounting, and an EWMA recency score. Randomness comes from an injected,
// seedable source so that every selection can be replayed in a post-mortem.
package bandit

import (
	"math"
	"math/rand/v2"
)

// SampleBeta draws from Beta(a, b) as X/(X+Y) with X ~ Gamma(a), Y ~ Gamma(b). Non-positive parameters
// are treated as a tiny positive shape rather than failing: arms are always valid distributions.
func SampleBeta(rng *rand.Rand, a, b float64) float64 {
	x := SampleGamma(rng, a)
	y := SampleGamma(rng, b)
	if x+y == 0 {
		// Both draws underflowed (only possible for minute shapes): fall back to the mean.
		return a / (a + b)
	}
	return x / (x + y)
}

const minShape = 1e-6

// SampleGamma draws from Gamma(shape, 1) by Marsaglia and Tsang's method; shapes below one use the
// boost Gamma(shape+1) × U^(1/shape).
func SampleGamma(rng *rand.Rand, shape float64) float64 {
	if !(shape > minShape) {
		shape = minShape
	}
	if shape < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return SampleGamma(rng, shape+1) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		x2 := x * x
		if u < 1-0.0331*x2*x2 {
			return d * v
		}
		if math.Log(u) < 0.5*x2+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
