package httpapi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/classify"
)

// classificationFloors guard against regressions of the answer's category through the real API, per
// adversarial set and shape; the measured figures are logged. The sets were written apart from the
// training data, before any tuning (internal/core/classify/testdata).
var classificationFloors = map[string]float64{
	"adversarial clear": 0.88, "adversarial misleading": 0.80,
	"adversarial-2 clear": 0.88, "adversarial-2 misleading": 0.72,
}

// TestClassificationThroughTheAPI routes every task of the adversarial sets and reads the category the
// answer names: the classifier as a caller meets it, general fallback included.
func TestClassificationThroughTheAPI(t *testing.T) {
	files, err := filepath.Glob("../internal/core/classify/testdata/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no adversarial sets: %v", err)
	}
	tb := newTestbed(t, nil)
	type tally struct{ right, seen int }
	got := map[string]*tally{}
	for _, f := range files {
		set := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		exs, err := classify.ReadExamples(fh, f)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, ex := range exs {
			status, resp, bad := tb.route(map[string]any{"task": ex.Text, "workers": 1, "min_responses": 1})
			if status != 200 {
				t.Fatalf("%s: %d %+v", set, status, bad)
			}
			name := set + " " + ex.Shape
			if got[name] == nil {
				got[name] = &tally{}
			}
			got[name].seen++
			if resp.Category == string(ex.Category) {
				got[name].right++
			}
		}
	}
	for name, floor := range classificationFloors {
		g := got[name]
		if g == nil || g.seen == 0 {
			t.Errorf("%s: no tasks", name)
			continue
		}
		acc := float64(g.right) / float64(g.seen)
		t.Logf("%s: %.1f%% (%d/%d)", name, 100*acc, g.right, g.seen)
		if acc < floor {
			t.Errorf("%s: %.3f below %.2f", name, acc, floor)
		}
	}
}
