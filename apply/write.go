package apply

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/safefs"
	"github.com/sbx-dev/sbx/observe"
)

// copyChunk is how much is copied between two looks at the Stop channel.
const copyChunk = 1 << 20

// writer carries out the planned operations on the host.
type writer struct {
	o       Options
	res     *Result
	buf     []byte
	noted   map[string]bool // directories told to the journal
	curDir  string          // the directory of the operation being done
	journal error
}

// note tells the journal the current directory once, before a temporary name is made there.
func (w *writer) note() error {
	if w.o.Journal == nil || w.noted[w.curDir] {
		return w.journal
	}
	if w.noted == nil {
		w.noted = map[string]bool{}
	}
	w.noted[w.curDir] = true
	if err := w.o.Journal(w.curDir); err != nil {
		w.journal = fmt.Errorf("the apply journal: %w", err)
	}
	return w.journal
}

func (w *writer) stopped() bool {
	if w.o.Stop == nil {
		return false
	}
	select {
	case <-w.o.Stop:
		return true
	default:
		return false
	}
}

func (w *writer) problem(rel string, err error) {
	if len(w.res.Problems) < 50 {
		w.res.Problems = append(w.res.Problems, fmt.Sprintf("%s: %v", rel, err))
	}
}

func (w *writer) conflict(x op, why string) {
	w.res.Conflicts = append(w.res.Conflicts, Conflict{ApplyEntry: entry(x.rel, why), FromView: x.fromView})
}

// changed says whether the host entry st was changed after the run started: then it is the host's.
func (w *writer) changed(st *unix.Stat_t) bool {
	return time.Unix(st.Ctim.Unix()).After(w.o.Since.Add(-slack))
}

// do carries out one operation in its host directory, opened below the root handle without following
// any link.
func (w *writer) do(x op) {
	dirRel, name := safefs.Split(strings.TrimPrefix(x.rel, "/"))
	w.curDir = dirRel
	parent, err := safefs.OpenDir(w.o.Host, dirRel)
	if err != nil {
		w.problem(x.rel, fmt.Errorf("its host directory: %w", err))
		return
	}
	defer parent.Close()
	var hst unix.Stat_t
	inHost := unix.Fstatat(int(parent.Fd()), name, &hst, unix.AT_SYMLINK_NOFOLLOW) == nil
	if inHost && w.changed(&hst) && !(x.kind == opDir && hst.Mode&unix.S_IFMT == unix.S_IFDIR) {
		w.conflict(x, "the host's copy changed during the run")
		return
	}
	switch x.kind {
	case opDelete:
		if inHost {
			w.remove(parent, name, x.rel, &hst)
		}
	case opDir:
		if inHost && hst.Mode&unix.S_IFMT != unix.S_IFDIR {
			if !w.remove(parent, name, x.rel, &hst) {
				return
			}
			inHost = false
		}
		if !inHost {
			if err := unix.Mkdirat(int(parent.Fd()), name, 0o700); err != nil {
				w.problem(x.rel, err)
				return
			}
			w.own(parent, name, nil)
		}
		w.done(unix.Fchmodat(int(parent.Fd()), name, x.mode, 0), x.rel, 0)
	case opMode:
		if !inHost || hst.Mode&unix.S_IFMT != unix.S_IFREG {
			w.conflict(x, "the host's file is gone or no longer a file")
			return
		}
		w.done(unix.Fchmodat(int(parent.Fd()), name, x.mode, 0), x.rel, 0)
	case opFile:
		w.file(parent, name, x, inHost, &hst)
	case opSymlink:
		w.replace(parent, name, x.rel, inHost, &hst, func(tmp string) error {
			return unix.Symlinkat(x.target, int(parent.Fd()), tmp)
		})
	case opHardlink:
		first, err := safefs.Open(w.o.Host, strings.TrimPrefix(x.target, "/"), unix.O_PATH, 0)
		if err != nil {
			w.problem(x.rel, fmt.Errorf("linking to %s: %w", x.target, err))
			return
		}
		defer first.Close()
		w.replace(parent, name, x.rel, inHost, &hst, func(tmp string) error {
			return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(first.Fd())), int(parent.Fd()), tmp, unix.AT_SYMLINK_FOLLOW)
		})
	}
}

