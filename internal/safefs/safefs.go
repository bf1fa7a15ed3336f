// Package safefs owns sbx's file operations on trees that someone else controls (the sandbox's layers,
// the --changes directory, the working directory's overlay): every step below a root handle goes
// through openat2 with RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS, or through a single
// name relative to a directory fd with O_NOFOLLOW, so that no symlink, however planted or raced in, can
// make sbx read or write outside the root.
//
// What it does not do: resolve the root itself. A root is opened by path once (the caller chose that
// path); from then on only its fd is used. Nothing here opens what can block: files are opened with
// O_NONBLOCK and their type is checked on the fd.
package safefs

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Resolve is the openat2 resolution used for every path below a root: no step may leave the root, and
// no symlink (magic links of /proc included) is followed, not even one that points inside.
const Resolve = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// ErrNotDir is returned when a path that should be a directory below a root is something else (a
// symlink planted there included).
var ErrNotDir = errors.New("not a directory")

// OpenRoot opens dir as a root handle (O_PATH, a directory). dir itself is resolved as the caller
// gave it, links included: the caller chose it. Close the file when done.
func OpenRoot(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// OpenNoLinks opens the absolute path p as an O_PATH directory handle, following no link at all (no
// component of p may be a symlink): for a path resolved before, that must still be what it was.
func OpenNoLinks(p string) (*os.File, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(unix.AT_FDCWD, p, how)
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// Open opens rel below root with openat2 and Resolve. flags get O_CLOEXEC|O_NOFOLLOW added, and
// O_NONBLOCK unless O_PATH is set, so that a FIFO or device never blocks the open; check the type on the
// returned file before reading it. rel "" or "." opens root itself again.
func Open(root *os.File, rel string, flags int, perm uint32) (*os.File, error) {
	rel = clean(rel)
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NONBLOCK
	}
	how := &unix.OpenHow{Flags: uint64(flags), Mode: uint64(perm), Resolve: Resolve}
	if flags&unix.O_CREAT == 0 {
		how.Mode = 0
	}
	var fd int
	var err error
	for range 8 { // EAGAIN: a rename raced the lookup; the kernel asks to retry
		fd, err = unix.Openat2(int(root.Fd()), rel, how)
		if err != unix.EAGAIN && err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: rel, Err: err}
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// OpenDir opens the directory rel below root for reading its entries (O_RDONLY|O_DIRECTORY): a
// directory open never blocks, and fchown/fchmod work on the result (not on O_PATH files).
func OpenDir(root *os.File, rel string) (*os.File, error) {
	f, err := Open(root, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s: %w", rel, ErrNotDir)
	}
	return f, err
}

// MkdirAll creates rel below root, each missing level with perm, and returns the last level opened as
// a directory. An existing level that is not a directory (a symlink included) is ErrNotDir: nothing is
// ever created through it. made is called for each level it created, with that level's fd and its path
// relative to root (nil: nothing to do).
func MkdirAll(root *os.File, rel string, perm uint32, made func(dir *os.File, rel string) error) (*os.File, error) {
	cur, err := Open(root, "", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(clean(rel), "/")
	for i, name := range parts {
		if name == "." || name == "" {
			continue
		}
		level := strings.Join(parts[:i+1], "/")
		next, err := mkdirOne(cur, name, perm, func(dir *os.File) error {
			if made == nil {
				return nil
			}
			return made(dir, level)
		})
		cur.Close()
		if err != nil {
			return nil, fmt.Errorf("making %s: %w", rel, err)
		}
		cur = next
	}
	return cur, nil
}

func mkdirOne(parent *os.File, name string, perm uint32, made func(dir *os.File) error) (*os.File, error) {
	err := unix.Mkdirat(int(parent.Fd()), name, perm)
	created := err == nil
	if err != nil && err != unix.EEXIST {
		return nil, err
	}
	dir, err := OpenDir(parent, name)
	if err != nil {
		return nil, err
	}
	if created {
		if err := made(dir); err != nil {
			dir.Close()
			return nil, err
		}
	}
	return dir, nil
}

// Split returns the parent of rel and its last name, both relative ("a/b/c" → "a/b", "c").
func Split(rel string) (dir, name string) {
	rel = clean(rel)
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

// clean makes rel relative and free of empty and "." components; ".." stays (RESOLVE_IN_ROOT keeps it
// inside the root).
func clean(rel string) string {
	parts := strings.Split(rel, "/")
	out := parts[:0]
	for _, p := range parts {
		if p != "" && p != "." {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return "."
	}
	return strings.Join(out, "/")
}

// Path returns the path the kernel has for an open file (readlink of /proc/self/fd/N): where a
// resolution ended, as the calling process sees it.
func Path(f *os.File) (string, error) {
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return "", fmt.Errorf("reading the path of an open file: %w", err)
	}
	if strings.HasSuffix(p, " (deleted)") {
		return "", fmt.Errorf("%s: %w", p, unix.ENOENT)
	}
	return p, nil
}

// ResolveIn resolves p (absolute) inside the tree at root as a process chrooted there would: absolute
// symlinks and ".." stay inside root; magic links are refused. It returns the resolved path, absolute
// and relative to root, with no symlink left in it.
func ResolveIn(root, p string) (string, error) {
	r, err := OpenRoot(root)
	if err != nil {
		return "", err
	}
	defer r.Close()
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(int(r.Fd()), clean(p), how)
	if err != nil {
		return "", &os.PathError{Op: "resolve", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	got, err := Path(f)
	if err != nil {
		return "", err
	}
	base, err := Path(r)
	if err != nil {
		return "", err
	}
	if base == "/" {
		return got, nil
	}
	rest, ok := strings.CutPrefix(got, base)
	if !ok || (rest != "" && rest[0] != '/') {
		return "", fmt.Errorf("resolving %s: ended outside %s (at %s)", p, root, got)
	}
	if rest == "" {
		rest = "/"
	}
	return rest, nil
}
