package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// ErrNotSupported is matched (errors.Is) by errors about a kernel or filter that cannot give what the
// profile asks.
var ErrNotSupported = errors.New("not supported")

// NotSupportedError names a missing kernel feature and what it needs.
type NotSupportedError struct {
	Feature string // "landlock"
	Need    string // "ABI 1", "CONFIG_...", ...
	Have    string
}

func (e *NotSupportedError) Error() string {
	return fmt.Sprintf("%s needs %s, this kernel has %s", e.Feature, e.Need, e.Have)
}

// Is makes errors.Is(err, ErrNotSupported) true.
func (e *NotSupportedError) Is(target error) bool { return target == ErrNotSupported }

// landlockConfigs are go-landlock's configurations by ABI. sbx restricts the file system only: the
// network is the netns and nft contract's job, and Landlock TCP rules would not see MPTCP anyway.
var landlockConfigs = []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5}

// devFiles are device files every program expects to read and write.
var devFiles = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx"}

// ruleset is a Landlock ruleset built for the command, enforced by restrictThread.
type ruleset struct {
	fd    int
	flags uint32
}

// landlockRuleset builds the command's ruleset: the profile's read and write paths, the device files and
// /proc. It never degrades silently: it checks the ABI itself (BestEffort would apply nothing when
// seccomp answers ENOSYS) and uses the strict configuration of the newest ABI it knows that the kernel
// has. The supervisor is made undumpable here too, Landlock or not.
func landlockRuleset(cfg Prepare) (*ruleset, error) {
	// pid 1's own /proc files are the one place procRule reaches that matters (a command running as
	// root could otherwise write /proc/1/mem), and so is a run without Landlock: a process that is not
	// dumpable has them owned by root with no access for a process lacking CAP_SYS_PTRACE.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("making the supervisor undumpable: %w", err)
	}
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		have := "none"
		if err != nil {
			have = "none (" + err.Error() + ")"
		}
		return nil, fmt.Errorf("landlock: %w", &NotSupportedError{Feature: "landlock", Need: "ABI 1", Have: have})
	}
	ll := landlockConfigs[min(abi, len(landlockConfigs))-1]
	// The file system only, as RestrictPaths would: the configurations of ABI 4 on also handle TCP
	// bind and connect, which no rule here allows.
	ll.HandledAccessNet, ll.Scoped = 0, 0
	if abi >= 7 {
		// Denials are logged (to audit, when it is on) for the command too, for the report's denials:
		// by default Landlock stops logging at the first execve.
		ll = ll.EnableLoggingForSubprocesses()
	}
	devs := landlock.RWFiles(existing(devFiles)...)
	devDirs := landlock.RWDirs(existing([]string{"/dev/pts", "/dev/shm", "/dev/mqueue"})...)
	if abi >= 5 {
		// Terminals need ioctl on their device, a right that only exists from ABI 5.
		devs, devDirs = devs.WithIoctlDev(), devDirs.WithIoctlDev()
	}
	readDirs, readFiles := byType(existing(cfg.Read))
	writeDirs, writeFiles := byType(existing(cfg.Write))
	rules := []landlock.Rule{
		landlock.RODirs(readDirs...), landlock.ROFiles(readFiles...),
		writeRule(abi, writeDirs), landlock.RWFiles(writeFiles...),
		devs, devDirs,
		procRule(abi),
	}
	fd, flags, err := ll.NewRulesetFD(rules...)
	if err != nil {
		return nil, fmt.Errorf("landlock ABI %d: %w", abi, err)
	}
	if fd < 0 {
		return nil, fmt.Errorf("landlock ABI %d: the ruleset restricts nothing", abi)
	}
	// No signal or abstract-socket scoping (ABI 6): the pid and network namespaces already keep the
	// command from the host's processes and sockets.
	return &ruleset{fd: fd, flags: flags}, nil
}

