package runner

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/sandbox"
)

// A writable share is the host's directory itself, bound into the sandbox: what the command writes
// there lands on the host at once, with no layer to compare. For root runs sbx records it as it happens
// from the kernel's file events (observe.ShareWatch, started before the command, read until the sandbox
// is frozen or gone): every path below a writable share that the sandbox's processes created, modified
// or deleted is listed and judged as the changes of the sandbox's own layers are; the host's own writes
// there are not the command's and are left out.
//
// Without root the kernel gives no such events (filesystem marks and open_by_handle_at need
// CAP_SYS_ADMIN and CAP_DAC_READ_SEARCH): walking every writable share after each run would cost time in
// proportion to its size (a shared cache holds hundreds of thousands of files). What must not pass
// unseen is persistence planted through one: a git hook in a shared project, an .envrc, a shell startup
// file or an authorized key in a shared home. So after every run sbx also looks at the places below each
// writable share's top where the persistence table's files lie (shareProbes), and lists those the run
// created or changed, found by their ctime, which a command cannot set back; the persistence rules then
// judge them as any other change. What lies elsewhere in a share is, for rootless runs, not looked at:
// the report's notes say so. Root runs look at those places too when their watch could not see
// everything (its Problems make the run incomplete, and a hook must not pass meanwhile).

// shareProbes are the paths below a writable share's top where persistence files lie, as globs (one
// element at a time; * within an element).
var shareProbes = []string{
	".envrc", ".git/config", ".git/hooks/*", "hooks/*", "config",
	".bashrc", ".profile", ".bash_profile", ".bash_login", ".bash_logout", ".zshrc", ".zprofile", ".zshenv",
	".zlogin", ".zlogout", ".kshrc", ".mkshrc", ".cshrc", ".tcshrc", ".config/fish/*", ".config/fish/conf.d/*",
	".ssh/authorized_keys", ".ssh/authorized_keys2", ".ssh/config", ".ssh/rc", ".ssh/environment",
	".config/systemd/user/*", ".local/share/systemd/user/*",
	"sitecustomize.py", "usercustomize.py",
	".gitconfig", ".config/git/config", ".bash_aliases", ".config/autostart/*", ".config/environment.d/*",
	".local/bin/*", ".vimrc", ".gvimrc", ".exrc", ".vim/plugin/*", ".config/nvim/*", ".emacs", ".emacs.d/*",
	".tmux.conf", ".config/tmux/*", ".screenrc", ".inputrc", ".xinitrc", ".xsession", ".xsessionrc",
	".xprofile", ".npmrc", ".yarnrc", ".yarnrc.yml", ".cargo/config", ".cargo/config.toml",
	"lib/python3*/site-packages/*.pth", ".venv/lib/python3*/site-packages/*.pth",
	"venv/lib/python3*/site-packages/*.pth", ".local/lib/python3*/site-packages/*.pth",
}

// maxProbeEntries bounds the entries one glob element reads from a directory: past it the directory is
// not read further and the share's reading is incomplete (a hook behind many thousands of other names
// must not pass unseen).
const maxProbeEntries = 100_000

// clockSlack covers the file system's coarse clock (a tick behind the one sbx reads) when a change is
// told from the run's start by its ctime.
const clockSlack = 20 * time.Millisecond

// shareChanges lists the persistence places of each writable share that changed since start, as paths
// inside the sandbox (created when born since start, modified otherwise), and whether any share could
// not be looked at.
func shareChanges(shares []shareAt, start time.Time) (created, modified []report.FileChange, err error) {
	since := start.Add(-clockSlack)
	var errs []error
	for _, sh := range shares {
		dir, probes := sh.host, shareProbes
		if st, err := os.Lstat(sh.host); err == nil && !st.IsDir() {
			// A file shared by itself (--rw ~/.bashrc): the probe is the file.
			dir, probes = filepath.Dir(sh.host), []string{filepath.Base(sh.host)}
			sh.sandbox = path.Dir(sh.sandbox)
		}
		root, oerr := os.OpenRoot(dir)
		if oerr != nil {
			errs = append(errs, fmt.Errorf("share %s: %w", sh.host, oerr))
			continue
		}
		for _, p := range probes {
			rels, gerr := globIn(root, p)
			if gerr != nil {
				errs = append(errs, fmt.Errorf("share %s: %w", sh.host, gerr))
			}
			for _, rel := range rels {
				at := path.Join(sh.sandbox, rel)
				if !policy.MaybePersistence(at) {
					continue // "config" below a share that is no .git
				}
				c, ok := changedSince(root, rel, since)
				if !ok {
					continue
				}
				c.Path = at
				if c.Change == "created" {
					created = append(created, c)
				} else {
					modified = append(modified, c)
				}
			}
		}
		root.Close()
	}
	return created, modified, errors.Join(errs...)
}

// shareAt is a writable share: its host directory and where the sandbox shows it.
type shareAt struct{ host, sandbox string }

