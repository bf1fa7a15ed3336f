package seccomp

// Refused attempts recorded without kernel audit: seccomp user notification (SECCOMP_RET_USER_NOTIF).
//
// The filter keeps its hot path: allowed syscalls are still plain ALLOW rules. Only two groups of
// syscalls notify sbx instead:
//
//   - the profile's deny list (mount, unshare, ptrace, bpf, ...): sbx records the syscall with its
//     decoded arguments and the process, and answers with the profile's errno, as the ERRNO rule did;
//   - writes by path (open, openat and openat2 with a write flag, creat, mkdir, rename, link, symlink):
//     sbx reads the path from the process, resolves its links as the sandbox sees it (resolveInSandbox),
//     records it when the path the write lands on lies outside the Landlock write paths,
//     and lets the syscall go on (SECCOMP_USER_NOTIF_FLAG_CONTINUE): Landlock decides, as before. The
//     record is best effort (a thread could change the path between sbx's read and the kernel's);
//     enforcement never depends on it. Opens for reading stay plain ALLOW rules (a masked flag check).
//
// The supervisor loads the filter (bpf.go) with SECCOMP_FILTER_FLAG_NEW_LISTENER on the thread
// it starts the command from, and sends the notification fd to sbx over the control socket before go:
// nothing the filter notifies runs before sbx holds it. The supervisor (pid 1) itself runs unfiltered,
// and keeps no copy of the fd. When sbx dies, the kernel answers every pending and later notification
// with ENOSYS, so nothing inside hangs; Destroy stops the listener only once every process of the
// sandbox is dead.

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
)

// maxNotifyKeys and maxNotifyBytes bound the distinct records kept and the bytes of their strings
// (paths may be PATH_MAX long), whatever the command floods the listener with; twice that for refused
// writes that could plant persistence (room).
const (
	maxNotifyKeys  = 4096
	maxNotifyBytes = 1 << 20
)

// writeSyscall says where a write syscall keeps its path(s): pairs of (dirfd argument or -1, path
// argument), and its flags argument (-1 = none).
type writeSyscall struct {
	paths [][2]int
	flags int
	// sockaddr: bind's socket address argument (0 = none): an AF_UNIX address with a path names a
	// new file, as mknod does.
	sockaddr int
}

// writeSyscalls are the syscalls that create or open files for writing, by path.
var writeSyscalls = map[string]writeSyscall{
	"open": {paths: [][2]int{{-1, 0}}, flags: 1}, "openat": {paths: [][2]int{{0, 1}}, flags: 2},
	"creat": {paths: [][2]int{{-1, 0}}, flags: -1}, "openat2": {paths: [][2]int{{0, 1}}, flags: -1},
	"mkdir": {paths: [][2]int{{-1, 0}}, flags: -1}, "mkdirat": {paths: [][2]int{{0, 1}}, flags: -1},
	"rename": {paths: [][2]int{{-1, 1}}, flags: -1}, "renameat": {paths: [][2]int{{2, 3}}, flags: -1},
	"renameat2": {paths: [][2]int{{2, 3}}, flags: -1},
	"link":      {paths: [][2]int{{-1, 1}}, flags: -1}, "linkat": {paths: [][2]int{{2, 3}}, flags: -1},
	"symlink": {paths: [][2]int{{-1, 1}}, flags: -1}, "symlinkat": {paths: [][2]int{{1, 2}}, flags: -1},
	"mknod": {paths: [][2]int{{-1, 0}}, flags: -1}, "mknodat": {paths: [][2]int{{0, 1}}, flags: -1},
	// truncate writes a file by its path (Landlock's truncate right refuses it outside the write paths).
	"truncate": {paths: [][2]int{{-1, 0}}, flags: -1},
	// bind of an AF_UNIX socket to a path makes a socket file there (Landlock's make_sock right).
	"bind": {flags: -1, sockaddr: 1},
}

// openWriteFlags are the open flags that make an open a write.
const openWriteFlags = unix.O_WRONLY | unix.O_RDWR | unix.O_CREAT | unix.O_TRUNC

