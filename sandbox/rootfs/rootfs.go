package rootfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/safefs"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
)

// DefaultDiskBytes bounds the overlay's writable layer when the profile sets no limit.
const DefaultDiskBytes = 1 << 30

// Overlay is one overlay mount of the sandbox: a read-only, non-recursive bind of a host directory as
// its lower layer and a directory pair on the run's size-limited tmpfs as its writable layer.
type Overlay struct {
	At     string // where the sandbox sees it: "/" for the root
	Lower  string // the bind of the host directory At
	Upper  string
	work   string
	merged string
	idmap  *IDMapping // when set, the lower layer shows At's files as the command's (see bindIDMapped)
	userns *os.File   // idmap's user namespace when made already (bindInUserns); nil: bindLower makes one
}

// Merged is where the overlay is mounted on the host.
func (o *Overlay) Merged() string { return o.merged }

// bindLower binds At read-only as the lower layer (and makes the merged mount point): the part of an
// overlay that does not need the writable layer, so it can be done while the layer is made.
func (o *Overlay) bindLower() error {
	for _, d := range []string{o.Lower, o.merged} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	// The bind is not recursive: the lower layer is At's own file system without the mounts on it,
	// which is what overlayfs shows anyway; the bind gives observe the same view to compare with.
	// The source is opened without following any link (At was resolved before, so it has none): a
	// component swapped for a link since then fails the bind instead of binding what the link names.
	// The idmapped bind is cloned from the same handle.
	src, err := safefs.OpenNoLinks(o.At)
	if err != nil {
		return fmt.Errorf("binding the lower layer of %s: %w", o.At, err)
	}
	defer src.Close()
	if o.idmap != nil && o.userns != nil {
		if err := bindInUserns(src, o.Lower, o.userns); err != nil {
			return fmt.Errorf("binding the lower layer of %s: %w", o.At, err)
		}
	} else if o.idmap != nil {
		if err := bindIDMapped(src, o.Lower, *o.idmap); err != nil {
			return fmt.Errorf("binding the lower layer of %s: %w", o.At, err)
		}
	} else if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", src.Fd()), o.Lower, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the lower layer of %s: %w", o.At, err)
	}
	if o.idmap == nil {
		if err := unix.Mount("", o.Lower, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("binding the lower layer of %s: %w", o.At, err)
		}
	}
	// A bind of a shared mount (a systemd host's / is one) is a peer of it: without this, every mount
	// made below At afterwards (another run's overlay in the state root) would show in this lower
	// layer too, and unmounting this one (its teardown) would unmount those on the host as well.
	if err := unix.Mount("", o.Lower, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the lower layer of %s private: %w", o.At, err)
	}
	return nil
}