func (w *writer) done(err error, rel string, bytes int64) {
	if err != nil {
		w.problem(rel, err)
		return
	}
	w.res.Entries++
	w.res.Bytes += bytes
}

// file writes a regular file whole under a temporary name and renames it over the host's entry.
func (w *writer) file(parent *os.File, name string, x op, inHost bool, hst *unix.Stat_t) {
	srcRoot := w.o.Upper
	if x.fromView {
		srcRoot = w.o.View
	}
	in, err := safefs.Open(srcRoot, strings.TrimPrefix(x.rel, "/"), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		w.problem(x.rel, err)
		return
	}
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(in.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		w.problem(x.rel, errors.New("no longer a regular file in the layer"))
		return
	}
	out, linkTmp, err := tempFile(parent, w.note)
	if err != nil {
		w.problem(x.rel, err)
		return
	}
	defer out.Close()
	n, err := w.copyData(in, out, st.Size)
	if err == nil {
		err = unix.Fchmod(int(out.Fd()), x.mode)
	}
	if err == nil {
		err = futimens(out, x.mtime)
	}
	if err == nil && w.o.Chown {
		w.own(parent, "", out)
		if inHost {
			_ = unix.Fchown(int(out.Fd()), int(hst.Uid), int(hst.Gid))
		}
	}
	if err != nil {
		if linkTmp != "" {
			unix.Unlinkat(int(parent.Fd()), linkTmp, 0)
		}
		w.problem(x.rel, err)
		return
	}
	w.replace(parent, name, x.rel, inHost, hst, func(tmp string) error {
		if linkTmp != "" {
			return unix.Renameat(int(parent.Fd()), linkTmp, int(parent.Fd()), tmp)
		}
		return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(out.Fd())), int(parent.Fd()), tmp, unix.AT_SYMLINK_FOLLOW)
	})
	w.res.Bytes += n
}

// replace makes the new entry under a temporary name (make) and renames it over name: a directory there
// is removed first (its entries the host changed during the run keep it, a conflict).
func (w *writer) replace(parent *os.File, name, rel string, inHost bool, hst *unix.Stat_t, make func(tmp string) error) {
	if inHost && hst.Mode&unix.S_IFMT == unix.S_IFDIR {
		if !w.remove(parent, name, rel, hst) {
			return
		}
	}
	if err := w.note(); err != nil {
		w.problem(rel, err) // no temporary name sbx could not find again
		return
	}
	tmp := tempName()
	if err := make(tmp); err != nil {
		w.problem(rel, err)
		return
	}
	if err := unix.Renameat(int(parent.Fd()), tmp, int(parent.Fd()), name); err != nil {
		unix.Unlinkat(int(parent.Fd()), tmp, 0)
		w.problem(rel, err)
		return
	}
	w.res.Entries++
}

// remove deletes the host entry name (st) of parent, a directory with its contents, never following a
// link. An entry inside that the host changed during the run is kept, and with it its directories: a
// conflict. It says whether name is gone.
func (w *writer) remove(parent *os.File, name, rel string, st *unix.Stat_t) bool {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(int(parent.Fd()), name, 0); err != nil && err != unix.ENOENT {
			w.problem(rel, err)
			return false
		}
		w.res.Entries++
		return true
	}
	d, err := openDirAt(parent, name)
	if err != nil {
		w.problem(rel, err)
		return false
	}
	names, err := readNames(d)
	gone := err == nil
	if err != nil {
		w.problem(rel, err)
	}
	for _, n := range names {
		var cst unix.Stat_t
		if unix.Fstatat(int(d.Fd()), n, &cst, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		if w.changed(&cst) && cst.Mode&unix.S_IFMT != unix.S_IFDIR {
			w.res.Conflicts = append(w.res.Conflicts, Conflict{ApplyEntry: entry(rel+"/"+n, "the host changed it during the run: kept, and its directory with it")})
			gone = false
			continue
		}
		if !w.remove(d, n, rel+"/"+n, &cst) {
			gone = false
		}
	}
	d.Close()
	if !gone {
		return false
	}
	if err := unix.Unlinkat(int(parent.Fd()), name, unix.AT_REMOVEDIR); err != nil {
		w.problem(rel, err)
		return false
	}
	w.res.Entries++
	return true
}

