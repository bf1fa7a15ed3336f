package observe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/safefs"
	"github.com/sbx-dev/sbx/report"
)

// A writable share is the host's directory bound into the sandbox: what the command writes there lands
// on the host at once, with no layer to compare afterwards. ShareWatch records it as it happens, from
// the kernel's file events (fanotify), for root only:
//
//   - Mark. A filesystem mark (FAN_MARK_FILESYSTEM) on each share's file system, the only mark that
//     gives directory-entry events (create, delete, rename): the kernel refuses them on a mount mark
//     (EINVAL, checked on 6.18), and an inode mark would need a walk of the whole share. Events come
//     with the directory's file handle and the entry's name (FAN_REPORT_DFID_NAME), the entry's own
//     handle (FAN_REPORT_TARGET_FID) and a pidfd of the process (FAN_REPORT_PIDFD). The mark sees the
//     whole file system, the host's processes included: the reader sorts.
//   - Whose. A process still alive when its event is read is the sandbox's when its pid namespace is the
//     sandbox's or one below it, asked through the event's pidfd, which names that very process (no pid
//     number that could have been reused): with PIDFD_GET_PID_NAMESPACE where the kernel answers it
//     (Linux 6.11, probed at start); before, /proc/PID/ns/pid of the pid the pidfd's fdinfo gives,
//     taken only when the pidfd's process is still there after the open (a signal 0 through it). One that exited before the event was read has no pidfd (or
//     one whose namespace can no longer be asked): its event keeps the pid number and the read's time window, and Stop counts it when the exec stream saw
//     a process of that number in the sandbox's fork tree during that window (the host would have to
//     hand the same number out twice within the window for a host process to be taken for it).
//   - Where. The directory's handle is opened (open_by_handle_at, O_PATH: no link is followed, nothing
//     is opened for reading) on the share's own file system, and its path, as the kernel has it, placed
//     below a share or not; names come from the event. A directory gone before its event is read is
//     placed by the handle its own removal or creation event carried, once that is known. What cannot
//     be placed at all is a Problem: the lists may miss it. At Stop each entry's directory is looked up
//     again, so that an entry is listed where it ended, not where a renamed directory held it for a
//     while.
//   - What. Per path, the first and last events say whether it was there before and is there after:
//     created, modified (written, truncated, chmod, chown, a file opened for writing and closed), or
//     deleted; a temporary file created and removed within the run is not listed. A rename is the old
//     path deleted and the new one created, or modified when it replaced an entry (an editor's save,
//     sed -i); a directory renamed is listed as itself, not its entries. The kernel merges a queued event with a later one of the same
//     process on the same inode (create, write, delete of a temporary file become one event): they are
//     taken in the only order one inode allows.
//   - Kernel. The reports asked of fanotify_init need Linux 5.17 (FAN_REPORT_TARGET_FID, FAN_RENAME;
//     FAN_REPORT_PIDFD 5.15): where one is refused, StartShareWatch returns a FanotifyFeatureError
//     naming it, and nothing is watched (the caller's report says the changes were not seen).
//   - Bounds. The kernel's queue holds 16384 events by default: an overflow is a Problem, as is any
//     read error. The recorded operations and the paths listed are bounded (MaxEntries): past them
//     counting goes on, Truncated says so, and paths Keep names are kept up to as many more.
type ShareWatch struct {
	f      *os.File
	shares []watchedShare
	byFsid map[[2]int32]*os.File // a share root's handle opened for reading, per file system id
	opts   ShareWatchOptions
	pidNS  nsID

	done     chan struct{}
	mu       sync.Mutex // guards what the reader fills and Stop reads after it ended
	ops      []shareOp
	dropped  int // operations past the bound
	problems []string
	overflow bool
	unplaced []pendingOp
	settling bool // settlePending runs: what it places does not call it again
	// lostPending counts operations past maxPending, malformed the events past maxProblems.
	lostPending, malformed int
	places                 map[string]place // handle key -> where that directory is
	verdicts               map[uint64]bool  // pidfs inode of a live process -> whether it is the sandbox's
	// pidfs: pidfds have an inode of their own per process (Linux 6.9), which verdicts are kept by;
	// before, they shared one anonymous inode and nothing is kept.
	pidfs bool
	// pidfdNS: the kernel answers PIDFD_GET_PID_NAMESPACE (Linux 6.11); before, a process's pid
	// namespace is opened through /proc (pidNSByProc). Probed, not taken from the version.
	pidfdNS  bool
	lastFrom uint64 // CLOCK_MONOTONIC before the last read that left the queue empty
	renamed  int    // index in ops of the last event's rename target, else -1
}

