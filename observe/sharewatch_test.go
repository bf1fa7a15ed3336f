package observe

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/report"
)

// startWatch watches dir (shown as /s) for this process's pid namespace: every process of the test
// counts as the sandbox's.
func startWatch(t *testing.T, dir string, opts ShareWatchOptions) *ShareWatch {
	t.Helper()
	testutil.RequireRoot(t, "fanotify filesystem marks and open_by_handle_at")
	if opts.InitPid == 0 {
		opts.InitPid = os.Getpid()
	}
	opts.Shares = []WatchedShare{{Host: dir, Sandbox: "/s"}}
	w, err := StartShareWatch(opts)
	if errors.Is(err, ErrFanotifyFeature) {
		t.Skipf("the share watch needs fanotify's DFID_NAME (5.9), PIDFD (5.15) and TARGET_FID (5.17) reports: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// viaProc makes w open the pid namespaces of its events' processes through /proc, as it does on kernels
// without PIDFD_GET_PID_NAMESPACE (before 6.11), so that this path runs on every kernel.
func viaProc(w *ShareWatch) *ShareWatch {
	w.mu.Lock()
	w.pidfdNS = false
	w.mu.Unlock()
	return w
}

// pidNSPaths are the ways the watch asks a process's pid namespace: the pidfd ioctl where the kernel
// answers it, and /proc everywhere.
func pidNSPaths(t *testing.T) []string {
	if pidfdNSIoctl() {
		return []string{"pidfd ioctl", "proc"}
	}
	t.Log("no PIDFD_GET_PID_NAMESPACE (Linux 6.11): only the /proc path runs")
	return []string{"proc"}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func changePaths(cs []report.FileChange) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Path+":"+c.Kind)
	}
	slices.Sort(out)
	return out
}

// TestShareWatchNetChanges: what a sequence of operations adds up to, per path, with the processes'
// namespaces asked either way.
func TestShareWatchNetChanges(t *testing.T) {
	for _, how := range pidNSPaths(t) {
		t.Run(how, func(t *testing.T) { testShareWatchNetChanges(t, how == "proc") })
	}
}

func testShareWatchNetChanges(t *testing.T, proc bool) {
	dir := t.TempDir()
	for _, n := range []string{"mod", "del", "ren", "over", "rewritten", "unlinked", "victim"} {
		write(t, filepath.Join(dir, n), "a")
	}
	os.Mkdir(filepath.Join(dir, "olddir"), 0o755)
	write(t, filepath.Join(dir, "olddir/f"), "a")
	os.Mkdir(filepath.Join(dir, "movedir"), 0o755)
	os.Mkdir(filepath.Join(dir, "attrdir"), 0o755)
	outside := t.TempDir()
	w := startWatch(t, dir, ShareWatchOptions{})
	if proc {
		viaProc(w)
	}

	j := func(n string) string { return filepath.Join(dir, n) }
	f, _ := os.OpenFile(j("mod"), os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte("x"))
	f.Close()
	write(t, j("new"), "n")
	os.Remove(j("del"))
	os.Rename(j("ren"), j("ren2"))
	os.Rename(j("over"), j("mod2")) // new name, old one gone
	write(t, j("edit.tmp"), "saved")
	os.Rename(j("edit.tmp"), j("victim")) // an editor's save: the path was there, now with new content
	os.Remove(j("rewritten"))
	write(t, j("rewritten"), "again") // removed and made again: modified
	write(t, j("tmp"), "t")
	os.Remove(j("tmp")) // made and removed: nothing
	f, _ = os.OpenFile(j("unlinked"), os.O_WRONLY, 0)
	os.Remove(j("unlinked"))
	f.Write([]byte("late")) // a write after the removal: still deleted
	f.Close()
	os.RemoveAll(j("olddir"))
	os.MkdirAll(j("a/b"), 0o755)
	write(t, j("a/b/c"), "c")
	os.MkdirAll(j("gone/x"), 0o755)
	write(t, j("gone/x/y"), "y")
	os.RemoveAll(j("gone"))
	os.Rename(j("movedir"), j("moved"))
	write(t, j("moved/in"), "i") // placed under the directory's new name
	os.Chmod(j("ren2"), 0o600)
	os.Chmod(j("attrdir"), 0o700) // the directory's own event
	write(t, filepath.Join(outside, "elsewhere"), "not below the share")

	sc := w.Stop(nil)
	if len(sc.Problems) > 0 || sc.Truncated {
		t.Fatalf("problems %q, truncated %v", sc.Problems, sc.Truncated)
	}
	want := map[string][]string{
		"created":  {"/s/a:dir", "/s/a/b:dir", "/s/a/b/c:file", "/s/mod2:file", "/s/moved:dir", "/s/moved/in:file", "/s/new:file", "/s/ren2:file"},
		"modified": {"/s/attrdir:dir", "/s/mod:file", "/s/rewritten:file", "/s/victim:file"},
		"deleted":  {"/s/del:file", "/s/movedir:dir", "/s/olddir:dir", "/s/olddir/f:file", "/s/over:file", "/s/ren:file", "/s/unlinked:file"},
	}
	got := map[string][]string{"created": changePaths(sc.Created), "modified": changePaths(sc.Modified), "deleted": changePaths(sc.Deleted)}
	for k := range want {
		slices.Sort(want[k])
		if !slices.Equal(got[k], want[k]) {
			t.Errorf("%s = %q, want %q", k, got[k], want[k])
		}
	}
	if sc.Total != (report.Totals{Created: 8, Modified: 4, Deleted: 7}) {
		t.Errorf("total = %+v", sc.Total)
	}
	for _, c := range sc.Created {
		if c.Path == "/s/new" && (c.Size != 1 || c.Change != Created || c.Mode&unix.S_IFMT != unix.S_IFREG) {
			t.Errorf("new = %+v, want a created file of 1 byte", c)
		}
	}
}

// TestShareWatchFileShare: a file shared by itself is watched alone, not its directory's other entries.
func TestShareWatchFileShare(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "shared"), "a")
	w := startWatch(t, filepath.Join(dir, "shared"), ShareWatchOptions{})
	write(t, filepath.Join(dir, "shared"), "b")
	write(t, filepath.Join(dir, "other"), "b")
	sc := w.Stop(nil)
	if got := changePaths(sc.Modified); !slices.Equal(got, []string{"/s:file"}) || len(sc.Created) > 0 || len(sc.Problems) > 0 {
		t.Errorf("modified %q, created %q, problems %q; want /s only", got, changePaths(sc.Created), sc.Problems)
	}
}

