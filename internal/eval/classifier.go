package eval

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/classify"
)

// ClassifierReport measures the shipped classifier: its accuracy on the held-out split and on each
// adversarial set (by shape), and how well its confidence is calibrated, as a reliability diagram over
// all of them.
type ClassifierReport struct {
	Sets []ClassifierSet `json:"sets"`
	// Reliability bins the answers by confidence (tenths): in a calibrated classifier each bin's
	// accuracy is its mean confidence.
	Reliability []ReliabilityBin `json:"reliability"`
	// ECE is the expected calibration error: the bins' |accuracy − confidence| weighted by their share.
	ECE float64 `json:"expected_calibration_error"`
	// BelowLow and AboveLow are the accuracy of the answers under and over the low-confidence
	// threshold (0.6), with their shares.
	BelowLow ShareAccuracy `json:"below_low_confidence"`
	AboveLow ShareAccuracy `json:"above_low_confidence"`
}

// ClassifierSet is the accuracy of the best category on one labelled set, or one shape of it.
type ClassifierSet struct {
	Name     string  `json:"name"`
	Tasks    int     `json:"tasks"`
	Accuracy float64 `json:"accuracy"`
}

// ReliabilityBin is the answers whose confidence lies in [Low, Low+0.1).
type ReliabilityBin struct {
	Low        float64 `json:"low"`
	Tasks      int     `json:"tasks"`
	Confidence float64 `json:"mean_confidence"`
	Accuracy   float64 `json:"accuracy"`
}

// ShareAccuracy is a share of the answers and their accuracy.
type ShareAccuracy struct {
	Share    float64 `json:"share"`
	Accuracy float64 `json:"accuracy"`
}

// EvaluateClassifier measures c on the held-out split of the shipped examples and on every JSONL file
// that glob matches (the adversarial sets: category, shape and text per line). Confidence is the best
// category's, before the general fallback, since that is what the threshold judges. Each task is
// classified once: it counts for its set, its set's shape, and its confidence bin.
func EvaluateClassifier(c *classify.Classifier, glob string) (*ClassifierReport, error) {
	sets, err := labelledSets(glob)
	if err != nil {
		return nil, err
	}
	t := newClassifierTally()
	for name, exs := range sets {
		for _, ex := range exs {
			r := c.Classify(ex.Text)
			t.add(name, ex.Shape, r.Confidence, r.Best == ex.Category)
		}
	}
	return t.report(), nil
}

// labelledSets are the held-out split of the shipped examples and the examples of every JSONL file that
// glob matches, by set name (a file's name without .jsonl).
func labelledSets(glob string) (map[string][]classify.Example, error) {
	_, held, err := classify.Dataset()
	if err != nil {
		return nil, err
	}
	sets := map[string][]classify.Example{"held-out split": held}
	files, err := filepath.Glob(glob)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		exs, err := classify.ReadExamples(fh, f)
		fh.Close()
		if err != nil {
			return nil, err
		}
		sets[strings.TrimSuffix(filepath.Base(f), ".jsonl")] = exs
	}
	return sets, nil
}

// classifierTally counts the classifier's answers by set (and shape), by confidence bin, and on either
// side of the low-confidence threshold, until report turns the counts into shares and accuracies.
type classifierTally struct {
	sets         map[string]*setTally
	bins         []ReliabilityBin
	below, above ShareAccuracy
	total        int
}

// setTally is how many tasks of a set were classified, and how many rightly.
type setTally struct{ right, tasks int }

func newClassifierTally() *classifierTally {
	return &classifierTally{sets: map[string]*setTally{}, bins: make([]ReliabilityBin, 10)}
}

// add counts one answer for its set, its set's shape (when it has one), its confidence bin and its side
// of the threshold.
func (t *classifierTally) add(set, shape string, confidence float64, right bool) {
	t.count(set, right)
	if shape != "" {
		t.count(set+" "+shape, right)
	}
	b := &t.bins[min(int(confidence*10), 9)]
	side := &t.above
	if confidence < 0.6 {
		side = &t.below
	}
	b.Tasks++
	b.Confidence += confidence
	side.Share++
	t.total++
	if right {
		b.Accuracy++
		side.Accuracy++
	}
}

// count counts one answer for a named set.
func (t *classifierTally) count(name string, right bool) {
	s := t.sets[name]
	if s == nil {
		s = &setTally{}
		t.sets[name] = s
	}
	s.tasks++
	if right {
		s.right++
	}
}

