package observe

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sbx-dev/sbx/report"
	"golang.org/x/sys/unix"
)

// File change classes, the values of FileChange.Change.
const (
	Created  = "created"
	Modified = "modified"
	Deleted  = "deleted"
)

// FileChanges is the state of an overlay's upper layer, relative to its lower layer (or, read with
// [ChangesSince], relative to an earlier reading).
type FileChanges struct {
	Created  []report.FileChange
	Modified []report.FileChange
	Deleted  []report.FileChange
	// Total counts every change found, also those beyond the bound of the lists; Truncated says that a
	// list was cut.
	Total     report.Totals
	Truncated bool
	// Problems says what could not be read (an unreadable directory, a tree nested too deep): the lists
	// are then incomplete. Notes says what was read but judged conservatively (listed as modified
	// without a content comparison).
	Problems []string
	Notes    []string

	// dirs is what an unbounded reading (sbx's own, [Changes]) saw of each directory it read whole, by
	// path ("" for the top); start is the moment [FileChanges.Started] took. A later reading passes
	// over a directory unchanged since (see [FileChanges.Started]).
	dirs  map[string]*dirStamp
	start unix.Timespec
	// replayed and read count the directories passed over and those read whole (for tests).
	replayed, read int
}

// dirStamp is what a reading saw of one upper directory: its identity, its timestamps and its names.
type dirStamp struct {
	ino          uint64
	mtime, ctime unix.Timespec
	opaque       bool
	entries      []stampEntry
}

// stampEntry is one name of a dirStamp and what it was.
type stampEntry struct {
	name string
	kind entryKind
}

type entryKind byte

const (
	kindUnread entryKind = iota // could not be looked at
	kindWhiteout
	kindDir
	kindOther // a file, a link, anything else
)

// Started marks a reading taken before the command as complete: called just before the command
// starts, once nothing of sbx's own changes the layer any more. It reads the clock file systems stamp
// changes with (CLOCK_REALTIME_COARSE). A later [ChangesSince] passes over a directory whose inode,
// mtime and ctime are this reading's and whose ctime lies before that moment, and looks again only at
// the names it had then (each but a whiteout, which the overlay shows as nothing and so no one can
// touch through it):
//
// Any change of a directory's names (one created, removed, renamed into or out of it, linked) and of
// its own attributes sets its ctime to the file system's current time, which is never before the
// coarse clock at that moment (fine-grained timestamps, Linux 6.13 on, are later, not earlier). So a
// change made after Started stamps a ctime at or after the moment it read, and a directory whose ctime
// is still one from before that moment has the names it had. A directory stamped in the same tick of
// the coarse clock as Started could change again within that tick and keep its ctime: it is read
// whole. Files are judged the same way, by their own ctime (a write, a chmod, a new link moves it).
func (fc *FileChanges) Started() {
	if fc == nil {
		return
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts) == nil {
		fc.start = ts
	}
}

// Limits bound one reading of the changes. Zero fields take the defaults.
type Limits struct {
	MaxEntries   int             // entries kept per list (DefaultMaxEntries); counting goes on beyond it
	MaxPathBytes int             // bytes of paths kept in all lists together (DefaultMaxPathBytes)
	ContentBytes int64           // bytes compared to find rewrites that size and mtime hide (DefaultContentBytes)
	Stop         <-chan struct{} // closed: stop reading at once (a Problem says so)
	// Keep, when set, says which created or modified entries (paths relative to the layer, with a
	// leading slash) are kept past MaxEntries, up to MaxEntries more: those the report must judge
	// whatever came before them (a persistence mechanism), so that a flood of other files cannot push
	// them out. It must keep only what the report will judge so: entries that merely look the part
	// (a directory named .bashrc, a .pth file that runs nothing) would use up the allowance first.
	Keep func(c report.FileChange) bool
}

// Defaults of Limits.
const (
	DefaultMaxEntries   = 10000
	DefaultMaxPathBytes = 8 << 20
	DefaultContentBytes = 64 << 20
	// maxDepth bounds how deep the walk descends: each level holds two fds. Deeper trees are a Problem.
	maxDepth = 256
	// maxProblems bounds the Problems kept; the rest is counted in the last one.
	maxProblems = 20
)

