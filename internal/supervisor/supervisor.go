// Package supervisor is pid 1 of an sbx sandbox, and owns the control protocol sbx speaks with it
// ([Conn], used by both sides): it waits for sbx's go on the control socket, restricts the thread it
// starts the command from with Landlock (the command inherits the domain), starts the command as its
// child under the command's user, reports the command's pid and status, and reaps orphans until the
// sandbox is destroyed.
//
// It depends on nothing that needs cgo, so that it also builds as the small static sbx-init binary
// (internal/cmd/sbx-init), which starts in a fraction of the time of the whole sbx binary. Without
// sbx-init next to sbx, sbx runs itself in this role.
package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Exit statuses for failures before the command runs, as a shell gives them.
const (
	ExitSetup         = 125 // sbx could not set up the sandbox (Landlock could not be applied, ...)
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// ctlFD is the supervisor's end of the control socket: the first extra file libcontainer passes.
const ctlFD = 3

// stdioFD is the first of the command's three stdio fds when they come as extra files (Config.StdioFDs):
// libcontainer changes the owner of its init's own stdio to the init's user (fixStdioPermissions), which
// would take the command's pipes from it and hand the caller's files to the sandbox's root; extra files
// it leaves alone.
const stdioFD = 4

// stdio are the command's stdio; the supervisor's own messages go to the command's stderr.
var stdio = []*os.File{os.Stdin, os.Stdout, os.Stderr}

// droppedSignals are the signals that would end pid 1, and the sandbox with it, when a process inside
// sends them: a command of the supervisor's own uid may (without root, where the supervisor stays the
// namespace's root, one running as root inside; as root the supervisor takes ids of its own,
// Prepare.Creds, and the kernel refuses the command's signals). The kernel keeps SIGKILL and SIGSTOP
// from inside away from pid 1, and the Go runtime ignores the rest it does not relay but for these:
// the termination signals, SIGABRT, and the fault signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
// SIGSYS, SIGSTKFLT), which it takes for a crash even when kill sent them. Relayed, they are dropped; a real fault of the supervisor's own still crashes it
// (the runtime relays only those a process sent). bad_signal_supervisor in the battery sends them all.
var droppedSignals = []os.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1,
	unix.SIGUSR2, unix.SIGPIPE, unix.SIGTTIN, unix.SIGTTOU, unix.SIGTSTP, unix.SIGALRM, unix.SIGABRT,
	unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE, unix.SIGILL, unix.SIGTRAP, unix.SIGSYS, unix.SIGSTKFLT}

// Role is the first argument the supervisor is started with (sbx dispatches on it when it runs itself).
const Role = "__sbx_supervise"

// Prepare is what the supervisor prepares before the command is known: the command's Landlock ruleset
// and seccomp filter. sbx sends it as soon as the sandbox runs ([Conn.SendPrepare]).
type Prepare struct {
	Read    []string `json:"read"`
	Write   []string `json:"write"`
	Degrade bool     `json:"degrade"`           // go on without Landlock when it cannot be applied
	Seccomp *Seccomp `json:"seccomp,omitempty"` // the command's filter; nil for none
	// TimerSlack (ns) is the command's timer slack, its caller's: sbx and so the supervisor run with a
	// coarser one (see internal/cgprime). 0 leaves the supervisor's.
	TimerSlack uint64 `json:"timer_slack,omitempty"`
	// Creds are the supervisor's own ids from the command's preparation on, ids the command cannot
	// have; nil keeps the namespace's root (without root, where the namespace maps no other id).
	Creds *Creds `json:"creds,omitempty"`
}

// Creds are a process's user and group id (real, effective, saved and file system alike).
type Creds struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Config is the command the supervisor starts; sbx sends it with go ([Conn.SendGo]).
type Config struct {
	Terminal bool     `json:"terminal"`  // stdio is the sandbox's own terminal: give the command the foreground
	StdioFDs bool     `json:"stdio_fds"` // the command's stdio are fds 4, 5 and 6, not the supervisor's own
	Argv     [][]byte `json:"argv"`      // the command, bytes as given (JSON strings would mangle non-UTF-8)
	Env      [][]byte `json:"env"`       // the command's environment, KEY=VALUE
	UID, GID int      // the command's user; the supervisor is root with CAP_SETUID/CAP_SETGID when not 0
	// NoInput: the caller gave no input (a warm pool's run without stdin); the command's stdin is the
	// sandbox's /dev/null, as on a host that starts a program with nothing to read, not an empty pipe.
	NoInput bool `json:"no_input,omitempty"`
	// Closed are the command's stdio fds (0, 1, 2) to leave closed, as the caller's were.
	Closed [3]bool `json:"closed,omitempty"`
}

