package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
)

// The plan's shares as the sandbox takes them: their mount points (shareTargets), their host paths
// resolved through root's links only (resolveShares), and which paths are shared.

// shareTargets are where the shares are mounted in the sandbox.
func shareTargets(shares []policy.Share) []string {
	out := make([]string, len(shares))
	for i, sh := range shares {
		out[i] = sh.Sandbox
	}
	return out
}

// resolveShares gives every share a host path that leads through no link, before anything is built: the
// path its links lead to when every link on the way is root's (a system's /home -> /var/home, say). A
// link anyone else owns fails the share (ErrShareLink): a command in an earlier sandbox could have
// planted it in a directory shared with it (--rw ~/proj, then ~/proj/data -> ~/.ssh), and it runs as no
// host root (without root, as the caller: the caller's own links cannot be told from planted ones).
// Each start path then opens the share's source without following any link (supervisor.Mount.NoLinks,
// checkShares), so that a link planted after this check fails the run instead of being followed.
//
// As root, a share onto its own path is moved, on the host as in the sandbox: the sandbox shows the
// host's links as they are, so the command reaches the share through them, as on the host (hiding keeps
// the way down to the link too: shareLinks); sbx never makes a mount point through a link. A share onto
// a path of its own (filesystem.share's path) keeps it. Without root every share keeps its sandbox
// path: a link in a hidden directory (~ by default) is not in the sandbox, and the share's mount point is
// made at the link's path itself, which the command uses as on the host; moving it would leave that path
// empty. The plan is copied, not changed: a pool shares it.
func (s *Sandbox) resolveShares() error {
	shares := slices.Clone(s.cfg.Plan.Filesystem.Shares)
	moved := false
	for i, sh := range shares {
		real, err := resolveRootLinks(sh.Host)
		if err != nil {
			return shareError(sh.Host, err)
		}
		if real == filepath.Clean(sh.Host) {
			continue
		}
		moved = true
		shares[i].Host = real
		if Rootless() || sh.Sandbox != sh.Host {
			continue
		}
		shares[i].Sandbox = real
		s.shareLinks = append(s.shareLinks, filepath.Clean(sh.Host))
		s.Notes = append(s.Notes, fmt.Sprintf("share %s: shared at %s, where its link leads", sh.Host, real))
	}
	if moved {
		p := *s.cfg.Plan
		p.Filesystem.Shares = shares
		s.cfg.Plan = &p
	}
	return nil
}

// Shares are the sandbox's shares, with their host paths as resolved for the mounts (resolveShares).
func (s *Sandbox) Shares() []policy.Share { return s.cfg.Plan.Filesystem.Shares }

// shareError is the error about share host whose path could not be resolved or opened without a link:
// ErrShareLink for a link sbx does not follow (or too many), ErrShare for the rest (a path gone).
func shareError(host string, err error) error {
	kind := ErrShare
	if errors.Is(err, errNotRootLink) || errors.Is(err, unix.ELOOP) {
		kind = ErrShareLink
	}
	return fmt.Errorf("%w: %s: %w", kind, host, err)
}

// maxLinks bounds the links resolveRootLinks follows, as the kernel's 40.
const maxLinks = 40

// errNotRootLink is resolveRootLinks's error for a link on the way that is not root's.
var errNotRootLink = errors.New("a link on the way is not root's")

// resolveRootLinks resolves the links of the absolute path, one component at a time, into a path with
// no link on it; it fails (errNotRootLink) when a link on the way is not root's, when a component cannot
// be read, or when there are too many links.
func resolveRootLinks(path string) (string, error) {
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(path), "/"), "/")
	done := "/"
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			done = filepath.Dir(done)
			continue
		}
		next := filepath.Join(done, name)
		var st unix.Stat_t
		if err := unix.Lstat(next, &st); err != nil {
			return "", &os.PathError{Op: "lstat", Path: next, Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			done = next
			continue
		}
		if st.Uid != 0 {
			return "", fmt.Errorf("%w: %s (uid %d)", errNotRootLink, next, st.Uid)
		}
		if hops++; hops > maxLinks {
			return "", &os.PathError{Op: "resolve", Path: path, Err: unix.ELOOP}
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			done = "/"
		}
		rest = append(strings.Split(strings.Trim(target, "/"), "/"), rest...)
	}
	return done, nil
}

// sharedElsewhere says whether path lies in a share mounted at another path than its host path: the
// host's / then says nothing of what the sandbox sees there.
func sharedElsewhere(shares []policy.Share, path string) bool {
	for _, sh := range shares {
		if sh.Sandbox != sh.Host && host.Within(path, sh.Sandbox) {
			return true
		}
	}
	return false
}

// shared says whether path is inside one of the host paths shared into the sandbox.
func shared(shares []policy.Share, path string) bool {
	for _, sh := range shares {
		if host.Within(path, sh.Sandbox) {
			return true
		}
	}
	return false
}

// isShare says whether the bind of src at dst is one of shares (resolveShares made their host paths
// free of links).
func isShare(shares []policy.Share, src, dst string) bool {
	return slices.ContainsFunc(shares, func(sh policy.Share) bool { return sh.Host == src && sh.Sandbox == dst })
}
