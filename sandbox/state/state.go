package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/internal/cgprime"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/apply"
	"github.com/sbx-dev/sbx/internal/safefs"
	"github.com/sbx-dev/sbx/sandbox/cgroup"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
	"github.com/sbx-dev/sbx/sandbox/netcontract"
	"github.com/sbx-dev/sbx/sandbox/rootfs"
)

// Run is the state directory of one run. Its lock file is flock'ed for as long as the sbx that owns
// the run lives: the kernel drops the lock when that process dies, which is how GC tells dead runs.
type Run struct {
	dir   string
	lock  *os.File
	tmpfs bool // a tmpfs of the run's own is mounted on dir (see onTmpfs)
}

// RunsDir is where the state root keeps its runs' dirs.
func RunsDir(root string) string { return filepath.Join(root, "runs") }

// Claim creates and locks the state directory of run id. The directory is built under a temporary
// name and renamed once its lock is held and names its owner, so that a run dir never exists unlocked:
// GC can tell a dead run from one being born.
//
// The run dir belongs to the sandbox's root (ownerUID, ownerGID: the host ids of its user namespace's
// root), which reaches the sandbox's root file system below it by path; the state root and its runs
// dir are searchable for that, never listable.
func Claim(root, id string, ownerUID, ownerGID int) (*Run, error) {
	runs := RunsDir(root)
	tmp := filepath.Join(runs, newPrefix+strconv.Itoa(os.Getpid())+"-"+id)
	if ownerUID == os.Geteuid() {
		// The sandbox's root is sbx's own user (rootless): nobody else needs in.
		if err := os.MkdirAll(runs, 0o700); err != nil {
			return nil, fmt.Errorf("creating the state dir: %w", err)
		}
	} else if err := openStateRoot(root, runs); err != nil {
		return nil, err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("creating the state dir: %w", err)
	}
	if err := os.Lchown(tmp, ownerUID, ownerGID); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("handing the state dir to the sandbox's root: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(tmp, "lock"), os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("creating the state lock: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("locking the state dir: %w", err)
	}
	fmt.Fprintf(lock, "%d\n", os.Getpid())
	dir := filepath.Join(runs, id)
	if err := os.Rename(tmp, dir); err != nil {
		lock.Close()
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("creating the state dir: %w", err)
	}
	r := &Run{dir: dir, lock: lock}
	if err := r.onTmpfs(ownerUID, ownerGID); err != nil {
		r.Release()
		return nil, err
	}
	return r, nil
}

// runTmpfsOptions bound a run dir's tmpfs: a few mount points and small files (hosts, resolv.conf).
const runTmpfsOptions = "mode=0700,uid=%d,gid=%d,size=16m,nr_inodes=1024"

// onTmpfs mounts a tmpfs of the run's own on its run dir when sbx runs in a mount namespace of its own
// (as root: internal/cgprime), where the mount is sbx's alone and goes with it. What the run makes there
// (its mount points, hosts, resolv.conf) then costs no inodes of the state root's file system, which a
// run on disk made and freed by the dozen: on an ext4 without a journal, as this kind of host's root
// is, each new inode is searched for past every inode freed in the last half minute, and 20 runs at
// once took 15% longer with the state root there than on a tmpfs. The lock stays on disk below, where
// gc (in the host's mount namespace) looks.
func (r *Run) onTmpfs(uid, gid int) error {
	if host.Rootless() || !cgprime.PrivateMounts() {
		return nil
	}
	if err := unix.Mount("tmpfs", r.dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
		fmt.Sprintf(runTmpfsOptions, uid, gid)); err != nil {
		return fmt.Errorf("mounting the run dir's tmpfs: %w", err)
	}
	r.tmpfs = true
	return nil
}

// ownTmpfs says whether a run dir is a mount in this process's mount namespace: the tmpfs of one of
// its own runs (onTmpfs), which lives as long as the run; another process's tmpfs never shows here.
func ownTmpfs(dir string) bool {
	var st, parent unix.Stat_t
	return unix.Lstat(dir, &st) == nil && unix.Lstat(filepath.Dir(dir), &parent) == nil && st.Dev != parent.Dev
}

// offTmpfs detaches the run dir's tmpfs, and with it whatever is left on it.
func (r *Run) offTmpfs() {
	if r.tmpfs {
		_ = unix.Unmount(r.dir, unix.MNT_DETACH)
		r.tmpfs = false
	}
}

// openStateRoot creates the state root and its runs dir searchable for the sandbox's root, and checks
// that it can reach them.
func openStateRoot(root, runs string) error {
	if err := os.MkdirAll(runs, 0o711); err != nil {
		return fmt.Errorf("creating the state dir: %w", err)
	}
	for _, d := range []string{root, runs} {
		if err := searchable(d); err != nil {
			return fmt.Errorf("opening the state dir to the sandbox's root: %w", err)
		}
	}
	return reachable(filepath.Dir(root))
}

