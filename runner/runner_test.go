package runner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"

	"github.com/sbx-dev/sbx/internal/fakenet"
	"github.com/sbx-dev/sbx/internal/testutil"
)

// plan is a small plan built by hand, so that these tests do not depend on the profile parser.
func plan(t *testing.T) *policy.Plan {
	sc, err := seccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		t.Fatal(err)
	}
	return &policy.Plan{
		Profile: "test", Seccomp: sc,
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"},
		Filesystem: policy.Filesystem{
			Read: []string{"/"}, Write: []string{"/tmp"}, WriteCwd: true,
			Hidden: []string{"/root", "/home", "/run", "/tmp", "/var/tmp"},
		},
		Limits: policy.Limits{MemoryBytes: 256 << 20, Pids: 128},
	}
}

// waitListening is shell that waits (up to 30 s) until a TCP listener on port is bound in the command's
// network namespace (LISTEN, 0A, in /proc/net/tcp*): a command that leaves a listener behind must not
// exit before its listener exists, and under emulation python takes seconds to start. With sleepFirst
// the loop sleeps once before it looks, so that the run always execs sleep.
func waitListening(port int, sleepFirst bool) string {
	look := fmt.Sprintf(`grep -qs ":%04X [0-9A-F]*:0000 0A" /proc/net/tcp /proc/net/tcp6 && break; `, port)
	if sleepFirst {
		return "for t in $(seq 300); do sleep 0.1; " + look + "done; "
	}
	return "for t in $(seq 300); do " + look + "sleep 0.1; done; "
}

// Result wraps a report for assertions.
type Result struct{ Report *report.Report }

func itoa(i int) string { return strconv.Itoa(i) }

