package sandbox

import (
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sbx-dev/sbx/policy"
)

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
