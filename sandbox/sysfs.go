package sandbox

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// A sysfs shows the network devices of the network namespace it was mounted in, and mounts only where
// its mounter may administer that namespace. The network contract's namespace belongs to the host's
// user namespace, so the sandbox's root (root only in the sandbox's user namespace) cannot mount one
// there; a bind of the host's /sys instead shows the host's devices (their names, addresses and
// traffic counters, and those of other runs' veths) and hides the sandbox's own. sbx, root on the
// host, mounts the sandbox's sysfs itself, made in the contract's namespace, on the root overlay's
// /sys: both start paths take the root's whole tree (libcontainer binds it recursively, the direct
// start clones it), and the teardown's detach of the overlay takes it along. Being a mount of its
// own, nothing the host mounts below its /sys shows there either.

// sysfsAttrs are the sandbox's /sys's mount attributes, as Spec gives a sysfs of the sandbox's own.
const sysfsAttrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC

// mountNetSysfs mounts, read-only, a sysfs of network namespace netns (a path) on /sys of the tree at
// root, reached without any link on the way.
func mountNetSysfs(netns, root string) error {
	ns, err := os.Open(netns)
	if err != nil {
		return fmt.Errorf("mounting the sandbox's /sys: %w", err)
	}
	defer ns.Close()
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("mounting the sandbox's /sys: opening the root: %w", err)
	}
	defer unix.Close(rootFD)
	target, err := unix.Openat2(rootFD, "sys", &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
	if err != nil {
		return fmt.Errorf("mounting the sandbox's /sys: opening its mount point: %w", err)
	}
	defer unix.Close(target)
	mnt, err := netSysfs(int(ns.Fd()))
	if err != nil {
		return fmt.Errorf("mounting the sandbox's /sys: %w", err)
	}
	defer unix.Close(mnt)
	if err := unix.MoveMount(mnt, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting the sandbox's /sys: move_mount: %w", err)
	}
	return nil
}

// netSysfs is a detached sysfs of network namespace ns. A sysfs takes the namespace of the thread that
// opens its context (fsopen): that thread switches and is never unlocked, so that the runtime ends it
// rather than hand it to another goroutine in the wrong namespace.
func netSysfs(ns int) (int, error) {
	type made struct {
		fd  int
		err error
	}
	c := make(chan made, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			c <- made{-1, fmt.Errorf("entering the network namespace: %w", err)}
			return
		}
		fd, err := newSysfs()
		c <- made{fd, err}
	}()
	m := <-c
	return m.fd, m.err
}

// newSysfs is a detached, read-only sysfs of the calling thread's network namespace.
func newSysfs() (int, error) {
	fs, err := unix.Fsopen("sysfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen sysfs: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("fsconfig sysfs: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, sysfsAttrs)
	if err != nil {
		return -1, fmt.Errorf("fsmount sysfs: %w", err)
	}
	return mnt, nil
}