func runCmd(t *testing.T, p *policy.Plan, timeout time.Duration, args ...string) (*Result, string) {
	t.Helper()
	var out bytes.Buffer
	rep, err := runValid(t, context.Background(), Options{
		Plan: p, Args: args, Cwd: t.TempDir(), Stdout: &out, Stderr: &out, Timeout: timeout,
		StateRoot: testutil.StateRoot(t),
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return &Result{rep}, out.String()
}

func TestLeftRunning(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	res, out := runCmd(t, plan(t), 0, "sh", "-c", "nohup sleep 300 >/dev/null 2>&1 & python3 -m http.server 8765 >/dev/null 2>&1 & "+waitListening(8765, false)+"exit 0")
	r := res.Report
	if r.ExitCode != 0 {
		t.Errorf("exit code %d, want 0 (output %q)", r.ExitCode, out)
	}
	if got := len(r.Processes.LeftRunning); got != 2 {
		t.Fatalf("%d processes left running, want 2: %+v", got, r.Processes.LeftRunning)
	}
	if len(r.Sockets.Listening) != 1 || r.Sockets.Listening[0].Port != 8765 {
		t.Fatalf("listening = %+v, want one on 8765", r.Sockets.Listening)
	}
	if exe := r.Sockets.Listening[0].Exe; !bytes.Contains([]byte(exe), []byte("python3")) {
		t.Errorf("listener owned by %q, want python3", exe)
	}
	for _, p := range r.Processes.LeftRunning {
		if _, err := os.Stat("/proc/" + itoa(p.HostPid)); err == nil {
			t.Errorf("host pid %d (%v) still exists after the run", p.HostPid, p.Argv)
		}
	}
}

func TestTimeout(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	start := time.Now()
	res, _ := runCmd(t, plan(t), 300*time.Millisecond, "sleep", "30")
	if !res.Report.TimedOut {
		t.Errorf("timed_out = false, want true")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v for a 300ms timeout", d)
	}
}

func TestCancel(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := runValid(t, ctx, Options{Plan: plan(t), Args: []string{"sleep", "30"}, Cwd: "/", StateRoot: testutil.StateRoot(t)})
	if err == nil {
		t.Fatal("Run returned no error for a cancelled context")
	}
}

// TestInitGone kills the sandbox's init from the host while the command runs: sbx loses track of the
// command, yet the run still ends with a report, marked observe.incomplete, and nothing is left.
func TestInitGone(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	var out bytes.Buffer
	rep, err := runValid(t, context.Background(), Options{
		Plan: plan(t), Args: []string{"sleep", "30"}, Cwd: t.TempDir(), Stdout: &out, Stderr: &out,
		StateRoot: testutil.StateRoot(t),
		OnStart: func(pid int) {
			ppid := initOf(t, pid)
			if ppid <= 1 {
				return // never kill(0): sbx's own process group
			}
			if err := syscall.Kill(ppid, syscall.SIGKILL); err != nil {
				t.Errorf("killing the init %d: %v", ppid, err)
			}
		},
	})
	if err != nil {
		t.Fatalf("Run: %v, want a report", err)
	}
	if rep.Verdict != "violation" || !slices.Contains(rep.Incomplete, "the command's end") {
		t.Errorf("verdict %s, incomplete %v, notes %v; want a violation for the command's end", rep.Verdict, rep.Incomplete, rep.Notes)
	}
	if rep.ExitCode != 137 {
		t.Errorf("exit code %d, want 137", rep.ExitCode)
	}
}

// TestInitOOMKilled: a supervisor the OOM killer ended (here its score is raised from the host, as a
// command running as root inside may in the moment pid 1 is undumpable; the command lowers its own
// score, which it may) ends the run as a violation, the command's end incomplete, never as a pass.
func TestInitOOMKilled(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	p := plan(t)
	p.Limits.MemoryBytes = 64 << 20
	var out bytes.Buffer
	rep, err := runValid(t, context.Background(), Options{
		Plan: p, Cwd: t.TempDir(), Stdout: &out, Stderr: &out, StateRoot: testutil.StateRoot(t),
		Args: []string{"sh", "-c", "sleep 0.3; echo 0 > /proc/self/oom_score_adj; exec python3 -c 'b = [b\"x\" * (1 << 20) + bytes([i % 256]) for i in range(256)]'"},
		OnStart: func(pid int) {
			ppid := initOf(t, pid)
			if ppid <= 1 {
				return
			}
			if err := os.WriteFile("/proc/"+itoa(ppid)+"/oom_score_adj", []byte("1000"), 0); err != nil {
				t.Errorf("raising the init's OOM score: %v", err)
			}
		},
	})
	if err != nil {
		t.Fatalf("Run: %v, want a report", err)
	}
	if !rep.OOMKilled {
		t.Fatalf("no OOM kill (exit %d, notes %v, output %q)", rep.ExitCode, rep.Notes, out.String())
	}
	if rep.Verdict != "violation" || !slices.Contains(rep.Incomplete, "the command's end") {
		t.Errorf("verdict %s, incomplete %v, notes %v; want a violation for the command's end", rep.Verdict, rep.Incomplete, rep.Notes)
	}
}

// initOf is the host pid of the sandbox's init (sbx's supervisor): the parent of the command, host pid
// pid; 0 when it cannot be read.
func initOf(t *testing.T, pid int) int {
	stat, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		t.Errorf("reading the command's stat: %v", err)
		return 0
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// TestSocketWithoutProcess: a listener of the sandbox's network namespace that no process holds is
// reported when only the sandbox's init is left: sbx read no sockets then, and the run passed. A
// command gets one by sending a listener over a unix socket pair into a cycle of queues that no process
// holds (SCM_RIGHTS): it outlives every process and completes handshakes until the kernel's collector
// happens to run. Here the test holds the listener in that namespace itself, so that no collector races
// the check.
func TestSocketWithoutProcess(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	lfd := -1
	defer func() {
		if lfd >= 0 {
			unix.Close(lfd)
		}
	}()
	rep, err := runValid(t, context.Background(), Options{
		Plan: plan(t), Args: []string{"sleep", "0.2"}, Cwd: t.TempDir(), StateRoot: testutil.StateRoot(t),
		OnStart: func(pid int) {
			if pid <= 0 {
				t.Error("no host pid for the command")
				return
			}
			err := fakenet.RunIn("/proc/"+itoa(pid)+"/ns/net", func() error {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					return err
				}
				lfd = fd
				if err := unix.Bind(fd, &unix.SockaddrInet4{Port: 8773, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
					return err
				}
				return unix.Listen(fd, 4)
			})
			if err != nil {
				t.Errorf("listening in the sandbox's network namespace: %v", err)
			}
		},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Processes.LeftRunning) != 0 {
		t.Fatalf("left running: %+v, want nothing but the init", rep.Processes.LeftRunning)
	}
	if len(rep.Sockets.Listening) != 1 || rep.Sockets.Listening[0].Port != 8773 {
		t.Errorf("listening = %+v, want the listener on 8773", rep.Sockets.Listening)
	}
	if rep.Verdict != report.VerdictViolation {
		t.Errorf("verdict %s, want a violation for the listener", rep.Verdict)
	}
}

// TestRunsAtOnce: runs started at once (the MCP server's concurrent runs, a pool's refill beside a run)
// each get their own sandbox and report: each lists the one file it wrote in its own working
// directory, and nothing of the others'. make test runs this package with the race detector too, where
// sandboxes built at once raced on state libcontainer's and nftables' packages keep in globals.
func TestRunsAtOnce(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	const n = 4
	state := testutil.StateRoot(t)
	reps := make([]*report.Report, n)
	cwds := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		cwds[i] = t.TempDir()
		wg.Go(func() {
			var out bytes.Buffer
			reps[i], errs[i] = Run(context.Background(), Options{Plan: plan(t), Args: []string{"sh", "-c", "echo " + itoa(i) + " > mine" + itoa(i)},
				Cwd: cwds[i], Stdout: &out, Stderr: &out, StateRoot: state})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("run %d: %v", i, errs[i])
		}
		r := reps[i]
		if want := []string{filepath.Join(cwds[i], "mine"+itoa(i))}; r.ExitCode != 0 || !slices.Equal(r.Files.Created, want) || len(r.Files.Modified)+len(r.Files.Deleted) != 0 {
			_, onHost := os.Stat(filepath.Join(cwds[i], "mine"+itoa(i)))
			t.Errorf("run %d: exit %d, created %v modified %v deleted %v; want exit 0 and created %v (notes %q, incomplete %v, on the host: %v)",
				i, r.ExitCode, r.Files.Created, r.Files.Modified, r.Files.Deleted, want, r.Notes, r.Incomplete, onHost)
		}
	}
}
