package observe

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/safefs"
	"github.com/sbx-dev/sbx/report"
)

// ErrCopyStopped is returned by [Copier.Copy] when its Stop channel closed: the copy ended at once.
var ErrCopyStopped = errors.New("copy of the changed files stopped")

// copyChunk is how much is copied between two looks at the Stop channel.
const copyChunk = 1 << 20

// Copier copies changed files out of a writable layer into a review directory (--changes DIR): the
// overlay is thrown away at teardown. It keeps its budget and its lists across layers.
//
// Both sides are trees the command wrote: every step goes through a root handle with openat2
// RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS (package safefs), so that no link in the layer, and none the copy
// of an earlier layer recreated in the destination, is ever followed. Files keep their permission bits
// (no set-id bits) and mtime, symlinks are recreated as symlinks and never followed, holes stay holes.
// Entries that are not regular files, directories or symlinks are listed in Skipped, never opened;
// regular files are opened with O_NONBLOCK|O_NOFOLLOW and their type is checked on the fd.
type Copier struct {
	Stop   <-chan struct{} // closed: stop at once (ErrCopyStopped)
	Budget int64           // data bytes that may still be written (0: none); holes cost nothing
	// Skipped lists what was not copied and why ("/path: fifo, not opened"); Problems what failed.
	// Both keep their first maxProblems*50 and maxProblems lines.
	Skipped  []string
	Problems []string
	Bytes    int64 // data bytes written
	Files    int   // entries copied
	skippedN int
	dropped  int
}

// Copy copies the created and modified entries of changes from the layer src into dst, both root
// handles, at their paths relative to the layer; deletions are listed one path a line in DELETED.txt
// at dst's top. Failures of single entries are Problems; the error is ErrCopyStopped or nil.
func (cp *Copier) Copy(src, dst *os.File, changes []report.FileChange) error {
	var deleted []string
	for _, c := range changes {
		if cp.stopped() {
			return ErrCopyStopped
		}
		if c.Change == Deleted {
			deleted = append(deleted, c.Path)
			continue
		}
		if err := cp.entry(src, dst, c); err != nil {
			if errors.Is(err, ErrCopyStopped) {
				return err
			}
			cp.problem("%s: %v", c.Path, err)
		}
	}
	if len(deleted) == 0 {
		return nil
	}
	return cp.writeList(dst, "DELETED.txt", deleted)
}

// WriteSkipped lists Skipped in NOT-COPIED.txt at dst's top, when there is anything to list.
func (cp *Copier) WriteSkipped(dst *os.File) error {
	if len(cp.Skipped) == 0 {
		return nil
	}
	lines := cp.Skipped
	if cp.skippedN > len(lines) {
		lines = append(lines[:len(lines):len(lines)], fmt.Sprintf("... and %d more", cp.skippedN-len(lines)))
	}
	return cp.writeList(dst, "NOT-COPIED.txt", lines)
}

// writeList writes lines to dst/name, one a line. A line with a control character (a path the command
// chose: a FIFO named "x\n/etc/passwd: ...") is written Go-quoted ("x\n/etc/passwd..."), so that no
// name can add lines of its own to what a reviewer, or a script applying DELETED.txt, reads.
func (cp *Copier) writeList(dst *os.File, name string, lines []string) error {
	f, err := safefs.Open(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o644)
	if err == nil {
		var b strings.Builder
		for _, l := range lines {
			if strings.ContainsFunc(l, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				l = strconv.Quote(l)
			}
			b.WriteString(l + "\n")
		}
		_, err = f.WriteString(b.String())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		cp.problem("writing %s: %v", name, err)
	}
	return nil
}

func (cp *Copier) stopped() bool {
	select {
	case <-cp.Stop:
		return true
	default:
		return false
	}
}

// entry copies one created or modified entry. An entry that vanished from src since it was listed is
// skipped: the list was right when it was made.
func (cp *Copier) entry(src, dst *os.File, c report.FileChange) error {
	rel := strings.Trim(c.Path, "/")
	if rel == "" {
		return nil
	}
	in, err := safefs.Open(src, rel, unix.O_PATH, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(in.Fd()), &st); err != nil {
		return err
	}
	kind := kindOf(st.Mode)
	if kind == "other" {
		cp.skip("%s: %s, not opened", c.Path, otherKind(st.Mode))
		return nil
	}
	dirRel, name := safefs.Split(rel)
	parent, err := safefs.MkdirAll(dst, dirRel, 0o755, nil)
	if err != nil {
		return err
	}
	defer parent.Close()
	switch kind {
	case "dir":
		// Writable for sbx, so that its copied children fit.
		err := unix.Mkdirat(int(parent.Fd()), name, st.Mode&0o777|0o700)
		if err == unix.EEXIST {
			return nil
		}
		return err
	case "symlink":
		target, err := readlinkFd(in)
		if err != nil {
			return err
		}
		return unix.Symlinkat(target, int(parent.Fd()), name)
	}
	return cp.regular(src, rel, parent, name, c.Path)
}

