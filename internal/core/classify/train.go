package classify

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/conclave-ai/conclave/internal/platform/fnv1a"
)

// TrainOptions tune training. The zero value is the shipped configuration.
type TrainOptions struct {
	// Dim is the number of feature buckets; zero means 1<<16.
	Dim uint32
	// Epochs over the examples; zero means 12.
	Epochs int
	// Rate is AdaGrad's learning rate; zero means 0.4.
	Rate float64
	// L2 is the weight decay of a feature's weights each time it is seen; zero means 1e-4.
	L2 float64
	// Folds is the number of cross-validation folds whose out-of-fold scores fit the temperature;
	// zero means 5, one fits none (temperature 1).
	Folds int
	// Seed orders the examples.
	Seed uint64
}

func (o TrainOptions) withDefaults() TrainOptions {
	if o.Dim == 0 {
		o.Dim = 1 << 16
	}
	if o.Epochs == 0 {
		o.Epochs = 12
	}
	if o.Rate == 0 {
		o.Rate = 0.4
	}
	if o.L2 == 0 {
		o.L2 = 1e-4
	}
	if o.Folds == 0 {
		o.Folds = 5
	}
	return o
}

// sample is a training example read as the model reads it.
type sample struct {
	feats []uint32
	class int
}

// TrainModel fits the model on examples: softmax regression by AdaGrad over the examples in a seeded
// order, then a temperature chosen to minimise the log-loss of out-of-fold predictions (each example
// scored by a model trained without it), so that a confidence of 0.6 is right about 60 % of the time.
func TrainModel(examples []Example, opts TrainOptions) (*Model, error) {
	opts = opts.withDefaults()
	index := make(map[Category]int, len(Categories))
	for i, c := range Categories {
		index[c] = i
	}
	lex, err := newLexicon()
	if err != nil {
		return nil, err
	}
	samples := make([]sample, len(examples))
	x := newExtractor()
	for i, ex := range examples {
		ci, ok := index[ex.Category]
		if !ok {
			return nil, fmt.Errorf("example %d: unknown category %q", i, ex.Category)
		}
		samples[i] = sample{feats: append([]uint32(nil), x.features(ex.Text, lex, opts.Dim)...), class: ci}
	}
	w := fit(samples, opts)
	m := &Model{Dim: opts.Dim, Categories: Categories, Bias: w.bias, Temperature: 1, Digest: Digest(examples, opts)}
	m.Weights, m.Scale = quantize(w.w)
	if opts.Folds > 1 {
		m.Temperature = outOfFoldTemperature(samples, opts)
	}
	return m, nil
}

// Digest identifies a training run's examples, lexicon, features and options: the shipped weights
// carry it, and a test refuses weights whose digest differs from the embedded data's (run make
// classifier).
func Digest(examples []Example, opts TrainOptions) uint64 {
	opts = opts.withDefaults()
	h := fnv1a.Offset
	for _, ex := range examples {
		h = h.AddString(string(ex.Category)).AddByte(0).AddString(ex.Text).AddByte(0)
	}
	// The lexicon and the extractor's version: a change to either changes every example's features.
	for _, c := range Categories {
		for _, k := range keywords[c] {
			h = h.AddString(k).AddByte(0)
		}
	}
	for _, word := range slices.Sorted(maps.Keys(glosses)) {
		for _, g := range glosses[word] {
			h = h.AddString(word).AddByte(1).AddString(g).AddByte(0)
		}
	}
	var b [8]byte
	for _, v := range []uint64{uint64(opts.Dim), uint64(opts.Epochs), math.Float64bits(opts.Rate), math.Float64bits(opts.L2), uint64(opts.Folds), opts.Seed, modelVersion, featuresVersion} {
		binary.LittleEndian.PutUint64(b[:], v)
		h = h.AddBytes(b[:])
	}
	return uint64(h)
}

// weights are a model in training: full-precision weights (Dim rows of K) and biases.
type weights struct {
	w, bias []float32
}