// Filter is the filter a sandbox loads for the plan's sc: one that asks the kernel to log what it
// refuses and, when notify, in which the syscalls rec names notify sbx's listener (notifySeccomp). nil
// for no filter.
func Filter(sc *specs.LinuxSeccomp, rec policy.Record, notify bool) *specs.LinuxSeccomp {
	if sc != nil && !slices.Contains(sc.Flags, specs.LinuxSeccompFlagLog) {
		// The filter asks the kernel to log what it refuses (to audit, when audit is on) for the report's
		// denials; without audit this costs nothing.
		logged := *sc
		logged.Flags = append(slices.Clone(sc.Flags), specs.LinuxSeccompFlagLog)
		sc = &logged
	}
	if notify && sc != nil {
		sc = notifySeccomp(sc, rec)
	}
	return sc
}

// notifySeccomp returns a copy of sc in which the syscalls rec names notify sbx's listener instead of
// failing (deny list) or passing (writes) silently. A write syscall that the filter does not allow
// unconditionally keeps its rules.
func notifySeccomp(sc *specs.LinuxSeccomp, rec policy.Record) *specs.LinuxSeccomp {
	out := *sc
	out.Syscalls = nil
	var notify []string
	writes := map[string]bool{}
	if rec.Writes {
		for name := range writeSyscalls {
			if allowedPlainly(sc, name) {
				writes[name] = true
			}
		}
	}
	for _, r := range sc.Syscalls {
		if setIDRefusal(r, rec) {
			// A refusal on the mode argument (policy.SetIDSyscalls): notified with its arguments kept;
			// the listener answers EPERM.
			r.Action, r.ErrnoRet = specs.ActNotify, nil
			out.Syscalls = append(out.Syscalls, r)
			continue
		}
		keep := slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool {
			if r.Action == specs.ActErrno && len(r.Args) == 0 && slices.Contains(rec.Syscalls, n) {
				notify = append(notify, n)
				return true
			}
			return writes[n]
		})
		if len(keep) > 0 {
			r.Names = keep
			out.Syscalls = append(out.Syscalls, r)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(writes)) {
		if ws := writeSyscalls[name]; ws.flags >= 0 {
			out.Syscalls = append(out.Syscalls, openRules(name, uint(ws.flags))...)
		} else {
			notify = append(notify, name)
		}
	}
	if len(notify) > 0 {
		slices.Sort(notify)
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: notify, Action: specs.ActNotify})
	}
	return &out
}

// setIDRefusal says whether r is one of policy's refusals of a set-id mode that rec records.
func setIDRefusal(r specs.LinuxSyscall, rec policy.Record) bool {
	return r.Action == specs.ActErrno && len(r.Args) == 1 && len(r.Names) == 1 && r.ErrnoRet != nil &&
		slices.ContainsFunc(policy.SetIDSyscalls, func(c policy.SetIDSyscall) bool { return c.Name == r.Names[0] }) &&
		slices.Contains(rec.Syscalls, r.Names[0])
}

// openRules split an open syscall on its flags argument: without a write flag it stays a plain ALLOW
// (reads keep the hot path); with one it notifies. Seccomp compares each argument on its own, so each
// write flag is a rule of its own.
func openRules(name string, idx uint) []specs.LinuxSyscall {
	rules := []specs.LinuxSyscall{{Names: []string{name}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: idx, Value: openWriteFlags, ValueTwo: 0, Op: specs.OpMaskedEqual}}}}
	for _, a := range []struct{ mask, val uint64 }{
		{unix.O_ACCMODE, unix.O_WRONLY}, {unix.O_ACCMODE, unix.O_RDWR}, {unix.O_ACCMODE, unix.O_ACCMODE},
		{unix.O_CREAT, unix.O_CREAT}, {unix.O_TRUNC, unix.O_TRUNC},
	} {
		rules = append(rules, specs.LinuxSyscall{Names: []string{name}, Action: specs.ActNotify,
			Args: []specs.LinuxSeccompArg{{Index: idx, Value: a.mask, ValueTwo: a.val, Op: specs.OpMaskedEqual}}})
	}
	return rules
}

