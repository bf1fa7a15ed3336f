package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
)

// Cache is a cache the sandbox shows: the plan's, with the path its root-owned links lead to.
type Cache struct {
	policy.Cache
	At string // the host directory, no link on the way; the sandbox path too
}

// cacheOverlay is the overlay of cache i; idmap as the lower layer's.
func (r *FS) cacheOverlay(i int, at string, idmap *IDMapping) *Overlay {
	n := strconv.Itoa(i)
	return &Overlay{At: at, Lower: filepath.Join(r.runDir, "lower-cache-"+n), Upper: filepath.Join(r.layer, "upper-cache-"+n),
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

// CacheMounts are the spec's binds of the caches' overlays (as root: mounted by MountCaches).
func (r *FS) CacheMounts() []specs.Mount {
	var ms []specs.Mount
	for _, o := range r.caches {
		ms = append(ms, specs.Mount{Destination: o.At, Type: "bind", Source: o.merged, Options: []string{"bind", "nosuid", "nodev"}})
	}
	return ms
}

// CachesRootless prepares the caches' overlays without root: their upper and work dirs, the mount point
// in the layer of the top-level directory (LayeredTops gives it one: the caches are write paths), and
// the overlay mounts, which the supervisor makes after the top-level ones.
func (r *FS) CachesRootless(caches []Cache) error {
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

// MountCaches mounts the caches' overlays as root, after the root overlay: each lower layer an
// idmapped bind when the cache's owner is not the command's user (uid, gid: its host ids), each mount
// point made in the root overlay (a hidden home is an opaque directory there) and reachable for the
// command's user. It returns the caches shown, those mounted so far when it fails; leftOut is told of
// each one left out.
func (r *FS) MountCaches(caches []Cache, uid, gid int, leftOut func(Cache, error)) (shown []Cache, err error) {
	shown = caches[:0]
	userns := map[IDMapping]*os.File{} // one user namespace per mapping, for all the caches' binds
	defer func() {
		for _, ns := range userns {
			ns.Close()
		}
	}()
	for i, c := range caches {
		var st unix.Stat_t
		if err := unix.Lstat(c.At, &st); err != nil {
			return shown, fmt.Errorf("toolchain cache %s: %w", c.At, err)
		}
		var idmap *IDMapping
		if int(st.Uid) != uid {
			idmap = &IDMapping{FromUID: int(st.Uid), FromGID: int(st.Gid), ToUID: uid, ToGID: gid}
		}
		o := r.cacheOverlay(i, c.At, idmap)
		r.caches = append(r.caches, o)
		var err error
		if idmap != nil && userns[*idmap] == nil {
			if userns[*idmap], err = IDMapUserns(*idmap); err != nil {
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
			leftOut(c, err)
			continue
		} else if err != nil {
			return shown, err
		}
		if err := os.MkdirAll(o.Upper, 0o755); err != nil {
			return shown, err
		}
		if err := hideCredentials(o.Upper, c.At); err != nil {
			return shown, err
		}
		if err := o.mountOverlay(); err != nil {
			return shown, err
		}
		if err := MountPointLike(r.root.merged, c.At, true); err != nil {
			return shown, fmt.Errorf("preparing the mount point of %s: %w", c.At, err)
		}
		if err := r.Traversable(filepath.Dir(c.At)); err != nil {
			return shown, err
		}
		shown = append(shown, c)
	}
	return shown, nil
}
