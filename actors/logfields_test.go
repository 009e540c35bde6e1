package actors

import (
	"fmt"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/bandit"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestPerCallLinesStopAtTheRequestsBudget(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	c := &CoordinatorActor{log: zap.New(core)}
	for i := range JobLogBudget + 10 {
		c.jobLog("reply received", zap.Int("job", i))
	}
	if n := logs.Len(); n != JobLogBudget {
		t.Fatalf("%d lines logged, want %d", n, JobLogBudget)
	}
	if c.jobLines-JobLogBudget != 10 {
		t.Fatalf("%d lines counted past the budget, want 10", c.jobLines-JobLogBudget)
	}
}

func TestCandidateListsAreCutInALine(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		skipped int
		want    int // entries in the line
		more    int
	}{
		{"a short list is whole", 3, 3, 0},
		{"a list of exactly the bound is whole", logListMax, logListMax, 0},
		{"a long list ends with the count of the rest", logListMax + 25, logListMax + 1, 25},
	} {
		core, logs := observer.New(zap.InfoLevel)
		var skips []bandit.Skip
		for i := range tc.skipped {
			skips = append(skips, bandit.Skip{Model: fmt.Sprintf("m%d", i)})
		}
		zap.New(core).Info("models selected", zap.Array("skipped", skipsField(skips)))
		got, _ := logs.All()[0].ContextMap()["skipped"].([]any)
		if len(got) != tc.want {
			t.Errorf("%s: %d entries, want %d", tc.desc, len(got), tc.want)
			continue
		}
		if tc.more > 0 {
			last, _ := got[len(got)-1].(map[string]any)
			if fmt.Sprint(last["more"]) != fmt.Sprint(tc.more) {
				t.Errorf("%s: last entry %v, want more %d", tc.desc, last, tc.more)
			}
		}
	}
}
