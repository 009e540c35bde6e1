package core

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/conclave-ai/conclave/"

// allowed are the project's packages a decision may import besides the other decisions: the
// blueprints' and the protocol's value types, the injected clock and a hash.
var allowed = []string{module + "blueprints", module + "messages", module + "internal/platform/clock", module + "internal/platform/fnv1a"}

// io are the standard and third-party packages that reach outside the process.
var io = []string{"net", "os", "os/exec", "os/signal", "syscall", "database/sql", "log",
	"github.com/redis/", "github.com/jackc/", "golang.org/x/crypto/ssh", "github.com/asynkron/", "go.uber.org/zap", "google.golang.org/grpc"}

// exceptions are the few standard packages a decision uses for their values only.
var exceptions = map[string][]string{
	"resilience": {"net/http"},            // status codes and Retry-After dates
	"intake":     {"net/http", "net/url"}, // an image's bytes sniffed, its URL parsed: neither fetched
	"consensus":  {"net/url"},             // a schema's $ref pointers escaped: nothing fetched
}

// TestDecisionsDoNoIO reads every decision package's imports (tests left out) and refuses the
// adapters, the engine, the shell and anything that does I/O.
func TestDecisionsDoNoIO(t *testing.T) {
	dirs, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		err := filepath.WalkDir(d.Name(), func(path string, e os.DirEntry, err error) error {
			if err != nil || !e.IsDir() || e.Name() == "testdata" || e.Name() == "data" {
				return err
			}
			pkg, err := build.ImportDir(path, 0)
			if err != nil {
				if _, ok := err.(*build.NoGoError); ok {
					return nil
				}
				return err
			}
			checked++
			for _, imp := range pkg.Imports {
				if why := refused(d.Name(), imp); why != "" {
					t.Errorf("internal/core/%s imports %s: %s", path, imp, why)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 10 {
		t.Fatalf("read only %d packages: the walk is broken", checked)
	}
}

func refused(pkg, imp string) string {
	if strings.HasPrefix(imp, module) {
		if strings.HasPrefix(imp, module+"internal/core/") || slices.Contains(allowed, imp) {
			return ""
		}
		return "a decision depends on no adapter, platform service, actor or door"
	}
	if slices.Contains(exceptions[pkg], imp) {
		return ""
	}
	for _, p := range io {
		if imp == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(imp, p)) || strings.HasPrefix(imp, p+"/") {
			return "it reaches outside the process"
		}
	}
	return ""
}
