package observe

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sbx-dev/sbx/report"
	"golang.org/x/sys/unix"
)

// SnapshotOptions names what to look at. The caller knows the sandbox's processes (from its cgroup), so
// the snapshot never walks the host's /proc.
type SnapshotOptions struct {
	// HostPids are the sandbox's processes, as pids of the host's pid namespace.
	HostPids []int
	// InitHostPid is the sandbox's pid 1 (sbx's pause reaper). It is left out of the listing because it is
	// sbx's own, but processes reparented to it are marked Orphaned.
	InitHostPid int
	// NetNS is the path of the sandbox's network namespace, e.g. /proc/PID/ns/net. Empty: no sockets.
	NetNS string
	// HostTasks are the sandbox's threads (host thread ids, from its cgroup). Each names its process,
	// which is read too when HostPids lacks it: a task list is the ground truth of what still runs.
	HostTasks []int
	// NetDiag, when set, gives a sock_diag socket of the sandbox's network namespace (the caller may not
	// enter it: sbx without root); NetNS is then not entered. The snapshot closes the socket.
	NetDiag func() (int, error)
}

// Snap is what one snapshot saw.
type Snap struct {
	Processes   []report.Process // sorted by sandbox pid; the init is not included
	Listening   []report.Socket  // TCP LISTEN, bound unconnected UDP, unix LISTEN
	Established []report.Socket  // TCP ESTABLISHED, with the remote end
	Taken       time.Time        // when the snapshot started
	// Sockets holds every socket of the namespace, including those no fd holds (inode 0).
	Sockets []report.Socket
}

// Snapshot reads the given processes and the sockets of the sandbox's network namespace. Processes that
// exit during the walk are skipped. The socket dump (mostly kernel time) runs alongside the process
// walk, which is split over the CPUs: the work is all system calls, and the cost target is wall time. A
// socket created during the walk may then show in an fd without a description, never a wrong one.
//
// Established lists the TCP connections whenever a process of the sandbox holds one; connections no
// process holds (not yet accepted, closing) are listed only when that is the case too.
//
// The Snap is never nil: what could be read is in it, and the error says what could not (a process
// that could not be read, the socket dump).
func Snapshot(opts SnapshotOptions) (*Snap, error) {
	s := &Snap{Taken: time.Now()}
	type dumped struct {
		d   *sockDump
		err error
	}
	ch := make(chan dumped, 1)
	go func() {
		if opts.NetNS == "" {
			ch <- dumped{}
			return
		}
		var d *sockDump
		var err error
		if opts.NetDiag != nil {
			var fd int
			if fd, err = opts.NetDiag(); err == nil {
				d = &sockDump{fd: fd}
			}
		} else {
			d, err = openSockDump(opts.NetNS)
		}
		if err == nil {
			if err = d.waiting(); err != nil {
				d.close()
				d = nil
			}
		}
		ch <- dumped{d, err}
	}()
	raw, procErr := readProcs(opts)
	sd := <-ch
	errs := []error{procErr}
	if sd.err != nil {
		errs = append(errs, fmt.Errorf("reading the sockets: %w", sd.err))
	}
	if sd.d != nil {
		defer sd.d.close()
		if err := completeSockets(sd.d, raw); err != nil {
			errs = append(errs, fmt.Errorf("reading the connected sockets: %w", err))
		}
		s.Sockets = sd.d.socks
	}
	s.Processes = resolveParents(raw, opts.InitHostPid)
	s.attachSockets(extraSockets(raw))
	return s, errors.Join(errs...)
}

// completeSockets dumps the connected TCP sockets when some fd holds a socket the first dump did not
// find (a TCP connection, or a kind of socket sock_diag is not asked about, such as netlink).
func completeSockets(d *sockDump, raw []rawProc) error {
	known := make(map[uint32]bool, len(d.socks))
	for _, sock := range d.socks {
		known[sock.Inode] = true
	}
	for _, p := range raw {
		for _, fd := range p.FDs {
			if ino := socketInode(fd.Target); ino != 0 && !known[ino] {
				return d.connected()
			}
		}
		for _, ino := range p.extraSockets {
			if !known[ino] {
				return d.connected()
			}
		}
	}
	return nil
}

