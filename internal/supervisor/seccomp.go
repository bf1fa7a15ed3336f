package supervisor

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Seccomp is the command's seccomp filter, compiled by sbx on the host (sandbox/seccomp/bpf.go) and
// loaded by the supervisor on the thread it starts the command from, after Landlock.
type Seccomp struct {
	Filter []byte `json:"filter"` // struct sock_filter[] in the host's byte order, 8 bytes each
	Flags  uint   `json:"flags"`  // seccomp(2) flags of SECCOMP_SET_MODE_FILTER
	// Quiet is a second program, loaded first and without flags: it gives the answers that are no
	// refusal (copy_file_range's EXDEV, clone3's ENOSYS), which Filter then allows. A filter loaded
	// with SECCOMP_FILTER_FLAG_LOG logs every errno it returns, through audit or, with audit off, to
	// the host's kernel log: 40 µs of the calling task each, on every file cp copies.
	Quiet []byte `json:"quiet,omitempty"`
}

// maxFilterLen is the kernel's limit on a filter's instructions (BPF_MAXINSNS).
const maxFilterLen = 4096

// seccompHint is printed with an error loading the filter.
const seccompHint = "the kernel refused the profile's seccomp filter: check that it was built with CONFIG_SECCOMP_FILTER (sbx features)"

// loadSeccomp loads sc on the calling thread only (the caller holds runtime.LockOSThread), with
// no_new_privs, which an unprivileged filter needs. It returns the notification fd when the filter has
// one (SECCOMP_FILTER_FLAG_NEW_LISTENER, close-on-exec), else -1.
func loadSeccomp(sc *Seccomp) (int, error) {
	if sc.Flags&unix.SECCOMP_FILTER_FLAG_TSYNC != 0 {
		return -1, errors.New("seccomp: the filter is for this thread only, not every thread (TSYNC)")
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("seccomp: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	// The quiet program first: a failure to load the main one after it still fails the start. The
	// kernel runs every filter and takes the strictest answer, so the order changes no answer.
	if len(sc.Quiet) > 0 {
		if _, err := loadProgram(sc.Quiet, 0, "the quiet filter"); err != nil {
			return -1, err
		}
	}
	return loadProgram(sc.Filter, sc.Flags, "the filter")
}

// loadProgram loads one program with flags, and returns the notification fd when flags ask for one.
func loadProgram(filter []byte, flags uint, what string) (int, error) {
	n := len(filter) / int(unsafe.Sizeof(unix.SockFilter{}))
	if n == 0 || n > maxFilterLen || len(filter)%int(unsafe.Sizeof(unix.SockFilter{})) != 0 {
		return -1, fmt.Errorf("seccomp: %s of %d bytes is no program", what, len(filter))
	}
	// The program is copied to memory of its own type: the JSON decoder's bytes need not be aligned.
	prog := make([]unix.SockFilter, n)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), len(filter)), filter)
	fprog := unix.SockFprog{Len: uint16(n), Filter: &prog[0]}
	r, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, uintptr(flags), uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return -1, fmt.Errorf("seccomp: loading %s (flags %#x): %w", what, flags, errno)
	}
	if flags&unix.SECCOMP_FILTER_FLAG_NEW_LISTENER != 0 {
		return int(r), nil
	}
	return -1, nil
}
