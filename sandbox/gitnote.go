package sandbox

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
	"github.com/sbx-dev/sbx/sandbox/rootfs"
)

// hiddenRepoNote says, for the report, when the working directory lies in a git repository whose root
// (the directory holding .git) the profile hides: the sandbox shows only the way down to the working
// directory, so git in it finds no repository ("not a git repository"), where on the host it finds
// the one above, and nothing else says why. "" when no such repository is found. Looked at with lstat
// only, in the caller's tree as it is before the run, from the working directory's parent up to the
// hidden directory.
//
// Only a .git of the working directory's owner counts: the hidden directories above a working
// directory are often open to every user (/tmp, /var/tmp), and a .git another user planted there
// (/tmp/.git) is no repository of the caller's (git itself refuses it: safe.directory), yet the note
// would name it and advise sharing it, --rw /tmp included.
//
// It looks no higher than top ("" for no bound): an MCP caller's workspace, above which lie paths of the
// operator's that are none of the caller's business.
func hiddenRepoNote(fs policy.Filesystem, cwd, top string) string {
	var own unix.Stat_t
	if unix.Lstat(cwd, &own) != nil {
		return ""
	}
	for dir := filepath.Dir(cwd); dir != cwd && rootfs.BelowHidden(fs.Hidden, dir) && !shared(fs.Shares, dir) && (top == "" || host.Within(dir, top)); cwd, dir = dir, filepath.Dir(dir) {
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(dir, ".git"), &st) != nil || st.Uid != own.Uid {
			continue
		}
		if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && t != unix.S_IFREG {
			continue
		}
		return fmt.Sprintf("git: the working directory lies in the repository %s, which the profile hides: git finds no repository here; run sbx from %s (its writes stay in the sandbox's layer), or share it (--ro %s: read-only; --rw: writes reach the host)", dir, dir, dir)
	}
	return ""
}
