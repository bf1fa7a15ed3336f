// Package selfexe is sbx's own binary: where it is, and a sealed in-memory copy of it for a
// long-running sbx.
package selfexe

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/opencontainers/runc/libcontainer/exeseal"
	"golang.org/x/sys/unix"
)

// env carries sbx's own path into the copy of sbx that Seal starts from a sealed memfd, whose
// /proc/self/exe names no file (sbx-init, the probe's binary and the network helper are found from
// that path).
const env = "_SBX_SELF"

// Seal re-executes the program from a sealed in-memory copy of its binary; for a long-running sbx that
// builds many sandboxes (sbx mcp's warm pool). libcontainer protects the host's binary from a
// container that would overwrite it through /proc/self/exe: for each sandbox's init it copies the
// binary into a sealed memfd (without root: 17 MB, about 5 ms) or seals it behind an overlay (root),
// unless the running binary is such a sealed copy already. Seal returns only when it did not
// re-execute: sealed already, or the copy failed (then every sandbox seals its own, as before).
func Seal() {
	if exeseal.IsSelfExeCloned() {
		return
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return
	}
	defer exe.Close()
	st, err := exe.Stat()
	if err != nil {
		return
	}
	sealed, err := exeseal.CloneBinary(exe, st.Size(), "/proc/self/exe", os.TempDir())
	if err != nil {
		return
	}
	defer sealed.Close()
	environ := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, env+"=") })
	// execve opens the path before it closes the close-on-exec memfd.
	_ = unix.Exec("/proc/self/fd/"+strconv.Itoa(int(sealed.Fd())), os.Args, append(environ, env+"="+self))
}

// Path is sbx's binary: the file it was started from, also when it runs from the sealed copy Seal
// made. The variable counts only in such a copy.
func Path() (string, error) {
	if p := os.Getenv(env); p != "" && exeseal.IsSelfExeCloned() {
		return p, nil
	}
	return os.Executable()
}

func init() {
	// The kernel names a process after the file it executed: /proc/self/fd/N for the sealed copy.
	if os.Getenv(env) != "" && exeseal.IsSelfExeCloned() {
		_ = os.WriteFile("/proc/self/comm", []byte("sbx"), 0)
	}
}

// Beside is the file called name in the directory of sbx's binary self (from Path): the binaries that
// make build puts next to sbx (sbx-init, sbx-mcp). ok says whether it is there, a regular file and
// executable.
func Beside(self, name string) (path string, ok bool) {
	path = filepath.Join(filepath.Dir(self), name)
	st, err := os.Stat(path)
	return path, err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
