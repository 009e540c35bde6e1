// The layout: what the HTTP API, the remote listener and the configuration may depend on.
package internal_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/conclave-ai/conclave/"

// TestDoorsDependOnInterfaces reads the imports of the doors (tests left out): the HTTP API and the
// remote listener reach the pipeline through the small interfaces they declare (httpapi.Engine,
// remotedoor.Router), and judge a request with the one validation in internal/core/intake; neither
// depends on the actors, the supervisors or the engine that assembles them.
func TestDoorsDependOnInterfaces(t *testing.T) {
	refused := []string{module + "actors", module + "supervisors", module + "internal/engine"}
	for _, dir := range []string{"../http", "adapters/remotedoor"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(pkg.Imports, module+"internal/core/intake") {
			t.Errorf("%s does not judge requests with internal/core/intake", dir)
		}
		for _, imp := range pkg.Imports {
			for _, r := range refused {
				if imp == r || strings.HasPrefix(imp, r+"/") {
					t.Errorf("%s imports %s: a door depends on interfaces, not on the actor system", dir, imp)
				}
			}
			if dir == "../http" && strings.HasPrefix(imp, "github.com/asynkron/") {
				t.Errorf("%s imports %s: the HTTP API holds no actor types", dir, imp)
			}
			if dir == "../http" && strings.HasPrefix(imp, module+"internal/adapters/") {
				t.Errorf("%s imports %s: the doors speak the core's types, not an adapter's", dir, imp)
			}
		}
	}
}

// TestConfigurationKnowsNoAdapter reads the configuration's imports (tests left out): the sections it
// shares with adapters are the core's values, so no adapter's change reaches the configuration.
func TestConfigurationKnowsNoAdapter(t *testing.T) {
	pkg, err := build.ImportDir("platform/config", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, module+"internal/adapters/") {
			t.Errorf("internal/platform/config imports %s", imp)
		}
	}
}

// TestActorsHoldNoLock reads the actors' files (tests left out): an actor's state is read and written
// only by its own Receive, so the package holds no mutex; state shared without a message is a
// concurrent object of its own package (internal/gate, internal/slots, ...).
func TestActorsHoldNoLock(t *testing.T) {
	files, err := filepath.Glob("../actors/*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "sync" && (sel.Sel.Name == "Mutex" || sel.Sel.Name == "RWMutex") {
					t.Errorf("%s: sync.%s in an actor's package", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}