// TestShareWatchBounds: past the bound the lists are cut and say so, what Keep names is kept, and the
// kernel queue's overflow makes a Problem.
func TestShareWatchBounds(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, ".git/hooks"), 0o755)
	w := startWatch(t, dir, ShareWatchOptions{MaxEntries: 10, Keep: func(p string) bool { return strings.Contains(p, "/.git/hooks/") }})
	for i := range 100 {
		write(t, filepath.Join(dir, fmt.Sprint(i)), "x")
	}
	write(t, filepath.Join(dir, ".git/hooks/pre-commit"), "x")
	sc := w.Stop(nil)
	if !sc.Truncated || len(sc.Created) != 11 || sc.Created[10].Path != "/s/.git/hooks/pre-commit" {
		t.Errorf("truncated %v, created %q, problems %q; want 10 plus the hook last", sc.Truncated, changePaths(sc.Created), sc.Problems)
	}
	if sc.Total.Created < 11 || len(sc.Problems) > 0 {
		t.Errorf("total %+v, problems %q", sc.Total, sc.Problems)
	}

	// The reader is held while more events arrive than the kernel queues.
	w = startWatch(t, dir, ShareWatchOptions{})
	w.mu.Lock()
	for i := range 20000 {
		write(t, filepath.Join(dir, fmt.Sprint("q", i)), "")
	}
	w.mu.Unlock()
	sc = w.Stop(nil)
	if !slices.ContainsFunc(sc.Problems, func(p string) bool { return strings.Contains(p, "overflowed") }) {
		t.Errorf("problems = %q, want the overflow", sc.Problems)
	}
}

