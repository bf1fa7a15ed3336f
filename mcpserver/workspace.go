package mcpserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrCwd is matched by every refusal of a caller's cwd.
var ErrCwd = errors.New("cwd refused")

// workspace is a directory tree the operator lets callers work in, held open so that what it names is
// fixed at start.
type workspace struct {
	path string // real path, no symlinks
	fd   int    // O_PATH handle of path
}

// openWorkspaces resolves each directory once (the operator's own paths: symlinks in them are followed
// here, at start, and never again) and holds it open.
func openWorkspaces(dirs []string) ([]workspace, error) {
	var ws []workspace
	for _, d := range dirs {
		abs, err := filepath.Abs(d)
		if err == nil {
			abs, err = filepath.EvalSymlinks(abs)
		}
		if err != nil {
			closeWorkspaces(ws)
			return nil, fmt.Errorf("workspace %s: %w", d, err)
		}
		fd, err := unix.Open(abs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			closeWorkspaces(ws)
			return nil, fmt.Errorf("workspace %s: %w", d, err)
		}
		ws = append(ws, workspace{path: abs, fd: fd})
	}
	return ws, nil
}

func closeWorkspaces(ws []workspace) {
	for _, w := range ws {
		unix.Close(w.fd)
	}
}

// resolveCwd checks a caller's cwd (absolute, or relative to def) and returns it with the workspace it
// lies in. It must lie inside a workspace and be reached from it without any symbolic link (openat2 with
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS from the workspace's handle), so that the
// path the sandbox is given is the directory that was checked, and no link the caller or a command
// planted leads out of the workspace.
func resolveCwd(ws []workspace, def, cwd string) (string, workspace, error) {
	if cwd == "" {
		cwd = def
	} else if !filepath.IsAbs(cwd) {
		cwd = filepath.Join(def, cwd)
	}
	cwd = filepath.Clean(cwd)
	var in *workspace
	for i := range ws {
		if within(cwd, ws[i].path) && (in == nil || len(ws[i].path) > len(in.path)) {
			in = &ws[i]
		}
	}
	if in == nil {
		return "", workspace{}, fmt.Errorf("%w: %s is outside the server's workspaces (%s)", ErrCwd, cwd, workspacePaths(ws))
	}
	rel, err := filepath.Rel(in.path, cwd)
	if err != nil {
		return "", workspace{}, fmt.Errorf("%w: %s: %w", ErrCwd, cwd, err)
	}
	fd, err := unix.Openat2(in.fd, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return "", workspace{}, fmt.Errorf("%w: %s: a symbolic link on the way (a cwd is reached without links)", ErrCwd, cwd)
	case errors.Is(err, unix.EXDEV):
		return "", workspace{}, fmt.Errorf("%w: %s leads out of workspace %s", ErrCwd, cwd, in.path)
	case err != nil:
		return "", workspace{}, fmt.Errorf("%w: %s: %w", ErrCwd, cwd, err)
	}
	defer unix.Close(fd)
	// The workspace's own path may have been moved since start: the handle and the path must agree.
	if real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err != nil || real != cwd {
		return "", workspace{}, fmt.Errorf("%w: %s is no longer where workspace %s was at start", ErrCwd, cwd, in.path)
	}
	return cwd, *in, nil
}

// checkHidden refuses a cwd below a path the profile hides, unless the operator's workspace itself lies
// there (a workspace below /tmp is the operator's choice; /root inside a workspace of / is not the
// caller's): the sandbox would show the way down to the cwd and hand it to the command's user.
func checkHidden(cwd string, in workspace, hidden []string, profile string) error {
	for _, h := range hidden {
		if within(cwd, h) && !within(in.path, h) {
			return fmt.Errorf("%w: %s is below %s, which profile %s hides", ErrCwd, cwd, h, profile)
		}
	}
	return nil
}

func workspacePaths(ws []workspace) string {
	var ps []string
	for _, w := range ws {
		ps = append(ps, w.path)
	}
	return strings.Join(ps, ", ")
}

// within says whether path is dir or below it (both clean and absolute).
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}
