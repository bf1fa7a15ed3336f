package sandbox

import (
	"errors"
	"fmt"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrSupervisorGone is matched by Start's and Wait's errors when the sandbox's supervisor (pid 1) ended
// before it reported the command's end: the sandbox, the command and its processes end with it, and
// the report cannot say what the command did. A command that could reach the supervisor (an rlimit it
// set on it, the OOM killer steered to it) would end up here: a run whose report is a violation
// (observe.incomplete), never a pass.
var ErrSupervisorGone = errors.New("the sandbox's supervisor (pid 1) is gone")

// ErrGoneAfterGo is matched, beside ErrSupervisorGone, by Start's error when the supervisor ended after
// it was told to start the command and before it said it had: the command may have run (a command that
// steers the OOM killer to pid 1 can end it at once, before its answer). The runner reports such a run,
// when the OOM killer ended the supervisor, as one whose end was not observed, not as a start that
// failed (sbx's own exit status, "the command never ran").
var ErrGoneAfterGo = errors.New("after it was told to start the command")

// initGone is the error for the supervisor's control socket failing with err: the supervisor is gone,
// and how it ended when the kernel shows it within a moment (it is sbx's child: a zombie until
// reaped).
func (s *Sandbox) initGone(err error) error {
	if how := endOf(s.initPid, 200*time.Millisecond); how != "" {
		return fmt.Errorf("%w: %s: %w", ErrSupervisorGone, how, err)
	}
	return fmt.Errorf("%w: %w", ErrSupervisorGone, err)
}

// endOf says how process pid, a child of sbx, ended ("killed by signal 9 (killed)", "exited with
// status 2"), once it has, waiting up to max for that; "" when it has not by then. The child is left to
// be reaped by its waiter (WNOWAIT).
func endOf(pid int, max time.Duration) string {
	deadline := time.Now().Add(max)
	for pid > 0 {
		var info childInfo
		_, _, errno := unix.Syscall6(unix.SYS_WAITID, unix.P_PID, uintptr(pid), uintptr(unsafe.Pointer(&info)),
			unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, 0, 0)
		if errno != 0 {
			return ""
		}
		switch {
		case info.Pid != int32(pid):
		case info.Code == cldExited:
			return fmt.Sprintf("exited with status %d", info.Status)
		default: // killed, or dumped
			return fmt.Sprintf("killed by signal %d (%v)", info.Status, syscall.Signal(info.Status))
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return ""
}

// cldExited is CLD_EXITED, the code of a child that exited (CLD_KILLED and CLD_DUMPED: by a signal).
const cldExited = 1

// childInfo is the kernel's siginfo_t for SIGCHLD on a 64-bit machine (waitid's answer): x/sys's
// Siginfo leaves the union's fields opaque.
type childInfo struct {
	Signo, Errno, Code int32
	_                  int32
	Pid                int32
	UID                uint32
	Status             int32
	_                  [100]byte
}