// TestShareWatchUnsettled: an operation of a process gone before its event was read counts only when
// the exec stream places that pid in the sandbox during the event's window; without a stream it is a
// Problem, never silently dropped.
func TestShareWatchUnsettled(t *testing.T) {
	dir := t.TempDir()
	w := startWatch(t, dir, ShareWatchOptions{})
	w.mu.Lock() // the writer below is gone before its event is read
	if err := runShort(filepath.Join(dir, "byshort")); err != nil {
		w.mu.Unlock()
		t.Fatal(err)
	}
	w.mu.Unlock()
	sc := w.Stop(nil)
	if sc.Unsettled == 0 || len(sc.Problems) != 1 || len(sc.Created) != 0 {
		t.Errorf("unsettled %d, problems %q, created %q; want the creation unsettled, not listed", sc.Unsettled, sc.Problems, changePaths(sc.Created))
	}

	for _, in := range []bool{true, false} {
		w = startWatch(t, dir, ShareWatchOptions{})
		w.mu.Lock()
		err := runShort(filepath.Join(dir, fmt.Sprint("byshort", in)))
		w.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		var asked []uint64
		sc = w.Stop(func(pid int, from, to uint64) bool { asked = append(asked, from, to); return in })
		if len(sc.Created) != map[bool]int{true: 1, false: 0}[in] || len(sc.Problems) > 0 || len(asked) == 0 || asked[0] > asked[1] {
			t.Errorf("in tree %v: created %q, problems %q, window %v", in, changePaths(sc.Created), sc.Problems, asked)
		}
	}
}

// runShort creates p from a child process that has exited when it returns.
func runShort(p string) error { return exec.Command("/bin/sh", "-c", "echo x > "+p).Run() }

// TestMountMarkRefusesDirentEvents is the kernel fact the watch's design rests on: a mount mark would
// give the sandbox's own events only, but the kernel refuses directory-entry events on it, so the watch
// takes a filesystem mark and sorts by process.
func TestMountMarkRefusesDirentEvents(t *testing.T) {
	testutil.RequireRoot(t, "fanotify mount marks")
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_REPORT_DFID_NAME_TARGET, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	err = unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_MOUNT, unix.FAN_CREATE|unix.FAN_DELETE, unix.AT_FDCWD, t.TempDir())
	if !errors.Is(err, unix.EINVAL) {
		t.Errorf("mount mark with FAN_CREATE: %v, want EINVAL (if the kernel now allows it, a mount mark on the sandbox's bind mount would filter to the sandbox by itself)", err)
	}
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, shareEvents, unix.AT_FDCWD, t.TempDir()); err != nil {
		t.Errorf("filesystem mark: %v", err)
	}
}

// BenchmarkShareWatch is what a root run with a writable share adds: the watch's start before the
// command and its stop after, with one file written through the share.
func BenchmarkShareWatch(b *testing.B) {
	testutil.RequireRoot(b, "fanotify filesystem marks")
	dir := b.TempDir()
	for b.Loop() {
		w, err := StartShareWatch(ShareWatchOptions{Shares: []WatchedShare{{Host: dir, Sandbox: "/s"}}, InitPid: os.Getpid()})
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
		if sc := w.Stop(nil); len(sc.Created)+len(sc.Modified) != 1 {
			b.Fatalf("changes %+v", sc)
		}
	}
}

// TestShareWatchRemovedDirs: changes in directories removed before their events are read are placed by
// the removal's own event, below the share or outside it, by a process gone or not.
func TestShareWatchRemovedDirs(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	for _, in := range []bool{true, false} {
		for _, d := range []string{dir, outside} {
			os.MkdirAll(filepath.Join(d, "old/sub"), 0o755)
			write(t, filepath.Join(d, "old/sub/f"), "x")
		}
		w := startWatch(t, dir, ShareWatchOptions{})
		w.mu.Lock() // everything below is gone before it is read
		err := exec.Command("/bin/sh", "-c", "rm -r $0/old && mkdir -p $0/tmp/x && echo > $0/tmp/x/y && rm -r $0/tmp && rm -r $1/old", dir, outside).Run()
		w.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		sc := w.Stop(func(int, uint64, uint64) bool { return in })
		want := []string{}
		if in {
			want = []string{"/s/old/sub/f:file", "/s/old/sub:dir", "/s/old:dir"}
			slices.Sort(want)
		}
		if got := changePaths(sc.Deleted); !slices.Equal(got, want) || len(sc.Problems) > 0 || len(sc.Created) > 0 {
			t.Errorf("the sandbox's %v: deleted %q, created %q, problems %q; want deleted %q", in, got, changePaths(sc.Created), sc.Problems, want)
		}
	}
}

