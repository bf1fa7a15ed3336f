package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildWithoutSeccompTag: an sbx built without -tags seccomp refuses a run up front and names the
// fix (the build tag), instead of failing mid-setup with a hint about sbx gc. It builds that binary.
func TestBuildWithoutSeccompTag(t *testing.T) {
	bin, _ := buildSbx(t, filepath.Join(t.TempDir(), "sbx-noseccomp"), "")
	for _, args := range [][]string{{"exec", "--", "true"}, {"mcp"}, {"probe"}} {
		cmd := exec.Command(bin, args...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		_ = cmd.Run()
		msg := errb.String()
		if cmd.ProcessState.ExitCode() != exitSetup || !strings.Contains(msg, "sbx: error: this sbx was built without seccomp support") ||
			!strings.Contains(msg, "sbx: hint: rebuild it with the seccomp build tag") || strings.Contains(msg, "sbx gc") {
			t.Errorf("sbx %v without seccomp: status %d, stderr %q", args, cmd.ProcessState.ExitCode(), msg)
		}
	}
}

// buildSbx builds this package with the build tags given (space-separated) into bin, and returns bin
// and the go tool. It skips the test with -short or without a go toolchain.
func buildSbx(t *testing.T, bin, tags string) (string, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds sbx (-short)")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain on PATH")
	}
	build := exec.Command(goTool, "build", "-tags", tags, "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %q: %v\n%s", tags, err, out)
	}
	return bin, goTool
}