// WatchedShare is one writable share: its host path (resolved, no link in it) and where the sandbox
// shows it.
type WatchedShare struct{ Host, Sandbox string }

// ShareWatchOptions is what StartShareWatch watches and how much it keeps.
type ShareWatchOptions struct {
	Shares []WatchedShare
	// InitPid is the sandbox's init on the host: its pid namespace, and those below it, are the sandbox's.
	InitPid int
	// MaxEntries bounds the operations recorded and each list of the result (DefaultMaxEntries).
	MaxEntries int
	// Keep, when set, says which sandbox paths are kept past MaxEntries among the operations read, by
	// path alone (their content is not final while the command runs).
	Keep func(sandboxPath string) bool
	// KeepChange, when set, says which changes are kept past MaxEntries in the lists Stop returns (see
	// Limits.Keep: content included, so that look-alikes cannot use up the allowance); Keep decides
	// when it is nil.
	KeepChange func(report.FileChange) bool
}

type watchedShare struct {
	WatchedShare
	file  bool // a file shared by itself: only its own name in its directory
	real  string
	root  *os.File // O_PATH handle of the share (of its directory, for a file)
	mount *os.File // the same, opened for reading: open_by_handle_at and fanotify_mark refuse O_PATH
	fsid  [2]int32
}

// A place is where a directory is: below share (index, path relative to the share's root, "." for
// the root) or outside every share (share -1).
type place struct {
	share int
	rel   string
}

var outside = place{share: -1}

// shareOp is one recorded operation on a path below a share, with who did it: sure for a process
// known to be the sandbox's at read time; else the pid and the window (CLOCK_MONOTONIC) the event was
// generated in, for Stop to settle.
type shareOp struct {
	share        int
	rel          string // where the entry was when its event was read
	dirKey, name string // its directory's handle and its name: where it is at the end
	kind         opKind
	dir          bool
	sure         bool
	pid          int
	from, to     uint64
}

type opKind uint8

const (
	opCreate opKind = iota
	opDelete
	opWrite
	opReplace // a rename onto an entry that was there: the path existed before and exists after
)

// pendingOp is an operation whose directory could not be opened when it was read (gone already): it is
// placed once the directory's handle is known from another event.
type pendingOp struct {
	op                   shareOp
	dirKey, name, target string
}

// ErrShareWatch is matched by StartShareWatch's errors: the kernel's file events cannot be had (not
// root, no fanotify), which callers report as the note it is for rootless runs.
var ErrShareWatch = errors.New("cannot watch writable shares")

// shareEvents are the events asked for: every change of a directory entry, of a file's data or of its
// attributes, on directories too.
const shareEvents = unix.FAN_CREATE | unix.FAN_DELETE | unix.FAN_RENAME | unix.FAN_MODIFY |
	unix.FAN_ATTRIB | unix.FAN_CLOSE_WRITE | unix.FAN_ONDIR

// shareInitFlags are the watch's fanotify_init flags.
const shareInitFlags = unix.FAN_CLASS_NOTIF | unix.FAN_CLOEXEC | unix.FAN_NONBLOCK |
	unix.FAN_REPORT_DFID_NAME_TARGET | unix.FAN_REPORT_PIDFD

