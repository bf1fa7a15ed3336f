package runner

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/internal/fakenet"
	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
)

// waitIdle waits until the pool holds n sandboxes.
func waitIdle(t *testing.T, p *Pool, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); p.Idle() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool holds %d sandboxes after 20s, want %d", p.Idle(), n)
		}
	}
}

// poolRun runs args through the pool and says whether a pooled sandbox served it.
func poolRun(t *testing.T, p *Pool, o Options, args ...string) (*report.Report, string, bool) {
	t.Helper()
	var out bytes.Buffer
	o.Args, o.Stdout, o.Stderr = args, &out, &out
	served := p.served.Load()
	rep, err := valid(t)(p.Run(context.Background(), o))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep, out.String(), p.served.Load() > served
}

// TestPoolFreshSandbox: a pooled sandbox serves one run; nothing of run N is in run N+1: not a file it
// wrote (in the working directory and in /tmp), not a process it left running, not a socket it left
// listening, not a DNS answer or the address the contract learned from it, not a refused attempt.
func TestPoolFreshSandbox(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	up := fakenet.ForTest(t)
	pl := plan(t)
	pl.Expect.LeftRunning = true
	pl.Expect.Listeners = []policy.Listener{{Proto: "tcp", Port: 8765}}
	pl.Network = policy.Network{Mode: policy.NetContract, UplinkNetNS: up.Name,
		Allow: []policy.NetRule{{Host: "other.test", Proto: "tcp", Port: 443}},
		DNS:   policy.DNS{Upstream: fakenet.DNS + ":53"}}
	cwd, state := t.TempDir(), testutil.StateRoot(t)
	p := NewPool(1, state, func(err error) { t.Error(err) })
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
		// Close waits for the background teardowns and destroys the idle sandbox: nothing is left.
		if runs, err := os.ReadDir(filepath.Join(state, "runs")); err != nil || len(runs) != 0 {
			t.Errorf("after Close the state root holds %v (%v), want no run", runs, err)
		}
	}()
	p.Warm(pl, cwd, "")
	waitIdle(t, p, 1)
	o := Options{Plan: pl, Cwd: cwd, StateRoot: state, Stdin: strings.NewReader("from stdin\n")}
	connect := `import socket,sys
s=socket.socket(); s.settimeout(3)
try: s.connect((sys.argv[1],443)); print("connected")
except OSError as e: print("refused", e)`
	rep, out, pooled := poolRun(t, p, o, "sh", "-c", `cat; echo mine > mine; echo tmp > /tmp/left;
		python3 -c "import socket; print(socket.gethostbyname('other.test'))";
		python3 -c '`+connect+`' other.test; python3 -c '`+connect+`' `+fakenet.LAN+`;
		nohup python3 -m http.server 8765 >/dev/null 2>&1 & `+waitListening(8765, true))
	if !pooled {
		t.Fatal("run N started cold, want a pooled sandbox")
	}
	if want := "from stdin\n" + fakenet.Public2 + "\nconnected\nrefused"; !strings.HasPrefix(out, want) {
		t.Fatalf("run N printed %q, want it to start with %q", out, want)
	}
	if !slices.ContainsFunc(rep.Processes.Execs, func(e report.Exec) bool { return strings.HasSuffix(e.Exe, "/sleep") }) {
		t.Errorf("the exec stream of a pooled run missed the command's sleep: %+v", rep.Processes.Execs)
	}
	// The layers' snapshot was taken when the sandbox was built: the run's own files, nothing of sbx's.
	if want := []string{filepath.Join(cwd, "mine"), "/tmp/left"}; !slices.Equal(slices.Sorted(slices.Values(rep.Files.Created)), slices.Sorted(slices.Values(want))) ||
		len(rep.Files.Modified)+len(rep.Files.Deleted) != 0 {
		t.Errorf("run N's file changes: created %v, modified %v, deleted %v; want created %v and nothing else",
			rep.Files.Created, rep.Files.Modified, rep.Files.Deleted, want)
	}
	if len(rep.Network.DNS) == 0 || len(rep.Network.Denied) == 0 || len(rep.Processes.LeftRunning) == 0 || len(rep.Sockets.Listening) == 0 {
		t.Fatalf("run N left no trace to look for: dns %v, denied %v, left running %v, listening %v",
			rep.Network.DNS, rep.Network.Denied, rep.Processes.LeftRunning, rep.Sockets.Listening)
	}
	waitIdle(t, p, 1)
	o.Stdin = nil
	rep, out, pooled = poolRun(t, p, o, "sh", "-c", `echo reopened > /dev/stdout; ls -A; ls /tmp | grep -v -x `+strings.Split(strings.TrimPrefix(cwd, "/tmp/"), "/")[0]+`; ps -e -o comm= | grep -v -e '^ps$' -e '^sh$' -e '^grep$';
		cat /proc/net/tcp /proc/net/tcp6 | grep -c ':223D ' ; python3 -c '`+connect+`' `+fakenet.Public2)
	if !pooled {
		t.Fatal("run N+1 started cold, want a pooled sandbox")
	}
	if want := "reopened\n.sbx-init\n0\nrefused"; !strings.HasPrefix(out, want) {
		t.Errorf("run N+1 saw %q, want its stdout reopenable, only its own init, no listener on 8765 (223D), no file and the learned address refused (%q)", out, want)
	}
	if n := len(rep.Files.Created) + len(rep.Files.Modified) + len(rep.Files.Deleted); n != 0 {
		t.Errorf("run N+1 changed no file, its report says %+v", rep.Files)
	}
	if len(rep.Network.DNS) != 0 || len(rep.Network.Denied) != 1 || len(rep.Processes.LeftRunning) != 0 {
		t.Errorf("run N+1's report carries run N's: dns %v, denied %v (want only its own), left running %v",
			rep.Network.DNS, rep.Network.Denied, rep.Processes.LeftRunning)
	}
	if _, err := os.Stat(filepath.Join(cwd, "mine")); err == nil {
		t.Error("run N's file reached the host's working directory")
	}
}

