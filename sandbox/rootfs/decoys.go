package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
)

// Decoys: where secrets live (policy.CredentialPlaces) below a hidden home directory, the sandbox shows
// a decoy instead of nothing, each holding a value unique to the run. sbx writes them into the writable
// layer (with root through the mounted overlay, beside the container's start; without root before the
// overlay is mounted), owned by the host's root (no id of the sandbox's: the command can
// read them but cannot open them with O_NOATIME, which only an owner may), world-readable, their access
// time set to the epoch. A read of a decoy through the overlay sets its access time on the layer's file
// (the layer is mounted relatime: the first read after a change always does); a write, a chmod, a touch
// changes its ctime, which nothing can set back; a removal leaves no file. After the run sbx looks at
// each decoy (before anything of its own reads the layer) and names every access.
//
// Decoys never appear inside the working directory or a share, and never in place of a file the sandbox
// would show: only below a hidden home, where the sandbox shows nothing of the host's.

// Decoy is one decoy the sandbox shows.
type Decoy struct {
	Path      string // as seen inside the sandbox
	Mechanism string // policy.Cred*
	Token     string // the run-unique value in it
	// ReadByTools: a read is no finding (policy.CredentialPlace.ReadByTools), only where its value goes.
	ReadByTools bool
	host        string // the layer's file
	ctime       unix.Timespec
}

// Access is what the command did to a decoy: "read", "changed", "deleted"; "" for nothing.
func (d Decoy) Access() string {
	var st unix.Stat_t
	if err := unix.Lstat(d.host, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "deleted"
		}
		return "changed" // replaced by something sbx cannot look at
	}
	switch {
	case st.Ctim != d.ctime:
		return "changed"
	case st.Atim.Sec != 0 || st.Atim.Nsec != 0:
		return "read"
	}
	return ""
}

// plantDecoys writes the decoys of every home into view: the root overlay's upper layer before it is
// mounted (view is upper), or its mounted tree, whose new files land in upper. keep are the working
// directory and the shares' targets: no decoy goes inside one.
// The directories it makes on the way are the command's (owner uid:gid, its host ids): tools create
// their own files there (~/.config, ~/.ssh/authorized_keys, ~/.cargo/registry) as in an empty home.
func plantDecoys(view, upper string, homes, keep []string, uid, gid int) ([]Decoy, error) {
	var out []Decoy
	for _, h := range homes {
		for _, place := range policy.CredentialPlaces {
			p := filepath.Join(h, place.Rel)
			if blocked(p, keep) {
				continue
			}
			if err := decoyParents(view, h, filepath.Dir(p), uid, gid); err != nil {
				if errors.Is(err, errNoDecoyHere) {
					continue
				}
				return out, fmt.Errorf("making the way to decoy %s: %w", p, err)
			}
			content, token := policy.NewDecoy(place)
			d := Decoy{Path: p, Mechanism: place.Mechanism, Token: token, ReadByTools: place.ReadByTools, host: filepath.Join(upper, p)}
			ctime, err := writeDecoy(filepath.Join(view, p), content)
			if err != nil {
				if errors.Is(err, unix.EEXIST) {
					continue // something of sbx's own is there
				}
				return out, fmt.Errorf("writing decoy %s: %w", p, err)
			}
			d.ctime = ctime
			out = append(out, d)
		}
	}
	return out, nil
}

// blocked says whether a decoy at p would lie inside a path of keep (the working directory, a share).
// On the way down to one is fine: the host's entries beside the way are hidden there.
func blocked(p string, keep []string) bool {
	for _, k := range keep {
		if host.Within(p, filepath.Clean(k)) {
			return true
		}
	}
	return false
}

var errNoDecoyHere = errors.New("no decoy here")

// decoyParents makes dir (below home, as seen in the sandbox) in upper: each missing directory is made
// (mode 0755, the command's), a whiteout there (hideAround's) becomes an opaque directory,
// since the host's directory of that name stays hidden. A home that is not in the layer (a hidden
// directory that is not a directory on the host) takes no decoys.
func decoyParents(upper, home, dir string, uid, gid int) error {
	hst, err := os.Lstat(filepath.Join(upper, home))
	if err != nil || !hst.IsDir() {
		if h, herr := os.Lstat(home); herr == nil && h.IsDir() && errors.Is(err, os.ErrNotExist) {
			// Below an opaque hidden directory (the caller's home under /home): made here.
			if err := decoyParents(upper, filepath.Dir(home), filepath.Dir(home), uid, gid); err != nil {
				return err
			}
			if err := mkdirLike(filepath.Join(upper, home), home); err != nil {
				return err
			}
		} else {
			return errNoDecoyHere
		}
	}
	rel, err := filepath.Rel(home, dir)
	if err != nil || rel == "." {
		return err
	}
	cur := home
	for _, part := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, part)
		target := filepath.Join(upper, cur)
		var st unix.Stat_t
		err := unix.Lstat(target, &st)
		switch {
		case errors.Is(err, unix.ENOENT):
			if err := mkdirDecoy(target, uid, gid); err != nil {
				return err
			}
		case err != nil:
			return err
		case st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0: // a whiteout
			if err := os.Remove(target); err != nil {
				return err
			}
			if err := mkdirDecoy(target, uid, gid); err != nil {
				return err
			}
			if err := unix.Setxattr(target, opaqueXattr(), []byte("y"), 0); err != nil {
				return err
			}
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return errNoDecoyHere
		}
	}
	return nil
}

func mkdirDecoy(dir string, uid, gid int) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	return ignoreUnprivileged(os.Lchown(dir, uid, gid))
}

// writeDecoy creates the decoy file (never over anything), world-readable, its access time the epoch,
// and returns its ctime. One lookup of the path; the rest goes through the descriptor.
func writeDecoy(path string, content []byte) (unix.Timespec, error) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return unix.Timespec{}, err
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	_, err = f.Write(content)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		mtime := time.Now().Add(-time.Duration(len(content)%97+30) * 24 * time.Hour)
		err = unix.Futimes(fd, []unix.Timeval{{}, unix.NsecToTimeval(mtime.UnixNano())})
	}
	if err == nil {
		err = unix.Fstat(fd, &st)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return unix.Timespec{}, err
	}
	return st.Ctim, nil
}
