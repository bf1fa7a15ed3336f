package state

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/sandbox/internal/host"
)

// DefaultRoot is where sbx keeps the state of its runs. It lives on /run so that a reboot clears it.
const DefaultRoot = "/run/sbx"

// DefaultRootFor is where sbx keeps the state of its runs for the user it runs as: DefaultRoot
// for root; else $XDG_RUNTIME_DIR/sbx (cleared at logout) when its file system keeps user.* xattrs, or
// ~/.local/state/sbx. RootReason says why.
func DefaultRootFor() string {
	root, _ := rootFor()
	return root
}

// RootReason says why DefaultRootFor chose the state root it did ("" for root's).
func RootReason() string {
	_, why := rootFor()
	return why
}

// rootFor is the rootless state root and why it was chosen.
//
// A rootless sandbox's overlays keep their metadata in user.overlay.* xattrs (userxattr), so their
// upper and work dirs must be on a file system that keeps user.* xattrs. $XDG_RUNTIME_DIR is a tmpfs,
// and tmpfs keeps user.* xattrs only from Linux 6.6 on: on older kernels (Debian 12's 6.1) every
// rootless run failed there ("operation not supported"). So the runtime dir is tried by setting such
// an xattr on it, and ~/.local/state/sbx serves where it is refused.
func rootFor() (string, string) {
	if !host.Rootless() {
		return DefaultRoot, ""
	}
	home := ""
	if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
		home = filepath.Join(h, ".local", "state", "sbx")
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		err := userXattrs(d)
		if err == nil || home == "" {
			return filepath.Join(d, "sbx"), "$XDG_RUNTIME_DIR"
		}
		return home, fmt.Sprintf("$XDG_RUNTIME_DIR (%s) keeps no user.* xattrs (%v), which rootless overlays need", d, err)
	}
	if home != "" {
		return home, "no $XDG_RUNTIME_DIR"
	}
	return filepath.Join(os.TempDir(), "sbx-"+strconv.Itoa(os.Geteuid())), "no $XDG_RUNTIME_DIR and no home directory"
}

// userXattrs says whether the file system of dir keeps user.* xattrs, by setting one on a file made for
// the check (and removed): a file system without them answers EOPNOTSUPP. Other errors (a runtime dir
// that is not the caller's) count as a refusal too.
func userXattrs(dir string) error {
	f, err := os.CreateTemp(dir, ".sbx-xattr-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	return unix.Fsetxattr(int(f.Fd()), "user.sbx.probe", []byte{1}, 0)
}
