package supervisor

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

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
