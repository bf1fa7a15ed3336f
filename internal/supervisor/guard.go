package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrReachesGuarded is matched by the error about a writable bind whose source, as it was opened,
// contains the guarded directory (sbx's state root) or lies in it.
var ErrReachesGuarded = errors.New("a writable share reaches sbx's state root")

// FileID is a file's identity: its device and inode, what a bind mount or a link of it shares with it.
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// Guard is a directory no writable bind may reach (sbx's state root, which holds what later runs
// trust). sbx checks its shares by path before it starts the sandbox; a path can be swapped for a link
// after that check (by a command of another run that may write a directory on the path), so the check
// is repeated on the very descriptor that the bind's copy is made from.
type Guard struct {
	Root  *FileID  `json:"root,omitempty"` // the directory's identity; nil when it does not exist yet
	Above []FileID `json:"above"`          // the directories it lies in (or will, once made)
}

// Check returns ErrReachesGuarded when fd, a descriptor of a bind's source (O_PATH will do), is a
// directory the guarded one lies in, or lies in that directory itself; what it lies in is found by
// walking '..' from the descriptor (a file's: from the directory it was in when checked), never by a
// path that could be swapped again. A nil guard allows all.
func (g *Guard) Check(fd int) error {
	if g == nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("checking the source: %w", err)
	}
	id := FileID{st.Dev, st.Ino}
	for _, a := range g.Above {
		if id == a {
			return ErrReachesGuarded
		}
	}
	if g.Root == nil {
		return nil
	}
	dir := fd
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		parent, err := parentOf(fd, id)
		if err != nil {
			return err
		}
		defer unix.Close(parent)
		dir = parent
	}
	return g.walkUp(dir)
}

// maxDepth bounds the walk up from a source to '/'.
const maxDepth = 4096

// walkUp looks for the guarded directory among dir and the directories above it.
func (g *Guard) walkUp(dir int) error {
	cur, err := unix.Openat(dir, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("checking the source: %w", err)
	}
	defer func() { unix.Close(cur) }()
	var last FileID
	for range maxDepth {
		var st unix.Stat_t
		if err := unix.Fstat(cur, &st); err != nil {
			return fmt.Errorf("checking the source: %w", err)
		}
		id := FileID{st.Dev, st.Ino}
		if id == *g.Root {
			return ErrReachesGuarded
		}
		if id == last {
			return nil // '/': its '..' is itself
		}
		last = id
		up, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("checking the source: %w", err)
		}
		unix.Close(cur)
		cur = up
	}
	return fmt.Errorf("checking the source: more than %d directories deep", maxDepth)
}

// parentOf opens the directory that holds the file fd (identity id) now: the one its path names, once
// the file is seen under its name there (a path swapped meanwhile names another file, and fails).
func parentOf(fd int, id FileID) (int, error) {
	path, err := os.Readlink(procFD(fd))
	if err != nil || !filepath.IsAbs(path) {
		return -1, fmt.Errorf("checking the source: no path for it: %v", err)
	}
	dir, name := filepath.Split(path)
	parent, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("checking the source: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || (FileID{st.Dev, st.Ino}) != id {
		unix.Close(parent)
		return -1, fmt.Errorf("checking the source: it moved while it was checked")
	}
	return parent, nil
}

// OpenSource is a detached copy of bind m's source (its whole tree with MS_REC), looked up by its path
// (links followed, as mount(2) follows them, unless m.NoLinks); a writable bind's source is first
// checked against g on the descriptor the copy is then made from, so that what is checked is what is
// mounted (not sbx's own sources: Mount.Own).
func OpenSource(m Mount, g *Guard) (int, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC}
	if m.NoLinks {
		how.Resolve = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
	}
	fd, err := openat2(unix.AT_FDCWD, m.Source, &how)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fd)
	if !m.Own && m.Flags&unix.MS_RDONLY == 0 && m.RecSet&unix.MOUNT_ATTR_RDONLY == 0 {
		if err := g.Check(fd); err != nil {
			return -1, err
		}
	}
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH)
	if m.Flags&unix.MS_REC != 0 {
		flags |= unix.AT_RECURSIVE
	}
	return unix.OpenTree(fd, "", flags)
}
