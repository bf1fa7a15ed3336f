package observe

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/supervisor"
	"github.com/sbx-dev/sbx/internal/testutil"
)

// The test binary doubles as the victim: with victimEnv set it plays one role of a small sandbox (a reaping
// init, a command, a daemon, a middle process that double-forks a sleeper) instead of running tests.
const (
	victimEnv = "SBX_OBSERVE_VICTIM"
	dirEnv    = "SBX_OBSERVE_DIR"
	copyEnv   = "SBX_OBSERVE_COPY"
	countEnv  = "SBX_OBSERVE_COUNT"
)

// runVictim plays one role. Its main goroutine runs on the main thread (testutil locks it there): setComm's
// PR_SET_NAME renames the calling thread, and /proc/PID/stat shows the main thread's name.
func runVictim(role string) error {
	switch role {
	case "init":
		return victimInit()
	case "cmd":
		return victimCmd()
	case "middle":
		return startChild("/bin/sleep", "300")
	case "daemon":
		return victimDaemon()
	case "bench-init":
		return victimBenchInit()
	}
	return fmt.Errorf("unknown role %q", role)
}

// victimInit is the sandbox's pid 1: it brings up lo, starts the command and reaps forever.
func victimInit() error {
	if err := supervisor.LoopbackUp(); err != nil {
		return err
	}
	if err := startChild(os.Args[0]); err != nil {
		return err
	}
	reapForever()
	return nil
}

func reapForever() {
	for {
		if _, err := unix.Wait4(-1, nil, 0, nil); err == unix.ECHILD {
			time.Sleep(time.Second)
		}
	}
}

// startChild starts a process with the same environment but the role given by the next step of the tree.
func startChild(path string, args ...string) error {
	cmd := exec.Command(path, args...)
	cmd.Env = os.Environ()
	switch os.Getenv(victimEnv) {
	case "init":
		cmd.Env = append(cmd.Env, victimEnv+"=cmd")
	case "cmd":
		if path == os.Args[0] {
			cmd.Env = append(cmd.Env, victimEnv+"=middle")
		} else {
			cmd.Env = append(cmd.Env, victimEnv+"=daemon")
		}
	}
	return cmd.Start()
}

// victimCmd is the command: it starts the daemon from a copy of the binary and a middle process that
// double-forks a sleeper, waits until the daemon is ready, and exits.
func victimCmd() error {
	if err := startChild(os.Getenv(copyEnv)); err != nil {
		return err
	}
	middle := exec.Command(os.Args[0])
	middle.Env = append(os.Environ(), victimEnv+"=middle")
	if err := middle.Run(); err != nil {
		return err
	}
	ready := filepath.Join(os.Getenv(dirEnv), "ready")
	for deadline := time.Now().Add(testutil.Scaled(5 * time.Second)); time.Now().Before(deadline); {
		if _, err := os.Stat(ready); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("daemon not ready")
}

// victimReady is what the daemon tells the test.
type victimReady struct {
	TCPPort, UDPPort int
	Unix             string
	Log              string
}

// victimDaemon holds a log file, a TCP listener with one established connection, a UDP socket and an
// abstract unix socket; renames itself and deletes its own binary.
func victimDaemon() error {
	dir := os.Getenv(dirEnv)
	logf, err := os.OpenFile(filepath.Join(dir, "daemon.log"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	accepted, err := ln.Accept()
	if err != nil {
		return err
	}
	udp, err := net.ListenPacket("udp6", "[::]:0")
	if err != nil {
		return err
	}
	name := "@sbx-observe-" + strconv.Itoa(os.Getpid())
	ul, err := net.Listen("unix", name)
	if err != nil {
		return err
	}
	if err := setComm("renamed-daemon"); err != nil {
		return err
	}
	if err := os.Remove(os.Getenv(copyEnv)); err != nil {
		return err
	}
	r := victimReady{ln.Addr().(*net.TCPAddr).Port, udp.LocalAddr().(*net.UDPAddr).Port, name, logf.Name()}
	b, _ := json.Marshal(r)
	if err := os.WriteFile(filepath.Join(dir, "ready.tmp"), b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, "ready.tmp"), filepath.Join(dir, "ready")); err != nil {
		return err
	}
	victimHeld = []any{logf, ln, conn, accepted, udp, ul}
	select {} // hold everything open until killed
}

// victimHeld keeps the daemon's files and sockets reachable, so no finalizer closes them.
var victimHeld []any

// setComm renames the calling thread, which init() keeps as the main thread.
func setComm(name string) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	return unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0)
}

// victimBenchInit starts COUNT-1 sleepers (so the namespace holds COUNT processes with the init) and reaps.
func victimBenchInit() error {
	n, _ := strconv.Atoi(os.Getenv(countEnv))
	for range n - 1 {
		if err := exec.Command("/bin/sleep", "600").Start(); err != nil {
			return err
		}
	}
	reapForever()
	return nil
}

// sandboxUnderTest is a victim tree started in fresh pid and net namespaces.
type sandboxUnderTest struct {
	init *exec.Cmd
	dir  string
}

// startVictim starts the victim init in new pid and net namespaces with extra environment. The init and
// with it every process of its pid namespace are killed and waited for in t.Cleanup.
func startVictim(tb testing.TB, env ...string) *sandboxUnderTest {
	tb.Helper()
	dir := tb.TempDir()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), append([]string{dirEnv + "=" + dir}, env...)...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNET,
		Pdeathsig:  syscall.SIGKILL, // never outlive a crashed test
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start victim: %v", err)
	}
	s := &sandboxUnderTest{init: cmd, dir: dir}
	tb.Cleanup(func() { s.kill(tb) })
	return s
}

// kill ends the victim's pid namespace: SIGKILL to its init kills every process in it. It then waits
// until none of them exists any more, so that no test leaves anything behind.
func (s *sandboxUnderTest) kill(tb testing.TB) {
	pids := testutil.Descendants(s.init.Process.Pid)
	_ = s.init.Process.Signal(syscall.SIGKILL)
	_ = s.init.Wait()
	deadline := time.Now().Add(testutil.Scaled(5 * time.Second))
	for _, pid := range pids {
		for exists(pid) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if exists(pid) {
			tb.Errorf("victim process %d still exists after its pid namespace was killed", pid)
		}
	}
}

// exists reports whether a process (not a zombie) with this pid exists.
func exists(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	st, err := parseStat(b)
	return err == nil && st.state != 'Z'
}

// waitFile waits for a file the victim writes when it is ready.
func waitFile(tb testing.TB, path string) []byte {
	tb.Helper()
	for deadline := time.Now().Add(testutil.Scaled(10 * time.Second)); time.Now().Before(deadline); {
		if b, err := os.ReadFile(path); err == nil {
			return b
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("victim never wrote %s", path)
	return nil
}

func copyFile(tb testing.TB, src, dst string) {
	tb.Helper()
	in, err := os.Open(src)
	if err != nil {
		tb.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		tb.Fatal(err)
	}
	if err := out.Close(); err != nil {
		tb.Fatal(err)
	}
}

func realpath(tb testing.TB, p string) string {
	tb.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(testutil.Scaled(5 * time.Second)); time.Now().Before(deadline); {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !cond() {
		tb.Fatalf("condition never held in %v (%s scales the wait)", testutil.Scaled(5*time.Second), testutil.TimeScaleEnv)
	}
}