// fanotifyFeatures are the fanotify_init reporting flags the watch cannot do without, with the Linux
// release that brought each (FAN_RENAME, asked of the mark, came with FAN_REPORT_TARGET_FID).
var fanotifyFeatures = []struct {
	flag        uint
	name, since string
}{
	{unix.FAN_REPORT_DFID_NAME, "FAN_REPORT_DFID_NAME", "5.9"},
	{unix.FAN_REPORT_PIDFD, "FAN_REPORT_PIDFD", "5.15"},
	{unix.FAN_REPORT_DFID_NAME_TARGET, "FAN_REPORT_TARGET_FID", "5.17"},
}

// ErrFanotifyFeature is matched (errors.Is) by StartShareWatch's error when this kernel's fanotify lacks
// a reporting flag the watch needs; the error names it and the Linux release that brought it.
var ErrFanotifyFeature = errors.New("fanotify feature missing")

// FanotifyFeatureError names the fanotify_init flag this kernel refused.
type FanotifyFeatureError struct{ Flag, Since string }

func (e *FanotifyFeatureError) Error() string {
	return fmt.Sprintf("this kernel's fanotify lacks %s (Linux %s)", e.Flag, e.Since)
}

// Is makes errors.Is(err, ErrFanotifyFeature) true.
func (e *FanotifyFeatureError) Is(target error) bool { return target == ErrFanotifyFeature }

// fanotifyInitError says which flag a refused fanotify_init lacks: each is asked alone (EINVAL for a
// flag the kernel does not know). Other errors (EPERM without CAP_SYS_ADMIN) stay as they are.
func fanotifyInitError(err error) error {
	if !errors.Is(err, unix.EINVAL) {
		return err
	}
	for _, f := range fanotifyFeatures {
		fd, ferr := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|f.flag, unix.O_RDONLY)
		if ferr == nil {
			unix.Close(fd)
			continue
		}
		if errors.Is(ferr, unix.EINVAL) {
			return &FanotifyFeatureError{Flag: f.name, Since: f.since}
		}
	}
	return err
}

// Bounds of the reader's own state.
const (
	maxPending     = 4096 // operations waiting for their directory to be placed
	maxPlaces      = 8192 // cached directory places (then the cache starts over)
	maxVerdicts    = 8192 // cached live-process verdicts (idem)
	maxNameBytes   = 4096
	maxHandleBytes = 128 // the kernel's MAX_HANDLE_SZ
	shareReadSize  = 64 << 10
	maxEventBytes  = 4096 // more than the metadata, a pidfd and three fid records with a name of 255 bytes
)

// StartShareWatch marks the file systems of opts.Shares and starts reading their events. Call it
// before the command starts: what happens before is not seen. It needs CAP_SYS_ADMIN (filesystem
// marks) and CAP_DAC_READ_SEARCH (open_by_handle_at): without them it returns ErrShareWatch.
func StartShareWatch(opts ShareWatchOptions) (*ShareWatch, error) {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	w := &ShareWatch{opts: opts, byFsid: map[[2]int32]*os.File{}, done: make(chan struct{}),
		places: map[string]place{}, verdicts: map[uint64]bool{}, renamed: -1}
	ok := false
	defer func() {
		if !ok {
			w.close()
		}
	}()
	var err error
	if w.pidNS, err = nsOf(fmt.Sprintf("/proc/%d/ns/pid", opts.InitPid)); err != nil {
		return nil, fmt.Errorf("reading the sandbox's pid namespace: %w", err)
	}
	fd, err := unix.FanotifyInit(shareInitFlags, unix.O_RDONLY|unix.O_LARGEFILE)
	if err != nil {
		return nil, fmt.Errorf("%w: fanotify_init: %w", ErrShareWatch, fanotifyInitError(err))
	}
	w.f = os.NewFile(uintptr(fd), "fanotify")
	w.pidfs, w.pidfdNS = pidfdsArePidfs(), pidfdNSIoctl()
	w.lastFrom = monotonic() // the first read's window starts before the first mark
	for _, sh := range opts.Shares {
		if err := w.add(sh); err != nil {
			return nil, err
		}
	}
	ok = true
	go w.read()
	return w, nil
}