func (l Limits) withDefaults() Limits {
	if l.MaxEntries == 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	if l.MaxPathBytes == 0 {
		l.MaxPathBytes = DefaultMaxPathBytes
	}
	if l.ContentBytes == 0 {
		l.ContentBytes = DefaultContentBytes
	}
	return l
}

// unbounded keeps everything: for readings of sbx's own preparation, before the command ran.
var unbounded = Limits{MaxEntries: -1, MaxPathBytes: -1}

// Overlay markers (Documentation/filesystems/overlayfs.rst). Only "y" means opaque: since Linux 6.7 "x"
// marks a directory that holds xattr whiteouts, which hides nothing.
const (
	opaqueXattr   = "trusted.overlay.opaque"
	metacopyXattr = "trusted.overlay.metacopy"
	redirectXattr = "trusted.overlay.redirect"
)

// ErrUnreadable is matched by the error of a reading that could not open the layer at all.
var ErrUnreadable = errors.New("writable layer unreadable")

// Changes reads an overlay's upper dir against its lower dir, with no bound: it is meant for the reading
// sbx takes of its own preparation before the command runs. In upper, a whiteout (a character device
// 0:0) is a deletion when the path exists in lower; a file or symlink is created when the path does not
// exist in lower, else modified; a directory is listed only when created (a directory that exists in lower
// is in upper only as the parent of a change). Everything under an opaque directory is created.
//
// Limits: the old contents of a directory replaced as a whole (opaque) are not listed as deleted, since
// that would mean walking the lower tree (sbx hides /tmp, /home and others that way); files changed through
// other writable mounts (shared host paths) are not in the upper layer and not seen here.
//
// With lower "", upper is a file system that started empty (the sandbox's /dev/shm): all is created.
func Changes(upper, lower string) (*FileChanges, error) {
	return read(nil, upper, lower, unbounded)
}

// ChangesSince reads what changed in an overlay's upper layer since before (a [Changes] reading of the
// same layer; nil: none), within lim. It walks both layers by fd, one name at a time with O_NOFOLLOW, so
// that no link the command made is followed and no path length matters.
//
// It never fails on what the command made: an entry or directory that cannot be read is a Problem and
// the rest is read. The error is non-nil (matching ErrUnreadable) only when upper itself cannot be
// opened; the result then holds that Problem too.
//
// An entry identical to before's (kind, size, mtime, ctime, mode, metacopy) is left out. A file whose
// size and mtime match before's but whose ctime or metacopy state moved has its content compared with
// lower's, within lim.ContentBytes; beyond that budget it is listed as modified, with a Note.
func ChangesSince(before *FileChanges, upper, lower string, lim Limits) (*FileChanges, error) {
	return read(before, upper, lower, lim.withDefaults())
}

// ChangesSinceDir is ChangesSince on an upper directory already open for reading (O_RDONLY): for a
// tree reached through a handle, such as the sandbox's /dev/shm through /proc/PID/root.
func ChangesSinceDir(before *FileChanges, upper *os.File, lower string, lim Limits) *FileChanges {
	return readDir(before, upper, lower, lim.withDefaults())
}

func read(before *FileChanges, upper, lower string, lim Limits) (*FileChanges, error) {
	up, err := openDirAt(unix.AT_FDCWD, upper, false)
	if err != nil {
		d := newDiffer(before, lim)
		d.problem("%s: %v", upper, err)
		d.skipped("")
		d.finish()
		return d.out, fmt.Errorf("%w: %s: %w", ErrUnreadable, upper, err)
	}
	defer up.Close()
	return readDir(before, up, lower, lim), nil
}

func readDir(before *FileChanges, up *os.File, lower string, lim Limits) *FileChanges {
	w := &walker{d: newDiffer(before, lim), stop: lim.Stop}
	if lim.MaxEntries < 0 {
		w.d.out.dirs = map[string]*dirStamp{} // sbx's own reading: the later one passes over what stays
	} else if before != nil && before.start != (unix.Timespec{}) {
		w.prior, w.start = before.dirs, before.start
	}
	var st unix.Stat_t
	statErr := unix.Fstat(int(up.Fd()), &st)
	opaque := isOpaque(up)
	var low *os.File
	if lower != "" && !opaque {
		var err error
		if low, err = openDirAt(unix.AT_FDCWD, lower, true); err != nil {
			w.d.problem("lower layer %s: %v", lower, err)
			low = nil
		} else {
			defer low.Close()
		}
	}
	switch s := w.unchanged("", &st); {
	case statErr == nil && s != nil:
		w.replay(up, &lowDir{f: low, opened: true}, "", 0, s)
	case statErr == nil:
		w.dir(up, low, "", 0, &st, opaque)
	default:
		w.dir(up, low, "", 0, nil, opaque)
	}
	w.d.finish()
	w.d.out.replayed, w.d.out.read = w.replayed, w.read
	return w.d.out
}

