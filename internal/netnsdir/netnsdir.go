// Package netnsdir prepares the directory that holds named network namespaces (/run/netns) the way
// `ip netns add` does, for sbx and for the tests' fake networks alike.
package netnsdir

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Dir is where named network namespaces live, the directory `ip netns` reads.
const Dir = "/run/netns"

// Prepare creates Dir and makes it a shared mount point of its own. Were it not one when a namespace
// file is bind-mounted in it, the first `ip netns add` by anyone afterwards would bind-mount the
// directory over itself with every mount in it: the hidden original keeps the file a mount point, and
// removing the file fails with EBUSY until reboot. An flock on lock (created if needed) keeps two
// processes from stacking the directory twice.
func Prepare(lock string) error {
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", Dir, err)
	}
	if makeShared() == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(lock), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(lock), err)
	}
	fd, err := unix.Open(lock, unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("opening lock %s: %w", lock, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", lock, err)
	}
	if makeShared() == nil {
		return nil // another process made it a mount point meanwhile
	}
	if err := unix.Mount(Dir, Dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting %s on itself: %w", Dir, err)
	}
	if err := makeShared(); err != nil {
		return fmt.Errorf("making %s a shared mount: %w", Dir, err)
	}
	return nil
}

// makeShared fails with EINVAL when Dir is not a mount point.
func makeShared() error { return unix.Mount("", Dir, "", unix.MS_SHARED|unix.MS_REC, "") }
