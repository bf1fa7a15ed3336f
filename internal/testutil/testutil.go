// Package testutil holds what the tests of several sbx packages share: skipping without root
// (RequireRoot), a state root for sandboxes (StateRoot, RemoveStateRoot), and the TestMain of test binaries that are also
// the processes their tests start (Main: libcontainer's init, sbx's supervisor, a package's helper
// roles, sbx itself for testscript), with checks that the suite left nothing behind. The fake upstream
// network is internal/fakenet's.
//
// Importing it keeps the test binary's main goroutine on the main thread (see main.go).
package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// StateRoot is a fresh state root for sandboxes, removed after the test. Unlike a bare t.TempDir, its
// parents are searchable: the root of a sandbox's user namespace (an unprivileged host uid) reaches the
// sandbox's root file system below it by path.
func StateRoot(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// RemoveStateRoot removes a state root a test used, with sbx's own files in it (the compiled seccomp
// filters, the cgroup primer's file); of the rest only empty directories go: never RemoveAll a state
// root, a leaked run's mounts may be below it, and what a run left behind stays for the next look.
func RemoveStateRoot(root string) {
	os.RemoveAll(filepath.Join(root, "cache"))
	os.RemoveAll(filepath.Join(root, "reports")) // displaced --json reports
	os.Remove(filepath.Join(root, "primed"))
	os.Remove(filepath.Join(root, "mount-probe.json")) // the direct start's probe of mounts, cached per state root
	for _, d := range []string{"runs", "lc", ""} {
		os.Remove(filepath.Join(root, d))
	}
}

// RequireRoot skips the test unless it runs as root, saying why the test needs root ("needs root: why").
// Tests run as root so that kernel features are really exercised; without root they are skipped, never
// failed.
func RequireRoot(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: " + why)
	}
}
