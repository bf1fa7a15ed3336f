package sandbox

import (
	"bytes"
	"os"
	"testing"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sbx-dev/sbx/policy"
)

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

func TestSmoke(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: creates namespaces, cgroups and mounts")
	}
	cwd, _ := os.Getwd()
	var out, errb bytes.Buffer
	sb, err := Create(Config{Plan: testPlan(t), Command: Command{
		Args: []string{"sh", "-c", "echo hi; id; ls -l /proc/self/ns; ls /root /tmp; cat /proc/self/status | grep -i cap; echo x > /usr/x; echo $?; pwd"},
		Cwd:  cwd, Stdout: &out, Stderr: &errb,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sb.Destroy(); err != nil {
			t.Error(err)
		}
	}()
	r, err := sb.Start()
	if err != nil {
		t.Fatal(err)
	}
	code, err := r.Wait()
	t.Logf("code=%d err=%v\nstdout:\n%s\nstderr:\n%s", code, err, out.String(), errb.String())
}