// Main runs the supervisor as pid 1 of the sandbox. It waits for sbx's go on the control socket (the
// protocol is in conn.go), builds the command's Landlock ruleset, loads its seccomp filter on a thread
// restricted by both (sending the filter's notification fd to sbx), starts the command from that thread, reports the command's pid and exit status, and reaps every orphan until the sandbox
// is destroyed. It returns only when the control socket fails before the command starts.
//
// Running the command as the init's child, rather than as a second process that joins the namespaces,
// spares a whole libcontainer process start per run. sbx signals the command itself, from outside,
// through a pidfd.
func Main() int {
	if len(os.Args) > 1 && os.Args[1] == ProbeRole {
		return ProbeMain(os.Args[2:])
	}
	// The parent-death signal (sbx's: the sandbox dies with sbx), to set again once the supervisor has
	// taken ids of its own, which clears it; main's, on which init locks main.
	pdeath, pdeathErr := pdeathsig()
	ctl := NewConn(os.NewFile(ctlFD, "ctl"))
	unix.CloseOnExec(ctlFD)
	// Handled signals are reset to their default in the command, ignored ones would not be: catch and
	// drop every signal a process inside could send pid 1.
	drop := make(chan os.Signal, 16)
	signal.Notify(drop, droppedSignals...)
	go func() {
		for range drop {
		}
	}()
	children := make(chan os.Signal, 16)
	signal.Notify(children, unix.SIGCHLD)
	// Started by libcontainer's init: it built the sandbox and left the supervisor root with the
	// capabilities to hand the command its user (sandbox.initProcess).
	pre := fallbackThread
	if fds, ok := os.LookupEnv(SetupEnv); ok {
		// Started directly by sbx, through a descriptor of its binary: build the sandbox first, and
		// say so when that fails.
		os.Unsetenv(SetupEnv)
		closeInherited(strings.Fields(fds))
		// Named as libcontainer's exec of /dev/.sbx-init names it, not after the descriptor.
		os.WriteFile("/proc/self/comm", []byte(filepath.Base(os.Args[0])), 0)
		setup, err := ctl.ReadSetup()
		if err != nil {
			return ExitSetup
		}
		if err := buildAsRootGroup(setup, pdeath); err != nil {
			ctl.SendSetupFailed(err)
			return ExitSetup
		}
		pre = func(c *Creds) error { return commandThread(setup, c) }
	} else {
		// pid 1's bounding set as the command sees it (/proc/1/status, the main thread's: init locks
		// main to it) is what the supervisor keeps, as after a direct start: not the CAP_SETPCAP that
		// fallbackThread needs only on the command's thread (no such capability: EPERM, nothing to do).
		unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_SETPCAP, 0, 0, 0)
	}
	prep, err := ctl.ReadPrepare()
	if err != nil {
		return ExitSetup
	}
	rd, err := ctl.NewReady()
	if err != nil {
		return ExitSetup
	}
	// Before prepare, which may give the supervisor ids of its own (Prepare.Creds): the file is then the
	// namespace root's until the command starts (redump), and the supervisor may no longer open it.
	openOOMScoreAdj()
	st := prepare(prep, rd, pre)
	if st.creds != nil && pdeathErr == nil {
		restorePdeathsig(pdeath)
		if sbxGone(ctlFD) {
			return ExitSetup
		}
	}
	if st.readyErr != nil {
		return ExitSetup
	}
	cfg, err := ctl.ReadGo()
	if err != nil {
		return ExitSetup
	}
	// A sock_diag socket of the sandbox's network namespace, made before the command runs: sbx copies it
	// (pidfd_getfd) to list the sandbox's sockets where it may not enter the namespace (without root).
	diag, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		diag = -1
	}
	started := startCommand(cfg, st)
	started.DiagFD = diag
	ctl.SendStarted(started)
	pid := started.Pid
	detachStdio()
	reap(children, func(p int, ws unix.WaitStatus) {
		if p == pid {
			ctl.SendExit(ws)
		}
	})
	return 0
}

// pdeathsig is the calling thread's parent-death signal.
func pdeathsig() (int, error) {
	var sig int32
	err := unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0, 0, 0)
	return int(sig), err
}

// restorePdeathsig sets the parent-death signal sig again, on the main thread, which lives as long as
// the supervisor (the kernel sends the signal for whichever thread has it set). A change of the
// effective ids clears it on every thread that changes them: takeCreds's on all. sbx killed between
// the two is seen by sbxGone.
func restorePdeathsig(sig int) {
	if sig != 0 {
		unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(sig), 0, 0, 0)
	}
}

