package observe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbx-dev/sbx/report"
	"golang.org/x/sys/unix"
)

// The process-events connector (linux/cn_proc.h, linux/connector.h). x/sys/unix has none of these.
const (
	cnIdxProc         = 1
	cnValProc         = 1
	procCnMcastListen = 1
	procEventFork     = 0x00000001
	procEventExec     = 0x00000002
	procEventExit     = 0x80000000
	sizeofCnMsg       = 20
	procEventOffset   = unix.SizeofNlMsghdr + sizeofCnMsg // proc_event after nlmsghdr and cn_msg
	procEventDataOff  = procEventOffset + 16              // the union after what, cpu, timestamp_ns
	eventsRcvBuf      = 8 << 20
	readerNice        = -15
	// maxEventLog bounds the events recorded (about 40 bytes each); past it events count as lost.
	maxEventLog = 1 << 19
	// maxDetailedExecs bounds the execs read from /proc at event time; later ones keep only what the
	// event carries. Runs list the first MaxExecs execs, so this leaves room for sbx's own.
	maxDetailedExecs = 4 * MaxExecs
)

// ErrHostNetNS is returned by StartEvents when called from a thread outside the host's network namespace:
// the kernel delivers process events only to sockets in the initial network namespace.
var ErrHostNetNS = errors.New("process events need a socket in the host network namespace")

// EventsOptions tunes the event stream.
type EventsOptions struct {
	// InitFirst says that the first root given to Stop is the sandbox's init: its own execs (its start,
	// whatever path it was started through) are dropped.
	InitFirst bool
	// Track lists the host pids whose descendants' events are recorded, their execs read from /proc as
	// they happen. Events of other processes are not recorded, which keeps the cost and the memory on a
	// busy host low; where eBPF can be loaded, the kernel does not even pass them (events_bpf.go).
	// Default: the calling process, which with runc's libcontainer is the ancestor of everything in the
	// sandbox. Track adds more later.
	Track []int
	// MaxProcesses is how many tracked processes alive at once the kernel-side filter makes room for
	// (at least 2048, at most 65536): the sandbox's pids limit and some room for sbx's own. Past it the
	// filter passes every process's events, which the reader then sorts: slower, never incomplete.
	MaxProcesses int
}

// Events records fork, exec and exit events of the tracked processes and their descendants from
// StartEvents until Stop, in memory (bounded: maxEventLog events, maxDetailedExecs read from /proc), on a
// goroutine of its own.
type Events struct {
	fd       int
	wake     [2]int // a pipe: Stop writes to it to wake the reader out of poll
	opts     EventsOptions
	mono0    uint64 // CLOCK_MONOTONIC at start, the clock of the events' timestamps
	wall0    time.Time
	done     chan struct{}
	stopOnce sync.Once
	lost     atomic.Int64
	mu       sync.Mutex // guards tracked: Track runs on the caller's goroutine
	tracked  map[int]bool
	log      []event
	nspidOf  map[int][]int // host pid -> pid in each namespace, learnt at exec time, dropped at exit
	r        *procReader
	readErr  error
	// tr is the kernel-side filter (events_bpf.go); nil when filterErr says why the classic one is used.
	tr        *tracker
	filterErr error
	datagrams int              // datagrams read: each one a wake-up the filter let through
	detailed  int              // execs read from /proc so far
	reads     map[int]execRead // host pid -> its last exec read from /proc (settle)
	dropped   int              // execs the last Stop left out past MaxExecs
}

// execRead is what onExec read of a process from /proc, the time of its exec event and the time the
// reads ended (CLOCK_MONOTONIC, the events' clock).
type execRead struct {
	info    *report.Exec
	ts, end uint64
}

// event is one recorded kernel event. For execs, info holds what /proc told at event time.
type event struct {
	what        uint32
	ts          uint64
	pid, parent int // exec/exit: pid; fork: child and parent tgids
	info        *report.Exec
	// leader marks the exit of a leader that may leave threads behind (the classic filter's, the opened
	// eBPF filter's): unlike a whole process's end, it does not end the pid's tracking.
	leader bool
}