// restrictThread enforces the ruleset on the calling thread only (with no_new_privs, which Landlock
// needs): the caller holds runtime.LockOSThread and starts the command from this thread, so that the
// command inherits the domain. The ruleset's fd is closed.
func (r *ruleset) restrictThread() error {
	defer unix.Close(r.fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("landlock: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := llsys.LandlockRestrictSelf(r.fd, r.flags); err != nil {
		return fmt.Errorf("landlock: landlock_restrict_self: %w", err)
	}
	return nil
}

// A starter starts the command from a thread of its own that the command's Landlock ruleset restricts;
// the command inherits that thread's domain. prepare makes the thread before go, so that a run does not
// wait for the ruleset (and a pooled sandbox has it ready).
//
// Restricting the whole supervisor instead would cost a stop-the-world per run: before Landlock ABI 8
// (TSYNC) go-landlock enforces a ruleset thread by thread from a signal handler (2-3 ms here). The
// supervisor's other threads stay unrestricted; they run only its own code, which reads nothing the
// command controls but the control socket. The thread is never unlocked, so the runtime ends it with its
// goroutine, and its domain with it.
type starter struct {
	fatal    error  // the command must not start: the ruleset or the filter could not be built or enforced
	hint     string // with fatal
	warning  string // the profile allows running without Landlock, and Landlock could not be applied
	readyErr error  // ready could not be sent to sbx
	notifyFD int    // the seccomp filter's notification fd, -1 for none
	req      chan startRequest
	pre      func(*Creds) error // run first on the thread, with the supervisor's ids to take (commandThread, fallbackThread)
	creds    *Creds             // Prepare.Creds
}

type startRequest struct {
	path string
	args []string
	attr *os.ProcAttr
	done chan<- startResult
}

type startResult struct {
	pid int
	err error
}

// prepare builds the ruleset of raw (a Prepare) and the restricted thread, which also loads the
// seccomp filter, and sends rd to sbx (with the filter's notification fd). Failures are kept for go,
// which reports them on the command's stderr.
func prepare(raw []byte, rd *Ready, pre func(*Creds) error) *starter {
	s := &starter{req: make(chan startRequest, 1), hint: landlockHint, notifyFD: -1, pre: pre}
	var p Prepare
	if err := json.Unmarshal(raw, &p); err != nil {
		s.fatal = fmt.Errorf("supervisor: bad preparation: %w", err)
		s.readyErr = rd.Send(-1)
		return s
	}
	s.creds = p.Creds
	rs, err := landlockRuleset(p)
	if err != nil {
		if !p.Degrade {
			s.fatal = err
			s.readyErr = rd.Send(-1)
			return s
		}
		s.warning = fmt.Sprintf("running without Landlock: %v", err)
	}
	ready := make(chan error, 1)
	go s.thread(rs, p.Seccomp, p.TimerSlack, rd, ready)
	s.fatal = <-ready
	if s.readyErr != nil {
		s.readyErr = rd.Send(s.notifyFD)
	}
	// Closed here: once sbx is gone, no process holds the fd, and the kernel answers every notification
	// with ENOSYS instead of leaving its process waiting.
	if s.notifyFD >= 0 {
		unix.Close(s.notifyFD)
	}
	return s
}

// thread is the restricted thread: it enforces rs (nil: nothing to enforce) and then the seccomp
// filter sc (nil: none), sends rd to sbx, says so on ready, and starts the one command it is asked to.
// The filter comes last, so that it may refuse the Landlock syscalls to the command. The command
// inherits the thread's timer slack, set to slack first (0: left as it is).
func (s *starter) thread(rs *ruleset, sc *Seccomp, slack uint64, rd *Ready, ready chan<- error) {
	runtime.LockOSThread()
	var err error
	if slack != 0 {
		if err = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0); err != nil {
			err = fmt.Errorf("setting the command's timer slack: %w", err)
		}
	}
	fd := -1
	if err == nil {
		fd, err = s.restrict(rs, sc)
	}
	// rd goes first, from here: any later syscall of this thread may notify, and only sbx, once it holds
	// the fd, can answer (Ready.Send). sendmsg itself never notifies (policy.NeverNotify), but the
	// profile may deny it: then prepare sends rd from its own, unfiltered thread.
	s.readyErr, s.notifyFD = rd.Send(fd), fd
	ready <- err
	if err != nil {
		return
	}
	r := <-s.req
	if sys := r.attr.Sys; sys != nil && sys.Credential != nil && threadCreds(sys.Credential) == nil {
		// The command's ids are this thread's now: its process starts with them (see threadCreds).
		sys.Credential = nil
		redump()
	}
	pid, err := forkExec(r.path, r.args, r.attr)
	r.done <- startResult{pid, err}
}

// forkExec starts a process as os.StartProcess does (the same clone, files, errors), with the pidfd
// that attr.Sys asks for, but without os.StartProcess's check that pidfds work: Go's os package makes
// that check at its first start or lookup of a process, with a child it clones and reaps (0.5 ms here),
// and the supervisor needs no os.Process.
func forkExec(path string, args []string, attr *os.ProcAttr) (int, error) {
	files := make([]uintptr, len(attr.Files))
	for i, f := range attr.Files {
		files[i] = f.Fd() // a nil file is a closed descriptor in the child
	}
	pid, err := syscall.ForkExec(path, args, &syscall.ProcAttr{Dir: attr.Dir, Env: attr.Env, Files: files, Sys: attr.Sys})
	runtime.KeepAlive(attr) // its files stay open until the child has its copies
	if err != nil {
		return 0, &os.PathError{Op: "fork/exec", Path: path, Err: err}
	}
	return pid, nil
}