// searchable adds search permission for everyone to dir, a directory sbx owns.
func searchable(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&0o011 == 0o011 || int(st.Uid) != os.Geteuid() {
		return nil
	}
	return unix.Chmod(dir, st.Mode&0o7777|0o011)
}

// ErrRoot is matched by the error about a state root that the sandbox's root cannot reach.
var ErrRoot = errors.New("the state root is out of the sandbox's reach")

// reachable checks that everyone may search dir and its ancestors: the sandbox's root is an unprivileged
// host uid that reaches the run dir by path.
func reachable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			return fmt.Errorf("%w: %w", ErrRoot, err)
		}
		if st.Mode&0o001 == 0 {
			return fmt.Errorf("%w: %s is not searchable by other users (mode %#o)", ErrRoot, d, st.Mode&0o7777)
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// newPrefix marks a run dir being created.
const newPrefix = ".new-"

// Abandon lets go of the run dir without removing it: a run whose teardown could not remove everything
// is then a dead run that gc cleans up.
func (r *Run) Abandon() {
	if r != nil {
		r.offTmpfs()
		r.lock.Close()
	}
}

// Release removes the run's state directory and drops the lock.
func (r *Run) Release() error {
	if r == nil {
		return nil
	}
	err := r.remove()
	r.lock.Close()
	return err
}

// Dir is the run's state directory.
func (r *Run) Dir() string { return r.dir }

// remove removes the run's state directory (see removeRunDir), its tmpfs first.
func (r *Run) remove() error {
	if err := mountedBelow(r.dir); err != nil {
		return err
	}
	r.offTmpfs()
	return removeAll(r.dir)
}

// mountedBelow fails when anything is still mounted below dir.
func mountedBelow(dir string) error {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			return fmt.Errorf("not removing the state dir %s: %s is still mounted", dir, f[4])
		}
	}
	return nil
}

// removeRunDir removes a run's state directory, but never while anything is still mounted below it: the
// overlay's lower layer is the host's root file system.
func removeRunDir(dir string) error {
	if err := mountedBelow(dir); err != nil {
		return err
	}
	return removeAll(dir)
}

// removeAll removes a run's state directory that nothing is mounted below.
func removeAll(dir string) error {
	if host.Rootless() {
		openWorkDirs(dir)
	}
	err := os.RemoveAll(dir)
	if err != nil && host.Rootless() {
		// A directory the command left without permissions for its owner: open them all, then again.
		openForRemoval(dir)
		err = os.RemoveAll(dir)
	}
	if err != nil {
		return fmt.Errorf("removing the state dir: %w", err)
	}
	return nil
}

// waitStopped waits, up to a second, until a killed container's init is gone: Destroy refuses a running
// one. Without a cgroup (rootless) nothing else waits for the kill to land.
func waitStopped(c *libcontainer.Container) {
	for range 100 {
		if st, err := c.Status(); err != nil || st == libcontainer.Stopped {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// GCResult says what GC found and removed.
type GCResult struct {
	Runs    []string // ids of dead runs cleaned up
	Skipped []string // ids of live runs left alone
}

// GC removes what runs whose sbx died left behind: processes (by the run's cgroup), the container's
// state, the overlay and its layer, cgroups and the state dir. Runs whose sbx is alive are not touched.
func GC(root string) (GCResult, error) {
	var res GCResult
	if root == "" {
		root = DefaultRootFor()
	}
	entries, err := os.ReadDir(RunsDir(root))
	if errors.Is(err, os.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	var errs []error
	for _, e := range entries {
		id := e.Name()
		if strings.HasPrefix(id, newPrefix) {
			gcNewRunDir(filepath.Join(RunsDir(root), id))
			continue
		}
		dead, lock := claimDead(filepath.Join(RunsDir(root), id))
		if !dead {
			res.Skipped = append(res.Skipped, id)
			continue
		}
		if err := gcRun(root, id); err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", id, err))
		}
		lock.Close()
		res.Runs = append(res.Runs, id)
	}
	return res, errors.Join(errs...)
}

// gcNewRunDir removes a run dir whose owner died while creating it, before it built anything: one whose
// creator (named in it: .new-PID-ID) is gone, whose lock nobody holds and that is older than creating
// it takes (microseconds; a second is generous). The creator's pid is what tells: by its age alone, a
// run dir whose creator stalled for a second before it made the lock (an emulated VM under load, a
// clock that jumped) would be removed under it, and the removal, walking the directory by its
// descriptor, would follow it past its rename into the layer mounted there and empty that.
func gcNewRunDir(dir string) {
	if pid, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), newPrefix), "-"); ok {
		if n, err := strconv.Atoi(pid); err == nil && n > 0 && alive(n) {
			return
		}
	}
	st, err := os.Stat(dir)
	if err != nil || time.Since(st.ModTime()) < time.Second {
		return
	}
	if lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		defer lock.Close()
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			return // its owner lives: it is still being created
		}
	}
	removeRunDir(dir)
}

