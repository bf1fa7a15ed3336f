package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ProbeRole is the argument that runs the supervisor's binary as the mount probe (ProbeMain) instead
// of as pid 1.
const ProbeRole = "probe-mounts"

// ProbeStep is one mount operation of the probe and the kernel's answer ("" when it worked).
type ProbeStep struct {
	Step string `json:"step"`
	Err  string `json:"error,omitempty"`
	// Optional: the direct start does not need this step; it is probed for what sbx version says.
	Optional bool `json:"optional,omitempty"`
}

// ProbeMain is the mount probe, started by sbx in a new user and mount namespace whose root is the
// caller: it makes, with the very functions build uses, the kinds of mount the supervisor makes on
// every run (a new tmpfs attached, a bind of an attached tree with its propagation changed, masking of
// a directory and of a file, a read-only bind, and without root an overlay with user xattrs in the
// state root's dir given as args[0]), and writes what each answered to stdout as JSON. Nothing it
// mounts outlives it: the mount namespace is its own and dies with it.
//
// It exists because a kernel can have every call and still refuse one use of it: cloning a detached
// mount is EINVAL before Linux 6.15, and every sandbox failed on Debian's 6.1 and 6.12 while a
// version check said yes. The probe does what the run will do.
func ProbeMain(args []string) int {
	dir := ""
	if len(args) > 0 {
		dir = args[0]
	}
	if err := json.NewEncoder(os.Stdout).Encode(probeMounts(dir)); err != nil {
		return 1
	}
	return 0
}

// probeMounts runs the probe's steps in order; a step whose setup failed stops those that need it.
func probeMounts(stateDir string) []ProbeStep {
	var out []ProbeStep
	step := func(name string, optional bool, f func() error) bool {
		s := ProbeStep{Step: name, Optional: optional}
		if err := f(); err != nil {
			s.Err = err.Error()
		}
		out = append(out, s)
		return s.Err == ""
	}
	if !step("making / a slave", false, func() error {
		return unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, "")
	}) {
		return out
	}
	// The state root's dir is opened first: the scratch tmpfs may cover it (a state root below /tmp).
	state := -1
	if stateDir != "" {
		fd, err := unix.Open(stateDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			step("opening the state root's dir", false, func() error { return err })
			return out
		}
		defer unix.Close(fd)
		state = fd
	}
	// A scratch tmpfs over the temporary directory, in this namespace only: the other steps happen in it.
	scratch := os.TempDir()
	if !step("a new tmpfs (fsopen, fsmount, move_mount)", false, func() error {
		return attachNew(Mount{Type: "tmpfs", Source: "tmpfs", Data: "size=64k,nr_inodes=64"}, scratch)
	}) {
		return out
	}
	for _, d := range []string{"a", "b", "m", "lower", "ovl"} {
		os.Mkdir(filepath.Join(scratch, d), 0o755)
	}
	os.WriteFile(filepath.Join(scratch, "f"), nil, 0o644)
	os.WriteFile(filepath.Join(scratch, "src"), nil, 0o644)
	step("a bind of an attached tree (open_tree, mount_setattr, move_mount)", false, func() error {
		return probeBind(filepath.Join(scratch, "a"), filepath.Join(scratch, "b"))
	})
	step("masking a directory (a tmpfs of its own)", false, func() error { return onPath(filepath.Join(scratch, "m"), maskOne) })
	// A file bound onto a file, as masking binds /dev/null (the host's /dev has locked mounts below it
	// in a user namespace, which the sandbox's own /dev has not: a file of the scratch tmpfs stands in).
	step("a file bound onto a file (as masking binds /dev/null)", false, func() error {
		return onPath(filepath.Join(scratch, "f"), func(target int) error { return cloneOnto(unix.AT_FDCWD, filepath.Join(scratch, "src"), target) })
	})
	step("a read-only bind", false, func() error { return readOnly(filepath.Join(scratch, "b")) })
	step("cloning a detached mount (Linux 6.15+; sbx does not need it)", true, func() error {
		mnt, err := newFS(maskFS)
		if err != nil {
			return err
		}
		defer unix.Close(mnt)
		fd, err := unix.OpenTree(mnt, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
		if err == nil {
			unix.Close(fd)
		}
		return err
	})
	if state >= 0 {
		if step("an overlay with user xattrs, its upper in the state root", false, func() error {
			return probeOverlay(filepath.Join(scratch, "lower"), procFD(state), filepath.Join(scratch, "ovl"))
		}) {
			os.Mkdir(filepath.Join(scratch, "ovl-index"), 0o755)
			step(ProbeIndexStep, true, func() error {
				return probeIndex(filepath.Join(scratch, "lower"), procFD(state), filepath.Join(scratch, "ovl-index"))
			})
		}
	}
	return out
}

// ProbeIndexStep is the probe's step that says whether a rootless sandbox's overlays can keep the host's
// hard links one file: overlayfs's inodes index (index=on), which needs file handles of its layers and,
// in the kernels seen so far, the host's CAP_DAC_READ_SEARCH, which no mount in a user namespace has.
const ProbeIndexStep = "an overlay with user xattrs and an inodes index (index=on: hard links stay one file; optional)"

// probeIndex mounts an overlay as probeOverlay does, with index=on, and says whether the index held:
// overlayfs turns it off without an error (a line in the kernel's log), and then makes no index
// directory in its work dir.
func probeIndex(lower, stateDir, dst string) error {
	upper, work := filepath.Join(stateDir, "upper-index"), filepath.Join(stateDir, "work-index")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	if err := attachNew(Mount{Type: "overlay", Source: "overlay",
		Data: "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work + ",userxattr,index=on"}, dst); err != nil {
		return err
	}
	if st, err := os.Lstat(filepath.Join(work, "index")); err != nil || !st.IsDir() {
		return errors.New("overlayfs turned index=on off (a layer without file handles, or a mounter without the host's CAP_DAC_READ_SEARCH)")
	}
	return nil
}

// attachNew makes a new file system of m's kind and attaches it at path.
func attachNew(m Mount, path string) error {
	mnt, err := newFS(m)
	if err != nil {
		return err
	}
	defer unix.Close(mnt)
	return onPath(path, func(target int) error { return moveOnto(mnt, target) })
}

// onPath calls f with an O_PATH handle of path, opened without following links.
func onPath(path string, f func(int) error) error {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	defer unix.Close(fd)
	return f(fd)
}

// probeBind copies the attached tree at src and attaches the copy at dst, made a slave first, as
// bindTree and openTree do for every share and the root.
func probeBind(src, dst string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Propagation: unix.MS_SLAVE}); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	return onPath(dst, func(target int) error { return moveOnto(fd, target) })
}

// probeOverlay mounts an overlay of lower at dst whose upper and work dirs are made in stateDir, with
// the options of a rootless sandbox's layers (user xattrs).
func probeOverlay(lower, stateDir, dst string) error {
	upper, work := filepath.Join(stateDir, "upper"), filepath.Join(stateDir, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return attachNew(Mount{Type: "overlay", Source: "overlay",
		Data: "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work + ",userxattr"}, dst)
}
