package classify

import (
	"os"
	"testing"
)

// The adversarial set was written apart from the training data, from real-world task shapes: clear
// tasks (often without their category's signal words) and misleading ones (whose keywords point
// elsewhere). These floors guard against regressions; the measured figures are logged.
const minAdversarialClear, minAdversarialMisleading = 0.88, 0.80

func TestAdversarialHeldOut(t *testing.T) {
	f, err := os.Open("testdata/adversarial.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exs, err := ReadExamples(f, f.Name())
	if err != nil {
		t.Fatal(err)
	}
	c := classifier(t)
	type tally struct{ right, seen int }
	shapes := map[string]*tally{"clear": {}, "misleading": {}}
	missed := map[string]map[Category]int{"clear": {}, "misleading": {}}
	for line, ex := range exs {
		s, ok := shapes[ex.Shape]
		if !ok {
			t.Fatalf("line %d: shape %q", line+1, ex.Shape)
		}
		s.seen++
		if got := c.Classify(ex.Text).Category; got == ex.Category {
			s.right++
		} else {
			missed[ex.Shape][ex.Category]++
		}
	}
	for shape, floor := range map[string]float64{"clear": minAdversarialClear, "misleading": minAdversarialMisleading} {
		s := shapes[shape]
		acc := float64(s.right) / float64(max(s.seen, 1))
		t.Logf("%s: %.1f%% (%d/%d); misses by category %v", shape, 100*acc, s.right, s.seen, missed[shape])
		if s.seen == 0 || acc < floor {
			t.Errorf("%s tasks: accuracy %.3f below %.2f", shape, acc, floor)
		}
	}
}
