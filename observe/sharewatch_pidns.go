package observe

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Whose event it is (ShareWatch's "Whose", sharewatch.go): whether the process of an event's pidfd is
// the sandbox's, by its pid namespace.

// nsID is a namespace's identity: the device and inode of its nsfs file.
type nsID struct{ dev, ino uint64 }

// pidfdsArePidfs says whether this kernel's pidfds live in pidfs, with an inode per process.
func pidfdsArePidfs() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var sfs unix.Statfs_t
	return unix.Fstatfs(fd, &sfs) == nil && sfs.Type == unix.PID_FS_MAGIC
}

// pidfdNSIoctl says whether this kernel answers PIDFD_GET_PID_NAMESPACE (Linux 6.11), asked of sbx's
// own pidfd.
func pidfdNSIoctl() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	ns, err := unix.IoctlRetInt(fd, pidfdGetPidNamespace)
	if err != nil {
		return false
	}
	unix.Close(ns)
	return true
}

// nsOf is the identity of the namespace file p.
func nsOf(p string) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return nsID{}, err
	}
	return nsID{st.Dev, st.Ino}, nil
}

// sandboxProcess says whether the live process of pidfd is the sandbox's (its pid namespace is the
// sandbox's or lies below it), and whether that could be told: a process that ended before (the kernel
// may hand out a pidfd of a process gone) is left to Stop's window. Verdicts are kept by the pidfd's
// inode, which pidfs never gives another process.
func (w *ShareWatch) sandboxProcess(pidfd int) (in, known bool) {
	var st unix.Stat_t
	if unix.Fstat(pidfd, &st) != nil {
		return false, false
	}
	if !w.pidfs {
		return w.inSandboxNS(pidfd)
	}
	if v, ok := w.verdicts[st.Ino]; ok {
		return v, true
	}
	in, known = w.inSandboxNS(pidfd)
	if !known {
		return false, false
	}
	if len(w.verdicts) >= maxVerdicts {
		clear(w.verdicts)
	}
	w.verdicts[st.Ino] = in
	return in, true
}

// Ioctls of pidfs and nsfs (linux/pidfd.h, linux/nsfs.h).
const (
	pidfdGetPidNamespace = 0xff05 // _IO(0xFF, 5)
	nsGetParent          = 0xb702 // _IO(0xb7, 2)
	maxPidNSDepth        = 33     // the kernel's MAX_PID_NS_LEVEL is 32
)

func (w *ShareWatch) inSandboxNS(pidfd int) (in, known bool) {
	ns, err := w.pidNamespace(pidfd)
	if err != nil {
		return false, false // the process ended (ESRCH)
	}
	for range maxPidNSDepth {
		var st unix.Stat_t
		err := unix.Fstat(ns, &st)
		if err == nil && (nsID{st.Dev, st.Ino}) == w.pidNS {
			unix.Close(ns)
			return true, true
		}
		parent, err := unix.IoctlRetInt(ns, nsGetParent)
		unix.Close(ns)
		if err != nil {
			return false, true // the host's namespace: its parent is none of the caller's
		}
		ns = parent
	}
	unix.Close(ns)
	return false, true
}

// pidNamespace opens the pid namespace of pidfd's process: asked of the pidfd where the kernel
// answers, else through /proc.
func (w *ShareWatch) pidNamespace(pidfd int) (int, error) {
	if w.pidfdNS {
		return unix.IoctlRetInt(pidfd, pidfdGetPidNamespace)
	}
	return pidNSByProc(pidfd)
}

// pidNSByProc opens the pid namespace of pidfd's process through /proc, for kernels without
// PIDFD_GET_PID_NAMESPACE: the pidfd's fdinfo gives the pid, /proc/PID/ns/pid is opened, and a signal 0
// sent through the pidfd afterwards says that the process had not been reaped yet, so that the pid was
// still its own (not handed to another process) when its namespace was opened.
func pidNSByProc(pidfd int) (int, error) {
	pid, err := pidfdPid(pidfd)
	if err != nil {
		return -1, err
	}
	ns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		unix.Close(ns)
		return -1, err
	}
	return ns, nil
}

// pidfdPid is the pid of pidfd's process as sbx's /proc numbers it, from the pidfd's fdinfo (Linux
// 5.3): ESRCH when the process ended (-1) or has no number there (0).
func pidfdPid(pidfd int) (int, error) {
	f, err := os.Open("/proc/self/fdinfo/" + strconv.Itoa(pidfd))
	if err != nil {
		return -1, err
	}
	defer f.Close()
	b := make([]byte, 1024) // pos, flags, mnt_id, ino, Pid, NSpid: a few dozen bytes
	n, err := f.Read(b)
	if err != nil {
		return -1, err
	}
	for line := range strings.SplitSeq(string(b[:n]), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			switch {
			case err != nil:
				return -1, fmt.Errorf("a pidfd's fdinfo: %w", err)
			case pid <= 0:
				return -1, unix.ESRCH
			}
			return pid, nil
		}
	}
	return -1, errors.New("a pidfd's fdinfo has no Pid line")
}
