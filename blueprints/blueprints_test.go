package blueprints

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/problems"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestEmbeddedMatchesSpecification(t *testing.T) {
	want := []Blueprint{
		{Name: "code_review", Workers: 6, TimeoutSeconds: 90, Strategy: Rotating, MinResponses: 3},
		{Name: "security_audit", Workers: 6, TimeoutSeconds: 120, Strategy: Weighted, MinResponses: 4},
		{Name: "architecture", Workers: 6, TimeoutSeconds: 120, Strategy: Rotating, MinResponses: 4},
		{Name: "implementation", Workers: 4, TimeoutSeconds: 180, Strategy: Rotating, MinResponses: 2},
		{Name: "refactoring", Workers: 4, TimeoutSeconds: 90, Strategy: Rotating, MinResponses: 2},
		{Name: "debugging", Workers: 6, TimeoutSeconds: 90, Strategy: Weighted, MinResponses: 3},
		{Name: "testing", Workers: 4, TimeoutSeconds: 90, Strategy: Rotating, MinResponses: 2},
		{Name: "documentation", Workers: 3, TimeoutSeconds: 60, Strategy: Majority, MinResponses: 2},
		{Name: "research", Workers: 6, TimeoutSeconds: 300, Strategy: Rotating, MinResponses: 3},
		{Name: "classification", Workers: 4, TimeoutSeconds: 30, Strategy: Majority, MinResponses: 3},
		{Name: "summarization", Workers: 3, TimeoutSeconds: 60, Strategy: Majority, MinResponses: 2},
		{Name: "translation", Workers: 3, TimeoutSeconds: 60, Strategy: Majority, MinResponses: 2},
		{Name: "data_analysis", Workers: 4, TimeoutSeconds: 120, Strategy: Weighted, MinResponses: 2},
		{Name: "planning", Workers: 6, TimeoutSeconds: 120, Strategy: Rotating, MinResponses: 3},
		{Name: "evaluation", Workers: 6, TimeoutSeconds: 90, Strategy: Pairwise, MinResponses: 4},
		{Name: "brainstorming", Workers: 6, TimeoutSeconds: 60, Strategy: Rotating, MinResponses: 3},
		{Name: "explanation", Workers: 3, TimeoutSeconds: 60, Strategy: Majority, MinResponses: 2},
		{Name: "comparison", Workers: 4, TimeoutSeconds: 90, Strategy: Pairwise, MinResponses: 3},
		{Name: "troubleshooting", Workers: 6, TimeoutSeconds: 90, Strategy: Weighted, MinResponses: 3},
		{Name: "configuration", Workers: 3, TimeoutSeconds: 60, Strategy: Majority, MinResponses: 2},
		{Name: "migration", Workers: 4, TimeoutSeconds: 120, Strategy: Rotating, MinResponses: 3},
		{Name: "general", Workers: 4, TimeoutSeconds: 90, Strategy: Rotating, MinResponses: 2},
	}
	set, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	if got := len(set.Names()); got != len(want) {
		t.Fatalf("embedded set has %d blueprints, want %d", got, len(want))
	}
	for _, w := range want {
		got, err := set.Get(w.Name)
		if err != nil {
			t.Errorf("%s: %v", w.Name, err)
			continue
		}
		if got.Description == "" {
			t.Errorf("%s: no description", w.Name)
		}
		got.Description = ""
		if got != w {
			t.Errorf("%s: got %+v, want %+v", w.Name, got, w)
		}
	}
	if set.Source() != "embedded" {
		t.Errorf("source %q", set.Source())
	}
}

func ptr[T any](v T) *T { return &v }