// own gives a new host entry the owner of its directory (sbx with root: the files are the working
// directory owner's, not root's). f is the entry when open, else name in parent.
func (w *writer) own(parent *os.File, name string, f *os.File) {
	if !w.o.Chown {
		return
	}
	var pst unix.Stat_t
	if unix.Fstat(int(parent.Fd()), &pst) != nil {
		return
	}
	if f != nil {
		_ = unix.Fchown(int(f.Fd()), int(pst.Uid), int(pst.Gid))
		return
	}
	_ = unix.Fchownat(int(parent.Fd()), name, int(pst.Uid), int(pst.Gid), unix.AT_SYMLINK_NOFOLLOW)
}

// tempFile makes the file a new version is written to: an O_TMPFILE in parent, nameless until linked
// (a kill leaves nothing behind), or where the file system has none a file of a temporary name, which
// linkTmp then names.
func tempFile(parent *os.File, note func() error) (f *os.File, linkTmp string, err error) {
	fd, err := unix.Openat(int(parent.Fd()), ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), "tmpfile"), "", nil
	}
	if err := note(); err != nil {
		return nil, "", err
	}
	linkTmp = tempName()
	fd, err = unix.Openat(int(parent.Fd()), linkTmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, "", err
	}
	return os.NewFile(uintptr(fd), linkTmp), linkTmp, nil
}

// TempPrefix starts the names of entries Apply writes before it renames them into place; a kill of sbx
// in that moment leaves one (sbx gc does not look into working directories).
const TempPrefix = ".sbx-apply-"

func tempName() string {
	b := make([]byte, 8)
	rand.Read(b)
	return TempPrefix + hex.EncodeToString(b)
}

// copyData copies in to out, holes left holes (observe.CopySegments), looking at the stop channel
// between chunks.
func (w *writer) copyData(in, out *os.File, size int64) (int64, error) {
	if w.buf == nil {
		w.buf = make([]byte, copyChunk)
	}
	return observe.CopySegments(in, out, size, w.buf, func(int64) error {
		if w.stopped() {
			return ErrStopped
		}
		return nil
	})
}

// futimens sets f's access and modification times to t (utimensat on the fd itself: a NULL path).
func futimens(f *os.File, t unix.Timespec) error {
	ts := [2]unix.Timespec{t, t}
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, f.Fd(), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// CleanTemps removes what Apply left under a temporary name in the directories rel (relative to
// host, a root handle) that its journal named: entries named TempPrefix*, regular files or symlinks,
// never followed. It returns how many it removed.
func CleanTemps(host *os.File, rels []string) (int, error) {
	n := 0
	var errs []error
	for _, rel := range rels {
		dir, err := safefs.OpenDir(host, rel)
		if err != nil {
			if !errors.Is(err, unix.ENOENT) {
				errs = append(errs, err)
			}
			continue
		}
		names, err := readNames(dir)
		for _, name := range names {
			var st unix.Stat_t
			if !strings.HasPrefix(name, TempPrefix) || unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			if t := st.Mode & unix.S_IFMT; t == unix.S_IFREG || t == unix.S_IFLNK {
				if unix.Unlinkat(int(dir.Fd()), name, 0) == nil {
					n++
				}
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
		dir.Close()
	}
	return n, errors.Join(errs...)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
