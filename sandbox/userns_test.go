package sandbox

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
)

// TestUserNamespace: on the host, the sandbox's pid 1 runs as the namespace root's unprivileged uid,
// never root, then as its own, and the command as its own uid; the command writes its root-owned working tree through
// the idmapped lower layer while no file of the host or of the layer is chowned.
func TestUserNamespace(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "f"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := testPlan(t)
	plan.UID, plan.GID = 4242, 4242
	var out, errb bytes.Buffer
	sb, err := Create(Config{Plan: plan, StateRoot: testutil.StateRoot(t), Command: Command{
		// The sleep keeps the command alive while its host uid is read.
		Args: []string{"sh", "-c", "sleep 0.3; echo y >> f && stat -c %u:%g f . && id -u"}, Cwd: cwd, Stdout: &out, Stderr: &errb,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy()
	if uid := hostUID(t, sb.InitPid()); uid != sb.ids.RootUID || uid == 0 {
		t.Errorf("the supervisor runs as host uid %d, want the namespace root's %d (not 0)", uid, sb.ids.RootUID)
	}
	r, err := sb.Start()
	if err != nil {
		t.Fatal(err)
	}
	if r.Pid <= 0 {
		t.Errorf("the command's host pid is unknown (%d)", r.Pid)
	} else if uid := hostUID(t, r.Pid); uid != 4242 {
		t.Errorf("the command runs as host uid %d, want 4242", uid)
	}
	// Once the sandbox is built, the supervisor has ids of its own, neither the namespace root's nor the
	// command's (supervisorID).
	if uid := hostUID(t, sb.InitPid()); uid != sb.ids.SupUID || uid == sb.ids.RootUID || uid == 4242 {
		t.Errorf("with the command running, the supervisor runs as host uid %d, want its own %d", uid, sb.ids.SupUID)
	}
	if code, err := r.Wait(); code != 0 || err != nil {
		t.Fatalf("status %d (%v); stderr %q", code, err, errb.String())
	}
	if err := sb.Destroy(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "4242:4242\n4242:4242\n4242\n" {
		t.Errorf("inside: %q, want the tree and the edited file owned by 4242", got)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(cwd, "f"), &st); err != nil || st.Uid != 0 {
		t.Errorf("the host's file: owner %d (%v), want 0", st.Uid, err)
	}
	if b, _ := os.ReadFile(filepath.Join(cwd, "f")); string(b) != "x\n" {
		t.Errorf("the host's file was written: %q", b)
	}
}

// hostUID is the real uid of pid on the host.
func hostUID(t *testing.T, pid int) int {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f, ok := strings.CutPrefix(line, "Uid:"); ok {
			uid, _ := strconv.Atoi(strings.Fields(f)[0])
			return uid
		}
	}
	t.Fatalf("no Uid line for pid %d", pid)
	return -1
}

// TestShareBelowHidden: a share whose mount point lies in a hidden directory only root may enter (/root)
// is mounted: libcontainer runs as the sandbox's root, an unprivileged uid, so sbx prepares the mount
// point and opens the way in the overlay.
func TestShareBelowHidden(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	dir, err := os.MkdirTemp("/root", ".sbx-share-test-")
	if err != nil {
		t.Skipf("cannot make a directory in /root: %v", err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("shared\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := testPlan(t)
	plan.UID, plan.GID = 65534, 65534
	plan.Filesystem.Shares = []policy.Share{{Host: dir, Sandbox: dir}}
	plan.Filesystem.Read = append(plan.Filesystem.Read, dir)
	code, out, stderr := runPlan(t, plan, t.TempDir(), "cat", filepath.Join(dir, "f"))
	if code != 0 || out != "shared\n" {
		t.Errorf("status %d, stdout %q, stderr %q; want the shared file", code, out, stderr)
	}
}

// TestPidfdPid: the pid a pidfd's fdinfo names, and -1 once its process was reaped (its pid may then be
// reused: Start falls back to a search rather than trust it).
func TestPidfdPid(t *testing.T) {
	cmd := exec.Command("true")
	pidfd := -1
	cmd.SysProcAttr = &syscall.SysProcAttr{PidFD: &pidfd}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if got := pidfdPid(pidfd); got != cmd.Process.Pid {
		t.Errorf("pidfdPid of a started child = %d, want %d", got, cmd.Process.Pid)
	}
	cmd.Wait()
	if got := pidfdPid(pidfd); got != -1 {
		t.Errorf("pidfdPid of a reaped child = %d, want -1", got)
	}
}

// TestSupervisorIDs: the supervisor's own ids are mapped beside the namespace root's and the command's,
// and are never the command's, inside or on the host, whatever uid the profile gives it (root's
// subordinate range starting at 100000 here).
func TestSupervisorIDs(t *testing.T) {
	const root = 100000
	for _, uid := range []int{0, 65534, 1000, root + 1, root + 2} {
		m := IDMap{RootUID: root, RootGID: root, UID: uid, GID: uid, HostUID: uid, HostGID: uid}
		if uid == 0 {
			m.HostUID, m.HostGID = root, root
		}
		m.SupUID, m.SupGID = supervisorID(m.RootUID, m.UID), supervisorID(m.RootGID, m.GID)
		if m.SupUID == 0 || m.SupUID == m.UID || m.SupUID == m.HostUID || m.SupUID == m.RootUID {
			t.Errorf("uid %d: the supervisor's uid %d is one the command has", uid, m.SupUID)
		}
		uids, _ := m.mappings()
		inside, host := map[uint32]bool{}, map[uint32]bool{}
		for _, e := range uids {
			if inside[e.ContainerID] || host[e.HostID] {
				t.Errorf("uid %d: overlapping uid map %v", uid, uids)
			}
			inside[e.ContainerID], host[e.HostID] = true, true
		}
		if !inside[uint32(m.SupUID)] || !host[uint32(m.SupUID)] {
			t.Errorf("uid %d: uid map %v does not map the supervisor's %d", uid, uids, m.SupUID)
		}
	}
}
