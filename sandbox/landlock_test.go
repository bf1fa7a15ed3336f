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
