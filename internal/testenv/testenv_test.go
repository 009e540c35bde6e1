package testenv

import "testing"

func TestRequired(t *testing.T) {
	for _, tc := range []struct {
		desc, ci, require string
		want              bool
	}{
		{"a user's machine", "", "", false},
		{"CI says true", "true", "", true},
		{"CI says 1", "1", "", true},
		{"CI says false", "false", "", false},
		{"the project's own variable", "", "1", true},
		{"not a boolean", "yes", "", false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv("CONCLAVE_REQUIRE_SERVICES", tc.require)
			if got := Required(); got != tc.want {
				t.Fatalf("Required() = %v, want %v", got, tc.want)
			}
		})
	}
}

// fakeT records how a test ended instead of ending it.
type fakeT struct {
	testing.TB
	skipped, failed bool
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Skip(...any)           { f.skipped = true }
func (f *fakeT) Fatalf(string, ...any) { f.failed = true }

func TestMissingSkipsOrFails(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv("CONCLAVE_REQUIRE_SERVICES", "")
	f := &fakeT{}
	Missing(f, "no %s", "redis")
	if !f.skipped || f.failed {
		t.Fatalf("on a user's machine: skipped %v failed %v", f.skipped, f.failed)
	}
	t.Setenv("CONCLAVE_REQUIRE_SERVICES", "1")
	f = &fakeT{}
	Missing(f, "no %s", "redis")
	if !f.failed {
		t.Fatal("with services required, a missing one did not fail")
	}
	f = &fakeT{}
	SharedDir(f, "no-such-folder-anywhere")
	if !f.failed {
		t.Fatal("with services required, a missing shared folder did not fail")
	}
}
