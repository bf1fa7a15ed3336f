package sandbox

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sbx-dev/sbx/policy"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// runPlan runs args in cwd in a sandbox built from plan and returns the status, stdout and stderr.
func runPlan(t *testing.T, plan *policy.Plan, cwd string, args ...string) (int, string, string) {
	t.Helper()
	return runPlanWith(t, plan, "", cwd, args...)
}

// runPlanWith is runPlan with a given supervisor binary ("" = the default choice).
func runPlanWith(t *testing.T, plan *policy.Plan, init, cwd string, args ...string) (int, string, string) {
	t.Helper()
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	var out, errb bytes.Buffer
	sb, err := Create(Config{Plan: plan, StateRoot: testutil.StateRoot(t), InitBinary: init, Command: Command{
		Args: args, Cwd: cwd, Stdout: &out, Stderr: &errb,
	}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := sb.Start()
	if err != nil {
		sb.Destroy()
		t.Fatal(err)
	}
	code, err := r.Wait()
	// Buffers are filled by libcontainer's copying goroutines, which end with the sandbox.
	if derr := sb.Destroy(); derr != nil {
		t.Error(derr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// TestLandlockFailsClosed: when the seccomp filter answers ENOSYS for Landlock (as a profile could make
// it), the command does not run and sbx says why, unless the profile allows degrading.
func TestLandlockFailsClosed(t *testing.T) {
	enosys := uint(38)
	noLandlock := func(degrade bool) *policy.Plan {
		p := testPlan(t)
		p.Seccomp.Syscalls = append(p.Seccomp.Syscalls, specs.LinuxSyscall{
			Names: []string{"landlock_create_ruleset"}, Action: specs.ActErrno, ErrnoRet: &enosys,
		})
		removeSyscall(p.Seccomp, "landlock_create_ruleset")
		p.Filesystem.LandlockDegrade = degrade
		return p
	}
	code, _, stderr := runPlan(t, noLandlock(false), "/", "sh", "-c", "echo ran")
	if code != ExitSetup {
		t.Errorf("status %d, want %d (stderr %q)", code, ExitSetup, stderr)
	}
	if !strings.Contains(stderr, "sbx: error: landlock: landlock needs ABI 1") || !strings.Contains(stderr, "sbx: hint: ") {
		t.Errorf("stderr %q does not say why and what to do", stderr)
	}
	code, _, stderr = runPlan(t, noLandlock(true), "/", "sh", "-c", "exit 3")
	if code != 3 || !strings.Contains(stderr, "running without Landlock") {
		t.Errorf("degrade: status %d, stderr %q; want 3 and a warning", code, stderr)
	}
}

// removeSyscall takes name out of every rule but the last, which is the one the test added.
func removeSyscall(sc *specs.LinuxSeccomp, name string) {
	for i := range sc.Syscalls[:len(sc.Syscalls)-1] {
		r := &sc.Syscalls[i]
		kept := r.Names[:0:0]
		for _, n := range r.Names {
			if n != name {
				kept = append(kept, n)
			}
		}
		r.Names = kept
	}
}

// TestStaticInit runs sandboxes with the small static supervisor (sbx-init, built here with cgo off) the
// way make build ships it: status, Landlock, the user and fail-closed behave as with sbx itself.
func TestStaticInit(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	bin := filepath.Join(t.TempDir(), InitName)
	build := exec.Command("go", "build", "-o", bin, "github.com/sbx-dev/sbx/internal/cmd/sbx-init")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("cannot build sbx-init here (%v): %s", err, out)
	}
	p := testPlan(t)
	p.UID, p.GID = 65534, 65534
	code, out, stderr := runPlanWith(t, p, bin, "/", "sh", "-c", `id -u; echo x > /usr/sbx-static 2>/dev/null || echo refused; exit 5`)
	if code != 5 || out != "65534\nrefused\n" {
		t.Errorf("status %d, stdout %q, stderr %q; want 5, uid 65534 and a refused write", code, out, stderr)
	}
	code, _, stderr = runPlanWith(t, p, bin, "/", "no-such-command-sbx")
	if code != ExitNotFound || !strings.Contains(stderr, "command not found") {
		t.Errorf("unknown command: status %d, stderr %q", code, stderr)
	}
}

// TestLandlockBindsCommand: the command, and whatever it forks, is held by Landlock where nothing else
// would stop it. The hidden /tmp is an empty directory the command may write by its permissions; left
// out of the write paths, only Landlock refuses the write. The supervisor restricts only the thread it
// starts the command from, so this is what shows the command inherits that thread's domain.
func TestLandlockBindsCommand(t *testing.T) {
	p := testPlan(t)
	p.Filesystem.Write, p.Filesystem.WriteCwd = []string{"/var/tmp"}, false
	// Landlock holds the file system only: binding a TCP port stays the network namespace's business.
	script := `ls -ld /tmp >&2; echo x > /tmp/a && echo wrote-a; sh -c 'echo y > /tmp/b' && echo wrote-b; ` +
		`echo z > /var/tmp/c && echo wrote-c; ` +
		`python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 8765)); s.listen(); print("bound")'`
	code, out, stderr := runPlan(t, p, "/", "sh", "-c", script)
	if strings.Contains(out, "wrote-a") || strings.Contains(out, "wrote-b") {
		t.Errorf("the command wrote outside its write paths: %q (stderr %q)", out, stderr)
	}
	if !strings.Contains(out, "wrote-c") || !strings.Contains(out, "bound") || code != 0 {
		t.Errorf("status %d, stdout %q, stderr %q: want a write to /var/tmp and a TCP port bound", code, out, stderr)
	}
	// The same plan with /tmp writable: the refusal above was Landlock's, not the directory's mode.
	p.Filesystem.Write = []string{"/tmp", "/var/tmp"}
	if _, out, stderr := runPlan(t, p, "/", "sh", "-c", script); !strings.Contains(out, "wrote-a") || !strings.Contains(out, "wrote-b") {
		t.Errorf("with /tmp writable: stdout %q, stderr %q", out, stderr)
	}
}