// threadCreds gives the calling thread, and so the command it starts, the ids of c and no supplementary
// group, on this thread only (setIDs with raw syscalls; Go's own change every thread). Done in the
// child instead, between Go's vfork and the exec, the change happened while the child still shared the
// supervisor's memory, which made the supervisor undumpable (every change of ids does) until redump,
// after the command already ran: a command racing it from its first instruction could open
// /proc/1/oom_score_adj (9 of 200 starts through libcontainer's path, 1 in 200 direct ones). Here
// nothing of the sandbox runs yet when redump follows. On an error the thread may hold some of the ids:
// the child then sets all of them, as before, and Start's redump after the start still applies.
func threadCreds(c *syscall.Credential) error {
	return setIDs(unix.RawSyscall, int(c.Uid), int(c.Gid), true)
}

// redump makes the supervisor dumpable again: before it starts the command, once the starting thread
// took the command's ids (threadCreds), and after, for a command whose own process changed its ids.
// Every change of ids makes a process undumpable, and the command's process, until its exec, shares
// the supervisor's memory (Go starts it with CLONE_VFORK|CLONE_VM), so that its change to the
// command's ids made the supervisor undumpable too. An undumpable process's /proc files belong to the
// root of its user namespace: a command running as that root could write /proc/1/oom_score_adj (its
// Landlock rule for /proc allows it) and have the OOM killer end pid 1 first. Dumpable, they are the
// supervisor's own ids' (Prepare.Creds), which no process of the sandbox has; without CAP_SYS_PTRACE
// none may trace it, read its memory or /proc/1/environ or copy its descriptors (pidfd_getfd): the
// kernel asks for the same ids as for a process of another user. (No core file is written either way:
// the Go runtime exits on a crash, it does not dump.) The call before the start runs on the command's
// thread, under its filter, which may deny prctl; the one after, on an unfiltered thread (the flag is
// the process's), always ends an undumpable spell, and only a command whose process changed its ids,
// or whose filter denied the first call, races it from its first instructions. Should both fail, the
// supervisor stays undumpable, as it was before it had ids of its own.
func redump() {
	unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
}

// restrict enforces rs and then loads sc on the calling thread; it returns the filter's notification
// fd, -1 for none.
func (s *starter) restrict(rs *ruleset, sc *Seccomp) (int, error) {
	if s.pre != nil {
		if err := s.pre(s.creds); err != nil {
			s.hint = ""
			return -1, err
		}
	}
	if rs != nil {
		if err := rs.restrictThread(); err != nil {
			return -1, err
		}
	}
	if sc == nil {
		return -1, nil
	}
	fd, err := loadSeccomp(sc)
	if err != nil {
		s.hint = seccompHint
	}
	return fd, err
}

// start starts the command from the restricted thread.
func (s *starter) start(path string, args []string, attr *os.ProcAttr) (int, error) {
	done := make(chan startResult, 1)
	s.req <- startRequest{path, args, attr, done}
	r := <-done
	return r.pid, r.err
}

// writeRule grants full rights below the writable paths, with refer from ABI 2: without it every
// rename or hard link from one directory to another fails with EXDEV (git mv, tar extracting hard
// links, os.rename into a subdirectory, Maildir). Refer never reaches beyond the rule's own paths: a
// file can only move between places where the command may write anyway.
func writeRule(abi int, paths []string) landlock.Rule {
	rw := landlock.RWDirs(paths...)
	if abi >= 2 {
		rw = rw.WithRefer()
	}
	return rw
}

// procRule lets the command write (and truncate) files in /proc, and nothing else there (no create, no remove: proc
// has neither anyway). Programs write their own entries: /proc/self/comm and /proc/self/task/*/comm
// (setproctitle, pthread_setname_np), /proc/self/oom_score_adj (the supervisor too, see startCommand).
// A narrower rule cannot exist: Landlock binds a rule to an inode when the ruleset is built, before the
// command has a pid, and each process it starts gets entries of its own. What else the rule opens is
// kept shut by the kernel: runc mounts /proc/sys, /proc/irq, /proc/bus and /proc/fs read-only and masks
// /proc/sysrq-trigger, other users' entries refuse writes, and pid 1 is undumpable.
func procRule(abi int) landlock.Rule {
	access := landlock.AccessFSSet(llsys.AccessFSWriteFile)
	if abi >= 3 {
		// open(O_TRUNC), which shells (>) and fopen("w") use, needs the truncate right from ABI 3.
		access |= llsys.AccessFSTruncate
	}
	return landlock.PathAccess(access, "/proc")
}

// byType splits paths into directories and the rest (a share of a single file, --ro FILE or --rw FILE):
// the kernel refuses a rule that grants directory rights (read_dir, make_*, remove_*, refer) on a file
// with EINVAL, which would fail the whole run.
func byType(paths []string) (dirs, files []string) {
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			files = append(files, p)
			continue
		}
		dirs = append(dirs, p)
	}
	return dirs, files
}

// existing keeps the paths that exist: a profile lists paths such as /lib64 that some systems lack.
func existing(paths []string) []string {
	out := paths[:0:0]
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}