// TestPoolHiddenSince: what a pooled sandbox hides is what a cold run would hide at the time of the run,
// not at the time the sandbox was built: a file that appears beside the way down to the working
// directory (in a hidden directory) while the sandbox waits in the pool stays hidden.
func TestPoolHiddenSince(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	pl := plan(t)
	cwd, state := t.TempDir(), testutil.StateRoot(t)
	for _, d := range []string{filepath.Dir(cwd), cwd} {
		if err := os.Chmod(d, 0o755); err != nil { // the command's user may list the way down
			t.Fatal(err)
		}
	}
	if !belowHiddenDir(pl.Filesystem.Hidden, cwd) {
		t.Skipf("the working directory %s lies below no hidden directory of the plan", cwd)
	}
	// A share below the hidden directory: the way down to it is kept, every entry beside it hidden.
	share := t.TempDir()
	pl.Filesystem.Shares = []policy.Share{{Host: share, Sandbox: share}}
	p := NewPool(1, state, func(err error) { t.Error(err) })
	defer p.Close()
	p.Warm(pl, cwd, "")
	waitIdle(t, p, 1)
	later := t.TempDir() // a sibling of cwd, made after the sandbox was built
	if err := os.Chmod(later, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(later, "secret"), []byte("s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Plan: pl, Cwd: cwd, StateRoot: state}
	_, out, _ := poolRun(t, p, o, "sh", "-c", "cat "+filepath.Join(later, "secret")+" 2>/dev/null; ls -A "+filepath.Dir(cwd))
	if strings.Contains(out, "s3cret") || strings.Contains(out, filepath.Base(later)) {
		t.Errorf("a pooled run saw a file made in a hidden directory after its sandbox was built: %q", out)
	}
}

func belowHiddenDir(hidden []string, p string) bool {
	return slices.ContainsFunc(hidden, func(h string) bool { return strings.HasPrefix(p, filepath.Clean(h)+"/") })
}

// TestPoolSeccomp: a pooled sandbox's command (its supervisor loaded the filter before the command was
// known) runs under the profile's filter, and so do its threads and children, forked or spawned; a
// refused syscall of a child is recorded, in each of two pooled runs (each pooled sandbox hands over a
// listener of its own).
func TestPoolSeccomp(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	prof, err := policy.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	cwd, state := t.TempDir(), testutil.StateRoot(t)
	pl, err := policy.Compile(prof, policy.CompileContext{Cwd: cwd})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPool(1, state, func(err error) { t.Error(err) })
	defer p.Close()
	const script = `import os, subprocess, threading
def filtered(path): return "Seccomp:\t2" in open(path).read()
r = {}
t = threading.Thread(target=lambda: r.update(t=filtered("/proc/thread-self/status"))); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os.execvp("sh", ["sh", "-c", "unshare -n true 2>/dev/null; grep -q 'Seccomp:.2' /proc/self/status && echo child-filtered"])
os.waitpid(pid, 0)
spawned = subprocess.run(["grep", "-c", "Seccomp:.2", "/proc/self/status"], capture_output=True, text=True).stdout.strip()
print("self", filtered("/proc/self/status"), "thread", r["t"], "spawned", spawned)`
	o := Options{Plan: pl, Cwd: cwd, StateRoot: state}
	p.Warm(pl, cwd, "")
	for i := range 2 {
		waitIdle(t, p, 1)
		rep, out, pooled := poolRun(t, p, o, "python3", "-c", script)
		if !pooled {
			t.Fatalf("run %d started cold", i)
		}
		if !strings.Contains(out, "child-filtered") || !strings.Contains(out, "self True thread True spawned 1") {
			t.Errorf("run %d: %q, want the command, its thread and children filtered", i, out)
		}
		d := rep.Denials
		if !slices.ContainsFunc(d.Seccomp, func(s report.SeccompDenial) bool {
			return s.Syscall == "unshare" && s.Args == "CLONE_NEWNET" && s.Exe == "/usr/bin/unshare"
		}) {
			t.Errorf("run %d: seccomp denials %+v (%s), want the child's unshare", i, d.Seccomp, d.Reason)
		}
	}
}

// TestPoolEventsStopped: the exec stream a pooled sandbox starts when it is built (its socket and kernel
// filter) goes with it when it is destroyed unused, whether the pool moves to another plan or closes: no
// descriptor is left behind.
func TestPoolEventsStopped(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	// The stream's descriptors: sockets (netlink), eBPF maps and programs. Go's runtime opens files
	// of its own meanwhile (the cgroup's CPU quota), which are not counted.
	collectorFDs := func() []string {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			l, _ := os.Readlink("/proc/self/fd/" + e.Name())
			if strings.HasPrefix(l, "socket:") || strings.HasPrefix(l, "anon_inode:bpf") {
				out = append(out, l)
			}
		}
		return out
	}
	before := collectorFDs()
	pl := plan(t)
	cwd, other, state := t.TempDir(), t.TempDir(), testutil.StateRoot(t)
	p := NewPool(2, state, func(err error) { t.Error(err) })
	p.Warm(pl, cwd, "")
	waitIdle(t, p, 2)
	if n := len(collectorFDs()); n < len(before)+2 {
		t.Fatalf("%d stream descriptors with two sandboxes pooled, %d before: the pool starts none", n, len(before))
	}
	p.Warm(pl, other, "") // the two built for cwd are destroyed unused
	waitIdle(t, p, 2)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if after := collectorFDs(); len(after) != len(before) {
		t.Errorf("stream descriptors after the pool closed: %v, before: %v", after, before)
	}
}
