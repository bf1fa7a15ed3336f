package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
)

// ErrStateShare is matched by the error about a writable share that reaches sbx's state root.
//
// The state root holds what later runs trust: the compiled seccomp filters they load (seccompbpf.go),
// the other runs' dirs and libcontainer's state. Without root the command runs as the caller's uid on
// the host, so a file there is the command's to rewrite as soon as a share lets it reach the file: a
// filter it rewrote would be loaded by every later run, whatever its profile. A share that contains the
// state root, or lies in it, is refused; identity (device and inode), not the path, decides, so that a
// symlink or a bind mount of the same directory is no way around it.
var ErrStateShare = errors.New("a writable share reaches sbx's state root")

// checkStateShares refuses a writable share that contains the state root or lies in it.
func checkStateShares(stateRoot string, shares []policy.Share) error {
	root, above := stateRootIdentity(stateRoot)
	for _, sh := range shares {
		if !sh.Writable {
			continue
		}
		real, err := filepath.EvalSymlinks(sh.Host)
		if err != nil {
			continue // a share that does not exist is refused with ErrShare
		}
		for d := real; ; d = filepath.Dir(d) {
			id, ok := identity(d)
			if ok && (d == real && above[id] || root != nil && id == *root) {
				return fmt.Errorf("%w: %s (state root %s)", ErrStateShare, sh.Host, stateRoot)
			}
			if d == "/" || d == "." {
				break
			}
		}
	}
	return nil
}

// fileID is a directory's identity: what a bind mount or a symlink of it shares with it.
type fileID struct{ dev, ino uint64 }

func identity(path string) (fileID, bool) {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return fileID{}, false
	}
	return fileID{st.Dev, st.Ino}, true
}

// stateRootIdentity is the state root's identity (nil when it does not exist yet) and those of the
// directories it lies in: a share of any of them contains it, now or once it is made.
func stateRootIdentity(stateRoot string) (*fileID, map[fileID]bool) {
	abs, err := filepath.Abs(stateRoot)
	if err != nil {
		abs = stateRoot
	}
	above := map[fileID]bool{}
	var root *fileID
	// Down from the nearest directory that exists, resolved: that is where the state root is made.
	d, rest := abs, ""
	for {
		if real, err := filepath.EvalSymlinks(d); err == nil {
			d = filepath.Join(real, rest)
			break
		} else if !errors.Is(err, os.ErrNotExist) || d == "/" {
			break
		}
		rest = filepath.Join(filepath.Base(d), rest)
		d = filepath.Dir(d)
	}
	for p := d; ; p = filepath.Dir(p) {
		if id, ok := identity(p); ok {
			above[id] = true
			if p == d {
				root = &id
			}
		}
		if p == "/" || p == "." {
			break
		}
	}
	return root, above
}