// readProcs reads the processes on up to GOMAXPROCS goroutines, each with its own buffers.
func readProcs(opts SnapshotOptions) ([]rawProc, error) {
	pids, tasksErr := processesOf(opts.HostPids, opts.HostTasks)
	pids = slices.DeleteFunc(pids, func(p int) bool { return p == opts.InitHostPid })
	workers := min(runtime.GOMAXPROCS(0), (len(pids)+procsPerWorker-1)/procsPerWorker)
	if workers <= 1 {
		raw, err := readProcRange(pids)
		return raw, errors.Join(tasksErr, err)
	}
	results := make([][]rawProc, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(pids)/workers, (w+1)*len(pids)/workers
		wg.Go(func() { results[w], errs[w] = readProcRange(pids[lo:hi]) })
	}
	wg.Wait()
	return slices.Concat(results...), errors.Join(tasksErr, errors.Join(errs...))
}

// processesOf returns pids and the processes the threads tids belong to, each once; the error names the
// threads that could not be read.
func processesOf(pids, tids []int) ([]int, error) {
	var errs []error
	out := slices.Clone(pids)
	known := make(map[int]bool, len(pids))
	for _, p := range pids {
		known[p] = true
	}
	r := newProcReader()
	if len(tids) > len(pids) {
		// The threads of the known processes need no look-up: one directory read each instead of one
		// status read per thread.
		for _, p := range pids {
			names, _ := r.readdirnames("/proc/" + strconv.Itoa(p) + "/task")
			for _, n := range names {
				if tid, err := strconv.Atoi(n); err == nil {
					known[tid] = true
				}
			}
		}
	}
	for _, tid := range tids {
		if known[tid] {
			continue
		}
		var st procStatus
		b, err := r.read("/proc/" + strconv.Itoa(tid) + "/status")
		if gone(err) {
			continue
		}
		if err == nil {
			st, err = parseStatus(b)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read thread %d: %w", tid, err))
			continue
		}
		known[tid] = true
		if st.tgid > 0 && !known[st.tgid] {
			known[st.tgid] = true
			out = append(out, st.tgid)
		}
	}
	return out, errors.Join(errs...)
}

// procsPerWorker is the least work worth a goroutine of its own (a process costs ~20 µs to read).
const procsPerWorker = 8

// readProcRange reads pids. A process that cannot be read whole is named in the error and kept with
// what was read, once its sandbox pid is known (a leftover that hides its fds is still a leftover); the
// others are read on.
func readProcRange(pids []int) ([]rawProc, error) {
	r := newProcReader()
	raw := make([]rawProc, 0, len(pids))
	var errs []error
	for _, pid := range pids {
		p, err := r.readProc(pid)
		if gone(err) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			if p.Pid == 0 {
				continue
			}
			if p.Argv == nil {
				p.Argv = []string{}
			}
			if p.FDs == nil {
				p.FDs = []report.FD{}
			}
		}
		raw = append(raw, p)
	}
	return raw, errors.Join(errs...)
}

// rawProc is a process as read, before its parent is resolved to a sandbox pid.
type rawProc struct {
	report.Process
	hostPPid int
	// sockets past MaxFDs, kept only to name the owner of a socket.
	extraSockets []uint32
}

// readProc reads one process. An error for which gone() holds means it exited meanwhile.
func (r *procReader) readProc(pid int) (rawProc, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	var p rawProc
	p.HostPid = pid
	b, err := r.read(dir + "/stat")
	if err != nil {
		return p, wrapProc(pid, err)
	}
	st, err := parseStat(b)
	if err != nil {
		return p, err
	}
	p.Comm, p.Start, p.hostPPid = st.comm, st.start, st.ppid
	p.State, p.Started = string(st.state), r.boot.Add(ticksToDuration(st.start))
	if b, err = r.read(dir + "/status"); err != nil {
		return p, wrapProc(pid, err)
	}
	status, err := parseStatus(b)
	if err != nil {
		return p, err
	}
	p.Pid, p.UID = status.nspid[len(status.nspid)-1], status.uid
	// A zombie main thread takes the process's exe, command line and fds along only when the whole
	// process is gone: with another thread alive, they are read through that thread.
	view := dir
	if st.state == 'Z' {
		if task, live, err := r.liveThread(dir, pid); err != nil {
			return p, wrapProc(pid, err)
		} else if task != "" {
			view, p.State, p.LeaderExited = task, string(live.state), true
			st.argBytes = live.argBytes
		}
	}
	if st.state != 'Z' && st.exiting && view == dir && r.allExiting(dir) {
		// Past exit() but not yet a zombie (a fork chain's parent caught mid-exit): its memory and files
		// are gone already, and it is no more running than a zombie is.
		p.State, p.FDs = "X", []report.FD{}
		return p, nil
	}
	if b, err = r.readLimit(view+"/cmdline", MaxArgvBytes); err != nil {
		return p, wrapProc(pid, err)
	}
	p.Argv, p.ArgvTruncated = capArgv(b, st.argBytes)
	if p.ArgvTruncated {
		p.ArgvBytes = st.argBytes
	}
	// exe is unreadable for kernel threads and zombies (ENOENT): keep the process with no exe.
	if exe, err := r.readlink(view + "/exe"); err == nil {
		p.Exe, p.Deleted = splitDeleted(exe)
	}
	if st.state == 'Z' && view == dir {
		// Every thread exited: the process holds no file any more (they close at exit), and without
		// root its fd directory cannot even be opened (EACCES).
		p.FDs = []report.FD{}
		return p, nil
	}
	if err = r.readFDs(view+"/fd", &p); err != nil {
		return p, wrapProc(pid, err)
	}
	return p, nil
}

