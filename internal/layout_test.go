// The doors' layout: what the HTTP API and the remote listener may depend on.
package internal_test

import (
	"go/build"
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
		}
	}
}