// StartEvents subscribes to the kernel's process events and starts recording. Call it before the command
// starts: what happens before is not seen. It needs root (CAP_NET_ADMIN) and must run on a thread in the
// host's network namespace.
func StartEvents(opts EventsOptions) (*Events, error) {
	e := &Events{
		opts: opts, done: make(chan struct{}), tracked: make(map[int]bool),
		nspidOf: make(map[int][]int), r: newProcReader(), reads: make(map[int]execRead),
	}
	track := opts.Track
	if len(track) == 0 {
		track = []int{os.Getpid()}
	}
	for _, p := range track {
		e.tracked[p] = true
	}
	if err := unix.Pipe2(e.wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, fmt.Errorf("start process events: %w", err)
	}
	fd, err := procConnectorSocket(e.attachFilter(track))
	if err != nil {
		unix.Close(e.wake[0])
		unix.Close(e.wake[1])
		if e.tr != nil {
			e.tr.close()
		}
		return nil, err
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	e.mono0, e.wall0 = uint64(ts.Nano()), time.Now()
	e.fd = fd
	// Return only once the reader runs on its own thread: events queued before it starts are read late,
	// when short-lived processes may be gone.
	ready := make(chan struct{})
	go e.read(ready)
	<-ready
	return e, nil
}

// Track adds host pids whose descendants' execs are read from /proc at event time (see EventsOptions).
// Their events from the return on are seen: the kernel-side filter learns them before Track returns, and
// the reader, which waits for the same lock, only afterwards handles what it passed.
func (e *Events) Track(pids ...int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range pids {
		e.tracked[p] = true
	}
	if e.tr != nil {
		e.tr.add(pids...)
	}
}

// attachFilter returns what procConnectorSocket attaches to the socket: the eBPF filter tracking track
// (events_bpf.go), or, when that cannot be loaded, the classic filter, which passes every whole process's
// events for the reader to sort; FilterDegraded then says why. Unprivileged callers try too: a socket
// filter is the one program an unprivileged process may load where kernel.unprivileged_bpf_disabled is
// 0; elsewhere (the usual default) the kernel refuses with EPERM and the classic filter serves, as it
// did before (since Linux 6.6 the connector serves unprivileged listeners too).
func (e *Events) attachFilter(track []int) func(fd int) error {
	return func(fd int) error {
		tr, err := loadTracker(fd, trackSize(e.opts.MaxProcesses), track)
		if err != nil {
			e.filterErr = err
			return attachClassic(fd)
		}
		e.tr = tr
		return nil
	}
}

// FilterDegraded is nil when the kernel passed this stream only the tracked processes' events; otherwise
// it says why every whole process's events on the host reached the reader instead: the eBPF filter could
// not be loaded (EPERM without the privilege), or its map ran full (ErrFilterFull). The recording is
// complete either way: the reader sorts them. Final after Stop.
func (e *Events) FilterDegraded() error { return e.filterErr }

// ErrFilterFull says that the kernel-side filter could not track every process and passed everything.
var ErrFilterFull = errors.New("the kernel-side process-events filter ran out of room")

func attachClassic(fd int) error {
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, eventsFilter()); err != nil {
		return fmt.Errorf("filter process events: %w", err)
	}
	return nil
}

// Lost returns how many times the kernel dropped events because the reader fell behind (ENOBUFS). A
// non-zero count means the exec list may be incomplete.
func (e *Events) Lost() int { return int(e.lost.Load()) }

// procConnectorSocket opens, filters (attach), sizes, binds and subscribes a process-events socket. The
// filter is in place before the bind: no event arrives unfiltered, and the eBPF filter sees every fork of
// its tree. It runs on a locked thread so that the namespace check and the socket refer to the same thread.
func procConnectorSocket(attach func(fd int) error) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if !inHostNetNS() {
		return -1, ErrHostNetNS
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK,
		unix.NETLINK_CONNECTOR)
	if err != nil {
		return -1, fmt.Errorf("open process-events socket: %w", err)
	}
	if err := attach(fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	// A burst of forks on the host fills the default buffer; FORCE ignores rmem_max (root only).
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, eventsRcvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, eventsRcvBuf)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind process-events socket: %w", err)
	}
	if err := unix.Sendto(fd, subscribeMsg(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("subscribe to process events: %w", err)
	}
	return fd, nil
}