// allowedPlainly says whether sc allows name in one rule without argument checks, and names it nowhere
// else: only such a syscall can be split into an allowed and a notified part.
func allowedPlainly(sc *specs.LinuxSeccomp, name string) bool {
	plain := false
	for _, r := range sc.Syscalls {
		if !slices.Contains(r.Names, name) {
			continue
		}
		if r.Action != specs.ActAllow || len(r.Args) > 0 || plain {
			return false
		}
		plain = true
	}
	return plain || (sc.DefaultAction == specs.ActAllow && !slices.ContainsFunc(sc.Syscalls, func(r specs.LinuxSyscall) bool {
		return slices.Contains(r.Names, name)
	}))
}

// Listener takes the filter's notification fd from the supervisor and answers every notification.
type Listener struct {
	errnos map[int32]int32 // deny-list syscall number → errno to answer
	names  map[int32]string
	writes map[int32]writeSyscall
	wpaths []string    // Landlock write paths, as seen inside the sandbox
	root   *rootHandle // the sandbox's root, for walks that meet no link (served by one goroutine)
	wake   [2]int
	done   chan struct{} // closed when serve ends; nil until attach

	mu      sync.Mutex
	fd      int // the notification fd; -1 until attached
	reason  string
	seccomp map[notifyKey]int
	written map[notifyKey]int
	order   []notifyKey
	lost    int
	bytes   int // of the strings of the kept records
	cost    report.RecorderCost

	// sandboxCPU reads the CPU time the sandbox has used (its cgroup; nil: none known); cpuChecked is
	// the recorder's CPU time at the last reading, sbxCPU what it read.
	sandboxCPU func(pid int) (time.Duration, bool)
	cpuChecked time.Duration
	sbxCPU     time.Duration
	recCPU     time.Duration // the recorder's own CPU time, over every notification
	over       bool          // past its budget: writes are answered unresolved, unread
	lastPid    int           // the last notifying task (procCPU's, without a cgroup)
	checkCost  time.Duration // the recorder's CPU for its last reading of the sandbox's
}

type notifyKey struct {
	pid, nsPid int
	exe        string
	syscall    string
	detail     string // decoded arguments, or the path
	flags      string
	write      bool
	unresolved string // why sbx could not resolve the path as the kernel does; detail is as far as it got
	dir        string // the directory a relative path starts from
}

// NewListener prepares the listener of sc's notifications; Attach starts it. writePaths are the Landlock
// write paths as the supervisor applies them; sandboxCPU reads the CPU time the sandbox has used, which
// the recorder's own is judged against (nil: none known).
func NewListener(sc *specs.LinuxSeccomp, rec policy.Record, writePaths []string, sandboxCPU func(pid int) (time.Duration, bool)) (*Listener, error) {
	l := &Listener{fd: -1, errnos: map[int32]int32{}, sandboxCPU: sandboxCPU,
		names: map[int32]string{}, writes: map[int32]writeSyscall{},
		seccomp: map[notifyKey]int{}, written: map[notifyKey]int{}, root: &rootHandle{fixed: chrootRefused(sc)}}
	for _, r := range sc.Syscalls {
		for _, n := range r.Names {
			if r.Action == specs.ActErrno && len(r.Args) == 0 && slices.Contains(rec.Syscalls, n) && r.ErrnoRet != nil ||
				setIDRefusal(r, rec) {
				l.addSyscall(n, func(nr int32) { l.errnos[nr] = int32(*r.ErrnoRet) })
			}
		}
	}
	if rec.Writes {
		for n, ws := range writeSyscalls {
			l.addSyscall(n, func(nr int32) { l.writes[nr] = ws })
		}
		l.wpaths = writeRoots(writePaths)
	}
	if err := unix.Pipe2(l.wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	return l, nil
}

// Attach serves the notifications of fd (the listener owns it from here) until Stop.
func (l *Listener) Attach(fd int) {
	l.mu.Lock()
	l.fd = fd
	l.mu.Unlock()
	l.done = make(chan struct{})
	go l.serve(fd)
}

// Fail says why the listener never got its fd.
func (l *Listener) Fail(reason string) {
	l.mu.Lock()
	l.reason = reason
	l.mu.Unlock()
}

func (l *Listener) addSyscall(name string, set func(int32)) {
	nr, err := libseccomp.GetSyscallFromName(name)
	if err != nil || nr < 0 {
		return // not a syscall of this architecture (open on arm64)
	}
	l.names[int32(nr)] = name
	set(int32(nr))
}

// writeRoots are the paths writes may land in: the profile's, the device files and directories the
// supervisor opens for every command (internal/supervisor), each also with its symlinks resolved.
func writeRoots(paths []string) []string {
	out := slices.Concat(paths, []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
		"/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/shm", "/dev/mqueue", "/dev/stdin", "/dev/stdout", "/dev/stderr",
		"/dev/fd", "/proc/self/fd", "/proc/thread-self/fd", "/proc/self/oom_score_adj"})
	for _, p := range out {
		if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
			out = append(out, r)
		}
	}
	return out
}

