package eval

import (
	"bytes"
	"encoding/xml"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/classify"
)

func TestClassifierReport(t *testing.T) {
	dir := t.TempDir()
	set := `{"category":"translation","shape":"clear","text":"Translate into German: the invoice is overdue."}
{"category":"debugging","shape":"misleading","text":"Translate this error for me: why does my loop never end? for i := 0; i < 10; i-- {}"}
`
	if err := os.WriteFile(filepath.Join(dir, "mini.jsonl"), []byte(set), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := classify.New(classify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := EvaluateClassifier(c, filepath.Join(dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int{}
	for _, s := range rep.Sets {
		sizes[s.Name] = s.Tasks
		if s.Accuracy < 0 || s.Accuracy > 1 {
			t.Errorf("%s: accuracy %v", s.Name, s.Accuracy)
		}
	}
	_, held, _ := classify.Dataset()
	if sizes["held-out split"] != len(held) || sizes["mini"] != 2 || sizes["mini clear"] != 1 || sizes["mini misleading"] != 1 {
		t.Fatalf("sets %v", sizes)
	}
	binned := 0
	for _, b := range rep.Reliability {
		binned += b.Tasks
		if b.Tasks > 0 && (b.Confidence < b.Low || b.Confidence > b.Low+0.1+1e-9) {
			t.Errorf("bin %.1f: mean confidence %.3f outside it", b.Low, b.Confidence)
		}
	}
	if binned != len(held)+2 { // the shapes repeat their set's tasks and are not binned again
		t.Errorf("%d tasks binned, want %d", binned, len(held)+2)
	}
	if rep.ECE < 0 || rep.ECE > 1 || math.Abs(rep.BelowLow.Share+rep.AboveLow.Share-1) > 1e-9 {
		t.Errorf("ECE %v, shares %v + %v", rep.ECE, rep.BelowLow.Share, rep.AboveLow.Share)
	}
	var md, svg bytes.Buffer
	rep.WriteTable(&md)
	if !strings.Contains(md.String(), "| mini misleading | 1 |") || !strings.Contains(md.String(), "expected calibration error") {
		t.Errorf("table:\n%s", md.String())
	}
	if err := rep.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&svg)
	for {
		if _, err := d.Token(); err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("the SVG is not well-formed: %v", err)
			}
			break
		}
	}
}
