package sandbox

// Tests of the direct start (direct.go and the supervisor's setup.go): what libcontainer's init
// guaranteed holds when the supervisor builds the sandbox itself. Each runs both ways where the old
// path is the reference (SBX_LIBCONTAINER=1).

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox/cgroup"
	"github.com/sbx-dev/sbx/sandbox/state"
)

// bothStarts runs f as a subtest with the direct start and with libcontainer's init.
func bothStarts(t *testing.T, f func(t *testing.T)) {
	for _, lc := range []string{"", "1"} {
		name := "direct"
		if lc != "" {
			name = "libcontainer"
		}
		t.Run(name, func(t *testing.T) {
			t.Setenv(directEnv, lc)
			f(t)
		})
	}
}

// hostMountsBelow lists the mount points of the host's mount namespace strictly below dir.
func hostMountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	return out
}

// TestDirectMountsStayInside: on a host whose mounts are shared (systemd makes / shared; here a tmpfs
// made shared stands for it), what the supervisor mounts onto a share (a nested share, sbx's own
// /etc/hosts over a shared /etc) stays in the sandbox: nothing propagates to the host's mount
// namespace, during the run or after it.
func TestDirectMountsStayInside(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	bothStarts(t, func(t *testing.T) {
		fs := filepath.Join(t.TempDir(), "shared")
		if err := os.Mkdir(fs, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", fs, "tmpfs", 0, "size=8m,mode=755"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, m := range hostMountsBelow(t, fs) {
				unix.Unmount(m, unix.MNT_DETACH)
			}
			unix.Unmount(fs, unix.MNT_DETACH)
		})
		if err := unix.Mount("", fs, "", unix.MS_SHARED, ""); err != nil {
			t.Fatal(err)
		}
		work, etc, data := filepath.Join(fs, "work"), filepath.Join(fs, "etc"), filepath.Join(t.TempDir(), "data")
		for _, d := range []string{filepath.Join(work, "sub"), etc, data} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []string{filepath.Join(etc, "hosts"), filepath.Join(data, "f")} {
			if err := os.WriteFile(f, []byte("host's\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		plan := testPlan(t)
		plan.Filesystem.Shares = []policy.Share{{Host: work, Sandbox: work, Writable: true},
			{Host: data, Sandbox: filepath.Join(work, "sub")}, {Host: etc, Sandbox: "/etc"}}
		code, out, stderr := runPlan(t, plan, t.TempDir(), "sh", "-c",
			`cat `+filepath.Join(work, "sub", "f")+`; grep -c sbx /etc/hosts; cat /proc/1/mountinfo >/dev/null`)
		if code != 0 || out != "host's\n1\n" {
			t.Errorf("status %d, stdout %q, stderr %q; want the nested share's file and sbx's /etc/hosts", code, out, stderr)
		}
		if got := hostMountsBelow(t, fs); len(got) > 0 {
			t.Errorf("the sandbox's mounts reached the host: %q", got)
		}
		if data, _ := os.ReadFile(filepath.Join(etc, "hosts")); string(data) != "host's\n" {
			t.Errorf("the host's hosts file reads %q", data)
		}
	})
}

// TestDirectShareBelowClosedDir: a shared directory below one only the host's root may search (/root
// is 0700), onto a mount point the sandbox lacks, is mounted as a directory: its kind is that of what
// sbx opened with the host root's rights, not what the supervisor, unprivileged on the host, can see
// of the host path.
func TestDirectShareBelowClosedDir(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	bothStarts(t, func(t *testing.T) {
		closed := filepath.Join(t.TempDir(), "closed")
		dir := filepath.Join(closed, "d")
		if err := os.Mkdir(closed, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("shared\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		plan := testPlan(t)
		plan.UID, plan.GID = 65534, 65534
		plan.Filesystem.Shares = []policy.Share{{Host: dir, Sandbox: "/var/tmp/share"}}
		// /var/tmp as the host has it (1777, without the mount point), not hidden: an empty directory
		// sbx makes, with the mount point in it.
		plan.Filesystem.Hidden = slices.DeleteFunc(plan.Filesystem.Hidden, func(p string) bool { return p == "/var/tmp" })
		code, out, stderr := runPlan(t, plan, t.TempDir(), "cat", "/var/tmp/share/f")
		if code != 0 || out != "shared\n" {
			t.Errorf("status %d, stdout %q, stderr %q; want the shared file", code, out, stderr)
		}
	})
}

// TestInitPathTaken: the supervisor's path inside the sandbox (/dev/.sbx-init), whose execs the
// report leaves out as the supervisor's own, is taken (the supervisor's binary, read-only) even where
// the command may write /dev as root: a program copied there would run with its execs unseen.
func TestInitPathTaken(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	bothStarts(t, func(t *testing.T) {
		plan := testPlan(t)
		plan.UID, plan.GID = 0, 0
		plan.Filesystem.Write = append(plan.Filesystem.Write, "/dev")
		_, out, stderr := runPlan(t, plan, t.TempDir(), "sh", "-c",
			`cp /bin/echo `+initPath+` || rm -f `+initPath+` && cp /bin/echo `+initPath+` && `+initPath+` planted`)
		if strings.Contains(out, "planted") {
			t.Errorf("the command ran its own program as %s (stderr %q)", initPath, stderr)
		}
	})
}

// TestDirectNoPidfd: a supervisor whose pidfd could not be opened is killed all the same when the
// failed sandbox is torn down: Create returns the error, instead of waiting for good on a supervisor
// that waits for its setup.
func TestDirectNoPidfd(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	t.Setenv(directEnv, "")
	defer func(f func(int, int) (int, error)) { pidfdOpen = f }(pidfdOpen)
	pidfdOpen = func(int, int) (int, error) { return -1, unix.EMFILE }
	cfg := Config{Plan: testPlan(t), StateRoot: testutil.StateRoot(t), Command: Command{Args: []string{"true"}, Cwd: t.TempDir()}}
	done := make(chan error, 1)
	go func() {
		sb, err := Create(cfg)
		if err == nil {
			sb.Destroy()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, unix.EMFILE) {
			t.Errorf("Create: %v, want the pidfd's error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Create did not return: the teardown waits for a supervisor it did not kill")
	}
}

// TestNoNewMountAPI: on a kernel without mount_setattr (before Linux 5.12) libcontainer's init builds
// the sandbox, and runs work as before; with it, sbx starts the supervisor itself.
func TestNoNewMountAPI(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	t.Setenv(directEnv, "")
	defer func(f func() bool) { newMountAPI = f }(newMountAPI)
	for _, has := range []bool{true, false} {
		newMountAPI = func() bool { return has }
		var out bytes.Buffer
		sb, err := Create(Config{Plan: testPlan(t), StateRoot: testutil.StateRoot(t), Command: Command{
			Args: []string{"echo", "ran"}, Cwd: t.TempDir(), Stdout: &out, Stderr: io.Discard}})
		if err != nil {
			t.Fatalf("mount API %v: %v", has, err)
		}
		_, direct := sb.container.(*directContainer)
		r, err := sb.Start()
		code := -1
		if err == nil {
			code, err = r.Wait()
		}
		if derr := sb.Destroy(); derr != nil {
			t.Error(derr)
		}
		if err != nil || code != 0 || out.String() != "ran\n" {
			t.Errorf("mount API %v: exit %d, %v, output %q", has, code, err, out.String())
		}
		if direct != has {
			t.Errorf("mount API %v: started directly %v, want %v", has, direct, has)
		}
	}
}

// TestCgroupLeftForGC: a teardown that cannot remove the sandbox's cgroups (here a host process the test
// moved into them, which killing the sandbox does not reach) keeps the run dir, gc's record of the run,
// and lets go of it: gc then removes the cgroups once they are empty. Before, the run dir was removed
// and the cgroups were left with nothing to find them by.
func TestCgroupLeftForGC(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	root := testutil.StateRoot(t)
	sb, err := Create(Config{Plan: testPlan(t), StateRoot: root, Command: Command{
		Args: []string{"true"}, Cwd: t.TempDir(), Stdout: io.Discard, Stderr: io.Discard}})
	if err != nil {
		t.Fatal(err)
	}
	squatter := exec.Command("sleep", "30")
	if err := squatter.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { squatter.Process.Kill(); squatter.Wait() }()
	for _, dir := range cgroup.Dirs(sb.ID) {
		// v1: the pids hierarchy's dir is enough to keep one busy; v2 (unified): the one dir.
		if strings.Contains(dir, "/pids/") || cgroups.IsCgroup2UnifiedMode() {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(squatter.Process.Pid)), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := sb.Destroy(); err == nil {
		t.Fatal("Destroy removed the cgroups of a busy sandbox, want an error")
	}
	if _, err := os.Stat(filepath.Join(state.RunsDir(root), sb.ID)); err != nil {
		t.Fatalf("the run dir is gone (%v): nothing left to find the cgroups by", err)
	}
	squatter.Process.Kill()
	squatter.Wait()
	res, err := state.GC(root)
	if err != nil || !slices.Contains(res.Runs, sb.ID) {
		t.Fatalf("gc: %+v, %v; want run %s removed", res, err, sb.ID)
	}
	if dirs := cgroup.Dirs(sb.ID); len(dirs) != 0 {
		t.Errorf("after gc the cgroups %v are left", dirs)
	}
}