// eventsFilter is the classic socket filter, used where the eBPF one (tracker) cannot be: it keeps only
// what handle uses, execs, and forks and exits of whole processes, of the whole host. Threads are most
// of a host's forks and exits (every Go program starts several), and each event reaches every sbx run in
// progress: dropping them in the kernel spares each reader most of its wake-ups. Classic BPF loads words
// in network byte order, so the event codes are compared byte-swapped; pids are compared with each other,
// which the order does not change.
func eventsFilter() *unix.SockFprog {
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeqK = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jeqX = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_X
		tax  = unix.BPF_MISC | unix.BPF_TAX
		ret  = unix.BPF_RET | unix.BPF_K
	)
	swap := func(v uint32) uint32 { return v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24 }
	d := uint32(procEventDataOff)
	prog := []unix.SockFilter{
		/* 0 */ {Code: ld, K: procEventOffset}, // what
		/* 1 */ {Code: jeqK, K: swap(procEventExec), Jt: 11, Jf: 0},
		/* 2 */ {Code: jeqK, K: swap(procEventFork), Jt: 2, Jf: 0},
		/* 3 */ {Code: jeqK, K: swap(procEventExit), Jt: 5, Jf: 0},
		/* 4 */ {Code: ret, K: 0},
		// fork: child_pid == child_tgid
		/* 5 */ {Code: ld, K: d + 8},
		/* 6 */ {Code: tax},
		/* 7 */ {Code: ld, K: d + 12},
		/* 8 */ {Code: jeqX, Jt: 4, Jf: 5},
		// exit: process_pid == process_tgid
		/* 9 */ {Code: ld, K: d},
		/* 10 */ {Code: tax},
		/* 11 */ {Code: ld, K: d + 4},
		/* 12 */ {Code: jeqX, Jt: 0, Jf: 1},
		/* 13 */ {Code: ret, K: 0xffffffff},
		/* 14 */ {Code: ret, K: 0},
	}
	return &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
}

func inHostNetNS() bool {
	var self, host unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &self) != nil || unix.Stat("/proc/1/ns/net", &host) != nil {
		return true // cannot tell: let the subscription decide
	}
	return self.Ino == host.Ino && self.Dev == host.Dev
}

// subscribeMsg builds PROC_CN_MCAST_LISTEN. Since Linux 6.6 it may carry an event mask (struct
// proc_input) so the kernel drops what sbx does not need (uid, sid, ptrace ... changes); older kernels
// ignore a message of that size, so they get the plain 4-byte form.
func subscribeMsg() []byte {
	payload := binary.NativeEndian.AppendUint32(nil, procCnMcastListen)
	if kernelAtLeast(6, 6) {
		payload = binary.NativeEndian.AppendUint32(payload, procEventFork|procEventExec|procEventExit)
	}
	msg := make([]byte, procEventOffset, procEventOffset+len(payload))
	binary.NativeEndian.PutUint32(msg[0:], uint32(procEventOffset+len(payload)))
	binary.NativeEndian.PutUint16(msg[4:], unix.NLMSG_DONE)
	binary.NativeEndian.PutUint32(msg[12:], uint32(os.Getpid()))
	cn := msg[unix.SizeofNlMsghdr:]
	binary.NativeEndian.PutUint32(cn[0:], cnIdxProc)
	binary.NativeEndian.PutUint32(cn[4:], cnValProc)
	binary.NativeEndian.PutUint16(cn[16:], uint16(len(payload)))
	return append(msg, payload...)
}

func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var maj, min int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &maj, &min); err != nil {
		return false
	}
	return maj > major || maj == major && min >= minor
}

