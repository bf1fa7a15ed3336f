package observe

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// CopyChanges copies the created and modified entries of changes out of the overlay's upper dir into
// dest, at their sandbox paths relative to dest (for --changes DIR: the overlay is thrown away at
// teardown). Files keep their mode and mtime, symlinks are recreated as symlinks, created directories are
// made; deletions are listed one path a line in dest/DELETED.txt.
//
// Both trees are opened as os.Root: what the sandbox wrote is untrusted, so no symlink in upper or
// recreated in dest can make the copy read or write outside them.
func CopyChanges(upper string, changes []FileChange, dest string) error {
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return fmt.Errorf("copy changes: %w", err)
	}
	src, err := os.OpenRoot(upper)
	if err != nil {
		return fmt.Errorf("copy changes: %w", err)
	}
	defer src.Close()
	dst, err := os.OpenRoot(dest)
	if err != nil {
		return fmt.Errorf("copy changes: %w", err)
	}
	defer dst.Close()
	var deleted []string
	for _, c := range changes {
		if c.Change == Deleted {
			deleted = append(deleted, c.Path)
			continue
		}
		if err := copyEntry(src, dst, c); err != nil {
			return fmt.Errorf("copy changed %s: %w", c.Path, err)
		}
	}
	if len(deleted) == 0 {
		return nil
	}
	return dst.WriteFile("DELETED.txt", []byte(strings.Join(deleted, "\n")+"\n"), 0o644)
}

// copyEntry copies one created or modified entry. An entry that vanished from upper since it was listed
// is skipped: the list was right when it was made.
func copyEntry(src, dst *os.Root, c FileChange) error {
	rel := strings.TrimPrefix(path.Clean(c.Path), "/")
	if rel == "" {
		return nil
	}
	if err := dst.MkdirAll(path.Dir(rel), 0o755); err != nil {
		return err
	}
	info, err := src.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case info.IsDir():
		err := dst.Mkdir(rel, info.Mode().Perm()|0o700) // writable, so its copied children fit
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := src.Readlink(rel)
		if err != nil {
			return err
		}
		return dst.Symlink(target, rel)
	case info.Mode().IsRegular():
		return copyRegular(src, dst, rel, info)
	}
	return nil // fifos, sockets, devices: nothing to review
}

func copyRegular(src, dst *os.Root, rel string, info fs.FileInfo) error {
	in, err := src.Open(rel)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := dst.OpenFile(rel, os.O_CREATE|os.O_EXCL|os.O_WRONLY, info.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return dst.Chtimes(rel, info.ModTime(), info.ModTime())
}