func TestApplyOverrides(t *testing.T) {
	base := Blueprint{Name: "code_review", Workers: 6, TimeoutSeconds: 90, Strategy: Rotating, MinResponses: 3}
	tests := []struct {
		desc       string
		overrides  Overrides
		want       Blueprint
		wantFields []string // fields named by validation errors, in order
	}{
		{desc: "no overrides keeps the blueprint", want: base},
		{
			desc:      "every field can be overridden",
			overrides: Overrides{Workers: ptr(3), Strategy: ptr(Majority), MinResponses: ptr(1), QuorumGraceSeconds: ptr(0.5)},
			want:      Blueprint{Name: "code_review", Workers: 3, TimeoutSeconds: 90, Strategy: Majority, MinResponses: 1, QuorumGraceSeconds: 0.5},
		},
		{desc: "workers below one", overrides: Overrides{Workers: ptr(0)}, wantFields: []string{"workers"}},
		{desc: "min_responses above workers", overrides: Overrides{Workers: ptr(2)}, wantFields: []string{"min_responses"}},
		{desc: "min_responses of zero", overrides: Overrides{MinResponses: ptr(0)}, wantFields: []string{"min_responses"}},
		{desc: "unknown strategy", overrides: Overrides{Strategy: ptr(Strategy("vibes"))}, wantFields: []string{"strategy"}},
		{desc: "more workers than a blueprint may have", overrides: Overrides{Workers: ptr(100000)}, wantFields: []string{"workers"}},
		{desc: "negative quorum grace", overrides: Overrides{QuorumGraceSeconds: ptr(-2.0)}, wantFields: []string{"quorum_grace_seconds"}},
		{desc: "an unknown quorum", overrides: Overrides{Quorum: ptr("sometimes")}, wantFields: []string{"quorum"}},
		{
			desc:       "every problem is reported at once",
			overrides:  Overrides{Workers: ptr(0), Strategy: ptr(Strategy("")), MinResponses: ptr(0)},
			wantFields: []string{"workers", "min_responses", "strategy"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got, err := base.Apply(tt.overrides)
			if len(tt.wantFields) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if got != tt.want {
					t.Fatalf("got %+v, want %+v", got, tt.want)
				}
				return
			}
			var verrs problems.Errors
			if !errors.As(err, &verrs) {
				t.Fatalf("want validation errors, got %v", err)
			}
			var fields []string
			for _, p := range verrs {
				fields = append(fields, p.Field)
			}
			if len(fields) != len(tt.wantFields) {
				t.Fatalf("fields %v, want %v (%v)", fields, tt.wantFields, err)
			}
			for i := range fields {
				if fields[i] != tt.wantFields[i] {
					t.Fatalf("fields %v, want %v", fields, tt.wantFields)
				}
			}
		})
	}
}

