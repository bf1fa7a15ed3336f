package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/safefs"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
	"github.com/sbx-dev/sbx/sandbox/rootfs"
)

// The sandbox's files for this run (package rootfs builds them): the working directory resolved once,
// the overlays mounted, the way down to the working directory and the shares opened, and the working
// directory handed to the command's user.

// buildFiles resolves the working directory (once: every later step, the supervisor's included, uses
// the result), mounts the overlays and lets the command's user write to the working directory.
func (s *Sandbox) buildFiles() error {
	if err := s.resolveShares(); err != nil {
		return err
	}
	if !sharedElsewhere(s.cfg.Plan.Filesystem.Shares, s.cfg.Command.Cwd) {
		real := rootfs.ResolveCwd(s.cfg.Command.Cwd)
		if s.cfg.Command.CwdNoLinks && real != filepath.Clean(s.cfg.Command.Cwd) {
			return fmt.Errorf("%w: %s is %s now", ErrCwdMoved, s.cfg.Command.Cwd, real)
		}
		s.cfg.Command.Cwd = real
	}
	s.pickCaches()
	defer s.cacheEnv()
	plan, cwd := s.cfg.Plan, s.cfg.Command.Cwd
	if note := hiddenRepoNote(plan.Filesystem, cwd, s.cfg.Command.Top); note != "" {
		s.Notes = append(s.Notes, note)
	}
	if Rootless() {
		s.rootfs.SetIndexWhy(rootlessIndex(s.cfg))
		s.Notes = append(s.Notes, s.rootlessNotes()...)
		s.rootfs.SetDecoys(decoyHomes(plan, s.cfg.CallerHome), append(shareTargets(plan.Filesystem.Shares), s.cachePaths()...), 0, 0)
		if err := s.rootfs.BuildRootless(plan.Filesystem.Hidden, cwd, rootfs.LayeredTops(plan, s.writePaths(), cwd)); err != nil {
			return err
		}
		return s.rootfs.CachesRootless(s.caches)
	}
	give := plan.Filesystem.WriteCwd && cwd != "/" && !shared(plan.Filesystem.Shares, cwd)
	idmap := s.cwdIDMap(give)
	// A working directory on another file system than / gets an overlay of its own, unless a share
	// brings it in already; so does one the command sees through an idmapping, and one below a hidden
	// directory, which then becomes an opaque empty directory in O(1) instead of a whiteout for every
	// entry beside the way down (see hide).
	ownFS := (!sameFS("/", cwd) || rootfs.BelowHidden(plan.Filesystem.Hidden, cwd)) && !shared(plan.Filesystem.Shares, cwd)
	overlayCwd := ownFS || idmap != nil && !shared(plan.Filesystem.Shares, cwd)
	shares := append(shareTargets(plan.Filesystem.Shares), s.shareLinks...)
	s.rootfs.SetDecoys(decoyHomes(plan, s.cfg.CallerHome), s.cachePaths(), s.ids.HostUID, s.ids.HostGID) // no decoy inside a toolchain cache shown
	err := s.rootfs.Mount(plan.Limits.DiskBytes, plan.Filesystem.Hidden, cwd, overlayCwd, shares, idmap)
	if errors.Is(err, ErrNoIDMap) && os.Geteuid() == 0 {
		// No idmapped mounts here: as root, hand the tree over by changing owners in the overlay.
		s.rootfs.Unmount()
		s.rootfs = rootfs.New(s.run.Dir())
		s.rootfs.SetDecoys(decoyHomes(plan, s.cfg.CallerHome), s.cachePaths(), s.ids.HostUID, s.ids.HostGID)
		return s.giveCwd(plan, cwd, ownFS)
	}
	s.Notes = append(s.Notes, s.rootfs.Notes()...)
	if err != nil {
		return err
	}
	if err := s.openWays(plan, cwd); err != nil {
		return err
	}
	if err := s.giveWayUp(plan, cwd, give); err != nil {
		return err
	}
	return s.mountCaches()
}

