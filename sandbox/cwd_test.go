package sandbox

import (
	"errors"
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

// TestCwdNoLinks: a working directory checked to hold no link (an MCP caller's) that a link leads
// elsewhere by the time the sandbox is built (swapped in after the check: into a hidden directory) is
// refused, before anything is mounted or handed over; without the check the link is resolved.
func TestCwdNoLinks(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	dir := t.TempDir()
	hidden := filepath.Join(dir, "hidden")
	if err := os.MkdirAll(filepath.Join(hidden, "keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	cwd := filepath.Join(dir, "ws")
	if err := os.Symlink(filepath.Join(hidden, "keys"), cwd); err != nil { // was a directory at the check
		t.Fatal(err)
	}
	plan := testPlan(t)
	plan.Filesystem.Hidden = append(plan.Filesystem.Hidden, hidden)
	state := testutil.StateRoot(t)
	sb, err := Create(Config{Plan: plan, StateRoot: state, Command: Command{Args: []string{"true"}, Cwd: cwd, CwdNoLinks: true}})
	if !errors.Is(err, ErrCwdMoved) {
		if sb != nil {
			sb.Destroy()
		}
		t.Fatalf("Create with a checked cwd that a link now leads elsewhere: %v, want ErrCwdMoved", err)
	}
	sb, err = Create(Config{Plan: plan, StateRoot: state, Command: Command{Args: []string{"true"}, Cwd: cwd}})
	if err != nil {
		t.Fatalf("Create with an unchecked cwd through a link: %v", err)
	}
	sb.Destroy()
}