// add opens one share's root and marks its file system (once per file system).
func (w *ShareWatch) add(sh WatchedShare) error {
	ws := watchedShare{WatchedShare: sh}
	dir := sh.Host
	if st, err := os.Lstat(sh.Host); err == nil && !st.IsDir() {
		ws.file, dir = true, path.Dir(sh.Host)
	}
	root, err := safefs.OpenNoLinks(dir)
	if err != nil {
		return fmt.Errorf("opening the share %s: %w", sh.Host, err)
	}
	ws.root = root
	w.shares = append(w.shares, ws)
	if ws.real, err = safefs.Path(root); err != nil {
		return fmt.Errorf("opening the share %s: %w", sh.Host, err)
	}
	if ws.mount, err = safefs.OpenDir(root, ""); err != nil {
		return fmt.Errorf("opening the share %s: %w", sh.Host, err)
	}
	w.shares[len(w.shares)-1] = ws
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(root.Fd()), &sfs); err != nil {
		return fmt.Errorf("opening the share %s: %w", sh.Host, err)
	}
	ws.fsid = sfs.Fsid.Val
	w.shares[len(w.shares)-1] = ws
	if _, ok := w.byFsid[ws.fsid]; ok {
		return nil
	}
	w.byFsid[ws.fsid] = ws.mount
	err = unix.FanotifyMark(int(w.f.Fd()), unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, shareEvents, int(ws.mount.Fd()), "")
	if err != nil {
		return fmt.Errorf("%w: marking the file system of %s: %w", ErrShareWatch, sh.Host, err)
	}
	return nil
}

func (w *ShareWatch) close() {
	if w.f != nil {
		w.f.Close()
	}
	for _, sh := range w.shares {
		sh.root.Close()
		if sh.mount != nil {
			sh.mount.Close()
		}
	}
}

// read reads events until Stop sets a deadline, then returns; Stop drains the rest.
func (w *ShareWatch) read() {
	defer close(w.done)
	buf := make([]byte, shareReadSize)
	for {
		from := monotonic()
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				w.problem(fmt.Sprintf("reading file events: %v", err))
			}
			return
		}
		w.batch(buf[:n], from)
	}
}

// batch handles the events of one read, begun at from. An event of this read was queued after the
// previous read that left the queue empty began (lastFrom), and before now.
// A read that may have left events queued (its buffer could not take one more) does not move the lower
// bound of the next read's window.
func (w *ShareWatch) batch(b []byte, from uint64) {
	to, n := monotonic(), len(b)
	w.mu.Lock()
	defer w.mu.Unlock()
	lower := w.lastFrom
	for len(b) >= unix.FAN_EVENT_METADATA_LEN {
		n := int(binary.NativeEndian.Uint32(b))
		if n < unix.FAN_EVENT_METADATA_LEN || n > len(b) {
			w.malformedEvent(errMalformed)
			break
		}
		w.event(b[:n], lower, to)
		b = b[n:]
	}
	if n < shareReadSize-maxEventBytes {
		w.lastFrom = from
	}
}

// malformedEvent records an event that could not be read, bounded (called with mu held).
func (w *ShareWatch) malformedEvent(err error) {
	if w.malformed++; w.malformed <= maxProblems {
		w.problems = append(w.problems, err.Error())
	}
}

// problem records what makes the lists incomplete.
func (w *ShareWatch) problem(p string) {
	w.mu.Lock()
	w.problems = append(w.problems, p)
	w.mu.Unlock()
}

