package classify

import (
	"slices"
	"strings"
	"testing"
)

func classifier(t testing.TB) *Classifier {
	t.Helper()
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDatasetShape(t *testing.T) {
	train, held, err := Dataset()
	if err != nil {
		t.Fatal(err)
	}
	perTrain, perHeld := map[Category]int{}, map[Category]int{}
	seen := map[string]bool{}
	for _, ex := range train {
		perTrain[ex.Category]++
		seen[ex.Text] = true
	}
	for _, ex := range held {
		perHeld[ex.Category]++
		if seen[ex.Text] {
			t.Errorf("held-out example also in training: %.60q", ex.Text)
		}
	}
	for _, c := range Categories {
		if perTrain[c] < 40 {
			t.Errorf("%s: %d training examples, want at least 40", c, perTrain[c])
		}
		if perHeld[c] != HeldOutPerCategory {
			t.Errorf("%s: %d held-out examples, want %d", c, perHeld[c], HeldOutPerCategory)
		}
	}
}

// minHeldOutAccuracy guards against regressions; the measured figure is logged by the test.
const minHeldOutAccuracy = 0.74

func TestHeldOutAccuracy(t *testing.T) {
	_, held, err := Dataset()
	if err != nil {
		t.Fatal(err)
	}
	c := classifier(t)
	right, best := 0, 0
	wrong := map[Category]int{}
	for _, ex := range held {
		r := c.Classify(ex.Text)
		if r.Category == ex.Category {
			right++
		} else {
			wrong[ex.Category]++
		}
		if r.Best == ex.Category {
			best++
		}
	}
	acc := float64(right) / float64(len(held))
	t.Logf("held-out accuracy %.1f%% (%d/%d); best guess before the general fallback %.1f%%; temperature %.1f; misses by category %v",
		100*acc, right, len(held), 100*float64(best)/float64(len(held)), c.Temperature(), wrong)
	if acc < minHeldOutAccuracy {
		t.Fatalf("held-out accuracy %.3f below %.2f", acc, minHeldOutAccuracy)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		desc         string
		task         string
		want         Category
		wantSignals  []string
		wantPriority Priority
	}{
		{
			desc:         "security keywords",
			task:         "Check this PHP login form for SQL injection and XSS vulnerabilities before we ship it.",
			want:         SecurityAudit,
			wantSignals:  []string{"injection", "xss", "vulnerability"},
			wantPriority: Critical,
		},
		{
			desc:         "a stack trace to fix",
			task:         "Fix this exception: Traceback (most recent call last): File \"app.py\", line 12, in <module> KeyError: 'user_id'",
			want:         Debugging,
			wantSignals:  []string{"fix", "exception", "traceback"},
			wantPriority: High,
		},
		{
			desc:         "summarise a thread",
			task:         "TLDR please: give me a brief overview of this email thread about the Q3 budget.",
			want:         Summarization,
			wantSignals:  []string{"tldr", "brief", "overview"},
			wantPriority: Low,
		},
		{
			desc:         "a plan without keywords of other categories",
			task:         "Lay out a roadmap with milestones for moving our billing system to the new payment provider over two quarters.",
			want:         Planning,
			wantSignals:  []string{"roadmap", "milestone"},
			wantPriority: Medium,
		},
	}
	c := classifier(t)
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			r := c.Classify(tt.task)
			if r.Category != tt.want || r.Priority != tt.wantPriority {
				t.Fatalf("got %s (%s, confidence %.2f, alternatives %v), want %s (%s)", r.Category, r.Priority, r.Confidence, r.Alternatives, tt.want, tt.wantPriority)
			}
			var got []string
			for _, s := range r.Signals {
				got = append(got, s.Keyword)
			}
			for _, w := range tt.wantSignals {
				if !slices.Contains(got, w) {
					t.Errorf("signal %q missing from %v", w, got)
				}
			}
		})
	}
}

func TestUnsureAnswersGeneral(t *testing.T) {
	c := classifier(t)
	for _, task := range []string{"", "zxqv blorptang fimble", "hmm"} {
		r := c.Classify(task)
		if r.Confidence < 0 || r.Confidence > 1 {
			t.Fatalf("%q: confidence %v outside [0,1]", task, r.Confidence)
		}
		if !r.LowConfidence && r.Best != General { // a near-empty task is most often small talk
			t.Errorf("%q: %s at confidence %.2f not flagged low", task, r.Best, r.Confidence)
		}
		if r.Category != General {
			t.Errorf("%q: answered %s (%.2f), want general", task, r.Category, r.Confidence)
		}
	}
	strict, err := New(Options{MinConfidence: 0.999})
	if err != nil {
		t.Fatal(err)
	}
	r := strict.Classify("Review my pull request: the diff renames two functions.")
	if r.Category != General || !r.Fallback || r.Best == General {
		t.Fatalf("strict classifier answered %s (best %s, fallback %v)", r.Category, r.Best, r.Fallback)
	}
}