// openDirAt opens the directory name below dirfd without following a link: for reading its entries,
// or (asPath) only as a base for *at calls.
func openDirAt(dirfd int, name string, asPath bool) (*os.File, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if asPath {
		flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	}
	fd, err := unix.Openat(dirfd, name, flags, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// walker reads one upper tree by fd.
type walker struct {
	d       *differ
	stop    <-chan struct{}
	stopped bool
	// prior and start are the earlier reading's directories and the moment the command started
	// (FileChanges.Started): a directory unchanged since is passed over (replay).
	prior          map[string]*dirStamp
	start          unix.Timespec
	replayed, read int // directories passed over, read whole
}

// dir reads the entries of the upper directory up (at rel, "" for the top) against the lower directory
// low (nil: none there, or hidden by an opaque upper directory). st is up's stat (nil: unknown), opaque
// whether it is an opaque directory; a reading of sbx's own keeps them, with its names (dirStamp).
func (w *walker) dir(up, low *os.File, rel string, depth int, st *unix.Stat_t, opaque bool) {
	w.read++
	var stamp *dirStamp
	if w.d.out.dirs != nil && st != nil {
		stamp = &dirStamp{ino: st.Ino, mtime: st.Mtim, ctime: st.Ctim, opaque: opaque}
	}
	for {
		if w.stopping() {
			w.d.skipped(rel)
			return
		}
		names, err := up.Readdirnames(256)
		for _, name := range names {
			k := w.entry(up, low, rel, name, depth)
			if stamp != nil {
				stamp.entries = append(stamp.entries, stampEntry{name, k})
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			w.d.problem("%s: reading the directory: %v", orRoot(rel), err)
			w.d.skipped(rel)
			return
		}
	}
	if stamp != nil && !slices.ContainsFunc(stamp.entries, func(e stampEntry) bool { return e.kind == kindUnread }) {
		w.d.out.dirs[rel] = stamp
	}
}

// unchanged returns the earlier reading's stamp of the directory at rel when st shows it unchanged
// since: the same inode, mtime and ctime, that ctime before the command started (FileChanges.Started).
func (w *walker) unchanged(rel string, st *unix.Stat_t) *dirStamp {
	s := w.prior[rel]
	if s == nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Ino != s.ino || st.Mtim != s.mtime || st.Ctim != s.ctime || !before(st.Ctim, w.start) {
		return nil
	}
	return s
}

func before(a, b unix.Timespec) bool {
	return a.Sec < b.Sec || a.Sec == b.Sec && a.Nsec < b.Nsec
}

// lowDir is the lower directory of a directory passed over, opened only when one of its entries must
// be read whole after all.
type lowDir struct {
	parent *lowDir
	name   string
	f      *os.File
	opened bool
	opaque bool // the upper directory is opaque: nothing of lower shows below it
}

func (l *lowDir) get() *os.File {
	if l == nil || l.opened {
		if l == nil {
			return nil
		}
		return l.f
	}
	l.opened = true
	if pf := l.parent.get(); pf != nil && !l.opaque {
		if f, err := openDirAt(int(pf.Fd()), l.name, true); err == nil {
			l.f = f
		}
	}
	return l.f
}

func (l *lowDir) close() {
	if l.parent != nil && l.f != nil {
		l.f.Close() // the top's is its caller's
	}
}

// replay passes over the upper directory up (at rel), unchanged since the earlier reading's stamp s:
// its names are s's. Each but a whiteout is looked at again: a directory unchanged in turn is passed
// over too, a file with its stat of the earlier reading (and a ctime from before the start) is seen,
// anything else is read as in a whole reading.
func (w *walker) replay(up *os.File, low *lowDir, rel string, depth int, s *dirStamp) {
	w.replayed++
	for _, e := range s.entries {
		if w.stopping() {
			w.d.skipped(rel)
			return
		}
		if e.kind == kindWhiteout {
			continue
		}
		p := rel + "/" + e.name
		var st unix.Stat_t
		if err := unix.Fstatat(int(up.Fd()), e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			if cs := w.unchanged(p, &st); e.kind == kindDir && cs != nil && depth+1 < maxDepth {
				if sub, err := openDirAt(int(up.Fd()), e.name, true); err == nil {
					w.d.seen(p)
					sl := &lowDir{parent: low, name: e.name, opaque: cs.opaque}
					w.replay(sub, sl, p, depth+1, cs)
					sl.close()
					sub.Close()
					continue
				}
			}
			if e.kind == kindOther && w.d.sameAsBefore(p, &st, w.start) {
				w.d.seen(p)
				continue
			}
		}
		w.entry(up, low.get(), rel, e.name, depth)
	}
}

func (w *walker) stopping() bool {
	if w.stopped || w.stop == nil {
		return w.stopped
	}
	select {
	case <-w.stop:
		w.stopped = true
		w.d.problem("reading the file changes was stopped by a signal: the lists are incomplete")
	default:
	}
	return w.stopped
}

// entry classifies one name of up and descends into it when it is a directory. It returns what the
// name is, for the stamp of a reading of sbx's own.
func (w *walker) entry(up, low *os.File, rel, name string, depth int) entryKind {
	p := rel + "/" + name
	var st unix.Stat_t
	if err := unix.Fstatat(int(up.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		w.d.problem("%s: %v", p, err)
		return kindUnread
	}
	var lst unix.Stat_t
	inLower := low != nil && unix.Fstatat(int(low.Fd()), name, &lst, unix.AT_SYMLINK_NOFOLLOW) == nil
	if isWhiteout(&st) {
		if inLower {
			w.d.whiteout(change(p, &lst, Deleted))
		}
		return kindWhiteout
	}
	c := change(p, &st, Created)
	if inLower && c.Kind != "dir" {
		c.Change = Modified
		if c.Kind == "file" && w.d.before[p] == nil && w.d.copiedUnchanged(up, low, p, name, &st, &lst) {
			w.d.seen(p)
			return kindOther
		}
	}
	if c.Kind == "file" && w.d.wantsMetacopy(p) {
		c.Metacopy = hasXattr(up, name, metacopyXattr)
	}
	if c.Kind != "dir" {
		w.d.entry(c, func(budget *int64) (bool, bool) { return sameContent(up, low, name, c.Size, budget) })
		return kindOther
	}
	switch {
	case !inLower:
		w.d.entry(c, nil)
	case lst.Mode&unix.S_IFMT != unix.S_IFDIR: // a file of lower replaced by a directory
		c.Change = Modified
		w.d.entry(c, nil)
	default:
		w.d.seen(p)
	}
	if !inLower {
		low = nil
	}
	w.descend(up, low, p, name, depth, &st)
	return kindDir
}

// copiedUnchanged says whether the regular file name of up is lower's copied up and nothing else: a new
// hard link to it (overlayfs copies a file up to link it), an xattr set and removed again, a touch of
// its mtime back to lower's. Its mode, owner, size, mtime and extended attributes (overlay's own left
// out) are lower's, and so is its data: a metacopy copy-up whose data is its own path's in lower (no
// redirect, or the one overlayfs sets on a metacopy file it links: its own path) has none of its own,
// any other has the same bytes as lower's, compared within the budget.
// Its ctime and link count are not looked at: a link moves both.
func (d *differ) copiedUnchanged(up, low *os.File, p, name string, st, lst *unix.Stat_t) bool {
	if lst.Mode != st.Mode || lst.Uid != st.Uid || lst.Gid != st.Gid || lst.Size != st.Size || lst.Mtim != st.Mtim {
		return false
	}
	upPath, lowPath := fmt.Sprintf("/proc/self/fd/%d/%s", up.Fd(), name), fmt.Sprintf("/proc/self/fd/%d/%s", low.Fd(), name)
	upX, err := userXattrs(upPath)
	if err != nil {
		return false
	}
	lowX, err := userXattrs(lowPath)
	if err != nil || !maps.Equal(upX, lowX) {
		return false
	}
	if hasXattr(up, name, metacopyXattr) {
		redirect, err := xattrValue(upPath, redirectXattr)
		if errors.Is(err, unix.ENODATA) || err == nil && redirect == p {
			return true
		}
	}
	same, ok := sameContent(up, low, name, st.Size, &d.budget)
	return ok && same
}

// userXattrs reads the extended attributes of the file at path (its last component not followed),
// leaving out overlay's own (trusted.overlay.*, and user.overlay.* of a rootless overlay's upper).
func userXattrs(path string) (map[string]string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(path, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Llistxattr(path, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Llistxattr(path, buf)
		}
	}
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, a := range strings.Split(string(buf[:n]), "\x00") {
		if a == "" || strings.HasPrefix(a, "trusted.overlay.") || strings.HasPrefix(a, "user.overlay.") {
			continue
		}
		v, err := xattrValue(path, a)
		if err != nil {
			return nil, err
		}
		out[a] = v
	}
	return out, nil
}

// xattrValue reads the extended attribute attr of the file at path, its last component not followed.
func xattrValue(path, attr string) (string, error) {
	v := make([]byte, 64<<10) // XATTR_SIZE_MAX
	n, err := unix.Lgetxattr(path, attr, v)
	if err != nil {
		return "", err
	}
	return string(v[:n]), nil
}

// descend reads the subdirectory name of up, whose stat is st. Below a created or opaque directory
// nothing of lower shows. One unchanged since the earlier reading is passed over (replay).
func (w *walker) descend(up, low *os.File, p, name string, depth int, st *unix.Stat_t) {
	if depth+1 >= maxDepth {
		w.d.problem("%s: nested deeper than %d levels, not read", p, maxDepth)
		w.d.skipped(p)
		return
	}
	if s := w.unchanged(p, st); s != nil {
		if sub, err := openDirAt(int(up.Fd()), name, true); err == nil {
			sl := &lowDir{f: low, opened: true}
			if low != nil {
				sl = &lowDir{parent: &lowDir{f: low, opened: true}, name: name, opaque: s.opaque}
			}
			w.replay(sub, sl, p, depth+1, s)
			sl.close()
			sub.Close()
			return
		}
	}
	sub, err := openDirAt(int(up.Fd()), name, false)
	if err != nil {
		w.d.problem("%s: %v", p, err)
		w.d.skipped(p)
		return
	}
	defer sub.Close()
	opaque := isOpaque(sub)
	var subLow *os.File
	if low != nil && !opaque {
		if subLow, err = openDirAt(int(low.Fd()), name, true); err == nil {
			defer subLow.Close()
		} else {
			subLow = nil
		}
	}
	w.dir(sub, subLow, p, depth+1, st, opaque)
}

func orRoot(rel string) string {
	if rel == "" {
		return "/"
	}
	return rel
}

// change describes the entry st at p.
func change(p string, st *unix.Stat_t, class string) report.FileChange {
	c := report.FileChange{Path: p, Kind: kindOf(st.Mode), Size: st.Size, Change: class,
		ModTime: time.Unix(st.Mtim.Unix()), CTime: time.Unix(st.Ctim.Unix()), Mode: st.Mode}
	if c.Kind == "dir" {
		c.Size = 0
	}
	c.PathB64 = PathB64(p)
	return c
}

// PathB64 is the value of FileChange.PathB64 for p: its bytes in base64 when p is not valid UTF-8,
// else "".
func PathB64(p string) string {
	if utf8.ValidString(p) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(p))
}

func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func isOpaque(dir *os.File) bool {
	var v [2]byte
	n, err := unix.Fgetxattr(int(dir.Fd()), opaqueXattr, v[:])
	return err == nil && n == 1 && v[0] == 'y'
}

// hasXattr reads an xattr of name in dir without following it: through the dir's fd in /proc, the
// last component is never followed by lgetxattr.
func hasXattr(dir *os.File, name, attr string) bool {
	_, err := unix.Lgetxattr(fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), name), attr, nil)
	return err == nil
}

func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

// sameContent compares the regular file name in up with the one in low, charging budget. ok is false
// when it could not tell (no lower file, over budget, unreadable).
func sameContent(up, low *os.File, name string, size int64, budget *int64) (same, ok bool) {
	if low == nil || size > *budget {
		return false, false
	}
	*budget -= size
	a, err := openRegularAt(up, name)
	if err != nil {
		return false, false
	}
	defer a.Close()
	b, err := openRegularAt(low, name)
	if err != nil {
		return false, false
	}
	defer b.Close()
	bufA, bufB := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		n, errA := io.ReadFull(a, bufA)
		m, errB := io.ReadFull(b, bufB)
		if n != m || string(bufA[:n]) != string(bufB[:m]) {
			return false, true
		}
		if errA == io.EOF || errA == io.ErrUnexpectedEOF {
			return errB == errA, true
		}
		if errA != nil || errB != nil {
			return false, false
		}
	}
}