// event handles one event (called with mu held).
func (w *ShareWatch) event(b []byte, lower, upper uint64) {
	ev, err := decodeEvent(b)
	if ev.pidfd >= 0 {
		defer unix.Close(int(ev.pidfd))
	}
	if ev.mask&unix.FAN_Q_OVERFLOW != 0 {
		w.overflow = true
		return
	}
	if err != nil {
		w.malformedEvent(err)
		return
	}
	renamed := w.renamed
	w.renamed = -1
	if !ev.hasDir {
		// A rename that replaced an entry: right after the rename's event, the kernel reports the link
		// count drop of the entry it replaced, by that inode alone. Other events without a directory
		// concern an inode no longer linked anywhere (the drop of an unlink, a write through an fd of a
		// removed file), of which the removal is the event that counts.
		if renamed >= 0 && ev.mask&unix.FAN_ATTRIB != 0 && w.ops[renamed].pid == ev.pid {
			w.ops[renamed].kind = opReplace
		}
		return
	}
	if _, ok := w.byFsid[ev.fsid]; ok && ev.mask&unix.FAN_RENAME != 0 && ev.mask&unix.FAN_ONDIR != 0 {
		// Every path below the directory moved, whoever moved it (the host too: into a share, out of one).
		clear(w.places)
	}
	op := shareOp{dir: ev.mask&unix.FAN_ONDIR != 0, pid: ev.pid, from: lower, to: upper}
	if ev.pid <= 0 {
		return // the kernel's own doing
	}
	if _, ok := w.byFsid[ev.fsid]; !ok {
		return
	}
	if pl, ok := w.places[ev.dirKey]; ok && pl.share < 0 && ev.mask&unix.FAN_RENAME == 0 {
		w.record(op, pl, ev.name, ev.target) // outside every share, whoever did it: most of a busy host's
		return
	}
	if ev.pidfd >= 0 {
		in, known := w.sandboxProcess(int(ev.pidfd))
		if known && !in {
			return
		}
		op.sure = known
	}
	if ev.mask&unix.FAN_RENAME != 0 { // never merged with another event
		op.kind = opDelete
		w.place(op, ev.fsid, ev.oldFH, ev.oldKey, ev.old, "")
		op.kind = opCreate
		n := len(w.ops)
		w.place(op, ev.fsid, ev.dirFH, ev.dirKey, ev.name, ev.target)
		if len(w.ops) > n && w.ops[n].kind == opCreate && w.ops[n].name == ev.name && w.ops[n].pid == ev.pid {
			w.renamed = n
		}
		return
	}
	// The kernel merges a queued event with a later one of the same process on the same entry (the
	// same directory, name and inode: TARGET_FID makes the inode part of it), ORing the masks. An
	// inode is created before it is written or removed: in that order.
	for _, k := range []struct {
		mask uint64
		kind opKind
	}{{unix.FAN_CREATE, opCreate}, {unix.FAN_MODIFY | unix.FAN_ATTRIB | unix.FAN_CLOSE_WRITE, opWrite}, {unix.FAN_DELETE, opDelete}} {
		if ev.mask&k.mask != 0 && !(k.kind == opWrite && ev.mask&unix.FAN_CREATE != 0) {
			op.kind = k.kind
			w.place(op, ev.fsid, ev.dirFH, ev.dirKey, ev.name, ev.target)
		}
	}
}

// place finds where the directory of an operation is and records the operation there: below a share,
// nowhere (outside), or later (the directory is gone; pending). target is the entry's own handle: a
// directory's, learnt for events in it that come later or were read before it was placed.
func (w *ShareWatch) place(op shareOp, fsid [2]int32, h fh, key, name, target string) {
	op.dirKey = key
	pl, ok := w.places[key]
	if !ok {
		pl, ok = w.resolve(fsid, h)
		if !ok {
			w.pend(pendingOp{op: op, dirKey: key, name: name, target: target})
			return
		}
		w.remember(key, pl)
	}
	w.record(op, pl, name, target)
}

// remember caches a directory's place, bounded.
func (w *ShareWatch) remember(key string, pl place) {
	if len(w.places) >= maxPlaces {
		clear(w.places)
	}
	w.places[key] = pl
}