// giveWayUp hands the working directory's ancestors that lie in a write path (/tmp/me above
// /tmp/me/repo) and that the working directory's owner owns on the host to the command's user, in the
// overlay: without root the command is the caller, who owns them, and creates a sibling of the working
// directory there (git worktree add ../x, a build's ../out) in the sandbox's layer; as root it ran as
// another user, and the kernel refused it with EACCES, which Landlock (the path is a write path) never
// saw and the report did not show. The host's directories keep their owners; what the command makes
// beside the working directory stays in the layer, as anything outside it does.
func (s *Sandbox) giveWayUp(plan *policy.Plan, cwd string, give bool) error {
	if !give {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(cwd, &st); err != nil || int(st.Uid) == s.ids.HostUID {
		return nil
	}
	for d := filepath.Dir(cwd); d != "/" && slices.ContainsFunc(plan.Filesystem.Write, func(w string) bool { return host.Within(d, filepath.Clean(w)) }); d = filepath.Dir(d) {
		var up unix.Stat_t
		if err := unix.Lstat(d, &up); err != nil || up.Uid != st.Uid || up.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil
		}
		if up.Mode&0o002 != 0 {
			continue // anyone may write there already (/tmp itself)
		}
		f, err := s.rootfs.OpenDir(d)
		if err != nil {
			return fmt.Errorf("handing %s to the command's user: %w", d, err)
		}
		err = unix.Fchown(int(f.Fd()), s.ids.HostUID, s.ids.HostGID)
		f.Close()
		if err != nil {
			return fmt.Errorf("handing %s to the command's user: %w", d, err)
		}
	}
	return nil
}

// openWays lets the sandbox's root (an unprivileged uid on the host, which libcontainer runs as inside)
// and the command's user reach the working directory and mount the shares: the directories on the way
// become searchable in the overlay, and the shares' mount points exist there already (libcontainer
// could not create them in a directory it may not write, such as a hidden /root).
func (s *Sandbox) openWays(plan *policy.Plan, cwd string) error {
	for _, sh := range plan.Filesystem.Shares {
		if s.rootfs.CwdOverlay() == nil || !host.Within(sh.Sandbox, s.rootfs.CwdOverlay().At) {
			st, err := os.Stat(sh.Host)
			if err != nil {
				return fmt.Errorf("%w: %s: %w", ErrShareTarget, sh.Host, err)
			}
			if err := rootfs.MountPointLike(s.rootfs.RootDir(), sh.Sandbox, st.IsDir()); err != nil {
				return fmt.Errorf("%w: preparing the mount point of %s: %w", ErrShareTarget, sh.Sandbox, err)
			}
		}
		if err := s.rootfs.Traversable(filepath.Dir(sh.Sandbox)); err != nil {
			return err
		}
	}
	return s.rootfs.Traversable(filepath.Dir(cwd))
}

// cwdIDMap is the idmapping that shows the working directory as the command's own, nil when the
// command's user owns it already or gets no write access to it.
func (s *Sandbox) cwdIDMap(give bool) *rootfs.IDMapping {
	if !give {
		return nil
	}
	// The owner is read on a handle opened without following links, as the bind itself will be.
	dir, err := safefs.OpenNoLinks(s.cfg.Command.Cwd)
	if err != nil {
		return nil
	}
	defer dir.Close()
	var st unix.Stat_t
	if unix.Fstat(int(dir.Fd()), &st) != nil {
		return nil
	}
	if int(st.Uid) == s.ids.HostUID {
		return nil
	}
	return &rootfs.IDMapping{FromUID: int(st.Uid), FromGID: int(st.Gid), ToUID: s.ids.HostUID, ToGID: s.ids.HostGID}
}

// giveCwd is the fallback without idmapped mounts: the working directory is handed to the command's user
// by changing owners in the overlay, up to rootfs.MaxChown entries.
func (s *Sandbox) giveCwd(plan *policy.Plan, cwd string, overlayCwd bool) error {
	if err := s.rootfs.Mount(plan.Limits.DiskBytes, plan.Filesystem.Hidden, cwd, overlayCwd, append(shareTargets(plan.Filesystem.Shares), s.shareLinks...), nil); err != nil {
		return err
	}
	s.Notes = append(s.Notes, s.rootfs.Notes()...)
	whole, err := s.rootfs.GiveTo(cwd, s.ids.HostUID, s.ids.HostGID)
	if err != nil {
		return err
	}
	s.Notes = append(s.Notes, "this kernel has no idmapped mounts: the working directory was handed to the command's user by changing owners in the overlay")
	if err := s.mountCaches(); err != nil {
		return err
	}
	if !whole {
		s.Notes = append(s.Notes, fmt.Sprintf("the working directory has over %d entries: only the directory itself was made writable for uid %d", rootfs.MaxChown, plan.UID))
	}
	return nil
}

// sameFS says whether b lies on the same file system as a.
func sameFS(a, b string) bool {
	var sa, sb unix.Stat_t
	if unix.Stat(a, &sa) != nil || unix.Stat(b, &sb) != nil {
		return true // nothing useful to say
	}
	return sa.Dev == sb.Dev
}