// openRegularAt opens name below dir for reading, without following a link or blocking, and only if
// it is a regular file.
func openRegularAt(dir *os.File, name string) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	return f, nil
}

// DiffChanges returns what changed between two readings of the same upper layer: sbx puts whiteouts and
// opaque directories (and a few files) there before the command runs, and those are not the command's.
// [ChangesSince] does the same while it reads, within bounds; see it for the rules.
func DiffChanges(before, after *FileChanges) (created, modified, deleted []report.FileChange) {
	d := newDiffer(before, unbounded)
	for _, c := range slices.Concat(after.Created, after.Modified) {
		d.entry(c, nil)
	}
	for _, c := range after.Deleted {
		d.whiteout(c)
	}
	d.finish()
	return d.out.Created, d.out.Modified, d.out.Deleted
}

// prior is an entry of the earlier reading, and whether the later one saw its path.
type prior struct {
	c    report.FileChange
	seen bool
}

// differ classifies the entries of a later reading against an earlier one as they come, keeping only
// what its limits allow.
type differ struct {
	before  map[string]*prior
	out     *FileChanges
	lim     Limits
	bytes   int
	budget  int64
	skips   []string // directories not read: before's entries below them are not deletions
	dropped int      // problems beyond maxProblems
	kept    int      // entries kept past MaxEntries (Limits.Keep)
}