// scores writes the uncalibrated scores of every category for the features into s.
func (m *weights) scores(feats []uint32, s []float64) {
	k := len(s)
	var acc [maxCategories]float32
	a := acc[:k]
	for _, f := range feats {
		for ci, w := range m.w[int(f)*k : int(f)*k+k] {
			a[ci] += w
		}
	}
	norm := 1 / math.Sqrt(float64(max(len(feats), 1)))
	for ci := range s {
		s[ci] = float64(m.bias[ci]) + float64(a[ci])*norm
	}
}

// fit trains weights and biases on samples.
func fit(samples []sample, opts TrainOptions) *weights {
	k := len(Categories)
	m := &weights{w: make([]float32, int(opts.Dim)*k), bias: make([]float32, k)}
	sumSq := make([]float32, len(m.w)) // AdaGrad's accumulated squared gradients
	biasSq := make([]float64, k)
	rng := rand.New(rand.NewPCG(opts.Seed, 0x636c6173736966)) // "classif"
	order := make([]int, len(samples))
	for i := range order {
		order[i] = i
	}
	var z [maxCategories]float64
	s := z[:k]
	const eps = 1e-8
	for range opts.Epochs {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			smp := samples[i]
			m.scores(smp.feats, s)
			softmax(s)
			s[smp.class]--                                               // s is now the gradient of the log-loss by the scores
			v := float32(1 / math.Sqrt(float64(max(len(smp.feats), 1)))) // each feature's value
			for _, f := range smp.feats {
				row := int(f) * k
				for ci, g := range s {
					j := row + ci
					grad := float32(g)*v + float32(opts.L2)*m.w[j]
					sumSq[j] += grad * grad
					m.w[j] -= float32(opts.Rate) * grad / float32(math.Sqrt(float64(sumSq[j])+eps))
				}
			}
			for ci, g := range s {
				biasSq[ci] += g * g
				m.bias[ci] -= float32(opts.Rate * g / math.Sqrt(biasSq[ci]+eps))
			}
		}
	}
	return m
}

// outOfFoldTemperature fits the temperature on predictions of examples by models that did not see them.
func outOfFoldTemperature(samples []sample, opts TrainOptions) float64 {
	k := len(Categories)
	logits := make([][]float64, len(samples))
	for fold := range opts.Folds {
		var train []sample
		for i, smp := range samples {
			if i%opts.Folds != fold {
				train = append(train, smp)
			}
		}
		m := fit(train, opts)
		for i := fold; i < len(samples); i += opts.Folds {
			logits[i] = make([]float64, k)
			m.scores(samples[i].feats, logits[i])
		}
	}
	p := make([]float64, k)
	return gridMinimum(temperatureGrid, func(t float64) float64 {
		loss := 0.0
		for i, l := range logits {
			for ci := range p {
				p[ci] = l[ci] / t
			}
			softmax(p)
			loss -= math.Log(max(p[samples[i].class], 1e-12))
		}
		return loss
	})
}

// temperatureGrid is the temperatures tried: 0.2 to 5 by 0.05.
var temperatureGrid = func() []float64 {
	var g []float64
	for i := 0; i <= 96; i++ {
		g = append(g, float64(20+5*i)/100) // exact where a sum of steps would drift
	}
	return g
}()

// gridMinimum returns the point of grid where f is least, by ternary search: the log-loss is unimodal
// in the temperature. Ties go to the smaller point.
func gridMinimum(grid []float64, f func(float64) float64) float64 {
	lo, hi := 0, len(grid)-1
	for hi-lo > 2 {
		m1, m2 := lo+(hi-lo)/3, hi-(hi-lo)/3
		if f(grid[m1]) <= f(grid[m2]) {
			hi = m2
		} else {
			lo = m1
		}
	}
	best, bestLoss := grid[lo], f(grid[lo])
	for _, t := range grid[lo+1 : hi+1] {
		if l := f(t); l < bestLoss {
			best, bestLoss = t, l
		}
	}
	return best
}
