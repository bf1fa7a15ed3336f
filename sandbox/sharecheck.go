package sandbox

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/supervisor"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
)

// libcontainer's init, the fallback start, binds each share by its host path, as mount(2) follows it:
// a link planted on the way after resolveShares checked it (by a command of another run that may write
// a directory on the path) would lead the bind elsewhere. sbx cannot hand it a descriptor instead, so
// it identifies each share's source before the start, on a descriptor opened without following any
// link, and checks what the sandbox has at the share's place once it is built, before the command
// runs: another file there fails the run.

// shareSources are the identities of the plan's shares' sources, opened without following a link, in
// the order of the plan's shares.
func (s *Sandbox) shareSources() ([]supervisor.FileID, error) {
	shares := s.cfg.Plan.Filesystem.Shares
	ids := make([]supervisor.FileID, len(shares))
	for i, sh := range shares {
		fd, err := unix.Openat2(unix.AT_FDCWD, sh.Host, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			return nil, shareError(sh.Host, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrShare, sh.Host, err)
		}
		ids[i] = supervisor.FileID{Dev: st.Dev, Ino: st.Ino}
	}
	return ids, nil
}

// checkShares checks that the sandbox of init pid has, at each share's place, the source identified
// before the start (want, from shareSources). The places are looked up inside the sandbox's root, as the
// command would, links there resolved within it. A share nested in a later one is covered by it and
// not checked.
func (s *Sandbox) checkShares(pid int, want []supervisor.FileID) error {
	shares := s.cfg.Plan.Filesystem.Shares
	if len(shares) == 0 {
		return nil
	}
	root, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the sandbox's root to check its shares: %w", err)
	}
	defer unix.Close(root)
	for i, sh := range shares {
		if coveredLater(shareTargets(shares[i+1:]), sh.Sandbox) {
			continue
		}
		fd, err := unix.Openat2(root, sh.Sandbox, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			return fmt.Errorf("%w: checking the share %s in the sandbox: %w", ErrShareLink, sh.Sandbox, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%w: checking the share %s in the sandbox: %w", ErrShareLink, sh.Sandbox, err)
		}
		if (supervisor.FileID{Dev: st.Dev, Ino: st.Ino}) != want[i] {
			return fmt.Errorf("%w: %s: the sandbox got another file than the share's (a link was planted on its way while the sandbox was built)", ErrShareLink, sh.Host)
		}
	}
	return nil
}

// coveredLater says whether path is at or below one of later, mounted after it.
func coveredLater(later []string, path string) bool {
	for _, l := range later {
		if host.Within(path, l) {
			return true
		}
	}
	return false
}