func newDiffer(before *FileChanges, lim Limits) *differ {
	d := &differ{before: map[string]*prior{}, out: &FileChanges{}, lim: lim, budget: lim.ContentBytes}
	if before != nil {
		for _, s := range [][]report.FileChange{before.Created, before.Modified, before.Deleted} {
			for _, c := range s {
				d.before[c.Path] = &prior{c: c}
			}
		}
	}
	return d
}

// wantsMetacopy says whether the metacopy state of p matters: for an unbounded reading (sbx's own,
// which becomes the earlier one), or for a path the earlier one had.
func (d *differ) wantsMetacopy(p string) bool {
	return d.lim.MaxEntries < 0 || d.before[p] != nil
}

func (d *differ) seen(p string) {
	if pr := d.before[p]; pr != nil {
		pr.seen = true
	}
}

// entry takes a created or modified entry of the later reading. cmp compares its content with lower's
// (nil: cannot).
func (d *differ) entry(c report.FileChange, cmp func(budget *int64) (same, ok bool)) {
	pr := d.before[c.Path]
	if pr == nil {
		d.add(c)
		return
	}
	pr.seen = true
	prev := pr.c
	switch {
	case prev.Change != Deleted && c.Kind == "dir" && prev.Kind == "dir":
	case sameEntry(prev, c) && d.unchanged(prev, c, cmp):
	case prev.Change != Deleted:
		c.Change = Modified
		d.add(c)
	default: // it was hidden by a whiteout: to the command the path is new
		c.Change = Created
		d.add(c)
	}
}

