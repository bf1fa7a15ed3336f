// Package host owns the few facts about the host and its paths that several of sandbox's packages
// read: whether sbx runs without root (Rootless, ErrRootless), and whether a path lies within a
// directory (Within).
// It imports no other sbx package.
package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// Rootless says whether sbx runs without root, and builds sandboxes the rootless way.
func Rootless() bool { return os.Geteuid() != 0 }

// ErrRootless is matched by errors about what sbx cannot do without root.
var ErrRootless = errors.New("not available without root")

// Within reports whether path is dir or below it.
func Within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// ResolveExisting is path with the symlinks of its longest existing prefix resolved (on the host,
// whose links the sandbox's read-only tree shows as they are); path itself when nothing resolves.
func ResolveExisting(path string) string {
	for dir, rest := filepath.Clean(path), ""; dir != "/" && dir != "."; dir, rest = filepath.Dir(dir), filepath.Join(filepath.Base(dir), rest) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
	}
	return path
}
