package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
)

// TestSharePropagation: a share of a host mount that is shared (as every mount of a systemd host is)
// is a slave in the sandbox, as libcontainer made it: it still sees what the host mounts there, but
// what is mounted below it inside the sandbox (here a nested share) never appears on the host, neither
// during the run nor after it.
func TestSharePropagation(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	shr := filepath.Join(t.TempDir(), "shr")
	if err := os.Mkdir(shr, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", shr, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(shr, unix.MNT_DETACH) })
	if err := unix.Mount("", shr, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	nested := filepath.Join(shr, "d")
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	p := testPlan(t)
	p.Filesystem.Shares = []policy.Share{{Host: shr, Sandbox: shr}, {Host: nested, Sandbox: nested, Writable: true}}
	code, out, stderr := runPlan(t, p, "/", "sh", "-c", `grep " `+shr+`" /proc/self/mountinfo`)
	if code != 0 {
		t.Fatalf("status %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("the sandbox's mounts at %s: %q, want the share and the nested one", shr, out)
	}
	for _, l := range lines {
		if strings.Contains(l, " shared:") || !strings.Contains(l, " master:") {
			t.Errorf("in the sandbox: %s\nwant a slave of the host's mount (master:N), not a peer (shared:N)", l)
		}
	}
	checkNoMountsBelow(t, shr)
}

// TestRootPropagation: with the state root on a shared mount (a systemd host's /run), the sandbox's
// root is private, as libcontainer makes it: nothing the sandbox mounts on it reaches the host's copy
// in the state root, and nothing the host mounts there comes in.
func TestRootPropagation(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	root := testutil.StateRoot(t)
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=2g,mode=0711"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	if err := unix.Mount("", root, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runPlanIn(t, testPlan(t), root, "", "/", "sh", "-c", `head -1 /proc/self/mountinfo`)
	if code != 0 {
		t.Fatalf("status %d, stderr %q", code, stderr)
	}
	f := strings.Fields(out)
	if len(f) < 7 || f[4] != "/" {
		t.Fatalf("the sandbox's first mount: %q, want its root", out)
	}
	if f[6] != "-" {
		t.Errorf("the sandbox's root: %s\nwant private (no shared:N or master:N): its copy in the state root is shared", out)
	}
	checkNoMountsBelow(t, root)
}

// checkNoMountsBelow fails the test for each mount of the host below dir: one that a sandbox's mount
// propagated out, left after the run.
func checkNoMountsBelow(t *testing.T, dir string) {
	t.Helper()
	host, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(host), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			t.Errorf("on the host after the run: %s\nwant no mount below %s: the sandbox's mounts propagated out", l, dir)
		}
	}
}