// liveThread finds a thread of process pid (at dir) that has not exited, and returns its /proc
// directory and stat; "" when every thread has.
func (r *procReader) liveThread(dir string, pid int) (string, procStat, error) {
	tids, err := r.readdirnames(dir + "/task")
	if err != nil {
		return "", procStat{}, err
	}
	for _, tid := range tids {
		if tid == strconv.Itoa(pid) {
			continue
		}
		task := dir + "/task/" + tid
		b, err := r.read(task + "/stat")
		if gone(err) {
			continue
		}
		if err != nil {
			return "", procStat{}, err
		}
		st, err := parseStat(b)
		if err != nil {
			return "", procStat{}, err
		}
		if st.state != 'Z' && st.state != 'X' {
			return task, st, nil
		}
	}
	return "", procStat{}, nil
}

// allExiting reports whether every thread of the process at dir is past exit(): a process with one
// thread still running is alive, whatever its main thread does. A thread that cannot be read counts
// as alive, so that nothing is left out on a failed read.
func (r *procReader) allExiting(dir string) bool {
	tids, err := r.readdirnames(dir + "/task")
	if err != nil {
		return false
	}
	for _, tid := range tids {
		b, err := r.read(dir + "/task/" + tid + "/stat")
		if gone(err) {
			continue
		}
		if err != nil {
			return false
		}
		st, err := parseStat(b)
		if err != nil || !st.exiting && st.state != 'Z' && st.state != 'X' {
			return false
		}
	}
	return true
}

func wrapProc(pid int, err error) error {
	return fmt.Errorf("read process %d: %w", pid, err)
}

// readFDs lists the open fds of a process with their targets: the lowest MaxFDs of them, with the total.
// Socket inodes past the bound are kept apart, only to name the owner of a socket.
func (r *procReader) readFDs(dir string, p *rawProc) error {
	names, err := r.readdirnames(dir)
	if err != nil {
		return err
	}
	nums := make([]int, 0, len(names))
	for _, name := range names {
		if n, err := strconv.Atoi(name); err == nil {
			nums = append(nums, n)
		}
	}
	names = nil
	slices.Sort(nums)
	p.FDs = make([]report.FD, 0, min(len(nums), MaxFDs))
	for i, n := range nums {
		if len(p.FDs) >= MaxFDs && (len(p.extraSockets) >= maxExtraSockets || r.extraReads >= maxExtraFDReads) {
			// Past what is listed and what can still name a socket's owner: counted, not read.
			p.FDsTotal += len(nums) - i
			p.FDsTruncated = true
			break
		}
		target, err := r.readlink(dir + "/" + strconv.Itoa(n))
		if err != nil {
			// The fd was closed between readdir and readlink: it no longer exists.
			continue
		}
		p.FDsTotal++
		if len(p.FDs) < MaxFDs {
			p.FDs = append(p.FDs, newFD(n, target))
			continue
		}
		r.extraReads++
		p.FDsTruncated = true
		if ino := socketInode(target); ino != 0 {
			p.extraSockets = append(p.extraSockets, ino)
		}
	}
	return nil
}

// newFD classifies one fd. The kernel marks files unlinked while open with " (deleted)"; memfds always
// carry it, so for them it says nothing and is only stripped.
func newFD(n int, target string) report.FD {
	fd := report.FD{FD: n, Target: target, Kind: fdKind(target)}
	if fd.Kind == "file" || fd.Kind == "memfd" || fd.Kind == "dev" {
		var deleted bool
		fd.Target, deleted = splitDeleted(target)
		fd.Deleted = deleted && fd.Kind != "memfd"
	}
	return fd
}

// readdirnames lists a directory with getdents into r's buffer.
func (r *procReader) readdirnames(dir string) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var names []string
	for {
		n, err := unix.Getdents(fd, r.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(r.buf[:n], -1, names)
		// proc fills the buffer as far as entries fit: room left for a longest entry means the end.
		if n+maxDirent < len(r.buf) {
			return names, nil
		}
	}
}

