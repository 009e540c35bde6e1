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
	"io"
	"io/fs"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
)

//go:embed data/*.jsonl
var dataFS embed.FS

// Example is one labelled task. In an adversarial set it also has a shape (clear, or misleading: its
// keywords point elsewhere) and, in the second, a form (code, long, other_language …).
type Example struct {
	Category Category `json:"category"`
	Shape    string   `json:"shape,omitempty"`
	Form     string   `json:"form,omitempty"`
	Text     string   `json:"text"`
}

// ReadExamples reads labelled tasks, one JSON object per line; name says where they come from in errors.
func ReadExamples(r io.Reader, name string) ([]Example, error) {
	var out []Example
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var ex Example
		if err := json.Unmarshal(sc.Bytes(), &ex); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		out = append(out, ex)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
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
		exs, err := ReadExamples(bytes.NewReader(raw), f)
		if err != nil {
			return nil, nil, err
		}
		for _, ex := range exs {
			byCategory[ex.Category] = append(byCategory[ex.Category], ex)
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

// Classifier is the shipped model with its options; it is safe for concurrent use.
type Classifier struct {
	opts    Options
	model   *Model
	lexicon lexicon    // keywords and glosses
	scratch *sync.Pool // *extractor
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

//go:embed model/classifier.bin
var shippedWeights []byte

// New returns the shipped classifier with opts. The weights are decoded once per process: every
// classifier New returns shares them.
func New(opts Options) (*Classifier, error) {
	m, err := shipped()
	if err != nil {
		return nil, err
	}
	return WithModel(m, opts)
}

var shipped = sync.OnceValues(func() (*Model, error) {
	m := &Model{}
	if err := m.UnmarshalBinary(shippedWeights); err != nil {
		return nil, fmt.Errorf("the shipped classifier (make classifier writes it): %w", err)
	}
	return m, nil
})

// WithModel returns a classifier that answers with m.
func WithModel(m *Model, opts Options) (*Classifier, error) {
	if !slices.Equal(m.Categories, Categories) {
		return nil, fmt.Errorf("%w: its categories %v are not this build's", ErrModelFormat, m.Categories)
	}
	lex, err := newLexicon()
	if err != nil {
		return nil, err
	}
	return &Classifier{opts: opts.withDefaults(), model: m, lexicon: lex,
		scratch: &sync.Pool{New: func() any { return newExtractor() }}}, nil
}

// Temperature returns the model's calibration temperature.
func (c *Classifier) Temperature() float64 { return c.model.Temperature }

// Classify classifies a task.
func (c *Classifier) Classify(task string) Result {
	var scores [maxCategories]float64
	s := scores[:len(Categories)]
	x := c.scratch.Get().(*extractor)
	defer c.scratch.Put(x)
	c.model.scores(x.features(task, c.lexicon, c.model.Dim), s)
	softmax(s)

	order := top3(s)
	best := Categories[order[0]]
	r := Result{
		Category:   best,
		Best:       best,
		Confidence: s[order[0]],
		Signals:    c.signals(x.hashes),
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

// signals lists the keywords among a task's word and pair hashes, each once.
func (c *Classifier) signals(hashes []uint64) []Signal {
	var out []Signal
	for _, h := range hashes {
		for _, hit := range c.lexicon[h].hits {
			if !slices.ContainsFunc(out, func(s Signal) bool { return s.Keyword == hit.phrase }) {
				out = append(out, Signal{Category: Categories[hit.category], Keyword: hit.phrase})
			}
		}
	}
	return out
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