// read is the reader goroutine. It owns a thread, raised in priority, and blocks in poll(2) rather than
// in Go's poller: whether a short-lived process can still be read depends on how soon after its exec the
// reader runs (measured here: with nice 0, 1-5% of /bin/true execs were missed, with -15 about 0.3%).
// At the end the thread gets its priority back and returns to the runtime, so that the next run's
// reader (a long-running sbx's) need not make a thread; one whose priority cannot be restored is never
// unlocked, and the runtime discards it with the goroutine.
func (e *Events) read(ready chan<- struct{}) {
	defer close(e.done)
	runtime.LockOSThread()
	tid := unix.Gettid()
	before, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	raised := err == nil && unix.Setpriority(unix.PRIO_PROCESS, tid, readerNice) == nil
	defer func() {
		// getpriority(2) returns 20 - nice.
		if !raised || unix.Setpriority(unix.PRIO_PROCESS, tid, 20-before) == nil {
			runtime.UnlockOSThread()
		}
	}()
	close(ready)
	buf := make([]byte, 64<<10)
	fds := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN}, {Fd: int32(e.wake[0]), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			e.readErr = fmt.Errorf("wait for process events: %w", err)
			return
		}
		if err := e.drain(buf); err != nil {
			e.readErr = err
			return
		}
		// Stop wakes the reader only after the command exited: its events are queued already and
		// the drain above read them.
		if fds[1].Revents != 0 {
			return
		}
	}
}

// drain reads every queued event without blocking.
func (e *Events) drain(buf []byte) error {
	for {
		n, err := unix.Read(e.fd, buf)
		switch {
		case err == unix.ENOBUFS:
			e.lost.Add(1)
		case err == unix.EAGAIN || err == unix.EINTR:
			return nil
		case err != nil:
			return fmt.Errorf("read process events: %w", err)
		case n <= 0:
			return nil
		default:
			e.datagrams++
			e.handle(buf[:n])
		}
	}
}

// handle decodes one datagram: one netlink message holding one cn_msg with one proc_event.
func (e *Events) handle(b []byte) {
	if len(b) < procEventDataOff+8 {
		return
	}
	what := binary.NativeEndian.Uint32(b[procEventOffset:])
	ev := event{what: what, ts: binary.NativeEndian.Uint64(b[procEventOffset+8:])}
	d := b[procEventDataOff:]
	u32 := func(i int) int { return int(binary.NativeEndian.Uint32(d[4*i:])) }
	// Only events of tracked processes are kept: the rest of the host is not what a run reports.
	switch what {
	case procEventFork:
		// Threads are forks too; only a new thread group is a new process.
		if len(d) < 16 || u32(2) != u32(3) {
			return
		}
		ev.parent, ev.pid = u32(1), u32(3)
		e.settle(ev.pid, ev.ts)
		tracked, reused := e.onFork(ev.parent, ev.pid)
		if reused {
			// Recorded as the end of the process that had the pid, for Stop's walk.
			ev = event{what: procEventExit, ts: ev.ts, pid: ev.pid}
		} else if !tracked {
			return
		}
	case procEventExec:
		ev.pid = u32(1)
		if ev.info = e.onExec(ev.pid, ev.ts); ev.info == nil {
			return
		}
	case procEventExit:
		// The filters pass a process's exit only: the eBPF one that of its last task, which may be a
		// thread other than the leader, cut to endedLen (events_bpf.go); the classic one, and the eBPF
		// one once opened, its leader's, whole.
		ev.pid, ev.leader = u32(1), len(b) != endedLen
		e.settle(ev.pid, ev.ts)
		if !e.onExit(ev.pid, ev.leader) {
			return
		}
	default:
		return
	}
	if len(e.log) >= maxEventLog {
		e.lost.Add(1)
		return
	}
	e.log = append(e.log, ev)
}

// onFork tracks child when parent is tracked, and says whether it is. A child of an untracked parent
// is untracked, also when its pid was tracked (reused): the host reused the pid of a process whose end
// went unseen, or was seen as its leader's exit only.
func (e *Events) onFork(parent, child int) (tracked, reused bool) {
	delete(e.nspidOf, child) // the reader's own: a new process, maybe in another namespace
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.tracked[parent] {
		reused = e.tracked[child]
		delete(e.tracked, child)
		return false, reused
	}
	e.tracked[child] = true
	if len(e.tracked) > maxTracked {
		e.sweep()
	}
	return true, false
}

// maxTracked bounds tracked where a leader's exit does not end a pid's tracking (see onExit); the
// host's pid space (kernel.pid_max, up to 4M) bounds it too. A variable for the tests.
var maxTracked = 1 << 20