// serve answers the notifications of fd until stop.
func (l *Listener) serve(fd int) {
	defer close(l.done)
	// One thread serves, so that its CPU time is the recorder's own (threadCPU).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The notifying task hands its CPU straight to this listener and back (kernel 6.6+; an older
	// kernel refuses the flag and wakes the listener the ordinary way).
	_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SET_FLAGS, unix.SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(l.wake[0]), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			l.handle(fd)
		} else if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			return // no process uses the filter any more
		}
	}
}

// seccompNotif and seccompNotifResp are struct seccomp_notif and seccomp_notif_resp.
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// notifIoctl makes one of the notification ioctls, again when a signal interrupted it (the Go runtime
// preempts goroutines with signals): an answer lost to EINTR would leave its process waiting forever.
func notifIoctl(fd int, req uint, p unsafe.Pointer) error {
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(p))
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}

// handle receives one notification and answers it. The poll said one is pending, so the receive does
// not block (ENOENT when its process died meanwhile).
func (l *Listener) handle(fd int) {
	var req seccompNotif
	if err := notifIoctl(fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
		return
	}
	start, cpu0 := time.Now(), threadCPU()
	resp := seccompNotifResp{ID: req.ID}
	if errno, ok := l.errnos[req.Nr]; ok {
		resp.Error = -errno
		l.record(fd, &req, false, l.names[req.Nr], decodeArgs(l.names[req.Nr], &req), "", "", "")
	} else if ws, ok := l.writes[req.Nr]; ok {
		resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
		if l.overBudget(int(req.Pid)) {
			if l.record(fd, &req, true, l.names[req.Nr], "", "", fmt.Sprintf("not resolved: sbx's recording used more CPU than its budget (%v plus %d times the sandbox's)", recorderAllowance, recorderRatio), "") {
				l.mu.Lock()
				l.cost.OverBudget++
				l.mu.Unlock()
			}
			// The answer waits: the notifying task uses no CPU meanwhile, and a flood is slowed to
			// about 1/recorderStall answers a second, each costing sbx the round trip alone.
			time.Sleep(recorderStall)
		} else {
			// The call's arguments in memory, read before and after sbx judges them: the task waits
			// meanwhile, so only another thread or process can change them (see recheckWrite).
			before := l.argsInMemory(&req, ws)
			first := l.recordWrite(fd, &req, ws, newBudget())
			if l.argsInMemory(&req, ws) != before {
				l.recheckWrite(fd, &req, ws, first)
			}
		}
	} else {
		resp.Error = -int32(unix.EPERM) // nothing else notifies: fail closed
	}
	_ = notifIoctl(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
	l.charge(time.Since(start), threadCPU()-cpu0)
}

// The recorder's budget: its CPU time may pass recorderAllowance only while it stays within
// recorderRatio times the sandbox's own (its cgroup's usage). Past that, a write is answered without
// being read or resolved (recorded unresolved: the run is incomplete), and only after recorderStall:
// even the bare round trip of a notification costs sbx several times what the refused syscall costs
// the sandbox, so a flood is slowed instead, and sbx's CPU for it stays within the allowance plus
// recorderRatio times the sandbox's plus about 40 µs per recorderStall (0.4% of a CPU), charged to
// nobody no more.
const (
	recorderAllowance = 250 * time.Millisecond
	recorderRatio     = 3
	recorderRecheck   = 10 * time.Millisecond // of the recorder's CPU time between readings of the sandbox's
	recorderStall     = 10 * time.Millisecond
)

// charge counts one notification's cost.
func (l *Listener) charge(wall, cpu time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cost.Notifications++
	l.recCPU += cpu
	l.cost.CPUMs = float64(l.recCPU) / float64(time.Millisecond)
	if us := wall.Microseconds(); us > l.cost.WorstUs {
		l.cost.WorstUs = us
	}
	if us := cpu.Microseconds(); us > l.cost.WorstCPUUs {
		l.cost.WorstCPUUs = us
	}
}

// overBudget says whether the recorder is past its budget, reading the sandbox's CPU time again once
// the recorder has spent recorderRecheck since the last reading.
func (l *Listener) overBudget(pid int) bool {
	l.mu.Lock()
	rec, checked, over := l.recCPU, l.cpuChecked, l.over
	l.mu.Unlock()
	if rec <= recorderAllowance {
		return false
	}
	// Each reading costs the recorder too (without a cgroup, one of every process of the sandbox's
	// tree): the next comes after ten times its cost of the recorder's CPU, at least recorderRecheck.
	l.mu.Lock()
	every := max(recorderRecheck, 10*l.checkCost)
	l.mu.Unlock()
	if rec-checked < every && checked > 0 {
		return over
	}
	var sb time.Duration
	ok := false
	if l.sandboxCPU != nil {
		c0 := threadCPU()
		sb, ok = l.sandboxCPU(pid)
		l.mu.Lock()
		l.checkCost = threadCPU() - c0
		l.mu.Unlock()
	}
	l.mu.Lock()
	l.lastPid = pid
	l.mu.Unlock()
	over = !ok || rec > recorderAllowance+recorderRatio*sb
	l.mu.Lock()
	l.cpuChecked, l.sbxCPU, l.over = rec, sb, over
	l.mu.Unlock()
	return over
}

// threadCPU is the CPU time of the calling thread (serve locks its goroutine to one).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// recordWrite records each path of a write syscall that lies outside the write paths, and each that
// sbx could not resolve as the kernel does (resolve.go), whatever it spells. It returns what it
// judged, for recheckWrite.
func (l *Listener) recordWrite(fd int, req *seccompNotif, ws writeSyscall, b *budget) []resolution {
	name := l.names[req.Nr]
	flags, rs := l.judgeCall(req, ws, b)
	for _, r := range rs {
		if l.recordable(r) {
			l.recordResolution(fd, req, name, flags, r)
		}
	}
	return rs
}

// recheckWrite judges again a write call whose arguments changed in the task's memory while sbx judged
// it, and records what lands outside the write paths that the first judgment (first) did not: the
// kernel reads the arguments again after sbx's answer (SECCOMP_USER_NOTIF_FLAG_CONTINUE), so another
// thread (or a process sharing the memory) could show sbx a harmless path and the kernel another. The
// task itself waits in the call the whole time, so no program changes them but one that races its own
// call. What is recorded is unresolved (the run is incomplete): sbx cannot know which reading the
// kernel will get. A change made after sbx's last reading, in the moment between its answer and the
// kernel's reading, stays unseen: no reader of the task's memory can see it (seccomp_unotify(2)).
func (l *Listener) recheckWrite(fd int, req *seccompNotif, ws writeSyscall, first []resolution) {
	name := l.names[req.Nr]
	flags, rs := l.judgeCall(req, ws, newBudget())
	seen := "nothing to write"
	if i := slices.IndexFunc(first, func(f resolution) bool { return f.outcome != noWrite }); i >= 0 {
		seen = strconv.Quote(first[i].path)
	}
	for _, r := range rs {
		if !l.recordable(r) || slices.ContainsFunc(first, func(f resolution) bool {
			return f.outcome == r.outcome && f.path == r.path && l.recordable(f)
		}) {
			continue
		}
		why := fmt.Sprintf("changed while the call ran: another thread rewrote its arguments in memory while sbx read them (sbx first resolved %s)", seen)
		if r.why != "" {
			why += "; " + r.why
		}
		l.recordResolution(fd, req, name, flags, resolution{outcome: unresolved, path: r.path, dir: r.dir, why: why})
	}
}

// argsInMemory reads the arguments of a write call that lie in the task's memory (its paths, openat2's
// open_how, bind's address), as one string to compare.
func (l *Listener) argsInMemory(req *seccompNotif, ws writeSyscall) string {
	var b strings.Builder
	pid := int(req.Pid)
	if l.names[req.Nr] == "openat2" {
		flags, resolve, err := readOpenHow(pid, req.Args[2], req.Args[3])
		fmt.Fprintf(&b, "%x %x %v\x00", flags, resolve, err != nil)
	}
	if ws.sockaddr > 0 {
		p, err := readUnixPath(pid, req.Args[ws.sockaddr], req.Args[ws.sockaddr+1])
		fmt.Fprintf(&b, "%s %v\x00", p, err != nil)
		return b.String()
	}
	for _, pa := range ws.paths {
		if req.Args[pa[1]] == 0 {
			continue
		}
		p, err := readPathArg(pid, req.Args[pa[1]])
		fmt.Fprintf(&b, "%s %v\x00", p, err != nil)
	}
	return b.String()
}

// judgeCall resolves the path arguments of a write call as the kernel would: a resolution each (one of
// outcome noWrite when the call writes no name: an openat2 for reading, a socket address that is none).
func (l *Listener) judgeCall(req *seccompNotif, ws writeSyscall, b *budget) (string, []resolution) {
	name := l.names[req.Nr]
	f, hasFlags := uint64(0), ws.flags >= 0
	inRoot, why := false, ""
	if hasFlags {
		f = req.Args[ws.flags]
	} else if name == "openat2" {
		// Its flags and how it resolves are in struct open_how: an openat2 for reading is no write;
		// RESOLVE_IN_ROOT and RESOLVE_BENEATH make its dirfd the root. What cannot be read is unresolved.
		flags, resolve, err := readOpenHow(int(req.Pid), req.Args[2], req.Args[3])
		if err == nil && flags&openWriteFlags == 0 {
			return "", []resolution{{outcome: noWrite}}
		}
		if err != nil {
			why = err.Error()
		} else {
			f, hasFlags, inRoot = flags, true, resolve&resolveInRootish != 0
		}
	}
	flags := ""
	if hasFlags {
		flags = openFlags(f)
	}
	// open, openat, creat, openat2 and truncate follow a link in the last component unless told not
	// to; the others act on the last name itself.
	follow := (hasFlags || name == "creat" || name == "openat2" || name == "truncate") &&
		f&(unix.O_CREAT|unix.O_EXCL) != unix.O_CREAT|unix.O_EXCL && f&unix.O_NOFOLLOW == 0
	task := notifTask{tid: int(req.Pid), tgid: int(req.Pid), root: l.root} // its ids in the sandbox: when a walk needs them
	paths := ws.paths
	if name == "renameat2" && req.Args[4]&unix.RENAME_EXCHANGE != 0 {
		// An exchange writes both names: the source gets the target's file.
		paths = append([][2]int{{0, 1}}, paths...)
	}
	if ws.sockaddr > 0 {
		p, err := readUnixPath(int(req.Pid), req.Args[ws.sockaddr], req.Args[ws.sockaddr+1])
		if err == nil && p == "" {
			return flags, []resolution{{outcome: noWrite}} // not a socket file: another family, an abstract name, an invalid address
		}
		r := resolution{outcome: unresolved, path: p, why: fmt.Sprintf("reading the socket address from the process's memory: %v", err)}
		if err == nil {
			r = task.resolvePath(req, p, -1, false, false, b)
		}
		return flags, []resolution{r}
	}
	rs := make([]resolution, 0, len(paths))
	for _, pa := range paths {
		r := task.resolveArg(req, req.Args[pa[1]], pa[0], inRoot, follow, b)
		if why != "" && r.outcome != unresolved {
			r = resolution{outcome: unresolved, path: r.path, dir: r.dir, why: why}
		}
		rs = append(rs, r)
	}
	return flags, rs
}

// recordable says whether a resolved path of a write is recorded: it lies outside the write paths, or
// sbx could not resolve it as the kernel does.
func (l *Listener) recordable(r resolution) bool {
	switch r.outcome {
	case noWrite:
		return false
	case landed, spelled:
		// spelled: the kernel fails the walk on the way (a missing directory), and the path as far as
		// it resolves is all there is to judge.
		return !l.writable(r.path)
	}
	return true
}

// recordResolution records one recordable path of a write call.
// An unresolved one is counted only when it is kept: a task killed while sbx resolved its call (a pool's
// workers ended by their parent, a timeout) makes no write, and its walk's failure is no blind spot.
func (l *Listener) recordResolution(fd int, req *seccompNotif, name, flags string, r resolution) {
	if l.record(fd, req, true, name, r.path, flags, r.why, r.dir) && r.outcome == unresolved {
		l.mu.Lock()
		l.cost.Unresolved++
		l.mu.Unlock()
	}
}

// writable says whether p lies in one of the write paths (or is one).
func (l *Listener) writable(p string) bool {
	for _, w := range l.wpaths {
		if p == w || strings.HasPrefix(p, strings.TrimSuffix(w, "/")+"/") {
			return true
		}
	}
	if rest, ok := strings.CutPrefix(p, "/proc/"); ok {
		// /proc/PID/fd/N are magic links to open files, whatever they are.
		if _, after, ok := strings.Cut(rest, "/"); ok && strings.HasPrefix(after, "fd/") {
			return true
		}
	}
	return false
}

// record counts one refusal, once the notification is known to be still valid (so that the pid read
// from /proc is the notifying process), and says whether it did.
func (l *Listener) record(fd int, req *seccompNotif, write bool, name, detail, flags, unresolved, dir string) bool {
	t := taskOf(int(req.Pid))
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(int(req.Pid)) + "/exe")
	id := req.ID
	if notifIoctl(fd, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)) != nil {
		return false // the task is gone: its call never runs
	}
	l.keepFor(t, exe, write, name, detail, flags, unresolved, dir)
	return true
}

