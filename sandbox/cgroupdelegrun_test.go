package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/sandbox/cgroup"
	"github.com/sbx-dev/sbx/sandbox/state"
)

// delegChildEnv starts TestDelegatedChild's checks: the test binary runs them as an ordinary user in a
// delegated cgroup, with the state root the variable names. delegCrashEnv makes it a run that its
// parent kills (the crashed run gc must clean up).
const (
	delegChildEnv = "SBX_TEST_DELEG_STATE"
	delegCrashEnv = "SBX_TEST_DELEG_CRASH"
)

// needDelegation is the requirement the delegated-cgroup tests skip on.
const needDelegation = "needs cgroup v2 with a cgroup delegated to the test user"

// TestDelegatedRun runs sandboxes without root in a cgroup delegated to the test's user, for real:
// the OOM kill and the pids limit are reported from the run's cgroup, a process left running is found
// through its freezer, limits.enforced says cgroup, and neither a run nor a crashed one (after gc)
// leaves its cgroup behind.
//
// Run by an ordinary user in a delegated cgroup (a `systemd-run --user --scope` of a systemd login),
// it checks that cgroup. Run as root on a cgroup v2 host, it delegates one itself, as systemd does for
// a Delegate=yes unit (a cgroup whose directory, cgroup.procs, cgroup.subtree_control and
// cgroup.threads belong to the user), to a user it adds, and runs the checks as that user there.
func TestDelegatedRun(t *testing.T) {
	if os.Geteuid() != 0 {
		if d, why := cgroup.Detect(); d == nil {
			t.Skipf("%s (%s)", needDelegation, why)
		}
		state := testutil.StateRoot(t)
		t.Setenv(delegChildEnv, state)
		delegatedChecks(t, state)
		return
	}
	var st unix.Statfs_t
	if unix.Statfs(cgroup.Root, &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Skipf("%s (this host has no cgroup v2 at %s)", needDelegation, cgroup.Root)
	}
	if on, _ := os.ReadFile(filepath.Join(cgroup.Root, "cgroup.subtree_control")); !slices.Contains(strings.Fields(string(on)), "memory") || !slices.Contains(strings.Fields(string(on)), "pids") {
		t.Skipf("%s (the root cgroup enables no memory and pids controllers for its children: %q)", needDelegation, on)
	}
	for _, tool := range []string{"useradd", "userdel", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s: %s is missing", needDelegation, tool)
		}
	}
	name := fmt.Sprintf("sbxd%d", os.Getpid()%100000)
	if out, err := exec.Command("useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() { // after removeCgroupTree, which kills whatever the user's checks left
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel: %v: %s", err, out)
		}
	})
	uid, gid := userIDs(t, name)

	// The delegated cgroup, below the root one as systemd's user@UID.service is below its slices.
	deleg := filepath.Join(cgroup.Root, fmt.Sprintf("sbxtest-deleg-%d", os.Getpid()))
	if err := os.Mkdir(deleg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupTree(t, deleg) })
	for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
		if err := os.Chown(filepath.Join(deleg, f), uid, gid); err != nil {
			t.Fatal(err)
		}
	}

	// The test binary, where the user can run it; the user's state root.
	bin := copyTestBinary(t)
	state := testutil.StateRoot(t)
	if err := os.Chown(state, uid, gid); err != nil {
		t.Fatal(err)
	}
	// A shell of root's joins the cgroup and becomes the user there: the user's process starts in it.
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && shift && exec "$@"`, "sh", deleg,
		"setpriv", "--reuid="+strconv.Itoa(uid), "--regid="+strconv.Itoa(gid), "--clear-groups",
		"env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME="+state, delegChildEnv+"="+state,
		bin, "-test.run=^TestDelegatedChild$", "-test.count=1", "-test.v")
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	t.Logf("as %s (uid %d) in %s:\n%s", name, uid, deleg, out)
	if err != nil {
		t.Fatalf("the checks as %s: %v", name, err)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestDelegatedChild")) {
		t.Fatalf("the checks as %s did not pass", name)
	}
	// The first run moved the user's process into the leaf and enabled the controllers.
	if on, _ := os.ReadFile(filepath.Join(deleg, "cgroup.subtree_control")); !bytes.Contains(on, []byte("memory")) || !bytes.Contains(on, []byte("pids")) {
		t.Errorf("%s/cgroup.subtree_control %q after the runs; want memory and pids", deleg, on)
	}
	if left := runCgroupsIn(deleg); len(left) > 0 {
		t.Errorf("runs' cgroups left in %s: %v", deleg, left)
	}
}

// TestDelegatedChild is TestDelegatedRun's checks, as the ordinary user (delegChildEnv names the
// state root); it is skipped in any other run of the tests.
func TestDelegatedChild(t *testing.T) {
	state := os.Getenv(delegChildEnv)
	if state == "" {
		t.Skip("run by TestDelegatedRun")
	}
	if os.Getenv(delegCrashEnv) == "1" {
		crashingRun(t, state)
		return
	}
	delegatedChecks(t, state)
}

// delegatedChecks are the checks of TestDelegatedRun, made by an ordinary user in a delegated cgroup.
func delegatedChecks(t *testing.T, root string) {
	d, why := cgroup.Detect()
	if d == nil {
		t.Fatalf("no delegated cgroup: %s", why)
	}
	t.Logf("delegated: %s (%s)", d.Dir(), strings.Join(d.Controllers(), " "))
	if !d.Has("memory") || !d.Has("pids") {
		t.Skipf("%s with memory and pids controllers (%s has %v)", needDelegation, d.Dir(), d.Controllers())
	}
	run := func(t *testing.T, mod func(*Config), args ...string) (*Sandbox, int, string) {
		t.Helper()
		plan := testPlan(t)
		plan.Limits.MemoryBytes, plan.Limits.Pids = 0, 0
		var out bytes.Buffer
		cfg := Config{Plan: plan, StateRoot: root, Command: Command{Args: args, Cwd: "/", Stdout: &out, Stderr: &out}}
		if mod != nil {
			mod(&cfg)
		}
		sb, err := Create(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if sb.deleg == nil || sb.cgroups == nil {
			sb.Destroy()
			t.Fatalf("the sandbox has no cgroup below %s", d.Dir())
		}
		r, err := sb.Start()
		if err != nil {
			sb.Destroy()
			t.Fatal(err)
		}
		code, err := r.Wait()
		if err != nil {
			sb.Destroy()
			t.Fatal(err)
		}
		return sb, code, out.String()
	}
	destroy := func(t *testing.T, sb *Sandbox) {
		t.Helper()
		dir := d.RunDir(sb.ID)
		if err := sb.Destroy(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s left after Destroy", dir)
		}
	}

	t.Run("memory", func(t *testing.T) {
		if _, err := exec.LookPath("python3"); err != nil {
			t.Skip("no python3")
		}
		sb, code, out := run(t, func(c *Config) { c.Plan.Limits.MemoryBytes = 64 << 20 }, "python3", "-c", "b = bytearray(320 << 20)")
		defer destroy(t, sb)
		if hits := sb.LimitHits(); code != 128+int(syscall.SIGKILL) || hits.OOMKills == 0 {
			t.Errorf("exit %d, %d OOM kills (%s); want 137 and the kill counted", code, hits.OOMKills, out)
		}
		if max, _ := os.ReadFile(filepath.Join(d.RunDir(sb.ID), "memory.max")); strings.TrimSpace(string(max)) != strconv.Itoa(64<<20) {
			t.Errorf("memory.max %q", max)
		}
		if by := enforcedBy(sb, "memory"); by != "cgroup" {
			t.Errorf("memory enforced by %q", by)
		}
	})
	t.Run("pids", func(t *testing.T) {
		sb, _, out := run(t, func(c *Config) { c.Plan.Limits.Pids = 20 },
			"sh", "-c", "i=0; while [ $i -lt 80 ]; do sleep 2 & i=$((i+1)); done; wait")
		defer destroy(t, sb)
		if hits := sb.LimitHits(); hits.PidsMax == 0 {
			t.Errorf("no refused fork counted (%s)", out)
		}
		if by := enforcedBy(sb, "pids"); by != "cgroup" {
			t.Errorf("pids enforced by %q", by)
		}
		for _, r := range sb.rootlessRlimits() {
			if r.Type == "RLIMIT_NPROC" {
				t.Errorf("RLIMIT_NPROC %d set beside the cgroup's pids.max", r.Hard)
			}
		}
	})
	t.Run("freezer", func(t *testing.T) {
		sb, code, out := run(t, nil, "sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!")
		defer destroy(t, sb)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, out)
		}
		if sb.OnlyInit() {
			t.Fatal("only the init left, with sleep running")
		}
		if err := sb.Freeze(); err != nil {
			t.Fatal(err)
		}
		if ev, _ := os.ReadFile(filepath.Join(d.RunDir(sb.ID), "cgroup.events")); !bytes.Contains(ev, []byte("frozen 1")) {
			t.Errorf("cgroup.events after Freeze: %q", ev)
		}
		pids, err := sb.Pids()
		if err != nil {
			t.Fatal(err)
		}
		sleeping := slices.ContainsFunc(pids, func(pid int) bool {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			return strings.TrimSpace(string(comm)) == "sleep"
		})
		tasks, err := sb.Tasks()
		if !sleeping || err != nil || len(tasks) <= 1 {
			t.Errorf("pids %v (sleep among them: %v), tasks %v (%v)", pids, sleeping, tasks, err)
		}
	})
	t.Run("gc of a crashed run", func(t *testing.T) {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(self, "-test.run=^TestDelegatedChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), delegCrashEnv+"=1")
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		id, ok := strings.CutPrefix(strings.TrimSpace(line), "running ")
		cmd.Process.Kill()
		cmd.Wait()
		if err != nil || !ok {
			t.Fatalf("the crashing run said %q (%v)", line, err)
		}
		dir := d.RunDir(id)
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("the crashed run's cgroup is not there to clean up: %v", err)
		}
		res, err := state.GC(root)
		if err != nil {
			t.Errorf("gc: %v", err)
		}
		if !slices.Contains(res.Runs, id) {
			t.Errorf("gc cleaned %v, not %s", res.Runs, id)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s left after gc", dir)
		}
	})
	if left := runCgroupsIn(d.Dir()); len(left) > 0 {
		t.Errorf("runs' cgroups left in %s: %v", d.Dir(), left)
	}
}

// crashingRun starts a sandbox whose command runs on, says "running ID" and waits to be killed.
func crashingRun(t *testing.T, state string) {
	plan := testPlan(t)
	sb, err := Create(Config{Plan: plan, StateRoot: state, Command: Command{Args: []string{"sleep", "600"}, Cwd: "/"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("running %s\n", sb.ID)
	time.Sleep(10 * time.Minute)
}

// enforcedBy is what holds limit in sb ("" when the plan sets none).
func enforcedBy(sb *Sandbox, limit string) string {
	for _, e := range sb.Enforced() {
		if e.Limit == limit {
			return e.By
		}
	}
	return ""
}

// runCgroupsIn lists the runs' cgroups (sbx-*) in dir.
func runCgroupsIn(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "sbx-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// removeCgroupTree kills what is left in a test's cgroup tree and removes it, children first.
func removeCgroupTree(t *testing.T, top string) {
	var dirs []string
	filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if len(dirs) == 0 {
		return
	}
	os.WriteFile(filepath.Join(top, "cgroup.kill"), []byte("1"), 0)
	for i := len(dirs) - 1; i >= 0; i-- {
		var err error
		for range 100 {
			if err = os.Remove(dirs[i]); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("removing the test's cgroup: %v", err)
		}
	}
}

// userIDs are the uid and gid of user name.
func userIDs(t *testing.T, name string) (int, int) {
	id := func(flag string) int {
		out, err := exec.Command("id", flag, name).Output()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		return n
	}
	return id("-u"), id("-g")
}

// copyTestBinary copies the test binary where every user can run it (go test's build dir is root's
// alone), with sbx-init beside it when the test binary has one.
func copyTestBinary(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sbx-deleg-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(self))
	for _, f := range []struct{ from, to string }{{self, bin}, {filepath.Join(filepath.Dir(self), InitName), filepath.Join(dir, InitName)}} {
		data, err := os.ReadFile(f.from)
		if err != nil {
			if f.from != self {
				continue
			}
			t.Fatal(err)
		}
		if err := os.WriteFile(f.to, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}