func TestValidateBoundsEveryField(t *testing.T) {
	ok := Blueprint{Name: "x", Workers: 2, TimeoutSeconds: 5, Strategy: Majority, MinResponses: 1}
	tests := []struct {
		desc   string
		change func(*Blueprint)
		field  string
	}{
		{"zero timeout", func(b *Blueprint) { b.TimeoutSeconds = 0 }, "timeout_seconds"},
		{"negative timeout", func(b *Blueprint) { b.TimeoutSeconds = -1 }, "timeout_seconds"},
		{"a timeout too small to mean anything", func(b *Blueprint) { b.TimeoutSeconds = 1e-300 }, "timeout_seconds"},
		{"absurd timeout", func(b *Blueprint) { b.TimeoutSeconds = 1e9 }, "timeout_seconds"},
		{"NaN timeout", func(b *Blueprint) { b.TimeoutSeconds = math.NaN() }, "timeout_seconds"},
		{"a fan-out to the whole catalog", func(b *Blueprint) { b.Workers = 100000 }, "workers"},
		{"an absurd quorum grace", func(b *Blueprint) { b.QuorumGraceSeconds = 1e9 }, "quorum_grace_seconds"},
		{"an unknown quorum", func(b *Blueprint) { b.Quorum = "sometimes" }, "quorum"},
		{"a certain tau", func(b *Blueprint) { b.QuorumTau = 1 }, "quorum_tau"},
		{"an audit share above one", func(b *Blueprint) { b.QuorumAudit = 1.5 }, "quorum_audit"},
		{"a NaN tau", func(b *Blueprint) { b.QuorumTau = math.NaN() }, "quorum_tau"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			b := ok
			tt.change(&b)
			verrs := problems.Of(b.Validate())
			if len(verrs) != 1 || verrs[0].Field != tt.field {
				t.Fatalf("problems %v, want one with %s", verrs, tt.field)
			}
		})
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestOverridesChanged(t *testing.T) {
	got := Overrides{Workers: ptr(2), Strategy: ptr(Majority)}.Changed()
	if len(got) != 2 || got[0] != "workers" || got[1] != "strategy" {
		t.Fatalf("changed = %v", got)
	}
}

func TestUnknownBlueprint(t *testing.T) {
	set, _ := Embedded()
	if _, err := set.Get("astrology"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("want ErrUnknown, got %v", err)
	}
}

func writeFile(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadDirOverridesAndExtends(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "code_review.json", `{"name":"code_review","description":"faster reviews","workers":3,"timeout_seconds":30,"strategy":"majority","min_responses":2}`)
	writeFile(t, dir, "poetry.json", `{"name":"poetry","description":"verse","workers":2,"timeout_seconds":10,"strategy":"pairwise","min_responses":1,"quorum_grace_seconds":1}`)
	set, err := Load(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if set.Source() != dir {
		t.Errorf("source %q, want %q", set.Source(), dir)
	}
	cr, _ := set.Get("code_review")
	if cr.Workers != 3 || cr.Strategy != Majority {
		t.Errorf("override not applied: %+v", cr)
	}
	if _, err := set.Get("poetry"); err != nil {
		t.Errorf("extension missing: %v", err)
	}
	if _, err := set.Get("security_audit"); err != nil {
		t.Errorf("embedded blueprint lost: %v", err)
	}
	if len(set.Names()) != 23 {
		t.Errorf("got %d names, want 23", len(set.Names()))
	}
}

func TestLoadFallsBackWhenDirectoryUnavailable(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	set, err := Load(filepath.Join(t.TempDir(), "missing"), zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	if set.Source() != "embedded" {
		t.Fatalf("source %q, want embedded", set.Source())
	}
	if n := logs.FilterField(zap.String("event", "blueprint_fallback")).Len(); n != 1 {
		t.Fatalf("want one blueprint_fallback event, got %d", n)
	}
}

func TestLoadKeepsTheValidFilesBesideABadOne(t *testing.T) {
	tests := []struct {
		desc, file, body, says string
	}{
		{"min_responses above workers", "x.json", `{"name":"x","workers":1,"timeout_seconds":5,"strategy":"majority","min_responses":2}`, "min_responses"},
		{"unknown field", "x.json", `{"name":"x","workers":1,"timeout_seconds":5,"strategy":"majority","min_responses":1,"wrokers":3}`, "wrokers"},
		{"name differs from file", "y.json", `{"name":"x","workers":1,"timeout_seconds":5,"strategy":"majority","min_responses":1}`, "file name"},
		{"not JSON", "x.json", `workers: 3`, "decode"},
		{"trailing data", "x.json", `{"name":"x","workers":1,"timeout_seconds":5,"strategy":"majority","min_responses":1} {}`, "trailing"},
		{"a fan-out to the whole catalog", "x.json", `{"name":"x","workers":100000,"timeout_seconds":5,"strategy":"majority","min_responses":1}`, "workers"},
		{"a timeout too small to mean anything", "x.json", `{"name":"x","workers":1,"timeout_seconds":1e-300,"strategy":"majority","min_responses":1}`, "timeout_seconds"},
		{"a huge file", "x.json", `{"name":"x","description":"` + strings.Repeat("d", 100<<10) + `","workers":1,"timeout_seconds":5,"strategy":"majority","min_responses":1}`, "bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, tt.file, tt.body)
			writeFile(t, dir, "poetry.json", `{"name":"poetry","workers":2,"timeout_seconds":10,"strategy":"pairwise","min_responses":1}`)
			core, logs := observer.New(zap.ErrorLevel)
			set, err := Load(dir, zap.New(core))
			if err != nil {
				t.Fatal(err)
			}
			if !set.Has("poetry") || set.Has("x") || len(set.Names()) != 23 {
				t.Fatalf("blueprints %v: want the valid file kept beside the bad one", set.Names())
			}
			rej := set.Rejected()
			if len(rej) != 1 || rej[0].File != filepath.Join(dir, tt.file) || !strings.Contains(rej[0].Error, tt.says) {
				t.Fatalf("rejected %+v: want %s rejected for %q", rej, tt.file, tt.says)
			}
			if logs.FilterField(zap.String("event", "blueprint_rejected")).Len() != 1 {
				t.Fatal("the rejection was not logged")
			}
		})
	}
}

func TestWithAddsBlueprints(t *testing.T) {
	set, _ := Embedded()
	more, err := set.With(Blueprint{Name: "gsm", Workers: 3, TimeoutSeconds: 30, Strategy: Majority, MinResponses: 2})
	if err != nil || !more.Has("gsm") || set.Has("gsm") || len(more.Names()) != 23 {
		t.Fatalf("with: %v", err)
	}
	if _, err := set.With(Blueprint{Name: "bad", Workers: 1, TimeoutSeconds: 1, Strategy: Majority, MinResponses: 2}); err == nil {
		t.Fatal("an invalid extra blueprint was accepted")
	}
}