// keepFor keeps one record of task t, whose executable is exe.
func (l *Listener) keepFor(t notifTask, exe string, write bool, name, detail, flags, unresolved, dir string) {
	l.keep(notifyKey{pid: t.tgid, nsPid: t.nsTid, exe: exe, syscall: name, detail: detail, flags: flags, write: write,
		unresolved: unresolved, dir: dir})
}

// keep counts one record, within the bounds.
func (l *Listener) keep(k notifyKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.seccomp
	if k.write {
		m = l.written
	}
	if _, ok := m[k]; !ok {
		size := len(k.exe) + len(k.detail) + len(k.flags) + len(k.unresolved) + len(k.dir)
		if !l.room(size, k.write && policy.MaybePersistence(k.detail)) {
			l.lost++
			return
		}
		l.bytes += size
		l.order = append(l.order, k)
	}
	m[k]++
}

// room says whether a new record of size bytes fits the bounds. A refused write whose path could be a
// persistence mechanism has as much room again past them, as file changes have (the report's files
// lists): a flood of other refused writes cannot push the one that plants persistence out of the report.
func (l *Listener) room(size int, persistence bool) bool {
	keys, bytes := maxNotifyKeys, maxNotifyBytes
	if persistence {
		keys, bytes = 2*keys, 2*bytes
	}
	return len(l.order) < keys && l.bytes+size <= bytes
}