// resolveParents turns host parent pids into sandbox pids. A parent outside the given set is the init
// (sandbox pid 1) or outside the sandbox (0). Processes whose parent is the init were reparented to it:
// sbx starts the command as a separate process, so nothing the command runs has the init as its parent
// unless its own parent exited.
func resolveParents(raw []rawProc, initHostPid int) []report.Process {
	sandboxPid := make(map[int]int, len(raw)+1)
	for _, p := range raw {
		sandboxPid[p.HostPid] = p.Pid
	}
	if initHostPid != 0 {
		sandboxPid[initHostPid] = 1
	}
	procs := make([]report.Process, len(raw))
	for i, p := range raw {
		p.PPid = sandboxPid[p.hostPPid]
		p.Orphaned = p.PPid == 1 && p.HostPid != initHostPid
		procs[i] = p.Process
	}
	slices.SortFunc(procs, func(a, b report.Process) int { return a.Pid - b.Pid })
	return procs
}

// extraSockets maps the sandbox pid of each process with sockets past MaxFDs to their inodes.
func extraSockets(raw []rawProc) map[int][]uint32 {
	extra := make(map[int][]uint32)
	for _, p := range raw {
		if len(p.extraSockets) > 0 {
			extra[p.Pid] = p.extraSockets
		}
	}
	return extra
}

// attachSockets describes socket fds and names the owners of listening and established sockets. The
// owner is the lowest sandbox pid holding the socket (sockets are shared across fork).
func (s *Snap) attachSockets(extra map[int][]uint32) {
	byInode := make(map[uint32]*report.Socket, len(s.Sockets))
	for i := range s.Sockets {
		if s.Sockets[i].Inode != 0 {
			byInode[s.Sockets[i].Inode] = &s.Sockets[i]
		}
	}
	owner := make(map[uint32]*report.Process)
	for i := range s.Processes {
		p := &s.Processes[i]
		for j := range p.FDs {
			fd := &p.FDs[j]
			ino := socketInode(fd.Target)
			if ino == 0 {
				continue
			}
			if _, ok := owner[ino]; !ok {
				owner[ino] = p
			}
			if sock := byInode[ino]; sock != nil {
				fd.Socket = sock.Describe()
			}
		}
		for _, ino := range extra[p.Pid] {
			if _, ok := owner[ino]; !ok {
				owner[ino] = p
			}
		}
	}
	for i := range s.Sockets {
		sock := &s.Sockets[i]
		if p := owner[sock.Inode]; p != nil && sock.Inode != 0 {
			sock.Pid, sock.Exe = p.Pid, p.Exe
		}
		switch {
		case listening(*sock):
			s.Listening = append(s.Listening, *sock)
		case strings.HasPrefix(sock.Proto, "tcp") && sock.State == "ESTABLISHED":
			s.Established = append(s.Established, *sock)
		}
	}
	sortSockets(s.Listening)
	sortSockets(s.Established)
}

func sortSockets(socks []report.Socket) {
	slices.SortFunc(socks, func(a, b report.Socket) int {
		if a.Proto != b.Proto {
			if a.Proto < b.Proto {
				return -1
			}
			return 1
		}
		if a.Port != b.Port {
			return a.Port - b.Port
		}
		if a.Address < b.Address {
			return -1
		}
		if a.Address > b.Address {
			return 1
		}
		return int(a.Inode) - int(b.Inode)
	})
}

// LeftRunning returns the processes of after that did not exist in before: new since the before snapshot
// and still alive once the command exited. A process is the same when its host pid and start time match,
// so a reused pid counts as new. Zombies are not running and are left out; the init is never in a Snap.
// after is taken once the command was reaped: a process with the command's pid then is another one (a pid
// is no identity, and a command could have a process of the sandbox take its pid to go unlisted).
func LeftRunning(before, after *Snap) []report.Process {
	type key struct {
		pid   int
		start uint64
	}
	old := make(map[key]bool)
	if before != nil {
		for _, p := range before.Processes {
			old[key{p.HostPid, p.Start}] = true
		}
	}
	var left []report.Process
	for _, p := range after.Processes {
		// A zombie has exited already; the init reaps it.
		if p.State == "Z" || p.State == "X" || old[key{p.HostPid, p.Start}] {
			continue
		}
		left = append(left, p)
	}
	return left
}

// maxDirent bounds one linux_dirent64: 19 bytes of header and a name of up to 255 bytes, aligned to 8.
const maxDirent = 280
