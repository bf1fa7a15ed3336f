package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestSplitOptions: overlay's data splits at commas that its escapes leave alone (sbx escapes ',' ':'
// and '\' in a layer's path: a working directory named "a,b:c\d" is one like any other), and keeps the
// escapes for overlay to undo; other file systems split at every comma, as mount(2) splits them.
func TestSplitOptions(t *testing.T) {
	for _, tc := range []struct {
		name, fsType, data string
		want               []string
	}{
		{"tmpfs", "tmpfs", "size=1m,mode=0755", []string{"size=1m", "mode=0755"}},
		{"overlay plain", "overlay", "lowerdir=/usr:/e,upperdir=/u,workdir=/w,userxattr,volatile",
			[]string{"lowerdir=/usr:/e", "upperdir=/u", "workdir=/w", "userxattr", "volatile"}},
		{"overlay escaped", "overlay", `lowerdir=/w/a\,b\:c\\d e,upperdir=/u/x\,y,workdir=/w`,
			[]string{`lowerdir=/w/a\,b\:c\\d e`, `upperdir=/u/x\,y`, "workdir=/w"}},
		{"overlay escaped backslash before comma", "overlay", `lowerdir=/a\\,userxattr`,
			[]string{`lowerdir=/a\\`, "userxattr"}},
		{"not overlay: no escapes", "tmpfs", `a\,b`, []string{`a\`, "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := splitOptions(tc.fsType, tc.data); !slices.Equal(got, tc.want) {
				t.Errorf("splitOptions(%q, %q) = %q, want %q", tc.fsType, tc.data, got, tc.want)
			}
		})
	}
}

// TestOptionalSourceGone: a rootless sandbox's top-level directory removed from the host's / after sbx
// listed it is left out, not a failed run. openSources marks an optional bind whose source is gone
// (and fails a required one); an overlay whose lower layer is gone fails with ENOENT, which build
// takes for gone; leaveOut removes the empty mount point, and leaves one that is not empty.
func TestOptionalSourceGone(t *testing.T) {
	testutil.RequireRoot(t, "open_tree and fsopen need CAP_SYS_ADMIN (nothing is mounted)")
	dir := t.TempDir()
	missing := filepath.Join(dir, "gone")
	for _, tc := range []struct {
		name              string
		m                 Mount
		wantErr, wantGone bool
		wantFD            bool
	}{
		{"optional, gone", Mount{Source: missing, Destination: "/gone", Type: "bind", Optional: true}, false, true, false},
		{"required, gone", Mount{Source: missing, Destination: "/gone", Type: "bind"}, true, false, false},
		{"optional, there", Mount{Source: dir, Destination: "/there", Type: "bind", Optional: true}, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := []Mount{tc.m}
			err := openSources(ms, nil)
			if (err != nil) != tc.wantErr || ms[0].gone != tc.wantGone || (ms[0].FD > 0) != tc.wantFD {
				t.Errorf("openSources: err %v, gone %v, fd %d; want error %v, gone %v, fd %v", err, ms[0].gone, ms[0].FD, tc.wantErr, tc.wantGone, tc.wantFD)
			}
			if tc.wantErr && !errors.Is(err, unix.ENOENT) {
				t.Errorf("openSources: %v, want ENOENT", err)
			}
			if ms[0].FD > 0 {
				unix.Close(ms[0].FD)
			}
		})
	}
	t.Run("overlay, lower gone", func(t *testing.T) {
		_, err := newFS(Mount{Type: "overlay", Source: "overlay", Destination: "/gone",
			Data: "lowerdir=" + missing + ":" + dir + ",userxattr"})
		if !errors.Is(err, unix.ENOENT) {
			t.Errorf("newFS: %v, want ENOENT", err)
		}
	})
	t.Run("leaveOut", func(t *testing.T) {
		root := t.TempDir()
		for _, d := range []string{"empty", "full/x"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		leaveOut(fd, "/empty")
		leaveOut(fd, "/full")
		if _, err := os.Stat(filepath.Join(root, "empty")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the empty mount point is still there (%v)", err)
		}
		if _, err := os.Stat(filepath.Join(root, "full", "x")); err != nil {
			t.Errorf("a mount point that is not empty was removed: %v", err)
		}
	})
}

// TestOverlayPathsByFD: where overlay has no fsconfig parsing of its own (before Linux 6.5) the kernel
// refuses an option value with a comma, escaped or not; the layers whose paths hold one then go as
// /proc/self/fd/N, the others as they were, and overlay, which follows the link, mounts them either way.
func TestOverlayPathsByFD(t *testing.T) {
	dir := t.TempDir()
	odd, plain := filepath.Join(dir, `a,b:c\d e`), filepath.Join(dir, "plain")
	for _, d := range []string{odd, plain} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	esc := func(p string) string {
		return strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`).Replace(p)
	}
	v, fds, err := overlayPathsByFD(esc(odd) + ":" + esc(plain))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	layers := strings.Split(v, ":")
	if len(fds) != 1 || len(layers) != 2 || layers[1] != plain {
		t.Fatalf("overlayPathsByFD: %q, fds %v; want the first layer by fd, the second as it was", v, fds)
	}
	if got, err := os.Readlink(layers[0]); err != nil || got != odd {
		t.Errorf("%s leads to %q (%v), want %q", layers[0], got, err, odd)
	}
	t.Run("mounted", func(t *testing.T) {
		testutil.RequireRoot(t, "fsopen needs CAP_SYS_ADMIN (nothing is mounted)")
		mnt, err := newFS(Mount{Type: "overlay", Source: "overlay", Destination: "/x",
			Data: "lowerdir=" + esc(odd) + ":" + esc(plain)})
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(mnt)
	})
}
