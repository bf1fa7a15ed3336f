// Package host owns the few facts about the host and its paths that several of sandbox's packages
// read: whether sbx runs without root (Rootless), and whether a path lies within a directory (Within).
// It imports no other sbx package.
package host

import (
	"os"
	"strings"
)

// Rootless says whether sbx runs without root, and builds sandboxes the rootless way.
func Rootless() bool { return os.Geteuid() != 0 }

// Within reports whether path is dir or below it.
func Within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}
