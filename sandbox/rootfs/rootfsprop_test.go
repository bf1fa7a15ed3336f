package rootfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestLowerPropagation: the lower layer bound from a shared mount (a systemd host's / is one) is
// private: a mount made below the host directory after the bind (another run's overlay in a state
// root below /) does not show in the lower layer, and unmounting the lower layer (a run's teardown)
// leaves the host's mounts below that directory alone. As a peer, every run's lower layer held every
// other run's mounts, and one run's teardown unmounted the next run's root on the host.
func TestLowerPropagation(t *testing.T) {
	testutil.RequireRoot(t, "mounts")
	base := t.TempDir()
	o := Overlay{At: filepath.Join(base, "at"), Lower: filepath.Join(base, "lower"), merged: filepath.Join(base, "merged")}
	if err := os.Mkdir(o.At, 0o755); err != nil {
		t.Fatal(err)
	}
	mount(t, "tmpfs", o.At, "tmpfs", "size=1m")
	if err := unix.Mount("", o.At, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(o.At, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := o.bindLower(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(o.Lower, unix.MNT_DETACH) })
	sub := filepath.Join(o.At, "sub")
	mount(t, "tmpfs", sub, "tmpfs", "size=1m")
	if isMountPoint(t, filepath.Join(o.Lower, "sub")) {
		t.Error("a mount made on the host below the bound directory shows in the lower layer, want the lower layer private")
	}
	for l := range strings.Lines(readFile(t, "/proc/self/mountinfo")) {
		if f := strings.Fields(l); len(f) > 6 && f[4] == o.Lower && f[6] != "-" {
			t.Errorf("the lower layer's mount: %s\nwant private (no shared:N or master:N)", strings.TrimSpace(l))
		}
	}
	if err := unix.Unmount(o.Lower, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if !isMountPoint(t, sub) {
		t.Error("unmounting the lower layer unmounted the host's mount below the bound directory")
	}
}

// mount mounts a file system for the test and unmounts it after.
func mount(t *testing.T, src, dst, fstype, data string) {
	t.Helper()
	if err := unix.Mount(src, dst, fstype, 0, data); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
}

// isMountPoint says whether dir is on another file system than its parent.
func isMountPoint(t *testing.T, dir string) bool {
	t.Helper()
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		t.Fatal(err)
	}
	return st.Dev != parent.Dev
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
