package sandbox

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestLandlockFailsClosed: on a kernel without Landlock, the command does not run and sbx says why,
// unless the profile allows degrading. The kernel is simulated: the sandbox is started from a thread
// whose seccomp filter answers ENOSYS for landlock_create_ruleset, which the supervisor (started from
// that thread here) and the command inherit. A profile's own filter cannot do this: the supervisor applies
// Landlock before it loads the profile's filter.
func TestLandlockFailsClosed(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	run := func(degrade bool, args ...string) (int, string, error) {
		t.Helper()
		p := testPlan(t)
		p.Filesystem.LandlockDegrade = degrade
		type result struct {
			code     int
			stderr   string
			startErr error
			err      error
		}
		done := make(chan result)
		// The supervisor starts from this test's thread, not from sbx's starter threads.
		defer func(f func(*exec.Cmd, string) error) { startSupervisor = f }(startSupervisor)
		startSupervisor = startIn
		go func() {
			runtime.LockOSThread() // never unlocked: the thread, and its filter, end with the goroutine
			if err := denyLandlockThread(); err != nil {
				done <- result{err: err}
				return
			}
			var errb bytes.Buffer
			sb, err := Create(Config{Plan: p, StateRoot: testutil.StateRoot(t), Command: Command{
				Args: args, Cwd: "/", Stdout: io.Discard, Stderr: &errb}})
			if err != nil {
				done <- result{err: err}
				return
			}
			r, startErr := sb.Start()
			code := -1
			if startErr == nil {
				code, err = r.Wait()
			}
			err = errors.Join(err, sb.Destroy())
			done <- result{code, errb.String(), startErr, err}
		}()
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.code, r.stderr, r.startErr
	}
	// Required: the command does not run, and Start says why as sbx's own failure (exit 125 with one
	// error line and a hint from the CLI), not as the command's status on its stderr.
	code, stderr, err := run(false, "sh", "-c", "echo ran")
	var se *SupervisorError
	if !errors.As(err, &se) || !errors.Is(err, ErrSetup) {
		t.Fatalf("Start: %v (status %d, stderr %q), want a SupervisorError matching ErrSetup", err, code, stderr)
	}
	if !strings.Contains(se.Reason, "landlock needs ABI 1") || se.Hint == "" {
		t.Errorf("reason %q, hint %q: want why and what to do", se.Reason, se.Hint)
	}
	if stderr != "" {
		t.Errorf("the command's stderr got %q, want nothing: it never ran", stderr)
	}
	// A missing command does not hide it behind the command's 127.
	code, stderr, err = run(false, "/nonexistent-command")
	if !errors.As(err, &se) {
		t.Errorf("missing command: Start: %v (status %d, stderr %q), want a SupervisorError", err, code, stderr)
	}
	code, stderr, err = run(true, "sh", "-c", "exit 3")
	if err != nil || code != 3 || !strings.Contains(stderr, "running without Landlock") {
		t.Errorf("degrade: %v, status %d, stderr %q; want 3 and a warning", err, code, stderr)
	}
}

// TestProfileCannotDisableLandlock: a profile whose filter refuses the Landlock syscalls still gets
// Landlock: the supervisor applies it before the filter. The write below is refused by Landlock alone.
func TestProfileCannotDisableLandlock(t *testing.T) {
	enosys := uint(38)
	p := testPlan(t)
	p.Seccomp.Syscalls = append(p.Seccomp.Syscalls, specs.LinuxSyscall{
		Names: []string{"landlock_create_ruleset"}, Action: specs.ActErrno, ErrnoRet: &enosys,
	})
	removeSyscall(p.Seccomp, "landlock_create_ruleset")
	p.Filesystem.Write, p.Filesystem.WriteCwd = []string{"/var/tmp"}, false
	code, out, stderr := runPlan(t, p, "/", "sh", "-c", "echo x > /tmp/a && echo wrote")
	if code == 0 || code == ExitSetup || strings.Contains(out, "wrote") || !strings.Contains(stderr, "Permission denied") {
		t.Errorf("status %d, stdout %q, stderr %q: want the write refused by Landlock", code, out, stderr)
	}
}

// denyLandlockThread loads, on the calling thread only, a filter that answers ENOSYS for
// landlock_create_ruleset, as a kernel without Landlock does.
func denyLandlockThread() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_LANDLOCK_CREATE_RULESET},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return errno
	}
	return nil
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
