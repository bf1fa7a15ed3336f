package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestCwdOnOtherFS: a working directory on another file system than / (here a tmpfs) is visible in the
// sandbox through an overlay of its own: its files are there and writable, nothing beside it on that
// file system shows, and nothing the command writes reaches the host.
func TestCwdOnOtherFS(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	fs := t.TempDir()
	if err := unix.Mount("tmpfs", fs, "tmpfs", 0, "size=8m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(fs, unix.MNT_DETACH) })
	cwd := filepath.Join(fs, "project")
	for _, d := range []string{cwd, filepath.Join(fs, "other")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(cwd, "in.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := testPlan(t)
	p.UID, p.GID = 65534, 65534
	code, out, stderr := runPlan(t, p, cwd, "sh", "-c",
		`cat in.txt; echo new > out.txt && echo wrote; ls ..; echo more >> in.txt`)
	if code != 0 {
		t.Fatalf("status %d, stderr %q", code, stderr)
	}
	if out != "hello\nwrote\nproject\n" {
		t.Errorf("stdout %q: want the file read, a write, and only the way to the working directory", out)
	}
	if _, err := os.Stat(filepath.Join(cwd, "out.txt")); err == nil {
		t.Error("the write reached the host")
	}
	if data, _ := os.ReadFile(filepath.Join(cwd, "in.txt")); strings.Contains(string(data), "more") {
		t.Error("the append reached the host")
	}
}