// sameAsBefore says whether the entry at p, not a directory, is still the earlier reading's, by its
// stat alone: kind, size, mode, mtime and a ctime from before start (FileChanges.Started).
func (d *differ) sameAsBefore(p string, st *unix.Stat_t, start unix.Timespec) bool {
	pr := d.before[p]
	if pr == nil || pr.c.Change == Deleted || !before(st.Ctim, start) {
		return false
	}
	c := change(p, st, pr.c.Change)
	c.Metacopy = pr.c.Metacopy // a copy-up of the data moves the ctime
	return c.Kind != "dir" && sameEntry(pr.c, c) && pr.c.Mode == c.Mode && pr.c.CTime.Equal(c.CTime)
}

// unchanged tells, for an entry whose kind, size and mtime match, whether anything else moved.
func (d *differ) unchanged(prev, c report.FileChange, cmp func(budget *int64) (same, ok bool)) bool {
	if prev.Mode != c.Mode {
		return false
	}
	if prev.CTime.Equal(c.CTime) && prev.Metacopy == c.Metacopy {
		return true
	}
	if c.Kind != "file" {
		return false
	}
	if c.Metacopy {
		return true // only metadata was copied up: the data is lower's, untouched
	}
	if cmp != nil {
		if same, ok := cmp(&d.budget); ok {
			return same
		}
	}
	d.note("%s: rewritten with its size and mtime kept; listed as modified without comparing its content", c.Path)
	return false
}

