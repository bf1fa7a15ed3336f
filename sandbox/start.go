package sandbox

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/supervisor"
)

// Starting the command in a created sandbox, and its end: Start lets the supervisor go, Running waits
// for the command and signals it.

// Running is the sandbox's command, started.
type Running struct {
	Pid     int // host pid; 0 when the command could not be started, or exited before it was looked up
	sb      *Sandbox
	started bool
	code    int // status when the command could not be started
	pidfd   int // the command's pidfd, for signals that cannot hit a reused pid; -1 when none
}

// Start lets the supervisor run the command. A command that cannot be started (not found, not
// executable, Landlock refused) is not an error: its Wait returns 127, 126 or 125.
func (s *Sandbox) Start() (*Running, error) {
	tr := newTracer()
	defer tr.done()
	// The supervisor's word first: one that could not build the sandbox sent no network record either.
	if err := s.awaitReady(); err != nil {
		return nil, err
	}
	tr.mark("ready")
	if s.net != nil {
		// Fail closed: nothing untrusted runs before the network contract (or record) is in force.
		if err := s.net.Ready(); err != nil {
			return nil, fmt.Errorf("%w: loading the network contract: %w", ErrSetup, err)
		}
	}
	tr.mark("network")
	if err := s.ctl.SendGo(s.supervisorConfig()); err != nil {
		return nil, fmt.Errorf("starting the command: %w", s.initGone(err))
	}
	tr.mark("go")
	st, err := s.ctl.ReadStarted()
	tr.mark("started")
	if errors.Is(err, supervisor.ErrProtocol) {
		return nil, fmt.Errorf("starting the command: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("starting the command: %w (%w)", s.initGone(err), ErrGoneAfterGo)
	}
	s.diagFD, s.answered = st.DiagFD, true
	if st.Pid == 0 && st.Code == ExitSetup {
		// The supervisor could not prepare the command (Landlock, the filter): sbx's own failure, not
		// the command's status.
		return nil, &SupervisorError{Reason: st.Reason, Hint: st.Hint}
	}
	if st.Pid == 0 {
		return &Running{sb: s, code: st.Code, pidfd: -1}, nil
	}
	r := &Running{sb: s, started: true, pidfd: -1}
	if fd, pid := s.commandPidfd(st.PidFD); fd >= 0 {
		r.Pid, r.pidfd, s.pidfd = pid, fd, fd // closed by Destroy, not Wait: Signal may race with Wait
		return r, nil
	}
	if r.Pid = s.hostPid(st.Pid); r.Pid > 0 {
		if fd, err := unix.PidfdOpen(r.Pid, 0); err == nil {
			r.pidfd, s.pidfd = fd, fd
		}
	}
	return r, nil
}

// awaitReady waits for the supervisor's preparation and hands the seccomp filter's notification fd,
// when there is one, to the listener. A filter that notifies with nobody to answer would leave the
// command waiting: then the run fails.
func (s *Sandbox) awaitReady() error {
	// The supervisor's own word first: one that could not build the sandbox says why and exits, and
	// the preparation sent meanwhile then fails on a closed socket.
	prepErr := <-s.prepared
	fd, err := s.ctl.ReadReady()
	// A sandbox the supervisor could not build is a setup failure (125), as libcontainer's init failing
	// to build it is (a mount point it may not make, a mount the kernel refuses), with the build's own
	// hint, not the one about mismatched builds of sbx and sbx-init.
	var be *supervisor.BuildError
	if errors.As(err, &be) {
		// Without root, AppArmor's restriction of user namespaces refuses the supervisor its first
		// mount or capability: that is said, not the build's guess (apparmor.go).
		return usernsRefusal(&SupervisorError{Reason: be.Reason, Hint: be.Hint})
	}
	if prepErr != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return fmt.Errorf("%w: preparing the supervisor: %w", ErrSetup, prepErr)
	}
	if err != nil {
		return fmt.Errorf("%w: preparing the supervisor: %w", ErrSetup, err)
	}
	switch {
	case s.notify != nil && fd >= 0:
		s.notify.Attach(fd)
	case fd >= 0:
		unix.Close(fd)
	case s.notify != nil && s.seccomp != nil && s.seccomp.Flags&unix.SECCOMP_FILTER_FLAG_NEW_LISTENER != 0:
		// Landlock or the filter failed: the command will not start (go reports why).
		s.notify.Fail("the supervisor could not load the seccomp filter")
	}
	return nil
}

// commandPidfd copies the command's pidfd from the supervisor (its fd there is n) and reads the
// command's host pid from the copy; -1 when there is none, or the command is gone already (reaped: its
// pid may be reused, so the copy is of no use).
func (s *Sandbox) commandPidfd(n int) (fd, pid int) {
	if n < 0 {
		return -1, 0
	}
	init, err := unix.PidfdOpen(s.initPid, 0)
	if err != nil {
		return -1, 0
	}
	defer unix.Close(init)
	fd, err = unix.PidfdGetfd(init, n, 0)
	if err != nil {
		return -1, 0
	}
	unix.CloseOnExec(fd)
	if pid = pidfdPid(fd); pid <= 0 {
		unix.Close(fd)
		return -1, 0
	}
	return fd, pid
}

// pidfdPid is the pid, in sbx's pid namespace, of the process a pidfd refers to (the "Pid:" line of its
// fdinfo); -1 once that process was reaped, 0 when unknown.
func pidfdPid(fd int) int {
	v, _ := procField("/proc/self/fdinfo/"+strconv.Itoa(fd), "Pid")
	pid, _ := strconv.Atoi(v)
	return pid
}

// hostPid maps a pid of the sandbox's pid namespace to the host's.
func (s *Sandbox) hostPid(nsPid int) int {
	pids, _ := s.Pids()
	for _, pid := range pids {
		v, _ := procField("/proc/"+strconv.Itoa(pid)+"/status", "NSpid")
		if fields := strings.Fields(v); len(fields) > 0 && fields[len(fields)-1] == strconv.Itoa(nsPid) {
			return pid
		}
	}
	return 0
}

// Wait waits for the command and returns its status as a shell shows it: the exit code, or 128+N when
// a signal N killed it.
func (r *Running) Wait() (int, error) {
	if !r.started {
		return r.code, nil
	}
	ws, err := r.sb.ctl.ReadExit()
	if errors.Is(err, supervisor.ErrProtocol) {
		return -1, fmt.Errorf("waiting for the command: %w", err)
	}
	if err != nil {
		return -1, fmt.Errorf("waiting for the command: %w", r.sb.initGone(err))
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
}

// Signal sends sig to the command through its pidfd; a command that has exited is not an error.
func (r *Running) Signal(sig syscall.Signal) error {
	if r.pidfd < 0 {
		return nil
	}
	err := unix.PidfdSendSignal(r.pidfd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}