// sweep drops the tracked pids that are gone from /proc, past maxTracked: a fork or exec by a thread of
// such a process may still be queued behind its leader's exit, so the sweep counts as a loss (Lost).
// Called with mu held.
func (e *Events) sweep() {
	for p := range e.tracked {
		if err := unix.Access("/proc/"+strconv.Itoa(p), unix.F_OK); errors.Is(err, unix.ENOENT) {
			delete(e.tracked, p)
		}
	}
	e.lost.Add(1)
}

// onExit says whether pid is tracked, and forgets it when its whole process ended. The exit of a leader
// (leader: all that the classic filter passes) does not end the tracking: the process's other threads
// may fork and exec on under its pid. The pid then stays tracked until the host hands it to a child of
// an untracked parent (onFork), which both filters pass in that state; tracked grows meanwhile, by one
// entry per process forked in the tree, up to maxTracked.
func (e *Events) onExit(pid int, leader bool) bool {
	e.mu.Lock()
	tracked := e.tracked[pid]
	if !leader {
		delete(e.tracked, pid)
	}
	e.mu.Unlock()
	if !leader {
		delete(e.nspidOf, pid)
	}
	return tracked
}

// onExec reads a tracked process right away, while it most likely still runs the binary it just
// executed; nil for an untracked one. The event itself carries only the pid and the time: that is all a
// process that exited before it could be read keeps (marked Incomplete), and so do the execs past
// maxDetailedExecs. The command line is kept up to MaxArgvBytes and MaxArgs.
func (e *Events) onExec(pid int, ts uint64) *report.Exec {
	e.mu.Lock()
	tracked := e.tracked[pid]
	e.mu.Unlock()
	if !tracked {
		return nil
	}
	x := &report.Exec{HostPid: pid, Incomplete: true}
	if e.settle(pid, ts) || e.detailed >= maxDetailedExecs {
		return x
	}
	e.detailed++
	defer func() { e.reads[pid] = execRead{info: x, ts: ts, end: monotonic()} }()
	// exe and cmdline vanish when the process exits, stat and status only when it is reaped: read the
	// former first.
	dir := "/proc/" + strconv.Itoa(pid)
	if exe, err := e.r.readlink(dir + "/exe"); err == nil {
		x.Exe, _ = splitDeleted(exe)
	}
	var cmdline []byte
	if b, err := e.r.readLimit(dir+"/cmdline", MaxArgvBytes); err == nil && len(b) > 0 {
		cmdline = append(cmdline, b...)
	}
	if cmdline == nil {
		// No command line (a process's has at least argv[0], "" when it passed none): the process is
		// gone, or in the middle of a later exec, whose new image /proc shows from the switch of its
		// memory on, and whose arguments come only once that image is set up. That exec's event is
		// sent after that, so its time would be later than this read's end and settle would keep
		// what was read: the later program, listed as this exec. Nothing read of it stands.
		*x = report.Exec{HostPid: pid, Incomplete: true}
		return x
	}
	b, err := e.r.read(dir + "/stat")
	if err != nil {
		return x
	}
	st, err := parseStat(b)
	if err != nil {
		return x
	}
	if cmdline != nil {
		x.Argv, x.ArgvTruncated = capArgv(cmdline, st.argBytes)
		if x.ArgvTruncated {
			x.ArgvBytes = st.argBytes
		}
	}
	x.Comm = st.comm
	if nspid, err := e.nspid(pid); err == nil && len(nspid) > 0 { // an empty NSpid line: no pid to give
		x.Pid = nspid[len(nspid)-1]
		x.PPid = e.sandboxParent(st.ppid, len(nspid))
	}
	x.Incomplete = x.Exe == "" || x.Argv == nil || x.Pid == 0
	return x
}

// settle checks what was read of pid at its last exec against an event of pid (a fork that hands the
// pid to a new process, an exec, an exit) at time ts. /proc shows a process as it is when read, not as it
// was at the event: a program that executes another at once (or exits, its pid taken by another
// process) before the reader gets to its exec would otherwise be listed as that other program, and a
// run of an executable outside expect.execs would pass as an allowed one (a flood of execs delays the
// reader at will). What was read before the later event happened stands; what was read after is
// dropped, the exec kept as the event carries it (Incomplete, no exe: never an allowed one). It says
// whether an event of pid later than ts was read already: then /proc can only show what came after.
func (e *Events) settle(pid int, ts uint64) (stale bool) {
	r, ok := e.reads[pid]
	if !ok {
		return false
	}
	if ts < r.ts {
		return true // delivered out of order: the later exec's read stands for the later exec only
	}
	if ts <= r.end {
		*r.info = report.Exec{HostPid: r.info.HostPid, Incomplete: true}
	}
	delete(e.reads, pid)
	return false
}