// TestShareWatchFinalPlace: an entry changed in a directory that was renamed meanwhile is listed where
// it is at the end: a hook written while .git was moved away is .git/hooks/pre-commit.
func TestShareWatchFinalPlace(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, ".git/hooks"), 0o755)
	w := startWatch(t, dir, ShareWatchOptions{})
	os.Rename(filepath.Join(dir, ".git"), filepath.Join(dir, "x"))
	write(t, filepath.Join(dir, "x/hooks/pre-commit"), "#!/bin/sh\n")
	seen := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return slices.ContainsFunc(w.ops, func(op shareOp) bool { return op.rel == "x/hooks/pre-commit" })
	}
	for deadline := time.Now().Add(testutil.Scaled(5 * time.Second)); time.Now().Before(deadline) && !seen(); {
		time.Sleep(10 * time.Millisecond)
	}
	if !seen() {
		t.Fatal("the hook's event was not read under the directory's passing name")
	}
	os.Rename(filepath.Join(dir, "x"), filepath.Join(dir, ".git"))
	sc := w.Stop(nil)
	if got := changePaths(sc.Created); !slices.Equal(got, []string{"/s/.git/hooks/pre-commit:file"}) || len(sc.Problems) > 0 {
		t.Errorf("created %q, problems %q; want the hook where it ended", got, sc.Problems)
	}
	if got := changePaths(sc.Modified); !slices.Equal(got, []string{"/s/.git:dir"}) {
		t.Errorf("modified %q, want .git (moved away and back)", got)
	}
}

// TestPidfdsArePidfs: on this kernel (6.18) pidfds have an inode per process, which the watch keeps
// its verdicts by.
func TestPidfdsArePidfs(t *testing.T) {
	if !kernelAtLeast(6, 9) {
		t.Skip("pidfs came with Linux 6.9")
	}
	if !pidfdsArePidfs() {
		t.Error("pidfds are not in pidfs: the watch asks the pid namespace of every event's process")
	}
}

// TestPidfdNSIoctl: from Linux 6.11 a pidfd answers PIDFD_GET_PID_NAMESPACE, which the watch asks;
// before, it opens the namespace through /proc.
func TestPidfdNSIoctl(t *testing.T) {
	if !pidfdNSIoctl() {
		if kernelAtLeast(6, 11) {
			t.Fatal("no PIDFD_GET_PID_NAMESPACE on a kernel of 6.11 or later")
		}
		t.Skip("PIDFD_GET_PID_NAMESPACE came with Linux 6.11: the watch uses /proc (TestPidNSByProc)")
	}
}

