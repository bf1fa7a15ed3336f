// Package apply carries a run's changes to its working directory over to the host's working directory,
// once the run is judged (sbx exec --apply, filesystem.apply).
//
// The changes are read from the overlay's upper directory at the working directory: only what the
// command changed is there, so the work is proportional to the change, not to the tree. Whiteouts are
// deletions; an opaque directory, a new one or one renamed (an overlay redirect) is a directory whose
// whole contents are the run's, and host entries it lacks are deleted; a file whose only change is its
// metadata (an overlay metacopy) gets its mode, not data. A renamed directory's contents are read from
// the sandbox's view of the tree (the overlay's merged mount), which only sbx with root has; without it
// such a directory is withheld.
//
// The host side is attack surface. Every host path is opened below a root handle of the working
// directory taken before the command ran, one component at a time with RESOLVE_NO_SYMLINKS: no link on
// the host side is followed and nothing outside the working directory is written. Each file is written
// whole under a temporary name (an O_TMPFILE where the file system has it) and renamed over the old one,
// so that a kill of sbx leaves every file old or new. A host entry whose ctime is after the run's start
// was changed by the host during the run: it is a conflict, left as the host has it. Set-id bits, file
// capabilities and other xattrs, devices, FIFOs and sockets are never applied.
package apply

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/safefs"
	"github.com/sbx-dev/sbx/report"
)

// MaxEntries bounds the entries of one apply: past it nothing is applied.
const MaxEntries = 250_000

// slack widens the window in which a host change counts as the host's own during the run: the kernel's
// timestamps come from a coarse clock, up to a tick behind the time the run started at.
const slack = 20 * time.Millisecond

// Options say what to apply and where.
type Options struct {
	// Upper is the writable layer's directory at the working directory; View the sandbox's view of it
	// (nil when sbx has none: without root). Both are root handles.
	Upper, View *os.File
	// Host is a root handle of the host's working directory, opened before the command ran.
	Host *os.File
	// Since is when the command started: a host entry changed after it is a conflict.
	Since time.Time
	// Own says whether the layer's entry at rel ("/a/b", relative to the working directory) with
	// status st is sbx's own preparation (a hidden path), never applied.
	Own func(rel string, st *unix.Stat_t) bool
	// Withhold says why rel must not be applied ("" to apply it): a persistence finding.
	Withhold func(rel string) string
	// Chown: the host files written get the owner of the file they replace, or of their directory
	// (sbx with root; without root they are the caller's).
	Chown bool
	Stop  <-chan struct{}
	// Journal, when set, is told each directory (relative to Host, "" for its top) before Apply first
	// gives an entry there a temporary name: what a kill of sbx between that name and the rename leaves
	// (TempPrefix*), the next sbx gc removes (see CleanTemps).
	Journal func(rel string) error
}

// Result is what Apply did.
type Result struct {
	Entries   int
	Bytes     int64
	Withheld  []report.ApplyEntry
	Conflicts []Conflict
	Problems  []string
	// Refused says why nothing at all was applied ("" when Apply went through its list).
	Refused string
}

// Conflict is a host entry the run changed too; From is the run's copy, relative to its source root
// (Source: the upper layer or the view), for keeping.
type Conflict struct {
	report.ApplyEntry
	FromView bool
}

// ErrStopped: a signal stopped the apply; what was applied is whole, the rest was not.
var ErrStopped = errors.New("applying stopped")

type opKind int

const (
	opDelete opKind = iota
	opDir
	opFile
	opMode // metadata only: the host file keeps its data
	opSymlink
	opHardlink
)

type op struct {
	kind     opKind
	rel      string // "/a/b"
	mode     uint32
	mtime    unix.Timespec
	target   string // symlink target, or the first name of a hard link
	fromView bool   // the data is read from the view, not the upper layer
	replace  bool   // opDir: the host has something else there
}

// Apply applies the changes. It plans first (bounded by MaxEntries) and writes only then.
func Apply(o Options) Result {
	p := &planner{o: o, links: map[[2]uint64]string{}}
	p.walk(o.Upper, o.Host, "", false, false, 0)
	var res Result
	res.Withheld, res.Problems = p.withheld, p.problems
	if p.over {
		res.Refused = fmt.Sprintf("more than %d changed entries: nothing was applied", MaxEntries)
		return res
	}
	if p.stopped {
		res.Refused = "stopped by a signal before anything was applied"
		return res
	}
	w := &writer{o: o, res: &res}
	for _, x := range p.ops {
		if w.stopped() {
			res.Problems = append(res.Problems, ErrStopped.Error()+": the rest was not applied")
			break
		}
		w.do(x)
	}
	return res
}

