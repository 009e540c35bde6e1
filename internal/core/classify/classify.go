// Package classify owns task classification: which of 22 categories a task belongs to, how sure
// that is, and the task's metadata (programming language, complexity, context length). It combines the
// specification's keyword signals with a multinomial naive Bayes model trained on a labelled set of example
// tasks shipped with the package, and it answers General when unsure.
package classify

import (
	"bufio"
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io/fs"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
)

//go:embed data/*.jsonl
var dataFS embed.FS

// Example is one labelled task.
type Example struct {
	Category Category `json:"category"`
	Text     string   `json:"text"`
}

// HeldOutPerCategory is how many examples of each category are kept out of training for evaluation.
const HeldOutPerCategory = 30

// Dataset returns the shipped examples split into training and held-out parts. The split is stratified
// and deterministic: within each category (whatever files its examples are in) the examples with the
// smallest FNV-1a hash of their text are held out.
func Dataset() (train, heldOut []Example, err error) {
	files, err := fs.Glob(dataFS, "data/*.jsonl")
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(files)
	byCategory := map[Category][]Example{}
	for _, f := range files {
		raw, err := fs.ReadFile(dataFS, f)
		if err != nil {
			return nil, nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for line := 1; sc.Scan(); line++ {
			var ex Example
			if err := json.Unmarshal(sc.Bytes(), &ex); err != nil {
				return nil, nil, fmt.Errorf("%s:%d: %w", f, line, err)
			}
			byCategory[ex.Category] = append(byCategory[ex.Category], ex)
		}
		if err := sc.Err(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	cats := slices.Sorted(maps.Keys(byCategory))
	for _, c := range cats {
		exs := byCategory[c]
		sort.SliceStable(exs, func(i, j int) bool { return textHash(exs[i].Text) < textHash(exs[j].Text) })
		n := min(HeldOutPerCategory, len(exs))
		heldOut = append(heldOut, exs[:n]...)
		train = append(train, exs[n:]...)
	}
	return train, heldOut, nil
}

func textHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// Options tune a classifier. The zero value is the shipped configuration.
type Options struct {
	// MinConfidence is the confidence below which the answer falls back to General; zero means 0.3.
	MinConfidence float64
	// LowConfidence is the confidence below which a result is flagged for the
	// low_confidence_classification event; zero means 0.6.
	LowConfidence float64
}

func (o Options) withDefaults() Options {
	if o.MinConfidence <= 0 {
		o.MinConfidence = 0.3
	}
	if o.LowConfidence <= 0 {
		o.LowConfidence = 0.6
	}
	return o
}

// smoothing is the Laplace pseudo-count of the naive Bayes token likelihoods; it and keywordWeight were
// chosen by 5-fold cross-validation on the training split.
const smoothing = 1.0

// Classifier is a trained, immutable classifier; it is safe for concurrent use.
type Classifier struct {
	opts     Options
	vocab    map[uint64]int32 // token hash -> row of logLik
	logLik   []float64        // len(vocab) × K: log P(token | category)
	unseen   []float64        // K: log P(token | category) for tokens outside the vocabulary
	logPrior []float64        // K
	// temperature divides the naive Bayes log-score, whose independence assumption makes raw posteriors
	// far too sure of themselves; it is fitted on leave-one-out predictions of the training set.
	temperature float64
	keywords    map[uint64][]keywordHit
	// keywordBits has the bit of every keyword's hash set, so that a token that is no keyword is
	// known without a map lookup.
	keywordBits [64]uint64
	scratch     *sync.Pool // *scratch, shared by the classifiers of one trained model
}

type scratch struct {
	toks []uint64
	buf  []byte
}

type keywordHit struct {
	category int
	phrase   string
}

// Signal is a keyword that matched.
type Signal struct {
	Category Category `json:"category"`
	Keyword  string   `json:"keyword"`
}

// Result is the classification of one task.
type Result struct {
	// Category is the answer: the best category, or General when Confidence < MinConfidence.
	Category Category `json:"category"`
	// Confidence in [0, 1] is the calibrated probability of the best category.
	Confidence float64 `json:"confidence"`
	// Best is the most probable category even when the answer fell back to General.
	Best Category `json:"best"`
	// Fallback is true when the answer is General because the classifier was unsure.
	Fallback bool `json:"fallback,omitempty"`
	// LowConfidence is true below the low-confidence threshold (0.6): log low_confidence_classification.
	LowConfidence bool     `json:"low_confidence,omitempty"`
	Priority      Priority `json:"priority"`
	Signals       []Signal `json:"signals,omitempty"`
	// Runner-up categories with their probabilities, best first (at most two).
	Alternatives []Scored `json:"alternatives,omitempty"`
	Metadata     Metadata `json:"metadata"`
}

// Scored is a category with its probability.
type Scored struct {
	Category    Category `json:"category"`
	Probability float64  `json:"probability"`
}

// New returns the shipped classifier, trained on the training part of the embedded dataset, with opts.
// It is trained once per process: every classifier New returns shares the trained model.
func New(opts Options) (*Classifier, error) {
	trained, err := shipped()
	if err != nil {
		return nil, err
	}
	c := *trained
	c.opts = opts.withDefaults()
	return &c, nil
}

var shipped = sync.OnceValues(func() (*Classifier, error) {
	train, _, err := Dataset()
	if err != nil {
		return nil, fmt.Errorf("classifier dataset: %w", err)
	}
	return Train(train, Options{})
})

// Train fits a classifier on examples.
func Train(examples []Example, opts Options) (*Classifier, error) {
	k := len(Categories)
	index := make(map[Category]int, k)
	for i, c := range Categories {
		index[c] = i
	}
	c := &Classifier{opts: opts.withDefaults(), vocab: map[uint64]int32{}, keywords: map[uint64][]keywordHit{}}
	c.scratch = &sync.Pool{New: func() any { return &scratch{toks: make([]uint64, 0, 256), buf: make([]byte, 0, 64)} }}

	docs := make([]int, k)
	var counts [][]float64 // per vocab row, per category
	totals := make([]float64, k)
	exTokens := make([][]uint64, len(examples))
	exClass := make([]int, len(examples))
	for i, ex := range examples {
		ci, ok := index[ex.Category]
		if !ok {
			return nil, fmt.Errorf("example %d: unknown category %q", i, ex.Category)
		}
		exClass[i] = ci
		docs[ci]++
		toks, _ := appendTokens(nil, ex.Text, nil)
		exTokens[i] = distinct(toks)
		for _, h := range exTokens[i] {
			row, ok := c.vocab[h]
			if !ok {
				row = int32(len(counts))
				c.vocab[h] = row
				counts = append(counts, make([]float64, k))
			}
			counts[row][ci]++
			totals[ci]++
		}
	}
	for ci, n := range docs {
		if n == 0 {
			return nil, fmt.Errorf("no training example for category %s", Categories[ci])
		}
	}
	v := float64(len(counts))
	c.logPrior = make([]float64, k)
	c.unseen = make([]float64, k)
	for ci := range k {
		c.logPrior[ci] = math.Log(float64(docs[ci]) / float64(len(examples)))
		c.unseen[ci] = math.Log(smoothing / (totals[ci] + smoothing*v))
	}
	c.logLik = make([]float64, len(counts)*k)
	for row, cs := range counts {
		for ci := range k {
			c.logLik[row*k+ci] = math.Log((cs[ci] + smoothing) / (totals[ci] + smoothing*v))
		}
	}
	for cat, phrases := range keywords {
		for _, p := range phrases {
			h, ok := phraseHash(p)
			if !ok {
				return nil, fmt.Errorf("keyword %q of %s has more than two significant words", p, cat)
			}
			c.keywords[h] = append(c.keywords[h], keywordHit{category: index[cat], phrase: p})
			c.keywordBits[h>>6%uint64(len(c.keywordBits))] |= 1 << (h & 63)
		}
	}
	c.temperature = c.fitTemperature(exTokens, exClass, counts, totals, docs)
	return c, nil
}

// fitTemperature picks the temperature that minimises the log-loss of leave-one-out predictions on the
// training set: each example is scored by the model trained without it.
func (c *Classifier) fitTemperature(exTokens [][]uint64, exClass []int, counts [][]float64, totals []float64, docs []int) float64 {
	k := len(Categories)
	v := float64(len(counts))
	n := len(exTokens)
	scores := make([][]float64, n)
	for i, toks := range exTokens {
		own := exClass[i]
		s := make([]float64, k)
		for ci := range k {
			d := float64(docs[ci])
			tot := totals[ci]
			if ci == own {
				d--
				tot -= float64(len(toks))
			}
			s[ci] = math.Log(max(d, 0.5) / float64(n-1))
			for _, h := range toks {
				cnt := counts[c.vocab[h]][ci]
				if ci == own {
					cnt-- // tokens are distinct per example, so the example contributed exactly one
				}
				s[ci] += math.Log((cnt + smoothing) / (tot + smoothing*v))
			}
		}
		scores[i] = s
	}
	kws := make([][maxCategories]float64, n) // the keywords' part does not depend on the temperature
	for i, toks := range exTokens {
		kws[i] = c.keywordScores(toks, nil)
	}
	probs := make([]float64, k)
	loss := func(t float64) float64 {
		sum := 0.0
		for i, s := range scores {
			kw := &kws[i]
			for ci := range k {
				probs[ci] = s[ci]/t + kw[ci]
			}
			softmax(probs)
			sum -= math.Log(max(probs[exClass[i]], 1e-12))
		}
		return sum
	}
	return gridMinimum(temperatureGrid, loss)
}

// temperatureGrid is the temperatures tried: 1 to 60 by 0.5.
var temperatureGrid = func() []float64 {
	var g []float64
	for t := 1.0; t <= 60; t += 0.5 {
		g = append(g, t)
	}
	return g
}()

// gridMinimum returns the point of grid where f is least, by ternary search: the log-loss is unimodal
// in the temperature, and a search evaluates it at about 20 points of the grid's 119 (training runs at
// every start). Ties go to the smaller point.
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

// distinct sorts and deduplicates token hashes: the model counts whether a token occurs in a task, not
// how often (binarised multinomial naive Bayes, which suits short texts better than raw counts).
func distinct(toks []uint64) []uint64 {
	slices.Sort(toks)
	return slices.Compact(toks)
}

// keywordScores adds keywordWeight per matched keyword to its category and appends the signals.
func (c *Classifier) keywordScores(toks []uint64, signals *[]Signal) (kw [maxCategories]float64) {
	for _, h := range toks {
		if c.keywordBits[h>>6%uint64(len(c.keywordBits))]&(1<<(h&63)) == 0 {
			continue // no keyword hashes here: most tokens are none
		}
		for _, hit := range c.keywords[h] {
			kw[hit.category] += keywordWeight
			if signals != nil && !hasSignal(*signals, hit.phrase) {
				*signals = append(*signals, Signal{Category: Categories[hit.category], Keyword: hit.phrase})
			}
		}
	}
	return kw
}

func hasSignal(signals []Signal, phrase string) bool {
	for _, s := range signals {
		if s.Keyword == phrase {
			return true
		}
	}
	return false
}

// maxCategories bounds the category count so per-call scores live on the stack.
const maxCategories = 32

// Temperature returns the fitted calibration temperature.
func (c *Classifier) Temperature() float64 { return c.temperature }

// Classify classifies a task.
func (c *Classifier) Classify(task string) Result {
	k := len(Categories)
	var scores [maxCategories]float64
	s := scores[:k]
	copy(s, c.logPrior)
	sc := c.scratch.Get().(*scratch)
	defer c.scratch.Put(sc)
	sc.toks, sc.buf = appendTokens(sc.toks[:0], task, sc.buf[:0])
	sc.toks = distinct(sc.toks)
	for _, h := range sc.toks {
		ll := c.unseen
		if row, ok := c.vocab[h]; ok {
			ll = c.logLik[int(row)*k : int(row)*k+k]
		}
		for ci := range s {
			s[ci] += ll[ci]
		}
	}

	var signals []Signal
	kw := c.keywordScores(sc.toks, &signals)
	for ci := range s {
		s[ci] = s[ci]/c.temperature + kw[ci]
	}
	softmax(s)

	order := top3(s)
	best := Categories[order[0]]
	r := Result{
		Category:   best,
		Best:       best,
		Confidence: s[order[0]],
		Signals:    signals,
		Metadata:   ExtractMetadata(task),
	}
	r.Alternatives = make([]Scored, 0, 2)
	for _, i := range order[1:3] {
		r.Alternatives = append(r.Alternatives, Scored{Category: Categories[i], Probability: s[i]})
	}
	if r.Confidence < c.opts.MinConfidence && best != General {
		r.Category, r.Fallback = General, true
	}
	r.LowConfidence = r.Confidence < c.opts.LowConfidence
	r.Priority = PriorityOf(r.Category)
	return r
}

// top3 returns the indices of the three highest scores, highest first; equal scores keep their order.
func top3(s []float64) [3]int {
	top := [3]int{-1, -1, -1}
	for i, x := range s {
		for k := range top {
			if top[k] < 0 || x > s[top[k]] {
				copy(top[k+1:], top[k:2])
				top[k] = i
				break
			}
		}
	}
	return top
}

func softmax(s []float64) {
	m := math.Inf(-1)
	for _, x := range s {
		m = max(m, x)
	}
	sum := 0.0
	for i, x := range s {
		s[i] = math.Exp(x - m)
		sum += s[i]
	}
	for i := range s {
		s[i] /= sum
	}
}