// TestPidNSByProc: the /proc path opens the pid namespace of the pidfd's process, the very one
// /proc/PID/ns/pid names (and the ioctl's, where the kernel has it), and refuses a process reaped.
func TestPidNSByProc(t *testing.T) {
	testutil.RequireRoot(t, "a pid namespace of its own for the child")
	child := exec.Command("/bin/sleep", "600")
	child.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pidfd, err := unix.PidfdOpen(child.Process.Pid, 0)
	if err != nil {
		child.Process.Kill()
		child.Wait()
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	want, err := nsOf(fmt.Sprintf("/proc/%d/ns/pid", child.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	self, _ := nsOf("/proc/self/ns/pid")
	for _, how := range []string{"proc", "pidfd ioctl"} {
		get := pidNSByProc
		if how == "pidfd ioctl" {
			if !pidfdNSIoctl() {
				continue
			}
			get = func(fd int) (int, error) { return unix.IoctlRetInt(fd, pidfdGetPidNamespace) }
		}
		ns, err := get(pidfd)
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(ns, &st)
		unix.Close(ns)
		if got := (nsID{st.Dev, st.Ino}); err != nil || got != want || got == self {
			t.Errorf("%s: namespace %v (%v), want the child's %v (not ours %v)", how, got, err, want, self)
		}
	}
	child.Process.Kill()
	child.Wait()
	if ns, err := pidNSByProc(pidfd); err == nil {
		unix.Close(ns)
		t.Error("the namespace of a reaped process was opened")
	}
}

// TestShareWatchHostExcluded: with the sandbox's init in a pid namespace of its own, what a host process
// (the test) changes is told the host's and not listed, whichever way the namespaces are asked.
func TestShareWatchHostExcluded(t *testing.T) {
	testutil.RequireRoot(t, "fanotify filesystem marks, pid namespaces")
	s := startVictim(t, victimEnv+"=bench-init", countEnv+"=1")
	for _, how := range pidNSPaths(t) {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			w := startWatch(t, dir, ShareWatchOptions{InitPid: s.init.Process.Pid})
			if how == "proc" {
				viaProc(w)
			}
			write(t, filepath.Join(dir, "host"), "h")
			sc := w.Stop(nil)
			if len(sc.Created)+len(sc.Modified) > 0 || len(sc.Problems) > 0 || sc.Unsettled > 0 {
				t.Errorf("created %q, modified %q, problems %q, unsettled %d; want nothing", changePaths(sc.Created), changePaths(sc.Modified), sc.Problems, sc.Unsettled)
			}
		})
	}
}

// TestShareWatchRemovalRace: a directory removed while its event's handle is being placed is never
// placed under the kernel's " (deleted)" mark as if that were its name.
func TestShareWatchRemovalRace(t *testing.T) {
	dir := t.TempDir()
	for i := range 300 {
		os.Mkdir(filepath.Join(dir, fmt.Sprint("d", i)), 0o755)
		write(t, filepath.Join(dir, fmt.Sprint("d", i), "f"), "x")
	}
	w := startWatch(t, dir, ShareWatchOptions{})
	for i := range 300 {
		os.Remove(filepath.Join(dir, fmt.Sprint("d", i), "f"))
		os.Remove(filepath.Join(dir, fmt.Sprint("d", i)))
	}
	sc := w.Stop(nil)
	for _, c := range sc.Deleted {
		if strings.Contains(c.Path, "(deleted)") {
			t.Fatalf("deleted %s", c.Path)
		}
	}
	if len(sc.Deleted) != 600 || len(sc.Problems) > 0 {
		t.Errorf("deleted %d, problems %q; want 600", len(sc.Deleted), sc.Problems)
	}
}

// TestInTree: when a pid belonged to the sandbox's fork tree, from the exec stream's log.
func TestInTree(t *testing.T) {
	const init, host = 100, 1
	e := &Events{log: []event{
		{what: procEventFork, ts: 10, pid: 200, parent: init}, // the command
		{what: procEventFork, ts: 20, pid: 300, parent: 200},  // its child
		{what: procEventExit, ts: 30, pid: 300},               // gone
		{what: procEventFork, ts: 40, pid: 300, parent: host}, // the pid, reused by the host
		{what: procEventFork, ts: 50, pid: 400, parent: 300},  // a host process's child
		{what: procEventExit, ts: 60, pid: 200, leader: true}, // a leader's exit: its threads run on
		{what: procEventFork, ts: 70, pid: 500, parent: 200},  // forked by such a thread
		{what: procEventFork, ts: 90, pid: 600, parent: init}, // init's child
		{what: procEventExit, ts: 95, pid: 600},               // gone
	}}
	in := e.InTree([]int{init, 200})
	for _, c := range []struct {
		pid      int
		from, to uint64
		want     bool
	}{
		{init, 0, 1, true}, // a root not seen forked: all along
		{200, 0, 5, false}, // a root seen forked: from its fork on
		{200, 5, 15, true},
		{300, 15, 25, true}, // alive in the tree
		{300, 31, 39, false},
		{300, 41, 45, false}, // the host's now
		{300, 25, 45, true},  // the window reaches back into the tree's time
		{400, 0, 100, false},
		{500, 75, 76, true},
		{600, 91, 94, true},
		{600, 96, 99, false},
		{7, 0, 100, false},
	} {
		if got := in(c.pid, c.from, c.to); got != c.want {
			t.Errorf("pid %d in [%d, %d]: %v, want %v", c.pid, c.from, c.to, got, c.want)
		}
	}
}