// sbxGone tells whether sbx's end of the control socket at fd is closed: sbx died. A parent-death
// signal set again after its parent died never comes, and sbx may have died between the change of ids
// that cleared it and restorePdeathsig, after it had sent go (the ready it answers goes before): the
// supervisor would then start the command in a sandbox nobody watches, left until 'sbx gc'. Once the
// signal is set, a later death sends it; before, this says so. Data sbx sent and left unread does not
// hide the hang-up.
func sbxGone(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLRDHUP) != 0
}

// closeInherited closes, in a directly started supervisor, the descriptor of its binary (args[0]) and
// every descriptor above the last one sbx passed (args[1]) that it did not open itself: what sbx's own
// caller let it inherit, which libcontainer's init would have closed too. The runtime's own files (it
// reads its cgroup's CPU limit through some) are close-on-exec; inherited ones are not.
func closeInherited(args []string) {
	if len(args) < 2 {
		return
	}
	exe, err1 := strconv.Atoi(args[0])
	last, err2 := strconv.Atoi(args[1])
	if err1 != nil || err2 != nil || exe <= ctlFD {
		return
	}
	unix.Close(exe)
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= last {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// startCommand resolves, restricts and starts the command. It returns its pid and a pidfd of it (kept
// open for sbx to copy; -1 when the kernel gives none), or pid 0 and the status a shell would give when
// it could not be started: 126 and 127 with the reason printed on the command's stderr, 125 (the
// supervisor could not prepare it) with the reason for sbx to say.
func startCommand(raw []byte, st *starter) Started {
	var cfg Config
	if err := json.Unmarshal(raw, &cfg); err != nil || len(cfg.Argv) == 0 {
		return Started{Code: ExitSetup, PidFD: -1, Reason: fmt.Sprintf("supervisor: bad configuration: %v", err)}
	}
	if cfg.StdioFDs {
		stdio = []*os.File{os.NewFile(stdioFD, "stdin"), os.NewFile(stdioFD+1, "stdout"), os.NewFile(stdioFD+2, "stderr")}
		for _, f := range stdio {
			unix.CloseOnExec(int(f.Fd()))
		}
		if cfg.NoInput {
			if null, err := os.Open(os.DevNull); err == nil {
				stdio[0].Close()
				stdio[0] = null
			}
		}
		closeStdio(cfg.Closed)
	}
	if st.fatal != nil {
		// Before the command is looked up: a sandbox that cannot hold it is sbx's failure (125), not a
		// missing command's 127 that would hide it.
		return Started{Code: ExitSetup, PidFD: -1, Reason: st.fatal.Error(), Hint: st.hint}
	}
	args, env := fromBytes(cfg.Argv), fromBytes(cfg.Env)
	// The command's environment is the supervisor's from here on: PATH lookups use it.
	os.Clearenv()
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	path, code, err := resolveCommand(args[0])
	if err != nil {
		return Started{Code: failure(code, err.Error(), commandHint(code, args[0])), PidFD: -1}
	}
	// Under memory pressure the OOM killer should pick the command's processes, not pid 1 (whose binary
	// makes it look big): raise the score the command inherits, and come back down after the fork, which
	// needs no privilege down to where it was.
	setOOMScoreAdj("1000")
	defer setOOMScoreAdj("0")
	if st.warning != "" {
		fmt.Fprintf(stdio[2], "sbx: warning: %s\n", st.warning)
	}
	pidfd := -1
	attr := &os.ProcAttr{Env: env, Files: stdio, Sys: &syscall.SysProcAttr{PidFD: &pidfd}}
	if cfg.Terminal {
		// Its own process group in the terminal's foreground, so that job control and Ctrl-C reach it.
		attr.Sys.Setpgid, attr.Sys.Foreground, attr.Sys.Ctty = true, true, 0
	}
	if cfg.UID != os.Getuid() {
		// Dropping from root to another user clears every capability before the exec.
		attr.Sys.Credential = &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID), Groups: []uint32{}}
	}
	pid, err := st.start(path, args, attr)
	if st.creds != nil {
		redump()
	}
	if err != nil {
		code, msg := ExitNotExecutable, fmt.Sprintf("cannot execute %s: %v", args[0], errors.Unwrap(err))
		if errors.Is(err, unix.ENOENT) {
			code = ExitNotFound
			if !strings.Contains(args[0], "/") { // a PATH entry only the command may search (lookPath)
				msg = "command not found: " + args[0]
			}
		}
		return Started{Code: failure(code, msg, commandHint(code, args[0])), PidFD: -1}
	}
	return Started{Pid: pid, PidFD: pidfd}
}

