package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestInRoot: mount points are looked up and made inside the sandbox's root whatever links the tree
// holds (a link planted by an earlier run through a writable share, or the host's own): an absolute or
// climbing link resolves as if the root were /, a dangling link in a file's place is refused rather than
// followed, and a proc or sysfs mount point may have no link on its way at all.
func TestInRoot(t *testing.T) {
	outside := t.TempDir()
	root := t.TempDir()
	for _, l := range []struct{ name, target string }{
		{"abs", outside},                      // a host path: inside the root it is root/<outside>
		{"up", "../../../../../../../../tmp"}, // climbs: stops at the root
		{"dangling", "/nowhere/file"},         // a file mount point onto it must not create /nowhere
		{"proc", "/elsewhere"},                // proc onto a link: refused
		{"etc", "/usr/../real"},               // an absolute link with a climb in it
	} {
		if err := os.Symlink(l.target, filepath.Join(root, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	within := func(fd int) string {
		t.Helper()
		p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == ".." || len(rel) > 2 && rel[:3] == "../" {
			t.Fatalf("%s resolved outside the root %s", p, root)
		}
		return "/" + rel
	}
	for _, c := range []struct {
		dir  bool
		path string
		want string
	}{
		{true, "/abs/x", filepath.Join(outside, "x")},
		{true, "/up/y", "/tmp/y"},
		{false, "/up/f", "/tmp/f"},
		{true, "/etc/z", "/real/z"},
		{true, "/a/b/c", "/a/b/c"},
	} {
		open := fileIn
		if c.dir {
			open = mkdirIn
		}
		fd, err := open(rfd, c.path)
		if err != nil {
			t.Errorf("%s: %v", c.path, err)
			continue
		}
		if got := within(fd); got != c.want {
			t.Errorf("%s made at %s, want %s inside the root", c.path, got, c.want)
		}
		unix.Close(fd)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the host's %s/x exists (%v): a mount point was made outside the root", outside, err)
	}
	if fd, err := fileIn(rfd, "/dangling"); err == nil {
		unix.Close(fd)
		t.Error("a file mount point onto a dangling link was made, want it refused")
	}
	if _, err := os.Lstat(filepath.Join(root, "nowhere")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("following the dangling link made %s/nowhere (%v)", root, err)
	}
	if err := mountIn(rfd, root, Mount{Type: "proc", Source: "proc", Destination: "/proc/x"}); err == nil {
		t.Error("proc mounted below /proc/x")
	}
	if err := mountIn(rfd, root, Mount{Type: "tmpfs", Source: "tmpfs", Destination: "/proc/sys"}); err == nil {
		t.Error("a tmpfs mount inside /proc was accepted, want it refused")
	}
	if err := mountIn(rfd, root, Mount{Type: "bind", Destination: "/"}); err == nil {
		t.Error("a mount onto the root was accepted, want it refused")
	}
	// proc and sysfs onto a link: refused before anything is mounted (no namespace needed to see it).
	err = mountIn(rfd, root, Mount{Type: "proc", Source: "proc", Destination: "/proc"})
	if err == nil || !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("proc onto a link: %v, want ELOOP", err)
	}
}

// TestOpenInRenames: a mount point reached through a link with ".." (a relative link such as
// /etc/resolv.conf -> ../run/systemd/resolve/stub-resolv.conf) opens while anything on the host renames
// files: the kernel answers such a RESOLVE_IN_ROOT lookup with EAGAIN whenever a rename happened during
// it (its rename lock is global), which would fail the sandbox's build at random on a busy host, or
// whenever another sandbox's command renames in a loop.
func TestOpenInRenames(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"d", "b"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../b", filepath.Join(dir, "d", "l")); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	x, y := filepath.Join(other, "x"), filepath.Join(other, "y")
	if err := os.WriteFile(x, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.Rename(x, y)
			os.Rename(y, x)
		}
	}()
	defer func() { close(stop); <-stopped }()
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	failed := 0
	var last error
	for range 20000 {
		fd, err := openIn(root, "d/l", unix.O_DIRECTORY)
		if err != nil {
			failed, last = failed+1, err
			continue
		}
		unix.Close(fd)
	}
	if failed > 0 {
		t.Errorf("%d of 20000 lookups failed while files were renamed, the last with %v", failed, last)
	}
}
