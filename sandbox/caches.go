package sandbox

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox/rootfs"
)

// A toolchain cache (policy.Cache, filesystem.toolchains) is an overlay of its own, as the working
// directory's is: the host directory as the read-only lower layer, an upper and a work dir in the run's
// writable layer, mounted at the host's path. The command reads what the host downloaded and built,
// writes what its tools write (lock files, new entries), and every write is thrown away with the layer:
// nothing reaches the host, and nothing is listed or applied (the caches are the toolchains', not the
// project's). The other way, the host path un-hidden in the root overlay, would show the cache only
// where it lies on the root file system and, without root, inside a hidden top-level directory whose
// overlay lower is an empty directory: no way at all. One overlay per cache costs a mount (measured:
// make toolchains).
//
// As root the command runs as another user than the cache's owner (nobody, for root's caches): the lower
// layer is an idmapped bind that shows the owner's files as the command's, as for the working directory,
// so that copy-up and new entries are the command's. Without root the command is the caller, who owns
// them.

// pickCaches decides which of the plan's caches the sandbox shows: those that are directories on the
// host, reached through root's links only, with nothing mounted below them without root (a user
// namespace locks such mounts, and an overlay refuses them); notes say what was left out, for a
// toolchain the profile named.
func (s *Sandbox) pickCaches() {
	for _, c := range s.cfg.Plan.Filesystem.Caches {
		real, err := resolveRootLinks(c.Host)
		var st unix.Stat_t
		if err == nil {
			err = unix.Lstat(real, &st)
		}
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			err = errors.New("not a directory")
		}
		if err == nil && Rootless() {
			if below, merr := rootfs.MountsBelow(real); merr != nil || below {
				err = fmt.Errorf("mounts below it, which a user namespace locks (%v)", merr)
			}
		}
		if err != nil {
			s.cacheLeftOut(c, err)
			continue
		}
		if Rootless() && int(st.Uid) != os.Geteuid() {
			// Shown all the same (reading works where its modes let the caller read), but a tool that
			// writes below it meets the kernel's refusal to copy up a file whose owner is not mapped.
			s.Notes = append(s.Notes, fmt.Sprintf("toolchains: %s %s belongs to uid %d, not the caller: without root the sandbox maps the caller's id alone, so what it holds shows as nobody's and writing to it fails (EOVERFLOW); chown it to the caller, or run as root", c.What, real, st.Uid))
		}
		s.caches = append(s.caches, rootfs.Cache{Cache: c, At: real})
	}
}

// cacheLeftOut notes a cache the sandbox does not show, when the profile named its toolchain.
func (s *Sandbox) cacheLeftOut(c policy.Cache, err error) {
	if c.Named {
		s.Notes = append(s.Notes, fmt.Sprintf("toolchains: %s: %s not shown: %v", c.Toolchain, c.What, err))
	}
}

// cacheEnv gives the plan's environment each shown cache's variable, unless it has one (the profile's
// env.set, -e), and notes each cache.
func (s *Sandbox) cacheEnv() {
	if len(s.caches) == 0 {
		return
	}
	env := slices.Clone(s.cfg.Plan.Env)
	for _, c := range s.caches {
		how := "shown read-only below a throwaway writable layer"
		if name, value, ok := strings.Cut(c.Env, "="); ok {
			if !hasEnv(env, name) {
				env = append(env, name+"="+strings.Replace(value, c.Host, c.At, 1))
				how += ", " + name + " points at it"
			} else {
				how += ", " + name + " left as the command's environment sets it"
			}
		}
		s.Notes = append(s.Notes, fmt.Sprintf("toolchains: %s %s %s (filesystem.toolchains)", c.What, c.At, how))
	}
	slices.SortFunc(env, func(a, b string) int {
		ka, _, _ := strings.Cut(a, "=")
		kb, _, _ := strings.Cut(b, "=")
		return strings.Compare(ka, kb)
	})
	p := *s.cfg.Plan
	p.Env = env
	s.cfg.Plan = &p
}

// Caches are the toolchain caches the sandbox shows, at their host paths (At).
func (s *Sandbox) Caches() []policy.Cache {
	out := make([]policy.Cache, len(s.caches))
	for i, c := range s.caches {
		out[i] = c.Cache
		out[i].Host = c.At
	}
	return out
}

// cachePaths are the sandbox paths of the caches shown: Landlock write paths (their layers take the
// writes).
func (s *Sandbox) cachePaths() []string {
	out := make([]string, len(s.caches))
	for i, c := range s.caches {
		out[i] = c.At
	}
	return out
}

// hasEnv says whether env (KEY=VALUE) sets key, to any value.
func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// mountCaches mounts the caches' overlays as root, after the root overlay (rootfs.FS.MountCaches); a
// cache the command's user could read but write nothing in is left out, with a note.
func (s *Sandbox) mountCaches() error {
	shown, err := s.rootfs.MountCaches(s.caches, s.ids.HostUID, s.ids.HostGID, func(c rootfs.Cache, err error) {
		c.Named = true
		s.cacheLeftOut(c.Cache, err)
	})
	s.caches = shown
	return err
}