// planner walks the upper layer (and, below a renamed directory, the view) into a list of operations.
type planner struct {
	o        Options
	ops      []op
	withheld []report.ApplyEntry
	problems []string
	links    map[[2]uint64]string // a file of several names in the source: its first name
	n        int
	over     bool
	stopped  bool
}

func (p *planner) add(x op) {
	if p.n++; p.n > MaxEntries {
		p.over = true
		return
	}
	p.ops = append(p.ops, x)
}

func (p *planner) withhold(rel, why string) {
	p.withheld = append(p.withheld, entry(rel, why))
}

func (p *planner) problem(format string, args ...any) {
	if len(p.problems) < 50 {
		p.problems = append(p.problems, fmt.Sprintf(format, args...))
	}
}

// walk plans the directory src (at rel) against the host's directory host (nil when the host has none
// there). whole: src holds the directory's whole contents, so host entries it lacks are deleted.
// fromView: src is in the view, where there are no overlay markers.
func (p *planner) walk(src, host *os.File, rel string, whole, fromView bool, depth int) {
	if depth > 256 {
		p.problem("%s: nested deeper than 256 levels, not applied", orRoot(rel))
		return
	}
	names, err := readNames(src)
	if err != nil {
		p.problem("%s: reading the directory: %v", orRoot(rel), err)
		return
	}
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		if p.over || p.stop() {
			return
		}
		seen[name] = true
		p.entry(src, host, rel, name, whole, fromView, depth)
	}
	if !whole || host == nil {
		return
	}
	hostNames, err := readNames(host)
	if err != nil {
		p.problem("%s: reading the host's directory: %v", orRoot(rel), err)
		return
	}
	for _, name := range hostNames {
		if !seen[name] {
			p.add(op{kind: opDelete, rel: rel + "/" + name})
		}
	}
}

func (p *planner) stop() bool {
	if p.stopped || p.o.Stop == nil {
		return p.stopped
	}
	select {
	case <-p.o.Stop:
		p.stopped = true
	default:
	}
	return p.stopped
}

// entry plans one name of src.
func (p *planner) entry(src, host *os.File, rel, name string, whole, fromView bool, depth int) {
	r := rel + "/" + name
	var st unix.Stat_t
	if err := unix.Fstatat(int(src.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		p.problem("%s: %v", r, err)
		return
	}
	if !fromView && p.o.Own != nil && p.o.Own(r, &st) {
		return
	}
	var hst unix.Stat_t
	inHost := host != nil && unix.Fstatat(int(host.Fd()), name, &hst, unix.AT_SYMLINK_NOFOLLOW) == nil
	if why := p.withheldWhy(r); why != "" {
		p.withhold(r, why)
		return
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if !fromView && st.Rdev == 0 { // a whiteout
			if inHost {
				p.add(op{kind: opDelete, rel: r})
			}
			return
		}
		p.withhold(r, "a character device: devices are never applied")
	case unix.S_IFDIR:
		p.dir(src, host, r, name, &st, inHost && hst.Mode&unix.S_IFMT == unix.S_IFDIR, inHost, whole, fromView, depth)
	case unix.S_IFREG:
		p.file(src, r, name, &st, inHost && hst.Mode&unix.S_IFMT == unix.S_IFREG, fromView)
	case unix.S_IFLNK:
		target, err := readlinkAt(src, name)
		if err != nil {
			p.problem("%s: %v", r, err)
			return
		}
		p.add(op{kind: opSymlink, rel: r, target: target})
	default:
		p.withhold(r, kindName(st.Mode)+": never applied")
	}
}

func (p *planner) withheldWhy(r string) string {
	if p.o.Withhold == nil {
		return ""
	}
	return p.o.Withhold(r)
}

// dir plans a directory: made on the host when it has none there, then its entries.
func (p *planner) dir(src, host *os.File, r, name string, st *unix.Stat_t, hostDir, inHost, whole, fromView bool, depth int) {
	sub, err := openDirAt(src, name)
	if err != nil {
		p.problem("%s: %v", r, err)
		return
	}
	defer sub.Close()
	if !fromView && overlayXattr(sub, "redirect") {
		// Renamed in the sandbox: its contents are at its old place in the lower layer; the view shows
		// them here.
		if p.o.View == nil {
			p.withhold(r, "a directory renamed in the sandbox, whose contents sbx can read only with root")
			return
		}
		view, err := safefs.OpenDir(p.o.View, strings.TrimPrefix(r, "/"))
		if err != nil {
			p.problem("%s: the sandbox's view: %v", r, err)
			return
		}
		defer view.Close()
		sub, fromView, whole = view, true, true
	}
	mode := st.Mode & 0o1777
	if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		p.withhold(r, "its set-id bits (the directory is applied without them)")
	}
	p.add(op{kind: opDir, rel: r, mode: mode, replace: inHost && !hostDir})
	var hsub *os.File
	if hostDir {
		if hsub, err = openDirAt(host, name); err != nil {
			p.problem("%s: the host's directory: %v", r, err)
			return
		}
		defer hsub.Close()
	}
	opaque := !fromView && overlayXattr(sub, "opaque")
	p.walk(sub, hsub, r, whole || opaque || !hostDir, fromView, depth+1)
}

