package netcontract

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/sbx-dev/sbx/internal/netnsdir"
	"golang.org/x/sys/unix"
)

// inNetNS runs f on a fresh OS thread switched into the network namespace fd. A socket belongs to the
// namespace of the thread that created it, so this is how sbx creates sockets in another namespace. The
// thread is locked and never unlocked: when the goroutine ends the runtime discards the thread instead of
// handing it, still in the wrong namespace, to another goroutine.
func inNetNS(fd int, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering network namespace: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// newNetNS creates a network namespace bind-mounted at path and runs f inside it, on the thread that
// created it. It returns an open fd of the namespace. On error nothing is left behind.
func newNetNS(path string, f func() error) (int, error) {
	if err := netnsdir.Prepare(filepath.Join(runDir, "netns.lock")); err != nil {
		return -1, err
	}
	type result struct {
		fd  int
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see inNetNS
		fd, err := unshareNetNS(path)
		if err == nil {
			if err = f(); err != nil {
				unix.Close(fd)
				removeNetNS(path)
			}
		}
		res <- result{fd, err}
	}()
	r := <-res
	return r.fd, r.err
}

// unprivilegedPortStart is the lowest port an unprivileged process may bind in the namespace.
const unprivilegedPortStart = "/proc/sys/net/ipv4/ip_unprivileged_port_start"

// unshareNetNS moves the calling (locked) thread into a new network namespace and pins it at path.
func unshareNetNS(path string) (int, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return -1, fmt.Errorf("creating namespace file: %w", err)
	}
	f.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		os.Remove(path)
		return -1, fmt.Errorf("creating network namespace: %w", err)
	}
	// Binding ports below 1024 needs no privilege in the sandbox's own namespace, as in Docker: its ports
	// are its own, and the host's floor protects the host's. /proc/sys/net is the calling thread's.
	if err := os.WriteFile(unprivilegedPortStart, []byte("0"), 0o644); err != nil {
		os.Remove(path)
		return -1, fmt.Errorf("opening low ports in the sandbox's namespace: %w", err)
	}
	if err := unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, ""); err != nil {
		os.Remove(path)
		return -1, fmt.Errorf("bind-mounting network namespace at %s: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		removeNetNS(path)
		return -1, fmt.Errorf("opening network namespace: %w", err)
	}
	return fd, nil
}

// removeNetNS unmounts and removes a namespace file. The namespace itself goes away when its last process
// and fd are gone.
func removeNetNS(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	return nil
}

// hostNS is sbx's own network namespace, opened once. /proc/self/ns/net is not used: it is the main
// thread's namespace, and a locked goroutine that ended on the main thread leaves that thread (wedged,
// never reused) in whatever namespace it switched to. Threads that run ordinary goroutines are never
// switched (inNetNS discards them), so the thread opening this is in sbx's namespace.
var hostNS = sync.OnceValues(func() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
})

// openUplink opens the uplink namespace: "" is sbx's own (the host's), a name is looked up under
// /run/netns, anything with a slash is a path.
func openUplink(spec string) (fd int, host bool, err error) {
	path := spec
	switch {
	case spec == "":
		h, err := hostNS()
		if err != nil {
			return -1, false, fmt.Errorf("opening sbx's network namespace: %w", err)
		}
		if fd, err = unix.Dup(h); err != nil {
			return -1, false, fmt.Errorf("duplicating sbx's network namespace fd: %w", err)
		}
		return fd, true, nil
	case !strings.Contains(spec, "/"):
		path = filepath.Join(netnsDir, spec)
	}
	fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false, fmt.Errorf("opening uplink network namespace %s: %w", path, err)
	}
	return fd, host, nil
}