// openFlags names the write-relevant open flags.
func openFlags(f uint64) string {
	var out []string
	switch f & unix.O_ACCMODE {
	case unix.O_WRONLY:
		out = append(out, "O_WRONLY")
	case unix.O_RDWR:
		out = append(out, "O_RDWR")
	}
	for _, x := range []struct {
		bit  uint64
		name string
	}{{unix.O_CREAT, "O_CREAT"}, {unix.O_TRUNC, "O_TRUNC"}, {unix.O_APPEND, "O_APPEND"}, {unix.O_EXCL, "O_EXCL"}} {
		if f&x.bit != 0 {
			out = append(out, x.name)
		}
	}
	return strings.Join(out, "|")
}

// Records returns what was recorded so far (the listener keeps serving until Stop).
func (l *Listener) Records(rec policy.Record) report.Denials {
	d := report.Denials{Seccomp: []report.SeccompDenial{}, Landlock: []report.LandlockDenial{}, Writes: []report.WriteDenial{}}
	l.mu.Lock()
	defer l.mu.Unlock()
	recording := l.fd >= 0
	reason := l.reason
	if !recording && reason == "" {
		reason = "the supervisor never sent the seccomp notification fd"
	}
	if l.lost > 0 {
		reason = fmt.Sprintf("%d distinct records over the bound (%d records, %d bytes) dropped", l.lost, maxNotifyKeys, maxNotifyBytes)
	}
	for _, k := range l.order {
		if k.write {
			d.Writes = append(d.Writes, report.WriteDenial{Pid: k.nsPid, HostPid: k.pid, Exe: k.exe, Syscall: k.syscall,
				Path: k.detail, Flags: k.flags, Count: l.written[k], Unresolved: k.unresolved, Dir: k.dir})
			continue
		}
		d.Seccomp = append(d.Seccomp, report.SeccompDenial{Pid: k.nsPid, HostPid: k.pid, Exe: k.exe, Syscall: k.syscall,
			Args: k.detail, Action: "errno", Source: observe.SourceSeccompNotify, Count: l.seccomp[k]})
	}
	if len(rec.Syscalls) > 0 {
		d.Sources = append(d.Sources, report.DenialSource{Name: observe.SourceSeccompNotify, Recorded: recording,
			Covers: coversSyscalls, Reason: reason})
	}
	if rec.Writes {
		d.Sources = append(d.Sources, report.DenialSource{Name: observe.SourceWriteNotify, Recorded: recording,
			Covers: coversWrites, Reason: reason})
	}
	d.Available = recording
	d.Lost = l.lost
	if recording {
		c := l.cost
		sb := l.sbxCPU // the last reading the budget was judged by
		if l.sandboxCPU != nil {
			if now, ok := l.sandboxCPU(l.lastPid); ok && now > sb {
				sb = now
			}
		}
		c.SandboxCPUMs = float64(sb) / float64(time.Millisecond)
		d.Recorder = &c
	}
	return d
}