// alive says whether a process of pid exists (in this pid namespace); EPERM is one of another user's.
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// claimDead takes the lock of a run dir if its owner is gone.
func claimDead(dir string) (bool, *os.File) {
	if ownTmpfs(dir) {
		return false, nil // a run of this very process, whose tmpfs hides its lock here
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		// Run dirs are renamed into place with their lock (Claim): one without is what is left of a
		// dead run whose removal was itself cut short, a gc killed halfway.
		return true, nil
	}
	if err != nil {
		return false, nil
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return false, nil
	}
	// The owner writes its pid once it holds the lock: an empty lock file belongs to a run between
	// creating the file and locking it.
	if st, err := lock.Stat(); err != nil || st.Size() == 0 {
		lock.Close()
		return false, nil
	}
	return true, lock
}

func gcRun(root, id string) error {
	var errs []error
	run := filepath.Join(RunsDir(root), id)
	cgroups := cgroup.Dirs(id)
	if d := cgroup.Recorded(run, id); d != "" {
		cgroups = append(cgroups, d) // a rootless run's, below the cgroup systemd delegates
	}
	cgroup.Thaw(cgroups) // a frozen task holds its SIGKILL until thawed
	cgroup.Kill(cgroups)
	killRecordedInit(run) // a rootless run's supervisor, which no cgroup may list
	if c, err := libcontainer.Load(filepath.Join(root, "lc"), id); err == nil {
		c.Signal(unix.SIGKILL)
		waitStopped(c)
		// A killed init leaves the cgroup before it is a zombie: until then libcontainer may find it
		// running. Give it a moment.
		err := c.Destroy()
		for i := 0; errors.Is(err, libcontainer.ErrRunning) && i < 50; i++ {
			time.Sleep(10 * time.Millisecond)
			err = c.Destroy()
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	// A run killed inside libcontainer's Create or Run has a state dir without state.json, which Load
	// does not know: remove it in every case (it holds no mount).
	if err := os.RemoveAll(filepath.Join(root, "lc", id)); err != nil {
		errs = append(errs, err)
	}
	if err := rootfs.New(run).Unmount(); err != nil {
		errs = append(errs, err)
	}
	for _, d := range cgroups {
		os.Remove(d)
	}
	if err := cleanApplyTemps(run); err != nil {
		errs = append(errs, err)
	}
	netcontract.KillPasta(run) // without root: the uplink of a run that died
	if err := netcontract.Cleanup("sbx" + id); err != nil {
		errs = append(errs, err)
	}
	if err := removeRunDir(run); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ApplyJournal returns the journal function of the apply of the run whose dir is runDir, its working
// directory being cwd (apply.Options.Journal); gc reads it back (cleanApplyTemps).
func ApplyJournal(runDir, cwd string) func(rel string) error {
	path := filepath.Join(runDir, applyJournalName)
	return func(rel string) error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Size() == 0 {
			if _, err := f.WriteString(strconv.Quote(cwd) + "\n"); err != nil {
				return err
			}
		}
		if _, err := f.WriteString(strconv.Quote(rel) + "\n"); err != nil {
			return err
		}
		return f.Sync()
	}
}

// maxApplyJournal bounds what gc reads of a dead run's journal.
const maxApplyJournal = 16 << 20

// applyJournalName is the file in a run's dir where its apply names the directories it gives temporary
// names in (apply.Options.Journal): the working directory's path, then one directory a line, each
// Go-quoted.
const applyJournalName = "apply-journal"

// cleanApplyTemps removes what a killed run's apply left under temporary names in the host's working
// directory, as its journal names them.
func cleanApplyTemps(run string) error {
	b, err := os.ReadFile(filepath.Join(run, applyJournalName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(b) > maxApplyJournal {
		b = b[:maxApplyJournal]
	}
	lines := strings.Split(string(b), "\n")
	cwd, err := strconv.Unquote(lines[0])
	if err != nil {
		return fmt.Errorf("apply journal: %w", err)
	}
	var rels []string
	for _, l := range lines[1:] {
		if rel, err := strconv.Unquote(l); err == nil {
			rels = append(rels, rel)
		}
	}
	host, err := safefs.OpenNoLinks(cwd)
	if err != nil {
		return fmt.Errorf("apply journal: %w", err)
	}
	defer host.Close()
	_, err = apply.CleanTemps(host, rels)
	return err
}
