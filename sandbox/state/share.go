package state

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/supervisor"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
)

// ErrShare is matched by the error about a writable share that reaches sbx's state root.
//
// The state root holds what later runs trust: the compiled seccomp filters they load (package seccomp),
// the other runs' dirs and libcontainer's state. Without root the command runs as the caller's uid on
// the host, so a file there is the command's to rewrite as soon as a share lets it reach the file: a
// filter it rewrote would be loaded by every later run, whatever its profile. A share that contains the
// state root, or lies in it, is refused; identity (device and inode), not the path, decides, so that a
// symlink or a bind mount of the same directory is no way around it.
var ErrShare = supervisor.ErrReachesGuarded

// CheckShares refuses a writable share that contains the state root or lies in it.
func CheckShares(stateRoot string, shares []policy.Share) error {
	for _, sh := range shares {
		if sh.Writable && ReachesRoot(stateRoot, sh.Host) {
			return fmt.Errorf("%w: %s (state root %s)", ErrShare, sh.Host, stateRoot)
		}
	}
	return nil
}

// ReachesRoot says whether the host path contains the state root ("" = the default) or lies in
// it, by identity: through symlinks and bind mounts of the same directories too. A path that does not
// exist yet is where its nearest existing directory is.
func ReachesRoot(stateRoot, path string) bool {
	if stateRoot == "" {
		stateRoot = DefaultRootFor()
	}
	root, above := stateRootIdentity(stateRoot)
	real := host.ResolveExisting(absolute(path))
	for d := real; ; d = filepath.Dir(d) {
		id, ok := identity(d)
		if ok && (d == real && above[id] || root != nil && id == *root) {
			return true
		}
		if d == "/" || d == "." {
			return false
		}
	}
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
	above := map[fileID]bool{}
	var root *fileID
	// Resolved as far as it exists: that is where the state root is made.
	d := host.ResolveExisting(absolute(stateRoot))
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

func absolute(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// Guard is the state root as the supervisor checks a writable bind's source against it again, on
// the descriptor the bind's copy is made from: a share's path that passed CheckShares can be
// swapped for a link to the state root before the copy is made (by another run's command that may
// write a directory on the path).
func Guard(stateRoot string) *supervisor.Guard {
	if stateRoot == "" {
		stateRoot = DefaultRootFor()
	}
	root, above := stateRootIdentity(stateRoot)
	g := &supervisor.Guard{}
	if root != nil {
		g.Root = &supervisor.FileID{Dev: root.dev, Ino: root.ino}
	}
	for id := range above {
		g.Above = append(g.Above, supervisor.FileID{Dev: id.dev, Ino: id.ino})
	}
	return g
}