// report turns the counts into accuracies, bin means, shares and the expected calibration error; it
// is called once, at the end.
func (t *classifierTally) report() *ClassifierReport {
	rep := &ClassifierReport{Reliability: t.bins}
	for _, name := range slices.Sorted(maps.Keys(t.sets)) {
		s := t.sets[name]
		rep.Sets = append(rep.Sets, ClassifierSet{Name: name, Tasks: s.tasks, Accuracy: float64(s.right) / float64(s.tasks)})
	}
	for i := range rep.Reliability {
		b := &rep.Reliability[i]
		b.Low = float64(i) / 10
		if b.Tasks > 0 {
			b.Confidence /= float64(b.Tasks)
			b.Accuracy /= float64(b.Tasks)
			rep.ECE += math.Abs(b.Accuracy-b.Confidence) * float64(b.Tasks) / float64(t.total)
		}
	}
	for _, s := range []*ShareAccuracy{&t.below, &t.above} {
		if s.Share > 0 {
			s.Accuracy /= s.Share
		}
		s.Share /= float64(max(t.total, 1))
	}
	rep.BelowLow, rep.AboveLow = t.below, t.above
	return rep
}

// WriteTable writes the classifier's accuracies and its reliability diagram as Markdown.
func (c *ClassifierReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\nclassifier: accuracy of the best category\n\n| set | tasks | accuracy |\n|---|---:|---:|\n")
	for _, s := range c.Sets {
		fmt.Fprintf(w, "| %s | %d | %s |\n", s.Name, s.Tasks, pct(s.Accuracy))
	}
	fmt.Fprintf(w, "\nreliability (all sets): expected calibration error %.3f; under confidence 0.6 %s of the answers, %s right; over it %s, %s right\n\n",
		c.ECE, pct(c.BelowLow.Share), pct(c.BelowLow.Accuracy), pct(c.AboveLow.Share), pct(c.AboveLow.Accuracy))
	fmt.Fprintf(w, "| confidence | tasks | mean confidence | accuracy | |\n|---|---:|---:|---:|---|\n")
	for _, b := range c.Reliability {
		if b.Tasks == 0 {
			continue
		}
		fmt.Fprintf(w, "| %.1f–%.1f | %d | %.2f | %.2f | %s |\n", b.Low, b.Low+0.1, b.Tasks, b.Confidence, b.Accuracy, bar(b.Accuracy, b.Confidence))
	}
}

// bar draws accuracy as a bar of 20 cells with the mean confidence marked, so that a bin's distance from
// calibration shows in the table.
func bar(acc, conf float64) string {
	cells := []rune(strings.Repeat("·", 20))
	for i := range int(math.Round(acc * 20)) {
		cells[i] = '█'
	}
	cells[min(int(conf*20), 19)] = '|'
	return "`" + string(cells) + "`"
}

// WriteSVG draws the reliability diagram: accuracy against mean confidence per bin, the diagonal being
// perfect calibration, with the low-confidence threshold marked.
func (c *ClassifierReport) WriteSVG(w io.Writer) error {
	const size, pad = 360.0, 40.0
	x := func(v float64) float64 { return pad + v*size }
	y := func(v float64) float64 { return pad + (1-v)*size }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", size+2*pad, size+2*pad)
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", pad, pad, size, size)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#bbb" stroke-dasharray="4 3"/>`+"\n", x(0), y(0), x(1), y(1))
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#d62728" stroke-dasharray="2 2"/><text x="%.1f" y="%.1f" fill="#d62728">0.6</text>`+"\n", x(0.6), y(0), x(0.6), y(1), x(0.6)+3, y(1)+12)
	var pts []string
	for _, bin := range c.Reliability {
		if bin.Tasks == 0 {
			continue
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#1f77b4" fill-opacity="0.25"/>`+"\n", x(bin.Low)+2, y(bin.Accuracy), size/10-4, bin.Accuracy*size)
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(bin.Confidence), y(bin.Accuracy)))
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#1f77b4"><title>%d tasks: confidence %.2f, accuracy %.2f</title></circle>`+"\n", x(bin.Confidence), y(bin.Accuracy), bin.Tasks, bin.Confidence, bin.Accuracy)
	}
	fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#1f77b4"/>`+"\n", strings.Join(pts, " "))
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">confidence</text><text x="12" y="%.0f" transform="rotate(-90 12 %.0f)" text-anchor="middle">accuracy</text>`+"\n", pad+size/2, size+2*pad-8, pad+size/2, pad+size/2)
	fmt.Fprintf(&b, `<text x="%.0f" y="24">classifier reliability, ECE %.3f</text>`+"\n</svg>\n", pad, c.ECE)
	_, err := io.WriteString(w, b.String())
	return err
}