func (d *differ) whiteout(c report.FileChange) {
	pr := d.before[c.Path]
	if pr != nil {
		pr.seen = true
		if pr.c.Change == Deleted {
			return
		}
	}
	c.Change = Deleted
	d.add(c)
}

// skipped records a directory whose entries were not (all) read.
func (d *differ) skipped(rel string) {
	if len(d.skips) >= maxProblems*50 {
		d.skips = []string{"/"} // too many to track: no deletion is inferred anywhere
	}
	if len(d.skips) == 1 && d.skips[0] == "/" {
		return
	}
	d.skips = append(d.skips, orRoot(rel))
}

// finish lists as deleted what before had, the later reading lacks and was not a directory (the
// sandbox removed a file sbx had put there), and sorts the lists.
func (d *differ) finish() {
	for p, pr := range d.before {
		if !pr.seen && pr.c.Change != Deleted && pr.c.Kind != "dir" && !d.inSkipped(p) {
			c := pr.c
			c.Change = Deleted
			d.add(c)
		}
	}
	for _, s := range [][]report.FileChange{d.out.Created, d.out.Modified, d.out.Deleted} {
		slices.SortFunc(s, func(a, b report.FileChange) int { return cmpString(a.Path, b.Path) })
	}
	if d.dropped > 0 {
		d.out.Problems = append(d.out.Problems, fmt.Sprintf("%d more problems not listed", d.dropped))
	}
}

func (d *differ) inSkipped(p string) bool {
	for _, s := range d.skips {
		if s == "/" || p == s || len(p) > len(s) && p[:len(s)] == s && p[len(s)] == '/' {
			return true
		}
	}
	return false
}

// add counts c and keeps it while the bounds allow.
func (d *differ) add(c report.FileChange) {
	list, total := &d.out.Created, &d.out.Total.Created
	switch c.Change {
	case Modified:
		list, total = &d.out.Modified, &d.out.Total.Modified
	case Deleted:
		list, total = &d.out.Deleted, &d.out.Total.Deleted
	}
	*total++
	if (d.lim.MaxEntries >= 0 && len(*list) >= d.lim.MaxEntries) ||
		(d.lim.MaxPathBytes >= 0 && d.bytes+len(c.Path) > d.lim.MaxPathBytes) {
		d.out.Truncated = true
		if c.Change == Deleted || d.lim.Keep == nil || d.kept >= d.lim.MaxEntries ||
			d.lim.MaxPathBytes >= 0 && d.bytes+len(c.Path) > 2*d.lim.MaxPathBytes || !d.lim.Keep(c) {
			return
		}
		d.kept++
	}
	d.bytes += len(c.Path)
	*list = append(*list, c)
}

func (d *differ) problem(format string, args ...any) {
	if len(d.out.Problems) >= maxProblems {
		d.dropped++
		return
	}
	d.out.Problems = append(d.out.Problems, fmt.Sprintf(format, args...))
}

func (d *differ) note(format string, args ...any) {
	if len(d.out.Notes) < maxProblems {
		d.out.Notes = append(d.out.Notes, fmt.Sprintf(format, args...))
	}
}

func sameEntry(a, b report.FileChange) bool {
	return a.Change == b.Change && a.Kind == b.Kind && a.Size == b.Size && a.ModTime.Equal(b.ModTime)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