// mountOverlay makes the upper and work directories in the writable layer and mounts the overlay over
// the lower layer bindLower bound.
func (o *Overlay) mountOverlay() error {
	for _, d := range []string{o.Upper, o.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The merged root directory is the upper one: it gets the lower's owner and mode (as the idmapping
	// shows them, when there is one), or a working directory of the command's own user would be root's.
	if err := sameOwner(o.Upper, o.Lower); err != nil {
		return fmt.Errorf("preparing the writable layer of %s: %w", o.At, err)
	}
	// xino=auto gives every file one inode number in both layers' ranges, so that a directory's inode from
	// readdir (scandir, find -inum) is the one stat shows, as on the host. index=on keeps the host's hard
	// links one file (see indexed).
	opts := overlayDirs(o.Lower, o.Upper, o.work) + ",volatile,metacopy=on,xino=auto,index=on"
	if err := unix.Mount("overlay", o.merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mounting the overlay of %s: %w", o.At, err)
	}
	return nil
}

// indexed says whether the mounted overlay keeps its inodes index: overlayfs copies a lower file up once
// for all its names (a link or a write through one name shows through the others, and every name keeps
// the lower file's inode number: git clone --local checks that), where without it each name is copied
// up on its own and the hard link is split. The kernel turns index=on off, with a line in its log and no
// error, when a layer's file system cannot encode and decode file handles or the mounter lacks
// CAP_DAC_READ_SEARCH of the host (any overlay mounted in a user namespace); it then makes no index
// directory in the work directory, which is what this looks at.
func (o *Overlay) indexed() bool {
	st, err := os.Lstat(filepath.Join(o.work, "index"))
	return err == nil && st.IsDir()
}

// splitLinksNote is the report's note for an overlay at whose hard links of the host are split.
func splitLinksNote(at string) string {
	return "hard links: the overlay of " + at + " keeps no inodes index here (overlayfs turned index=on off): a host file with several names is copied up per name when the command writes to it or links it, so a write through one name does not show through the others and a new link shows another inode number than its source (git clone of a local repository fails, \"hardlink different from source\": git clone --no-hardlinks)"
}

// overlayEscaper escapes a path for overlayfs's mount data, which splits options at ',' and lower
// layers at ':', with '\' escaping either.
var overlayEscaper = strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`)

// overlayDirs is overlayfs's lowerdir, upperdir and workdir options for these paths, escaped: a working
// directory named "a,b" or "a:b" is a path like any other.
func overlayDirs(lower, upper, work string) string {
	e := overlayEscaper.Replace
	return "lowerdir=" + e(lower) + ",upperdir=" + e(upper) + ",workdir=" + e(work)
}

// FS is what the sandbox sees as its files: the overlay of the host's root file system, and, when
// the working directory lies on another file system, an overlay of the working directory itself.
type FS struct {
	runDir string
	layer  string // tmpfs holding every upper and work dir
	root   Overlay
	cwd    *Overlay   // nil when the working directory is on the root file system
	caches []*Overlay // the toolchain caches' (caches.go)
	notes  []string   // what the rootfs could only partly do, for the report
	prep   *LayerPrep // the disk layer's device, attached ahead (Create) or in mount, and its claim
	// Rootless: the top level of / (see rootless.go) and hidden paths below read-only binds, which get
	// an empty tmpfs (directories) or /dev/null (files) mounted over them.
	top        []topLayer
	hideMounts []specs.Mount
	// index: the rootless overlays keep overlayfs's inodes index (index=on); indexWhy says why not.
	index    bool
	indexWhy string
	// hidSeen is what hiding read of the host: a sandbox used later (a warm pool's) is stale once
	// any of it changed (HiddenChanged).
	hidSeen []hostSeen
	// decoyHomes are the hidden homes that get decoys (decoys.go); decoys what was planted.
	decoyHomes []string
	decoyKeep  []string // without root: the shares' targets (with root, mount's keep)
	decoyUID   int      // the command's host ids: the owner of the directories made for decoys
	decoyGID   int
	decoys     []Decoy
	decoysDone chan error // StartDecoys' planting; nil when none runs
}

// StartDecoys plants the decoys (with root) through the mounted root overlay, on a goroutine of its
// own, beside the container's start: a cold run does not wait for its few dozen files, and the
// overlay itself makes the opaque directories over hidden ones. Files made through the overlay are
// the upper layer's, where DecoyAccesses looks. Call it once the sandbox's files are laid out (nothing
// else of sbx's writes there after), and AwaitDecoys before anything reads the layer or unmounts it.
func (r *FS) StartDecoys() {
	if len(r.decoyHomes) == 0 || r.decoysDone != nil {
		return
	}
	done := make(chan error, 1)
	r.decoysDone = done
	go func() {
		d, err := plantDecoys(r.root.merged, r.root.Upper, r.decoyHomes, r.decoyKeep, r.decoyUID, r.decoyGID)
		r.decoys = d
		done <- err
	}()
}

// AwaitDecoys waits for StartDecoys' planting; nil when none runs (or was waited for already).
func (r *FS) AwaitDecoys() error {
	if r.decoysDone == nil {
		return nil
	}
	err := <-r.decoysDone
	r.decoysDone = nil
	return err
}

// hostSeen is a host path as hiding found it: absent, or a directory whose entries were listed (names;
// its ctime changes with every entry added, removed or renamed, and cannot be set back).
type hostSeen struct {
	path  string
	there bool
	ctime unix.Timespec
	names map[string]bool
}

// HiddenChanged says whether a hidden path that was absent now exists, or a directory whose entries
// hiding listed has a new one: what the sandbox hides is then no longer what a new one would hide.
// An entry gone is no change (its whiteout hides nothing).
func (r *FS) HiddenChanged() bool {
	for _, h := range r.hidSeen {
		var st unix.Stat_t
		err := unix.Lstat(h.path, &st)
		if (err == nil) != h.there {
			return true
		}
		if err != nil || st.Ctim == h.ctime {
			continue
		}
		entries, err := os.ReadDir(h.path)
		if err != nil || slices.ContainsFunc(entries, func(e os.DirEntry) bool { return !h.names[e.Name()] }) {
			return true
		}
	}
	return false
}

// New is the sandbox's files in the run dir runDir, before anything is built (Mount as root,
// BuildRootless without root); Unmount undoes what a run left there after a crash too.
func New(runDir string) *FS {
	layer := filepath.Join(runDir, "layer")
	return &FS{
		runDir: runDir,
		layer:  layer,
		root: Overlay{At: "/", Lower: filepath.Join(runDir, "lower"), Upper: filepath.Join(layer, "upper"),
			work: filepath.Join(layer, "work"), merged: filepath.Join(runDir, "rootfs")},
	}
}

// UseLayer gives r the disk layer attached ahead (StartLayer), which Mount mounts.
func (r *FS) UseLayer(p *LayerPrep) { r.prep = p }

// SetDecoys says where the decoys go: the hidden homes, the paths below which none goes (keep, besides
// the working directory and the shares Mount is given), and the command's host ids (the owner of the
// directories made for them).
func (r *FS) SetDecoys(homes, keep []string, uid, gid int) {
	r.decoyHomes, r.decoyKeep, r.decoyUID, r.decoyGID = homes, keep, uid, gid
}

// Decoys lists the decoys planted.
func (r *FS) Decoys() []Decoy { return r.decoys }

// SetIndexWhy says why the rootless overlays keep no inodes index here ("" when they can: index=on).
func (r *FS) SetIndexWhy(why string) { r.index, r.indexWhy = why == "", why }

// IndexWhy is why the rootless overlays keep no inodes index ("" when they keep one).
func (r *FS) IndexWhy() string { return r.indexWhy }

// Notes say what the sandbox's files could only partly be, for the report.
func (r *FS) Notes() []string { return r.notes }

// RootDir is the sandbox's root as the host sees it (the run dir's rootfs).
func (r *FS) RootDir() string { return r.root.merged }

// CwdOverlay is the working directory's own overlay; nil when it has none (it lies on the root file
// system).
func (r *FS) CwdOverlay() *Overlay { return r.cwd }

// Layer is where the writable layer is mounted on the host (as root).
func (r *FS) Layer() string { return r.layer }

// Overlays lists the sandbox's overlays, the root first.
func (r *FS) Overlays() []*Overlay {
	if r.top != nil {
		return r.rootlessOverlays()
	}
	if r.cwd == nil {
		return []*Overlay{&r.root}
	}
	return []*Overlay{&r.root, r.cwd}
}

// Mount builds the writable layer (see layer.go), hides paths by writing overlay whiteouts and opaque
// directories into it, and mounts the overlays. The host's / is the root's only lower layer: other host
// mounts appear as empty directories, except the working directory's, which gets an overlay of its own
// (see mountCwd), unless it is a hidden directory itself. keep are the paths shares are mounted at:
// hiding leaves the way down to them (see hide).
// idmap, when set, shows the working directory's overlay as the command's own (see mountCwd).
func (r *FS) Mount(diskBytes int64, hidden []string, cwd string, overlayCwd bool, keep []string, idmap *IDMapping) error {
	diskBytes = LayerSize(diskBytes)
	if err := os.MkdirAll(r.layer, 0o700); err != nil {
		return err
	}
	// The writable layer (a copy of a template on a loop device) is made while the lower layers are
	// bound, the working directory's idmapped one included: neither needs the other.
	type made struct {
		note string
		err  error
	}
	layer := make(chan made, 1)
	if r.prep == nil {
		r.prep = StartLayer(diskBytes)
	}
	prep := r.prep // kept: unmount drops the device's claim once the layer is unmounted
	go func() {
		note, err := mountLayer(r.layer, diskBytes, prep)
		layer <- made{note, err}
	}()
	ownCwd := overlayCwd && !slices.ContainsFunc(hidden, func(h string) bool { return filepath.Clean(h) == cwd })
	if ownCwd {
		r.cwd = &Overlay{At: cwd, Lower: filepath.Join(r.runDir, "lower-cwd"),
			Upper: filepath.Join(r.layer, "upper-cwd"), work: filepath.Join(r.layer, "work-cwd"),
			merged: filepath.Join(r.runDir, "cwd"), idmap: idmap}
	}
	err := r.root.bindLower()
	if err == nil && ownCwd {
		err = r.cwd.bindLower()
	}
	m := <-layer
	if err = errors.Join(err, m.err); err != nil {
		return err
	}
	if m.note != "" {
		r.notes = append(r.notes, m.note)
	}
	if err := os.Mkdir(r.root.Upper, 0o755); err != nil {
		return err
	}
	for _, h := range hidden {
		if err := r.hide(h, cwd, keep, overlayCwd); err != nil {
			return fmt.Errorf("hiding %s: %w", h, err)
		}
	}
	// The decoys go in through the mounted overlay, beside the container's start (StartDecoys).
	r.decoyKeep = append(append([]string{cwd}, keep...), r.decoyKeep...)
	if err := r.root.mountOverlay(); err != nil {
		return err
	}
	if !r.root.indexed() {
		r.notes = append(r.notes, splitLinksNote("/"))
	}
	if ownCwd {
		if err := r.mountCwd(cwd); err != nil {
			return err
		}
		if !r.cwd.indexed() {
			r.notes = append(r.notes, splitLinksNote(cwd))
		}
	}
	return nil
}

// mountCwd overlays the working directory when it lies on another file system than the root (a
// separate /home, a tmpfs /tmp), or when the command sees it as its own through an idmapping (its lower
// layer is then an idmapped bind, bound by mount already): only the directory itself, not the rest of
// its file system, so that nothing beside it shows. The sandbox mounts it at cwd over the path the root
// overlay has there.
func (r *FS) mountCwd(cwd string) error {
	if err := r.cwd.mountOverlay(); err != nil {
		return err
	}
	// The mount point, in the root overlay (its writable layer), with the host's owner and mode.
	return mkdirAllLike(r.root.merged, cwd)
}

// Unmount undoes mount; it is safe on a partly built or already removed rootfs.
func (r *FS) Unmount() error {
	prep := r.prep
	r.prep = nil
	prep.Release()
	defer prep.Unclaim() // once the layer is unmounted: until then its device is this run's
	if host.Rootless() {
		return nil // its mounts are in the sandbox's mount namespace only, gone with it
	}
	var errs []error
	var mounts []string
	for _, o := range r.caches {
		mounts = append(mounts, o.merged, o.Lower)
	}
	mounts = append(mounts, filepath.Join(r.runDir, "cwd"), filepath.Join(r.runDir, "lower-cwd"), r.root.merged, r.layer, r.root.Lower)
	for _, m := range mounts {
		if m == r.layer {
			discardLayer(m)
		}
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// hide makes path (as seen in the sandbox) invisible: a directory becomes an empty opaque directory, a
// file a whiteout. One rule serves the working directory and every share (keep): when one lies strictly
// below a hidden directory, the way down to it stays (each directory on it keeps only the entry leading
// on) and the working directory's own subtree stays whole, so that the command can work where it was
// started and reach what was shared with it. A working directory that IS the hidden directory (cd /root,
// cd /tmp) does not unhide it: the command starts in an empty directory, and seeing the contents takes
// an explicit share (--ro/--rw). When the working directory gets an overlay of its own (ownCwd), it
// needs no way down here: mountCwd creates the way and its mount point, so a hidden directory with no
// share below is one opaque directory (O(1)) instead of a whiteout for every entry beside the way.
func (r *FS) hide(path, cwd string, keep []string, ownCwd bool) error {
	upper := r.root.Upper
	path = filepath.Clean(path)
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		r.hidSeen = append(r.hidSeen, hostSeen{path: path})
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
	var below []string
	if !ownCwd {
		keep = append([]string{cwd}, keep...)
	}
	for _, k := range keep {
		if k = filepath.Clean(k); k != path && host.Within(k, path) {
			below = append(below, k)
		}
	}
	if len(below) == 0 {
		if err := mkdirLike(target, path); err != nil {
			return err
		}
		return unix.Setxattr(target, opaqueXattr(), []byte("y"), 0)
	}
	return r.hideAround(upper, path, below)
}

// hideAround whites out every entry of dir except those leading to a path of keep (all strictly below
// dir), and goes on down each of those ways; a kept path's own subtree stays whole.
func (r *FS) hideAround(upper, dir string, keep []string) error {
	if err := mkdirLike(filepath.Join(upper, dir), dir); err != nil {
		return err
	}
	whole := map[string]bool{}    // entries of dir that are a kept path themselves
	ways := map[string][]string{} // entries of dir on the way down to kept paths, with those paths
	for _, k := range keep {
		name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(k, dir), "/"), "/")
		if k == filepath.Join(dir, name) {
			whole[name] = true
		} else {
			ways[name] = append(ways[name], k)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrPermission) && host.Rootless() {
		// A level the caller may not list: the sandbox may not list it either, so there is nothing
		// beside the way down to hide.
		entries = nil
	} else if err != nil {
		return err
	} else {
		seen := hostSeen{path: dir, there: true, ctime: st.Ctim, names: make(map[string]bool, len(entries))}
		for _, e := range entries {
			seen.names[e.Name()] = true
		}
		r.hidSeen = append(r.hidSeen, seen)
	}
	for _, e := range entries {
		if name := e.Name(); !whole[name] && ways[name] == nil {
			if err := whiteout(filepath.Join(upper, dir, name)); err != nil {
				return err
			}
		}
	}
	for name, below := range ways {
		next := filepath.Join(dir, name)
		if whole[name] {
			continue
		}
		if st, err := os.Lstat(next); err != nil || !st.IsDir() {
			continue // not there: a share's mount point that runc creates
		}
		if err := r.hideAround(upper, next, below); err != nil {
			return err
		}
	}
	return nil
}

// BelowHidden reports whether path is one of the hidden directories or below one.
func BelowHidden(hidden []string, path string) bool {
	for _, h := range hidden {
		if host.Within(path, filepath.Clean(h)) {
			return true
		}
	}
	return false
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

// MaxChown bounds how many entries of the working directory are handed to the command's user. Beyond it
// only the directory itself is, and the command can create files there but not change existing ones.
const MaxChown = 10000

// GiveTo makes dir (a path in the sandbox) writable for uid:gid by changing owners in the overlay, so that
// the host's files keep theirs. With metacopy, a chown copies up metadata only, not file contents.
// It reports whether the whole tree could be handed over.
//
// Every step goes through a handle of the overlay that holds dir (see OpenDir): fchown on directory fds
// opened with O_NOFOLLOW, fchownat with AT_SYMLINK_NOFOLLOW on single names. A symlink of the lower
// layer (absolute ones point at the host) is changed as a link, never followed.
func (r *FS) GiveTo(dir string, uid, gid int) (bool, error) {
	if err := r.Traversable(filepath.Dir(dir)); err != nil {
		return false, err
	}
	top, err := r.OpenDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("handing %s to uid %d: %w", dir, uid, err)
	}
	defer top.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(top.Fd()), &st); err != nil || int(st.Uid) == uid {
		return true, err
	}
	n, err := walkTree(top, MaxChown, func(*os.File, string, bool) error { return nil })
	if err != nil {
		return false, fmt.Errorf("handing %s to uid %d: %w", dir, uid, err)
	}
	whole := n < MaxChown
	if whole {
		_, err = walkTree(top, MaxChown, func(parent *os.File, name string, isDir bool) error {
			return unix.Fchownat(int(parent.Fd()), name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		})
	}
	if err == nil {
		err = unix.Fchown(int(top.Fd()), uid, gid)
	}
	if err != nil {
		return false, fmt.Errorf("handing %s to uid %d: %w", dir, uid, err)
	}
	return whole, nil
}

// walkTree calls visit for the entries below dir, depth first, each as its parent's fd and its name,
// and descends into directories by fd with O_NOFOLLOW. It stops after max entries (or when a tree is
// nested deeper than maxDepth) and returns how many it visited: max or more means it stopped early.
func walkTree(dir *os.File, max int, visit func(parent *os.File, name string, isDir bool) error) (int, error) {
	n := 0
	var walk func(d *os.File, depth int) error
	walk = func(d *os.File, depth int) error {
		if depth >= maxDepth {
			n = max
			return nil
		}
		if _, err := d.Seek(0, 0); err != nil {
			return err
		}
		for n < max {
			entries, err := d.ReadDir(256)
			for _, e := range entries {
				if n++; n >= max {
					return nil
				}
				isDir := e.Type().IsDir()
				if err := visit(d, e.Name(), isDir); err != nil {
					return fmt.Errorf("%s: %w", e.Name(), err)
				}
				if isDir {
					if err := descend(d, e.Name(), func(sub *os.File) error { return walk(sub, depth+1) }); err != nil {
						return err
					}
				}
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	err := walk(dir, 0)
	return n, err
}

// maxDepth bounds how deep walkTree descends (each level holds an fd).
const maxDepth = 256

// descend opens the directory name below d without following a link and calls f with it.
func descend(d *os.File, name string, f func(*os.File) error) error {
	sub, err := safefs.OpenDir(d, name)
	if err != nil {
		return err
	}
	defer sub.Close()
	return f(sub)
}

// Traversable lets everyone search dir and its ancestors (as seen in the sandbox), so that an
// unprivileged user can reach a working directory below, say, a 0700 directory. Names along the path
// become reachable; no directory becomes listable. Each directory is opened through the overlay's
// handle without following a link, and changed through its fd.
func (r *FS) Traversable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		f, err := r.OpenDir(d)
		if err != nil {
			return fmt.Errorf("opening %s for the command's user: %w", d, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(int(f.Fd()), &st)
		if err == nil && st.Mode&0o001 == 0 {
			err = unix.Fchmod(int(f.Fd()), st.Mode&(0o777|unix.S_ISVTX|unix.S_ISGID)|0o001)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("opening %s for the command's user: %w", d, err)
		}
		if d == "/" {
			return nil
		}
	}
}

// OpenDir opens the sandbox directory p in the overlay that holds it (the working directory's or the
// root's), through a handle of that overlay's merged tree: openat2 RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS,
// so that no link of the lower layer, which is the host's, can lead out to the host.
func (r *FS) OpenDir(p string) (*os.File, error) {
	root, rel := r.root.merged, p
	if r.cwd != nil && host.Within(p, r.cwd.At) {
		root, rel = r.cwd.merged, strings.TrimPrefix(p, r.cwd.At)
	}
	rf, err := safefs.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer rf.Close()
	return safefs.OpenDir(rf, rel)
}

// MountPointLike creates path below the merged tree root as the mount point of a share whose source is
// a directory (dir) or a file: missing levels like the host's of the same name (owner, mode, times), or,
// where the host has none (a share onto a path of its own, filesystem.share's path), root's with mode
// 0755; the point itself a directory or an empty file. Every step goes through a handle of root that no
// link can leave.
func MountPointLike(root, path string, dir bool) error {
	rf, err := safefs.OpenRoot(root)
	if err != nil {
		return err
	}
	defer rf.Close()
	if dir {
		d, err := safefs.MkdirAll(rf, path, 0o755, likeHost)
		if err != nil {
			return err
		}
		return d.Close()
	}
	parentDir, name := safefs.Split(path)
	parent, err := safefs.MkdirAll(rf, parentDir, 0o755, likeHost)
	if err != nil {
		return err
	}
	defer parent.Close()
	f, err := safefs.Open(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// likeHost gives a directory made at rel the host's attributes of /rel, and leaves it as made (root's,
// 0755) where the host has no /rel.
func likeHost(made *os.File, rel string) error {
	err := copyAttrs(made, "/"+rel)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return unix.Fchmod(int(made.Fd()), 0o755)
	}
	return err
}

// mkdirAllLike creates dir below the merged tree root, each missing level with the owner, mode and
// times of the host's, through a handle of root that no link can leave.
func mkdirAllLike(root, dir string) error {
	rf, err := safefs.OpenRoot(root)
	if err != nil {
		return err
	}
	defer rf.Close()
	d, err := safefs.MkdirAll(rf, dir, 0o700, func(made *os.File, rel string) error {
		return copyAttrs(made, "/"+rel)
	})
	if err != nil {
		return err
	}
	return d.Close()
}

// copyAttrs gives the directory f the owner, mode and times of the host directory like.
func copyAttrs(f *os.File, like string) error {
	var st unix.Stat_t
	if err := unix.Stat(like, &st); err != nil {
		return err
	}
	fd := int(f.Fd())
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return err
	}
	return unix.Futimes(fd, []unix.Timeval{unix.NsecToTimeval(st.Atim.Nano()), unix.NsecToTimeval(st.Mtim.Nano())})
}

// ResolveCwd resolves the working directory once, before anything is built, as the sandbox's root would
// (openat2 RESOLVE_IN_ROOT on a handle of /: absolute links and ".." stay inside it). Every later step
// uses the result, which holds no link: cwd overlay, hiding, the handover to the command's user, the
// supervisor's working directory. A path that does not resolve stays as given (the sandbox then fails
// to enter it); every step on it still goes through handles that no link can leave.
func ResolveCwd(cwd string) string {
	if !filepath.IsAbs(cwd) {
		return cwd
	}
	real, err := safefs.ResolveIn("/", cwd)
	if err != nil {
		return cwd
	}
	return real
}