// Stop ends the listener. Call it only when no process of the sandbox is left: a process that
// notifies after the fd is closed gets ENOSYS.
func (l *Listener) Stop() {
	if l.done != nil {
		_, _ = unix.Write(l.wake[1], []byte{0})
		<-l.done
	}
	l.root.close() // after serve: nothing uses it any more
	l.mu.Lock()
	if l.fd >= 0 {
		unix.Close(l.fd)
	}
	l.mu.Unlock()
	unix.Close(l.wake[0])
	unix.Close(l.wake[1])
}

// NotRecorded is what a sandbox without a listener records: nothing; the sources rec asks for say why
// (reason; none when reason is "", as when the plan records nothing).
func NotRecorded(rec policy.Record, reason string) report.Denials {
	d := report.Denials{Seccomp: []report.SeccompDenial{}, Landlock: []report.LandlockDenial{},
		Writes: []report.WriteDenial{}, Sources: []report.DenialSource{}}
	if reason != "" {
		if len(rec.Syscalls) > 0 {
			d.Sources = append(d.Sources, report.DenialSource{Name: observe.SourceSeccompNotify, Covers: coversSyscalls, Reason: reason})
		}
		if rec.Writes {
			d.Sources = append(d.Sources, report.DenialSource{Name: observe.SourceWriteNotify, Covers: coversWrites, Reason: reason})
		}
	}
	return d
}

// What the two sources of sbx's own recording cover.
const (
	coversSyscalls = "the deny list's syscalls, with decoded arguments"
	coversWrites   = "opens for writing, creat, truncate, mkdir, mknod, rename, link and symlink outside the write paths"
)