// record adds op on name in the directory at pl, and learns where a directory it created or removed is.
func (w *ShareWatch) record(op shareOp, pl place, name, target string) {
	if pl.share < 0 {
		if target != "" && op.dir {
			w.remember(target, outside)
			w.settlePending(target)
		}
		return
	}
	rel := pl.rel
	if name != "." && name != "" {
		rel = path.Join(rel, name)
	}
	if target != "" && op.dir {
		w.remember(target, place{share: pl.share, rel: rel})
	}
	sh := w.shares[pl.share]
	if sh.file && rel != path.Base(sh.Host) {
		return
	}
	op.share, op.rel, op.name = pl.share, rel, name
	w.add1(op)
	w.settlePending(target)
}

// add1 appends op, bounded; a repeat of the path's last operation by the same process is dropped.
func (w *ShareWatch) add1(op shareOp) {
	for i := len(w.ops) - 1; i >= 0 && i >= len(w.ops)-8; i-- {
		if p := w.ops[i]; p.share == op.share && p.rel == op.rel {
			if p.kind == op.kind && p.kind == opWrite && p.sure == op.sure && p.pid == op.pid {
				return
			}
			break
		}
	}
	max := 4 * w.opts.MaxEntries
	if len(w.ops) >= max && (len(w.ops) >= 2*max || w.opts.Keep == nil || !w.opts.Keep(w.sandboxPath(op))) {
		w.dropped++
		return
	}
	w.ops = append(w.ops, op)
}

// keepChange says whether c (its sandbox path) is kept past the bound of Stop's lists.
func (w *ShareWatch) keepChange(c report.FileChange) bool {
	switch {
	case w.opts.KeepChange != nil:
		return w.opts.KeepChange(c)
	case w.opts.Keep != nil:
		return w.opts.Keep(c.Path)
	}
	return false
}

// pend keeps an operation whose directory is gone, to place when its handle shows up.
func (w *ShareWatch) pend(p pendingOp) {
	if len(w.unplaced) >= maxPending {
		w.lostPending++
		return
	}
	w.unplaced = append(w.unplaced, p)
}

// settlePending places the pending operations whose directory became known (key just learnt), and
// those below them, until no more can be placed. Placing one may teach another directory's place (its
// target): the loop, not a nested call, picks that up.
func (w *ShareWatch) settlePending(key string) {
	if key == "" || w.settling || len(w.unplaced) == 0 {
		return
	}
	w.settling = true
	defer func() { w.settling = false }()
	for progress := true; progress; {
		progress = false
		var now, rest []pendingOp
		for _, p := range w.unplaced {
			if _, ok := w.places[p.dirKey]; ok {
				now = append(now, p)
			} else {
				rest = append(rest, p)
			}
		}
		w.unplaced = rest
		for _, p := range now {
			progress = true
			w.record(p.op, w.places[p.dirKey], p.name, p.target)
		}
	}
}

// resolve opens a directory's handle and places its path: below which share, or outside; false when
// it cannot be opened (gone) or is no longer linked.
func (w *ShareWatch) resolve(fsid [2]int32, h fh) (place, bool) {
	mount := w.byFsid[fsid]
	if mount == nil {
		return place{}, false // a handle of no marked file system
	}
	fd, err := unix.OpenByHandleAt(int(mount.Fd()), unix.NewFileHandle(h.typ, h.bytes), unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return place{}, false
	}
	defer unix.Close(fd)
	// The path first, then the link count: a directory removed is never linked again, so one still
	// linked after the path was read had that path (a name that ends in " (deleted)" included); the
	// other order would take the kernel's " (deleted)" mark of a removal in between for a name.
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return place{}, false
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Nlink == 0 {
		return place{}, false
	}
	for i, sh := range w.shares {
		if sh.fsid != fsid {
			continue
		}
		if p == sh.real {
			return place{share: i, rel: "."}, true
		}
		if rel, ok := strings.CutPrefix(p, strings.TrimSuffix(sh.real, "/")+"/"); ok && !sh.file {
			return place{share: i, rel: rel}, true
		}
	}
	return outside, true
}

func (w *ShareWatch) sandboxPath(op shareOp) string {
	sh := w.shares[op.share]
	if sh.file {
		return sh.Sandbox
	}
	return path.Join(sh.Sandbox, op.rel)
}
