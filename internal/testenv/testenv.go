// Package testenv owns what a test does when something it needs from outside the repository is missing
// (PostgreSQL, Redis, sshd, Chromium, the shared specifications and data): on a user's machine it
// skips with the reason, but where services are required (CI=true or CONCLAVE_REQUIRE_SERVICES=1) it
// fails, so a suite can never pass by skipping what it was meant to test.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Required reports whether missing services fail tests instead of skipping them.
func Required() bool {
	for _, name := range []string{"CI", "CONCLAVE_REQUIRE_SERVICES"} {
		if on, err := strconv.ParseBool(os.Getenv(name)); err == nil && on {
			return true
		}
	}
	return false
}

// Missing ends the test because something it needs is not there: a skip, or a failure where services
// are required.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("%s (required: CI or CONCLAVE_REQUIRE_SERVICES is set)", msg)
	}
	t.Skip(msg)
}

// SharedDir returns a folder of the shared specifications and data, which sit beside the repository
// (../shared) unless CONCLAVE_SHARED_DIR names them; a test without it is Missing.
func SharedDir(t testing.TB, elem ...string) string {
	t.Helper()
	root := os.Getenv("CONCLAVE_SHARED_DIR")
	if root == "" {
		root = filepath.Join(ModuleRoot(), "..", "shared")
	}
	dir := filepath.Join(append([]string{root}, elem...)...)
	if _, err := os.Stat(dir); err != nil {
		Missing(t, "shared data not found at %s (set CONCLAVE_SHARED_DIR): %v", dir, err)
	}
	return dir
}

// ModuleRoot is the nearest folder above the working directory (a test's package) holding go.mod: where
// a test finds the repository's own files (docs, configuration examples).
func ModuleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}
