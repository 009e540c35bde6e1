package logging

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryEventIsDocumented keeps docs/events.md in step with the code: every event name logged
// anywhere must have a row.
func TestEveryEventIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	pattern := regexp.MustCompile(`zap\.String\("event", "([a-z_]+)"\)`)
	found := map[string]bool{}
	err = filepath.WalkDir("../../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range pattern.FindAllSubmatch(src, -1) {
			found[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 20 {
		t.Fatalf("found only %d event names: the pattern is broken", len(found))
	}
	for name := range found {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("event %q is logged but not documented in docs/events.md", name)
		}
	}
}