// monotonic is CLOCK_MONOTONIC in nanoseconds, the clock of the events' timestamps.
func monotonic() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// nspid reads the pids of a process in each pid namespace; a process seen at an earlier exec (usually
// the parent, a shell) is not read again.
func (e *Events) nspid(pid int) ([]int, error) {
	if ns, ok := e.nspidOf[pid]; ok {
		return ns, nil
	}
	b, err := e.r.read("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	st, err := parseStatus(b)
	if err != nil {
		return nil, err
	}
	e.nspidOf[pid] = st.nspid
	return st.nspid, nil
}

// sandboxParent returns the parent's pid in the child's pid namespace, or 0 when the parent is outside
// it (its pid has fewer levels, like sbx itself for the command).
func (e *Events) sandboxParent(ppid, depth int) int {
	nspid, err := e.nspid(ppid)
	if err != nil || depth == 0 || len(nspid) != depth {
		return 0
	}
	return nspid[depth-1]
}

// Stop ends the stream and returns the first MaxExecs execs (Dropped counts the rest) of the given roots
// and their descendants (by the fork tree, in event order), so that no process outside the sandbox
// appears. Pass the sandbox init's and the command's host pids. A root's pid counts from its own fork on,
// if that was seen: an earlier process with the same pid is not it. With InitFirst, the first root's own
// execs are dropped, and only those: what the command runs is listed whatever the executable, sbx's
// supervisor binary included. Calling Stop again filters the same recording for other roots.
func (e *Events) Stop(roots []int) ([]report.Exec, error) {
	e.stopOnce.Do(func() {
		_, _ = unix.Write(e.wake[1], []byte{0})
		<-e.done
		unix.Close(e.fd)
		unix.Close(e.wake[0])
		unix.Close(e.wake[1])
		e.mu.Lock()
		if e.tr != nil {
			if e.tr.opened() {
				e.filterErr = ErrFilterFull
			}
			e.tr.close()
			e.tr = nil
		}
		e.mu.Unlock()
	})
	if e.readErr != nil {
		return nil, e.readErr
	}
	return e.filter(roots), nil
}

// Dropped returns how many execs the last Stop left out past MaxExecs.
func (e *Events) Dropped() int { return e.dropped }

// filter walks the log in order, keeping the set of processes in the tree.
func (e *Events) filter(roots []int) []report.Exec {
	born := make(map[int]int) // root -> index of the fork that created it
	for i, ev := range e.log {
		if ev.what == procEventFork && slices.Contains(roots, ev.pid) {
			born[ev.pid] = i
		}
	}
	in := make(map[int]bool)
	for _, r := range roots {
		if _, ok := born[r]; !ok {
			in[r] = true
		}
	}
	var execs []report.Exec
	e.dropped = 0
	parent := make(map[int]int)     // host pid -> host pid of its parent, from the fork events
	sandboxPid := make(map[int]int) // host pid -> sandbox pid, from the execs that could be read
	for i, ev := range e.log {
		switch ev.what {
		case procEventFork:
			if in[ev.parent] || born[ev.pid] == i && slices.Contains(roots, ev.pid) {
				in[ev.pid] = true
				parent[ev.pid] = ev.parent
			} else {
				delete(in, ev.pid) // a pid reused outside the roots' trees
			}
		case procEventExit:
			if !ev.leader {
				delete(in, ev.pid)
			}
		case procEventExec:
			if in[ev.pid] && !(e.opts.InitFirst && len(roots) > 0 && ev.pid == roots[0]) {
				x := *ev.info
				x.Time = e.wall0.Add(time.Duration(int64(ev.ts - e.mono0)))
				if x.Incomplete {
					x.PPid = sandboxPid[parent[x.HostPid]]
				} else {
					sandboxPid[x.HostPid] = x.Pid
				}
				if len(execs) >= MaxExecs {
					e.dropped++
					continue
				}
				execs = append(execs, x)
			}
		}
	}
	return execs
}
