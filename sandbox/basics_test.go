package sandbox

import (
	"os"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestSandboxBasics: a command sees its own namespaces, an empty /root and /tmp, no capabilities, and
// cannot write under /usr (Landlock), while its working directory is the caller's.
func TestSandboxBasics(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	hostNet, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	// A scratch directory, not the package's: a checkout below /root would show up in the sandbox's /root.
	cwd := t.TempDir()
	code, out, stderr := runPlan(t, testPlan(t), cwd, "sh", "-c", `readlink /proc/self/ns/net; ls -A /root | wc -l;
		grep CapEff /proc/self/status; echo x > /usr/sbx-basics 2>/dev/null && echo wrote-usr; pwd`)
	if code != 0 {
		t.Fatalf("status %d; stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{"!" + hostNet, "0", "CapEff:\t0000000000000000", cwd}
	if len(lines) != len(want) {
		t.Fatalf("output %q, want %d lines (a write to /usr must fail)", out, len(want))
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
