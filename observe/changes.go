package observe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// File change classes, the values of FileChange.Change.
const (
	Created  = "created"
	Modified = "modified"
	Deleted  = "deleted"
)

// FileChange is one path the sandbox created, modified or deleted, as seen inside the sandbox.
type FileChange struct {
	Path    string    `json:"path"`   // absolute path inside the sandbox
	Size    int64     `json:"size"`   // bytes; 0 for directories; for a deletion, the size of the hidden file
	Kind    string    `json:"kind"`   // file, dir, symlink, other (fifo, socket, device)
	Change  string    `json:"change"` // created, modified or deleted
	ModTime time.Time `json:"-"`      // mtime in the upper layer; tells a rewritten file from an untouched one
}

// FileChanges is the state of an overlay's upper layer, relative to its lower layer.
type FileChanges struct {
	Created  []FileChange
	Modified []FileChange
	Deleted  []FileChange
}

// Overlay markers (Documentation/filesystems/overlayfs.rst). Only "y" means opaque: since Linux 6.7 "x"
// marks a directory that holds xattr whiteouts, which hides nothing.
const opaqueXattr = "trusted.overlay.opaque"

// Changes reads an overlay's upper dir against its lower dir. In upper, a whiteout (a character device
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
	upper = filepath.Clean(upper)
	fc := &FileChanges{}
	// hidden[dir] holds when dir or one of its ancestors is opaque; WalkDir visits a directory before its
	// entries, so each directory's xattr is read once.
	hidden := map[string]bool{"/": isOpaque(upper)}
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == upper {
			return err
		}
		rel := "/" + filepath.ToSlash(p[len(upper)+1:])
		underOpaque := hidden[path.Dir(rel)]
		if d.IsDir() {
			hidden[rel] = underOpaque || isOpaque(p)
		}
		return fc.add(lower, rel, d, underOpaque)
	})
	if err != nil {
		return nil, fmt.Errorf("read overlay changes in %s: %w", upper, err)
	}
	return fc, nil
}

// add classifies one upper entry. Under an opaque directory nothing of lower is visible, so everything
// there is created and a whiteout hides nothing.
func (fc *FileChanges) add(lower, rel string, d fs.DirEntry, underOpaque bool) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	if isWhiteout(info) {
		if underOpaque {
			return nil
		}
		return fc.addWhiteout(lower, rel)
	}
	c := FileChange{Path: rel, Kind: kindOf(info.Mode()), Size: info.Size(), ModTime: info.ModTime()}
	if c.Kind == "dir" {
		c.Size = 0
	}
	switch {
	case underOpaque || !existsIn(lower, rel):
		c.Change = Created
		fc.Created = append(fc.Created, c)
	case c.Kind != "dir":
		c.Change = Modified
		fc.Modified = append(fc.Modified, c)
	}
	return nil
}

// addWhiteout records a deletion, when lower has the path (sbx may hide paths that do not exist).
func (fc *FileChanges) addWhiteout(lower, rel string) error {
	if lower == "" {
		return nil
	}
	info, err := os.Lstat(filepath.Join(lower, rel))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	c := FileChange{Path: rel, Kind: kindOf(info.Mode()), Size: info.Size(), Change: Deleted}
	if c.Kind == "dir" {
		c.Size = 0
	}
	fc.Deleted = append(fc.Deleted, c)
	return nil
}

func isWhiteout(info fs.FileInfo) bool {
	if info.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

func isOpaque(dir string) bool {
	var v [2]byte
	n, err := unix.Lgetxattr(dir, opaqueXattr, v[:])
	return err == nil && n == 1 && v[0] == 'y'
}

// existsIn reports whether rel exists in lower. Lstat: a symlink in lower is an entry of its own, and
// following it could leave lower.
func existsIn(lower, rel string) bool {
	if lower == "" {
		return false // no lower layer: a file system that started empty
	}
	_, err := os.Lstat(filepath.Join(lower, rel))
	return err == nil
}

func kindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

// DiffChanges returns what changed between two readings of the same upper layer: sbx puts whiteouts and
// opaque directories (and a few files) there before the command runs, and those are not the command's.
//
// An entry of after identical to before (path, kind, size, mtime) is left out. An entry new to or changed
// since before is created when before did not have the path (or had it deleted), else modified;
// directories are never modified (their mtime moves whenever a child changes). A path before had, after
// lacks and that was not a directory is deleted: the sandbox removed a file sbx had put there.
func DiffChanges(before, after *FileChanges) (created, modified, deleted []FileChange) {
	old := index(before)
	for _, c := range slices.Concat(after.Created, after.Modified) {
		prev, had := old[c.Path]
		switch {
		case had && prev.Change != Deleted && c.Kind == "dir" && prev.Kind == "dir":
		case had && sameEntry(prev, c):
		case had && prev.Change != Deleted:
			c.Change = Modified
			modified = append(modified, c)
		case had: // it was hidden by a whiteout: to the command the path is new
			c.Change = Created
			created = append(created, c)
		case c.Change == Created:
			created = append(created, c)
		default:
			modified = append(modified, c)
		}
	}
	now := index(after)
	for _, c := range after.Deleted {
		if prev, had := old[c.Path]; !had || prev.Change != Deleted {
			deleted = append(deleted, c)
		}
	}
	for p, prev := range old {
		if _, ok := now[p]; !ok && prev.Change != Deleted && prev.Kind != "dir" {
			prev.Change = Deleted
			deleted = append(deleted, prev)
		}
	}
	for _, s := range [][]FileChange{created, modified, deleted} {
		slices.SortFunc(s, func(a, b FileChange) int { return cmpString(a.Path, b.Path) })
	}
	return created, modified, deleted
}

func sameEntry(a, b FileChange) bool {
	return a.Change == b.Change && a.Kind == b.Kind && a.Size == b.Size && a.ModTime.Equal(b.ModTime)
}

func index(fc *FileChanges) map[string]FileChange {
	m := make(map[string]FileChange)
	if fc == nil {
		return m
	}
	for _, s := range [][]FileChange{fc.Created, fc.Modified, fc.Deleted} {
		for _, c := range s {
			m[c.Path] = c
		}
	}
	return m
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