func TestPriorities(t *testing.T) {
	want := map[Category]Priority{
		SecurityAudit: Critical, CodeReview: High, Architecture: High, Debugging: High, Troubleshooting: High,
		Documentation: Low, Classification: Low, Summarization: Low, Implementation: Medium, Refactoring: Medium,
		Testing: Medium, Research: Medium, Planning: Medium, Evaluation: Medium, General: Medium,
		Translation: Medium, DataAnalysis: Medium, Brainstorming: Medium, Explanation: Medium, Comparison: Medium,
		Configuration: Medium, Migration: Medium,
	}
	if len(want) != len(Categories) {
		t.Fatalf("priorities cover %d of %d categories", len(want), len(Categories))
	}
	for c, p := range want {
		if PriorityOf(c) != p {
			t.Errorf("%s: %s, want %s", c, PriorityOf(c), p)
		}
	}
}

func TestMetadata(t *testing.T) {
	longTask := "Design a distributed, fault tolerant job scheduler for production. " + strings.Repeat("It must handle tenants fairly. ", 40)
	tests := []struct {
		desc       string
		task       string
		language   string
		complexity Complexity
		tokens     int
	}{
		{"code fence", "Why does this panic?\n```go\nvar m map[string]int\nm[\"a\"] = 1\n```", "go", ComplexityMedium, 16},
		{"file name", "Add type hints to utils/date_parse.py", "python", ComplexityLow, 10},
		{"syntax hints", "def load(path):\n    import json\n    return json.load(open(path))", "python", ComplexityMedium, 16},
		{"rust syntax", "fn main() { let mut v = Vec::new(); v.push(1); println!(\"{:?}\", v.unwrap()); }", "rust", ComplexityMedium, 20},
		{"prose only", "What is the capital of Australia?", "", ComplexityLow, 9},
		{"prose mentioning one keyword is not code", "Should I import furniture from Denmark?", "", ComplexityLow, 10},
		{"long and heavy", longTask, "", ComplexityHigh, (len(longTask) + 3) / 4},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			md := ExtractMetadata(tt.task)
			if md.Language != tt.language || md.Complexity != tt.complexity || md.ContextLength != tt.tokens {
				t.Fatalf("got %+v, want language %q complexity %s tokens %d", md, tt.language, tt.complexity, tt.tokens)
			}
		})
	}
}

func TestLexiconIsValid(t *testing.T) {
	if _, err := newLexicon(); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkClassify(b *testing.B) {
	c := classifier(b)
	task := "Review this Go handler before I merge it: it reads the user id from the query string, loads the profile and writes JSON. Point out error handling and naming problems.\n```go\nfunc (s *Server) GetUser(w http.ResponseWriter, r *http.Request) {\n\tid := r.URL.Query().Get(\"id\")\n\tu, _ := s.db.User(id)\n\tjson.NewEncoder(w).Encode(u)\n}\n```"
	b.ReportAllocs()
	for b.Loop() {
		c.Classify(task)
	}
}

func TestGridMinimum(t *testing.T) {
	grid := temperatureGrid
	for _, tc := range []struct {
		desc string
		f    func(float64) float64
		want float64
	}{
		{"the least at the first point", func(t float64) float64 { return t }, 0.2},
		{"the least at the last point", func(t float64) float64 { return -t }, 5},
		{"the least inside", func(t float64) float64 { return (t - 1.75) * (t - 1.75) }, 1.75},
		{"the least between two points goes to the nearer", func(t float64) float64 { return (t - 1.33) * (t - 1.33) }, 1.35},
		{"a flat function gives the smallest point", func(float64) float64 { return 1 }, 0.2},
		{"a loss falling steeply then flat", func(t float64) float64 { return 1/t + max(t-4, 0) }, 4},
	} {
		if got := gridMinimum(grid, tc.f); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.desc, got, tc.want)
		}
	}
}

// BenchmarkLoadModel decodes the shipped weights, as the first New of a process does.
func BenchmarkLoadModel(b *testing.B) {
	for b.Loop() {
		var m Model
		if err := m.UnmarshalBinary(shippedWeights); err != nil {
			b.Fatal(err)
		}
	}
}