// globIn expands pattern (slash-separated, * within an element) below root, never leaving it. A
// directory is read whole, up to maxProbeEntries entries; one that holds more, or cannot be read past
// its start, is an error (the rest of the expansion is still returned).
func globIn(root *os.Root, pattern string) ([]string, error) {
	found := []string{"."}
	var errs []error
	for _, elem := range strings.Split(pattern, "/") {
		var next []string
		for _, dir := range found {
			if !strings.Contains(elem, "*") {
				next = append(next, path.Join(dir, elem))
				continue
			}
			d, err := root.Open(dir)
			if err != nil {
				continue // absent: nothing there to judge
			}
			names, err := readAllNames(d, maxProbeEntries)
			d.Close()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", dir, err))
			}
			for _, n := range names {
				if ok, _ := filepath.Match(elem, n); ok {
					next = append(next, path.Join(dir, n))
				}
			}
		}
		found = next
	}
	return found, errors.Join(errs...)
}

// readAllNames reads a directory's names, at most max: a directory with more is an error, as is one
// whose reading fails (not a directory is no error: nothing to expand).
func readAllNames(d *os.File, max int) ([]string, error) {
	var out []string
	for {
		names, err := d.Readdirnames(1024)
		out = append(out, names...)
		if len(out) > max {
			return out[:max], fmt.Errorf("more than %d entries: not read whole", max)
		}
		if err == io.EOF || errors.Is(err, unix.ENOTDIR) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// changedSince says whether the entry rel of root (not followed when a link) was born or changed since
// since, with its size and kind. The entry's directory is opened within root; the entry itself only
// looked at.
func changedSince(root *os.Root, rel string, since time.Time) (report.FileChange, bool) {
	d, err := root.Open(path.Dir(rel))
	if err != nil {
		return report.FileChange{}, false
	}
	defer d.Close()
	var st unix.Statx_t
	if unix.Statx(int(d.Fd()), path.Base(rel), unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC,
		unix.STATX_TYPE|unix.STATX_SIZE|unix.STATX_CTIME|unix.STATX_BTIME|unix.STATX_MTIME, &st) != nil {
		return report.FileChange{}, false
	}
	ctime := time.Unix(st.Ctime.Sec, int64(st.Ctime.Nsec))
	if ctime.Before(since) {
		return report.FileChange{}, false
	}
	c := report.FileChange{Size: int64(st.Size), Change: "modified", CTime: ctime, Mode: uint32(st.Mode),
		ModTime: time.Unix(st.Mtime.Sec, int64(st.Mtime.Nsec))}
	if st.Mask&unix.STATX_BTIME != 0 && !time.Unix(st.Btime.Sec, int64(st.Btime.Nsec)).Before(since) {
		c.Change = "created"
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		c.Kind = "file"
	case unix.S_IFDIR:
		return report.FileChange{}, false // a directory's entries are what the probes name
	case unix.S_IFLNK:
		c.Kind = "symlink"
	default:
		c.Kind = "other"
	}
	return c, true
}

// startShareWatch starts recording what the sandbox's processes change below its writable shares, for
// root runs. A root run whose watch cannot start is incomplete; a rootless one keeps the probes only.
func (r *run) startShareWatch() {
	shares := r.writableShares()
	if len(shares) == 0 || sandbox.Rootless() {
		return
	}
	// Processes are told the sandbox's by their pid namespace: one shared with sbx's would take the
	// whole host for the sandbox.
	if own, theirs := nsIno("/proc/self/ns/pid"), nsIno(fmt.Sprintf("/proc/%d/ns/pid", r.sb.InitPid())); own == 0 || own == theirs {
		r.rep.MarkIncomplete("file changes in writable shares", errors.New("the sandbox's pid namespace could not be told from sbx's"))
		return
	}
	var watched []observe.WatchedShare
	for _, sh := range shares {
		watched = append(watched, observe.WatchedShare{Host: sh.host, Sandbox: sh.sandbox})
	}
	w, err := observe.StartShareWatch(observe.ShareWatchOptions{Shares: watched, InitPid: r.sb.InitPid(),
		Keep: policy.MaybePersistence, KeepChange: r.persistenceFinding})
	if err != nil {
		r.rep.MarkIncomplete("file changes in writable shares", err)
		return
	}
	r.shareWatch = w
}

// stopShareWatch ends the watch and returns what the sandbox's processes changed below the writable
// shares; nil without a watch. What it could not see makes the run incomplete.
func (r *run) stopShareWatch() *observe.ShareChanges {
	w := r.shareWatch
	if w == nil {
		return nil
	}
	r.shareWatch = nil
	sc := w.Stop(r.inTree)
	for _, p := range sc.Problems {
		r.rep.MarkIncomplete("file changes in writable shares", errors.New(p))
	}
	for _, n := range sc.Notes {
		r.rep.Notes = append(r.rep.Notes, "file changes in writable shares: "+n)
	}
	return sc
}

// notListed drops from cs the paths of seen.
func notListed(cs []report.FileChange, seen map[string]bool) []report.FileChange {
	return slices.DeleteFunc(cs, func(c report.FileChange) bool { return seen[c.Path] })
}

// nsIno is the inode of the namespace file p, 0 when it cannot be read.
func nsIno(p string) uint64 {
	var st unix.Stat_t
	if unix.Stat(p, &st) != nil {
		return 0
	}
	return st.Ino
}
