package sandbox

// Helpers of the package's tests: a plan built by hand and a run of one command under it.

import (
	"bytes"
	"testing"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
)

// testPlan is a plan built by hand, so that these tests do not depend on the profile parser.
func testPlan(t *testing.T) *policy.Plan {
	sc, err := seccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		t.Fatal(err)
	}
	return &policy.Plan{
		Profile: "test",
		Seccomp: sc,
		Env:     []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"},
		Filesystem: policy.Filesystem{
			Read: []string{"/"}, Write: []string{"/tmp", "/var/tmp"}, WriteCwd: true,
			Hidden: []string{"/root", "/home", "/run", "/tmp", "/var/tmp", "/etc/shadow"},
		},
		Limits: policy.Limits{MemoryBytes: 512 << 20, Pids: 256},
	}
}

// runPlan runs args in cwd in a sandbox built from plan and returns the status, stdout and stderr.
func runPlan(t *testing.T, plan *policy.Plan, cwd string, args ...string) (int, string, string) {
	t.Helper()
	return runPlanWith(t, plan, "", cwd, args...)
}

// runPlanWith is runPlan with a given supervisor binary ("" = the default choice).
func runPlanWith(t *testing.T, plan *policy.Plan, init, cwd string, args ...string) (int, string, string) {
	t.Helper()
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	return runPlanIn(t, plan, testutil.StateRoot(t), init, cwd, args...)
}

// runPlanIn is runPlanWith in a given state root.
func runPlanIn(t *testing.T, plan *policy.Plan, stateRoot, init, cwd string, args ...string) (int, string, string) {
	t.Helper()
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	var out, errb bytes.Buffer
	sb, err := Create(Config{Plan: plan, StateRoot: stateRoot, InitBinary: init, Command: Command{
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
