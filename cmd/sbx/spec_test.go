package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// crunHybrid is crun's refusal of a host whose cgroup v2 mount has controllers while v1 is the main one.
const crunHybrid = "cgroups in hybrid mode not supported"

// TestBundleUnderCrun: Debian's crun runs the bundle sbx spec writes and gives back the command's status
// (runc does the same in testdata/script/spec.txtar). Skipped, saying so, only where this host's cgroup
// layout stops crun; the config has been read by then, so an ociVersion crun does not know still fails.
func TestBundleUnderCrun(t *testing.T) {
	testutil.RequireRoot(t, "crun run")
	crun, err := exec.LookPath("crun")
	if err != nil {
		t.Skip("crun is not installed (make deps installs Debian's)")
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox is not installed (make deps installs busybox-static)")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "rootfs", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rootfs", "bin", "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(dir, "rootfs", "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"spec", "-p", "strict", "-o", filepath.Join(dir, "config.json"), "--", "sh", "-c", "echo hello; exit 7"},
		nil, &out, &errb); code != 0 {
		t.Fatalf("sbx spec: status %d: %s", code, errb.String())
	}
	cmd := exec.Command(crun, "--root", filepath.Join(dir, "state"), "run", "--bundle", dir, "sbx-crun-"+filepath.Base(dir))
	out.Reset()
	errb.Reset()
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	switch msg := out.String() + errb.String(); {
	case strings.Contains(msg, "unknown version"):
		t.Fatalf("crun refuses the bundle's ociVersion: %s", msg)
	case strings.Contains(msg, crunHybrid):
		t.Skipf("this host's cgroup layout stops crun before the command starts (%q: cgroup v1 with controllers on the v2 mount); "+
			"crun read the config and accepted its ociVersion", crunHybrid)
	}
	if got := strings.TrimSpace(out.String()); cmd.ProcessState.ExitCode() != 7 || got != "hello" {
		t.Fatalf("crun: status %d, stdout %q, stderr %q; want 7 and hello", cmd.ProcessState.ExitCode(), got, errb.String())
	}
}