// closeStdio leaves the command's stdio fds that closed says closed: a nil file is a closed descriptor
// in the command (os.StartProcess), and the supervisor's own messages to it go nowhere.
func closeStdio(closed [3]bool) {
	for i, c := range closed {
		if c && stdio[i] != nil {
			stdio[i].Close()
			stdio[i] = nil
		}
	}
}

// detachStdio points the supervisor's own stdio at /dev/null, so that a pipe the caller reads reaches
// its end when the command and its children close it, not only at teardown.
func detachStdio() {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return
	}
	for fd := range 3 {
		unix.Dup2(int(null.Fd()), fd)
	}
	null.Close()
	for _, f := range stdio {
		if f.Fd() > 2 {
			f.Close()
		}
	}
}

// reap waits for every child of pid 1, which the kernel makes of every orphan in the sandbox.
func reap(children <-chan os.Signal, exited func(int, unix.WaitStatus)) {
	for {
		for {
			var ws unix.WaitStatus
			p, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if p <= 0 || err != nil {
				break
			}
			exited(p, ws)
		}
		<-children
	}
}

// resolveCommand finds the command as a shell would and classifies failures as 126 or 127.
func resolveCommand(name string) (string, int, error) {
	path := name
	if !strings.Contains(name, "/") {
		p, err := lookPath(name)
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return "", ExitNotFound, fmt.Errorf("command not found: %s", name)
			}
			return "", ExitNotExecutable, fmt.Errorf("cannot execute %s: %v", name, err)
		}
		path = p
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrPermission):
		// The supervisor looks with its own ids, the exec with the command's: a working directory of
		// mode 0700 (mktemp -d, a home) is the command's through the idmapped mount, not the
		// supervisor's. The exec decides, and its error gives the status.
		return filepath.Clean(path), 0, nil
	case errors.Is(err, os.ErrNotExist):
		return "", ExitNotFound, fmt.Errorf("no such file: %s", name)
	case err != nil:
		return "", ExitNotExecutable, fmt.Errorf("cannot execute %s: %v", name, err)
	case st.IsDir():
		return "", ExitNotExecutable, fmt.Errorf("cannot execute %s: is a directory", name)
	case st.Mode()&0o111 == 0:
		return "", ExitNotExecutable, fmt.Errorf("cannot execute %s: permission denied", name)
	}
	return filepath.Clean(path), 0, nil
}

// lookPath finds name in PATH as a shell does. A shell runs what it finds through a relative entry
// ("." or "bin"), which exec.LookPath refuses (ErrDot). And the supervisor searches with its own ids, the
// exec runs with the command's: when nothing is found, an entry the supervisor may not search (EACCES: a
// directory of mode 0700 that the idmapped mount makes the command's) is the candidate, and the exec
// decides.
func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	switch {
	case err == nil:
		return p, nil
	case errors.Is(err, exec.ErrDot):
		return p, nil
	case !errors.Is(err, exec.ErrNotFound):
		return "", err
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		if _, serr := os.Stat(filepath.Join(dir, name)); errors.Is(serr, os.ErrPermission) {
			return filepath.Join(dir, name), nil
		}
	}
	return "", err
}

func commandHint(code int, name string) string {
	switch code {
	case ExitNotFound:
		return "the sandbox sees the host's files through an overlay and PATH as the profile passes it; check the name"
	case ExitNotExecutable:
		return fmt.Sprintf("make %s executable, or run it through its interpreter", name)
	}
	return ""
}

const landlockHint = "the profile requires Landlock; set filesystem.landlock: degrade to run without it"

// failure prints why the command could not be started, as sbx prints its own errors, and returns the
// status a shell would give.
func failure(code int, msg, hint string) int {
	fmt.Fprintf(stdio[2], "sbx: error: %s\n", msg)
	if hint != "" {
		fmt.Fprintf(stdio[2], "sbx: hint: %s\n", hint)
	}
	return code
}

func fromBytes(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

const oomScoreAdj = "/proc/self/oom_score_adj"

// oomScoreAdjFD is /proc/self/oom_score_adj, opened before go (openOOMScoreAdj): each open for writing
// is a round trip to sbx's write recorder (seccomp notification), a write on an open fd is not.
var oomScoreAdjFD = -1

func openOOMScoreAdj() {
	if fd, err := unix.Open(oomScoreAdj, unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
		oomScoreAdjFD = fd
	}
}

// setOOMScoreAdj sets this process's oom_score_adj; failure only makes the supervisor a likelier OOM
// victim, which the report then shows.
func setOOMScoreAdj(v string) {
	if oomScoreAdjFD >= 0 {
		unix.Pwrite(oomScoreAdjFD, []byte(v), 0)
	}
}