// file plans a regular file.
func (p *planner) file(src *os.File, r, name string, st *unix.Stat_t, hostFile, fromView bool) {
	mode := st.Mode & 0o1777
	if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		p.withhold(r, "its set-id bits (the file is applied without them)")
	}
	if !fromView {
		if meta := overlayFileXattr(src, name, "metacopy"); meta {
			// Only its metadata changed; its data is the lower file's, at the same path unless renamed.
			if hostFile && !overlayFileXattr(src, name, "redirect") {
				p.add(op{kind: opMode, rel: r, mode: mode})
				return
			}
			if p.o.View == nil {
				p.withhold(r, "a file renamed in the sandbox, whose data sbx can read only with root")
				return
			}
			fromView = true
		}
	}
	if st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := p.links[key]; ok {
			p.add(op{kind: opHardlink, rel: r, target: first})
			return
		}
		p.links[key] = r
	}
	p.add(op{kind: opFile, rel: r, mode: mode, mtime: st.Mtim, fromView: fromView})
}

func orRoot(rel string) string {
	if rel == "" {
		return "/"
	}
	return rel
}

func entry(rel, why string) report.ApplyEntry {
	e := report.ApplyEntry{Path: rel, Why: why}
	if !utf8.ValidString(rel) {
		e.PathB64 = b64(rel)
	}
	return e
}

// readNames lists a directory's names (the whole directory: a bound here would make the apply silently
// partial; the planner's MaxEntries bounds the whole).
func readNames(dir *os.File) ([]string, error) {
	d, err := openDirAt(dir, ".") // readable, also when dir is an O_PATH handle
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var out []string
	for {
		names, err := d.Readdirnames(1024)
		out = append(out, names...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if len(out) > MaxEntries {
			return out, fmt.Errorf("more than %d entries", MaxEntries)
		}
	}
}

func openDirAt(dir *os.File, name string) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

func readlinkAt(dir *os.File, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(int(dir.Fd()), name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// overlayXattr says whether the directory dir carries the overlay marker name (trusted.overlay.* with
// root, user.overlay.* for a rootless layer): "opaque" is set when it holds "y".
func overlayXattr(dir *os.File, name string) bool {
	for _, ns := range []string{"trusted", "user"} {
		var v [256]byte
		n, err := unix.Fgetxattr(int(dir.Fd()), ns+".overlay."+name, v[:])
		if err == nil || err == unix.ERANGE {
			return name != "opaque" || n == 1 && v[0] == 'y'
		}
	}
	return false
}

// overlayFileXattr is overlayXattr for the entry name of dir, never followed.
func overlayFileXattr(dir *os.File, name, marker string) bool {
	p := "/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + name
	for _, ns := range []string{"trusted", "user"} {
		if _, err := unix.Lgetxattr(p, ns+".overlay."+marker, nil); err == nil || err == unix.ERANGE {
			return true
		}
	}
	return false
}

func kindName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFBLK:
		return "a block device"
	}
	return "a special file"
}
