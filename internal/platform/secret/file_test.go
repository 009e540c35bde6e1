package secret

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFileRefusesAFileOthersCanRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(path, []byte("OPENROUTER_API_KEY=sk-or-file\n"), 0o644)
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("a world-readable secrets file: %v", err)
	}
	os.Chmod(path, 0o600)
	keys, err := ReadFile(path)
	if err != nil || keys["OPENROUTER_API_KEY"].Reveal() != "sk-or-file" {
		t.Fatalf("%v %v", keys, err)
	}
}

func TestReadFileNeverQuotesABadLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(path, []byte("# keys\n\nGOOD=1\nsk-live-secret-without-a-name\n"), 0o600)
	_, err := ReadFile(path)
	if err == nil || strings.Contains(err.Error(), "sk-live") || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("err %v", err)
	}
}

func TestLookupPrefersTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(path, []byte("A='from-file'\n"), 0o600)
	env := map[string]string{"A": "from-env", "B": "env-only"}
	s := Source{File: path, Getenv: func(k string) string { return env[k] }}
	for name, want := range map[string]string{"A": "from-file", "B": "env-only"} {
		if k, _, err := s.Lookup(name); err != nil || k.Reveal() != want {
			t.Fatalf("%s: %q %v", name, k.Reveal(), err)
		}
	}
	if _, _, err := s.Lookup("C"); err == nil || !strings.Contains(err.Error(), "C is not set") {
		t.Fatalf("a missing key: %v", err)
	}
}
