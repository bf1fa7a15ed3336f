package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
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

// shownCache is a cache the sandbox shows: the plan's, with the path its root-owned links lead to.
type shownCache struct {
	policy.Cache
	At string // the host directory, no link on the way; the sandbox path too
}

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
			if below, merr := mountsBelow(real); merr != nil || below {
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
		s.caches = append(s.caches, shownCache{Cache: c, At: real})
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

// cacheOverlay is the overlay of cache i; idmap as the lower layer's.
func (r *rootfs) cacheOverlay(i int, at string, idmap *idmapping) *overlay {
	n := strconv.Itoa(i)
	return &overlay{At: at, Lower: filepath.Join(r.runDir, "lower-cache-"+n), Upper: filepath.Join(r.layer, "upper-cache-"+n),
		work: filepath.Join(r.layer, "work-cache-"+n), merged: filepath.Join(r.runDir, "cache-"+n), idmap: idmap}
}

// hideCredentials whites out, in a cache's upper dir, the files of policy.CredentialNames that its
// host directory holds at its top.
func hideCredentials(upper, host string) error {
	for _, name := range policy.CredentialNames {
		if _, err := os.Lstat(filepath.Join(host, name)); err == nil {
			if err := whiteout(filepath.Join(upper, name)); err != nil {
				return fmt.Errorf("hiding %s: %w", filepath.Join(host, name), err)
			}
		}
	}
	return nil
}

// mountCaches mounts the caches' overlays as root, after the root overlay: each lower layer an
// idmapped bind when the cache's owner is not the command's user, each mount point made in the root
// overlay (a hidden home is an opaque directory there) and reachable for the command's user.
func (s *Sandbox) mountCaches() error {
	r := s.rootfs
	shown := s.caches[:0]
	defer func() { s.caches = shown }()
	userns := map[idmapping]*os.File{} // one user namespace per mapping, for all the caches' binds
	defer func() {
		for _, ns := range userns {
			ns.Close()
		}
	}()
	for i, c := range s.caches {
		var st unix.Stat_t
		if err := unix.Lstat(c.At, &st); err != nil {
			return fmt.Errorf("toolchain cache %s: %w", c.At, err)
		}
		var idmap *idmapping
		if int(st.Uid) != s.ids.HostUID {
			idmap = &idmapping{FromUID: int(st.Uid), FromGID: int(st.Gid), ToUID: s.ids.HostUID, ToGID: s.ids.HostGID}
		}
		o := r.cacheOverlay(i, c.At, idmap)
		r.caches = append(r.caches, o)
		var err error
		if idmap != nil && userns[*idmap] == nil {
			if userns[*idmap], err = idmapUserns(*idmap); err != nil {
				delete(userns, *idmap)
			}
		}
		if idmap != nil {
			o.userns = userns[*idmap]
		}
		if err == nil {
			err = o.bindLower()
		}
		if errors.Is(err, ErrNoIDMap) {
			// The command's user could read the cache but write nothing there: left out.
			r.caches = r.caches[:len(r.caches)-1]
			c.Named = true
			s.cacheLeftOut(c.Cache, err)
			continue
		} else if err != nil {
			return err
		}
		if err := os.MkdirAll(o.Upper, 0o755); err != nil {
			return err
		}
		if err := hideCredentials(o.Upper, c.At); err != nil {
			return err
		}
		if err := o.mountOverlay(); err != nil {
			return err
		}
		if err := mountPointLike(r.root.merged, c.At, true); err != nil {
			return fmt.Errorf("preparing the mount point of %s: %w", c.At, err)
		}
		if err := r.traversable(filepath.Dir(c.At)); err != nil {
			return err
		}
		shown = append(shown, c)
	}
	return nil
}

// cacheMounts are the spec's binds of the caches' overlays (as root: mounted by mountCaches).
func (r *rootfs) cacheMounts() []specs.Mount {
	var ms []specs.Mount
	for _, o := range r.caches {
		ms = append(ms, specs.Mount{Destination: o.At, Type: "bind", Source: o.merged, Options: []string{"bind", "nosuid", "nodev"}})
	}
	return ms
}

// cachesRootless prepares the caches' overlays without root: their upper and work dirs, the mount point
// in the layer of the top-level directory (layeredTops gives it one: the caches are write paths), and
// the overlay mounts, which the supervisor makes after the top-level ones.
func (r *rootfs) cachesRootless(caches []shownCache) error {
	for i, c := range caches {
		o := r.cacheOverlay(i, c.At, nil)
		for _, d := range []string{o.Upper, o.work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		if err := sameMode(o.Upper, c.At); err != nil {
			return err
		}
		if err := hideCredentials(o.Upper, c.At); err != nil {
			return err
		}
		name := strings.SplitN(strings.TrimPrefix(c.At, "/"), "/", 2)[0]
		for _, l := range r.top {
			if l.name == name && l.layered && (l.overlay || l.hidden) {
				if err := copyParents(r.root.Upper, c.At); err != nil {
					return err
				}
				if err := mkdirLike(filepath.Join(r.root.Upper, c.At), c.At); err != nil {
					return err
				}
			}
		}
		r.caches = append(r.caches, o)
		opts := overlayDirs(c.At, o.Upper, o.work) + "," + r.overlayOpts()
		r.hideMounts = append(r.hideMounts, specs.Mount{Destination: c.At, Type: "overlay", Source: "overlay",
			Options: []string{"nosuid", "nodev", opts}})
	}
	return nil
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
