package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
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

// TestQuietAnswers: the filter's answers that are no refusal (copy_file_range's EXDEV, clone3's
// ENOSYS) still reach the command, but the kernel logs none of them, while a real refusal in the same
// run is logged (read from /dev/kmsg, where the kernel prints seccomp's records while audit is off:
// each cost the calling task about 40 µs, on every file cp copied).
func TestQuietAnswers(t *testing.T) {
	testutil.RequireRoot(t, "reads /dev/kmsg")
	// Read with plain syscalls: an os.File would wait in the poller where the read says EAGAIN.
	kmsg, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no kernel log to read: %v", err)
	}
	defer unix.Close(kmsg)
	if _, err := unix.Seek(kmsg, 0, io.SeekEnd); err != nil {
		t.Skipf("seeking the kernel log: %v", err)
	}
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "a"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Each call's errno, then the pid: the refusal (init_module, which the default profile refuses)
	// before and after the quiet ones, so that the kernel's rate limit cannot explain a missing line.
	probe := `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    r = libc.syscall(nr, *args)
    return ctypes.get_errno() if r < 0 else 0
a, b = os.open("a", os.O_RDONLY), os.open("b", os.O_WRONLY | os.O_CREAT, 0o644)
errs = [call(175, 0, 0, b"")]
for _ in range(3):
    errs += [call(326, a, None, b, None, 4, 0), call(435, None, 0)]
errs += [call(175, 0, 0, b"")]
print(" ".join(map(str, errs)), os.getpid())
`
	out, errs, code := sbxRun(t, work, nil, "exec", "-q", "--", "python3", "-c", probe)
	f := strings.Fields(out)
	if code != 0 || len(f) != 9 {
		t.Fatalf("status %d, stdout %q, stderr %s", code, out, errs)
	}
	want := []string{"1", "18", "38", "18", "38", "18", "38", "1"} // EPERM, EXDEV, ENOSYS
	if strings.Join(f[:8], " ") != strings.Join(want, " ") {
		t.Fatalf("errnos %v, want %v", f[:8], want)
	}
	logged := map[string]int{}
	buf := make([]byte, 8192)
	for {
		n, err := unix.Read(kmsg, buf)
		if errors.Is(err, unix.EPIPE) {
			continue // records overwritten meanwhile
		}
		if err != nil || n <= 0 {
			break // EAGAIN: nothing more
		}
		line := string(buf[:n])
		if strings.Contains(line, "type=1326") && strings.Contains(line, `comm="python3"`) {
			for _, w := range strings.Fields(line) {
				if nr, ok := strings.CutPrefix(w, "syscall="); ok {
					logged[nr]++
				}
			}
		}
	}
	if logged["175"] == 0 {
		t.Skipf("the kernel printed no seccomp record of the refused init_module (audit on, or rate-limited): %v", logged)
	}
	if logged["326"] > 0 || logged["435"] > 0 {
		t.Fatalf("the kernel logged the quiet answers: %v", logged)
	}
}