// readlinkFd reads the target of the symlink an O_PATH|O_NOFOLLOW file stands for.
func readlinkFd(f *os.File) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(int(f.Fd()), "", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func otherKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return "special file"
}

// regular copies a regular file: opened without blocking, its type checked again on the fd (a file
// swapped for a FIFO since the lookup is skipped), its data segments copied and its holes left holes.
func (cp *Copier) regular(src *os.File, rel string, parent *os.File, name, p string) error {
	in, err := safefs.Open(src, rel, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(in.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		cp.skip("%s: %s, not opened", p, otherKind(st.Mode))
		return nil
	}
	if st.Blocks*512 > cp.Budget {
		cp.skip("%s: %d bytes, beyond the run's disk limit left for the copy (%d bytes)", p, st.Size, cp.Budget)
		return nil
	}
	if _, err := unix.Fgetxattr(int(in.Fd()), metacopyXattr, nil); err == nil {
		// Only its metadata changed (owner, mode): its data is the host's, not in the layer.
		cp.skip("%s: only its metadata changed, its data is the host's", p)
		return nil
	}
	fd, err := unix.Openat(int(parent.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(fd), name)
	err = cp.copyData(in, out, st.Size)
	if err == nil {
		err = unix.Fchmod(fd, st.Mode&0o777)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlinkat(int(parent.Fd()), name, 0)
		if errors.Is(err, errOverBudget) {
			cp.skip("%s: %d bytes, beyond the run's disk limit left for the copy", p, st.Size)
			return nil
		}
		return err
	}
	cp.Files++
	ts := []unix.Timespec{st.Mtim, st.Mtim}
	return unix.UtimesNanoAt(int(parent.Fd()), name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

var errOverBudget = errors.New("over the copy budget")

// copyData copies the data segments of in (up to size) to out at the same offsets and sets out's size,
// so that a hole in in is a hole in out. Each segment is charged to the budget before it is written.
func (cp *Copier) copyData(in, out *os.File, size int64) error {
	n, err := CopySegments(in, out, size, make([]byte, copyChunk), func(n int64) error {
		if cp.stopped() {
			return ErrCopyStopped
		}
		if n > cp.Budget {
			return errOverBudget
		}
		cp.Budget -= n
		return nil
	})
	cp.Bytes += n
	return err
}

// CopySegments copies the data segments of in (up to size) to out at the same offsets and sets out's
// size: a hole in in stays a hole in out. before is called with each chunk's length before it is read
// and written, len(buf) at most (a budget, a look at a stop); its error ends the copy. A file that shrank
// since is copied as far as it goes. It returns the data bytes written.
func CopySegments(in, out *os.File, size int64, buf []byte, before func(n int64) error) (int64, error) {
	ifd := int(in.Fd())
	var total int64
	for off := int64(0); off < size; {
		data, err := unix.Seek(ifd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // the rest is a hole
		}
		if err != nil {
			return total, fmt.Errorf("finding data: %w", err)
		}
		hole, err := unix.Seek(ifd, data, unix.SEEK_HOLE)
		if err != nil {
			return total, fmt.Errorf("finding a hole: %w", err)
		}
		hole = min(hole, size)
		for o := data; o < hole; {
			n := min(int64(len(buf)), hole-o)
			if err := before(n); err != nil {
				return total, err
			}
			got, err := in.ReadAt(buf[:n], o)
			if got == 0 {
				if err == io.EOF {
					return total, out.Truncate(size)
				}
				return total, err
			}
			if _, err := out.WriteAt(buf[:got], o); err != nil {
				return total, err
			}
			o += int64(got)
			total += int64(got)
		}
		off = hole
	}
	return total, out.Truncate(size)
}

func (cp *Copier) skip(format string, args ...any) {
	cp.skippedN++
	if len(cp.Skipped) < maxProblems*50 {
		cp.Skipped = append(cp.Skipped, fmt.Sprintf(format, args...))
	}
}

func (cp *Copier) problem(format string, args ...any) {
	if len(cp.Problems) >= maxProblems {
		cp.dropped++
		return
	}
	cp.Problems = append(cp.Problems, fmt.Sprintf(format, args...))
}

// Dropped is how many problems were not kept in Problems.
func (cp *Copier) Dropped() int { return cp.dropped }
