package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestHideAboveCwd: a working directory below a hidden directory shows only the way down and itself,
// and hiding costs no whiteout per entry beside the way: the writable layer holds the way and nothing
// else, however full the hidden directory is (it took one whiteout per entry, and one walk over them
// in each snapshot of the layer).
func TestHideAboveCwd(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	hidden := t.TempDir()
	cwd := filepath.Join(hidden, "way", "work")
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		for _, dir := range []string{hidden, filepath.Dir(cwd)} {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("secret%d", i)), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(cwd, "mine"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := testPlan(t)
	plan.Filesystem.Hidden = append(plan.Filesystem.Hidden, hidden)
	t.Cleanup(func() { testutil.RemoveStateRoot("/run/sbx-test/hide") })
	sb, err := Create(Config{Plan: plan, StateRoot: "/run/sbx-test/hide", Command: Command{Args: []string{"true"}, Cwd: cwd}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()
	n := 0
	filepath.WalkDir(filepath.Join(sb.Layers()[0].Upper, hidden), func(string, os.DirEntry, error) error { n++; return nil })
	if n > 3 { // hidden, way, work
		t.Errorf("the writable layer holds %d entries below the hidden directory, want the way down only (3)", n)
	}
	code, out, stderr := runPlan(t, plan, cwd, "sh", "-c", `ls -A `+hidden+`; ls -A `+filepath.Dir(cwd)+`; ls -A`)
	if code != 0 {
		t.Fatalf("status %d; stderr %q", code, stderr)
	}
	if got, want := strings.Fields(out), []string{"way", "work", "mine"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the sandbox sees %q, want %q", got, want)
	}
}
