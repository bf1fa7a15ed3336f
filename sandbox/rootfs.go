package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// defaultDiskBytes bounds the overlay's writable layer when the profile sets no limit.
const defaultDiskBytes = 1 << 30

// overlay is one overlay mount of the sandbox: a read-only, non-recursive bind of a host directory as
// its lower layer and a directory pair on the run's size-limited tmpfs as its writable layer.
type overlay struct {
	At     string // where the sandbox sees it: "/" for the root
	Lower  string // the bind of the host directory At
	Upper  string
	work   string
	merged string
	idmap  *idmapping // when set, the lower layer shows At's files as the command's (see bindIDMapped)
}

// mount binds At read-only as the lower layer and mounts the overlay.
func (o *overlay) mount() error {
	for _, d := range []string{o.Lower, o.merged} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	for _, d := range []string{o.Upper, o.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The bind is not recursive: the lower layer is At's own file system without the mounts on it,
	// which is what overlayfs shows anyway; the bind gives observe the same view to compare with.
	if o.idmap != nil {
		if err := o.bindIDMapped(); err != nil {
			return err
		}
	} else if err := unix.Mount(o.At, o.Lower, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the lower layer of %s: %w", o.At, err)
	}
	if o.idmap == nil {
		if err := unix.Mount("", o.Lower, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("binding the lower layer of %s: %w", o.At, err)
		}
	} else if err := sameOwner(o.Upper, o.Lower); err != nil {
		// The merged root directory is the upper one: it belongs to whom the idmapping shows.
		return fmt.Errorf("preparing the writable layer of %s: %w", o.At, err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,volatile,metacopy=on", o.Lower, o.Upper, o.work)
	if err := unix.Mount("overlay", o.merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mounting the overlay of %s: %w", o.At, err)
	}
	return nil
}

// bindIDMapped binds At as the lower layer through the idmapping, opened without following a link in
// its last component.
func (o *overlay) bindIDMapped() error {
	fd, err := unix.Open(o.At, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("binding the lower layer of %s: %w", o.At, err)
	}
	src := os.NewFile(uintptr(fd), o.At)
	defer src.Close()
	return bindIDMapped(src, o.Lower, *o.idmap)
}

// rootfs is what the sandbox sees as its files: the overlay of the host's root file system, and, when
// the working directory lies on another file system, an overlay of the working directory itself.
type rootfs struct {
	runDir string
	layer  string // tmpfs holding every upper and work dir
	root   overlay
	cwd    *overlay // nil when the working directory is on the root file system
	// Rootless: the top level of / (see rootless.go) and hidden paths below read-only binds, which get
	// an empty tmpfs (directories) or /dev/null (files) mounted over them.
	top        []topLayer
	hideMounts []specs.Mount
}

func newRootfs(runDir string) *rootfs {
	layer := filepath.Join(runDir, "layer")
	return &rootfs{
		runDir: runDir,
		layer:  layer,
		root: overlay{At: "/", Lower: filepath.Join(runDir, "lower"), Upper: filepath.Join(layer, "upper"),
			work: filepath.Join(layer, "work"), merged: filepath.Join(runDir, "rootfs")},
	}
}

// overlays lists the sandbox's overlays, the root first.
func (r *rootfs) overlays() []*overlay {
	if r.top != nil {
		return r.rootlessOverlays()
	}
	if r.cwd == nil {
		return []*overlay{&r.root}
	}
	return []*overlay{&r.root, r.cwd}
}

// mount builds the writable layer on a size-limited tmpfs (so that a command cannot fill the host's
// disk), hides paths by writing overlay whiteouts and opaque directories into it, and mounts the
// overlays. The host's / is the root's only lower layer: other host mounts appear as empty directories,
// except the working directory's, which gets an overlay of its own (see mountCwd).
func (r *rootfs) mount(diskBytes int64, hidden []string, cwd string, overlayCwd bool, idmap *idmapping) error {
	if diskBytes <= 0 {
		diskBytes = defaultDiskBytes
	}
	if err := os.MkdirAll(r.layer, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", r.layer, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("size=%d,mode=0700", diskBytes)); err != nil {
		return fmt.Errorf("mounting the writable layer: %w", err)
	}
	if err := os.Mkdir(r.root.Upper, 0o755); err != nil {
		return err
	}
	for _, h := range hidden {
		if err := hide(r.root.Upper, h, cwd); err != nil {
			return fmt.Errorf("hiding %s: %w", h, err)
		}
	}
	if err := r.root.mount(); err != nil {
		return err
	}
	if overlayCwd {
		return r.mountCwd(cwd, idmap)
	}
	return nil
}

// mountCwd overlays the working directory when it lies on another file system than the root (a
// separate /home, a tmpfs /tmp), or when the command sees it as its own through an idmapping (its lower
// layer is then an idmapped bind): only the directory itself, not the rest of its file system, so that
// nothing beside it shows. The sandbox mounts it at cwd over the path the root overlay has there.
func (r *rootfs) mountCwd(cwd string, idmap *idmapping) error {
	r.cwd = &overlay{At: cwd, Lower: filepath.Join(r.runDir, "lower-cwd"),
		Upper: filepath.Join(r.layer, "upper-cwd"), work: filepath.Join(r.layer, "work-cwd"),
		merged: filepath.Join(r.runDir, "cwd"), idmap: idmap}
	if err := r.cwd.mount(); err != nil {
		return err
	}
	// The mount point, in the root overlay (its writable layer), with the host's owner and mode.
	return mkdirAllLike(r.root.merged, cwd)
}

// path is where the host sees a sandbox path: in the working directory's overlay or the root's.
func (r *rootfs) path(p string) string {
	if r.cwd != nil && within(p, r.cwd.At) {
		return filepath.Join(r.cwd.merged, strings.TrimPrefix(p, r.cwd.At))
	}
	return filepath.Join(r.root.merged, p)
}

// unmount undoes mount; it is safe on a partly built or already removed rootfs.
func (r *rootfs) unmount() error {
	if Rootless() {
		return nil // its mounts are in the sandbox's mount namespace only, gone with it
	}
	var errs []error
	mounts := []string{filepath.Join(r.runDir, "cwd"), filepath.Join(r.runDir, "lower-cwd"), r.root.merged, r.layer, r.root.Lower}
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// hide makes path (as seen in the sandbox) invisible: a directory becomes an empty opaque directory, a
// file a whiteout. When the working directory lies below a hidden directory, that directory stays, but
// everything in it that is not on the way down to the working directory is whited out, so that the
// command can still work where it was started.
func hide(upper, path, cwd string) error {
	path = filepath.Clean(path)
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := copyParents(upper, path); err != nil {
		return err
	}
	target := filepath.Join(upper, path)
	if !st.IsDir() {
		return whiteout(target)
	}
	if !within(cwd, path) {
		if err := mkdirLike(target, path); err != nil {
			return err
		}
		return unix.Setxattr(target, opaqueXattr(), []byte("y"), 0)
	}
	return hideAround(upper, path, cwd)
}

// hideAround whites out every entry of dir except the one leading to cwd, down to cwd itself.
func hideAround(upper, dir, cwd string) error {
	if dir == cwd {
		return nil
	}
	if err := mkdirLike(filepath.Join(upper, dir), dir); err != nil {
		return err
	}
	next := strings.SplitN(strings.TrimPrefix(cwd, dir+"/"), "/", 2)[0]
	if dir == "/" {
		next = strings.SplitN(strings.TrimPrefix(cwd, "/"), "/", 2)[0]
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrPermission) && Rootless() {
		// A level the caller may not list: the sandbox may not list it either, so there is nothing
		// beside the way down to hide.
		entries = nil
	} else if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() != next {
			if err := whiteout(filepath.Join(upper, dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return hideAround(upper, filepath.Join(dir, next), cwd)
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// copyParents creates path's parent directories in upper with the owner and mode of the host's, since
// an upper directory's attributes are the ones the merged view shows.
func copyParents(upper, path string) error {
	parent := filepath.Dir(path)
	if parent == "/" {
		return nil
	}
	if err := copyParents(upper, parent); err != nil {
		return err
	}
	return mkdirLike(filepath.Join(upper, parent), parent)
}

// mkdirLike creates dir (if missing) with the mode, owner and times of the host directory like.
func mkdirLike(dir, like string) error {
	st, err := os.Stat(like)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, st.Mode().Perm()); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	sys := st.Sys().(*syscall.Stat_t)
	if err := os.Chown(dir, int(sys.Uid), int(sys.Gid)); ignoreUnprivileged(err) != nil {
		return err
	}
	if err := os.Chmod(dir, st.Mode()&(os.ModePerm|os.ModeSticky|os.ModeSetgid|os.ModeSetuid)); err != nil {
		return err
	}
	return os.Chtimes(dir, st.ModTime(), st.ModTime())
}

// sameOwner gives dir (sbx's own, on the writable layer) the owner and mode of like.
func sameOwner(dir, like string) error {
	var st unix.Stat_t
	if err := unix.Stat(like, &st); err != nil {
		return err
	}
	if err := unix.Lchown(dir, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	return unix.Chmod(dir, st.Mode&0o7777)
}

// whiteout creates an overlay whiteout: a character device 0:0.
func whiteout(path string) error {
	err := unix.Mknod(path, unix.S_IFCHR, 0)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

// maxChown bounds how many entries of the working directory are handed to the command's user. Beyond it
// only the directory itself is, and the command can create files there but not change existing ones.
const maxChown = 10000

// giveTo makes dir (a path in the sandbox) writable for uid:gid by changing owners in the overlay, so that
// the host's files keep theirs. With metacopy, a chown copies up metadata only, not file contents.
// It reports whether the whole tree could be handed over.
func (r *rootfs) giveTo(dir string, uid, gid int) (bool, error) {
	if err := r.traversable(filepath.Dir(dir)); err != nil {
		return false, err
	}
	root := r.path(dir)
	st, err := os.Stat(root)
	if err != nil || !st.IsDir() || int(st.Sys().(*syscall.Stat_t).Uid) == uid {
		return true, nil
	}
	var paths []string
	whole := true
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if len(paths) == maxChown {
			whole = false
			return filepath.SkipAll
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return false, err
	}
	if !whole {
		paths = paths[:1]
	}
	for _, p := range paths {
		if err := os.Lchown(p, uid, gid); err != nil {
			return false, fmt.Errorf("handing %s to uid %d: %w", p, uid, err)
		}
	}
	return whole, nil
}

// traversable lets everyone search dir and its ancestors (as seen in the sandbox), so that an
// unprivileged user can reach a working directory below, say, a 0700 directory. Names along the path
// become reachable; no directory becomes listable.
func (r *rootfs) traversable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		p := r.path(d)
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, st.Mode()&(os.ModePerm|os.ModeSticky|os.ModeSetgid)|0o001); err != nil {
				return fmt.Errorf("opening %s for the command's user: %w", d, err)
			}
		}
		if d == "/" {
			return nil
		}
	}
}

// mountPointLike creates path below root as a mount point for the host's path of the same name: a
// directory (and its parents) like the host's, or an empty file. A path the host lacks is left to
// libcontainer.
func mountPointLike(root, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return nil
	}
	if st.IsDir() {
		return mkdirAllLike(root, path)
	}
	if err := mkdirAllLike(root, filepath.Dir(path)); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(root, path), os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// mkdirAllLike creates dir below root, each missing level with the owner and mode of the host's.
func mkdirAllLike(root, dir string) error {
	if dir == "/" {
		return nil
	}
	if err := mkdirAllLike(root, filepath.Dir(dir)); err != nil {
		return err
	}
	return mkdirLike(filepath.Join(root, dir), dir)
}
