package sandbox

import (
	"bytes"
	"os"
	"strings"
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

// TestSandboxBasics: a command sees its own namespaces, an empty /root and /tmp, no capabilities, and
// cannot write under /usr (Landlock), while its working directory is the caller's.
func TestSandboxBasics(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates namespaces, cgroups and mounts")
	}
	hostNet, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	cwd, _ := os.Getwd()
	var out, errb bytes.Buffer
	sb, err := Create(Config{Plan: testPlan(t), StateRoot: t.TempDir(), Command: Command{
		Args: []string{"sh", "-c", `readlink /proc/self/ns/net; ls -A /root | wc -l; grep CapEff /proc/self/status;
			echo x > /usr/sbx-basics 2>/dev/null && echo wrote-usr; pwd`},
		Cwd: cwd, Stdout: &out, Stderr: &errb,
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
	if derr := sb.Destroy(); derr != nil {
		t.Error(derr)
	}
	if err != nil || code != 0 {
		t.Fatalf("status %d, %v; stderr %q", code, err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"!" + hostNet, "0", "CapEff:\t0000000000000000", cwd}
	if len(lines) != len(want) {
		t.Fatalf("output %q, want %d lines (a write to /usr must fail)", out.String(), len(want))
	}
	if lines[0] == hostNet {
		t.Errorf("net namespace %s is the host's", lines[0])
	}
	for i, w := range want[1:] {
		if lines[i+1] != w {
			t.Errorf("line %d = %q, want %q", i+2, lines[i+1], w)
		}
	}
	if _, err := os.Stat("/usr/sbx-basics"); err == nil {
		t.Error("the write reached the host's /usr")
	}
}
