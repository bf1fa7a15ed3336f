package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/sandbox/cgroup"
)

// TestFreeze freezes a sandbox with a leftover process, checks that its cgroup is frozen and that the
// task list names every thread of it, that gc's thaw undoes a freeze, and that Destroy tears a frozen
// sandbox down leaving neither process nor cgroup.
func TestFreeze(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	sb, err := Create(Config{Plan: testPlan(t), StateRoot: testutil.StateRoot(t), Command: Command{
		// A leftover with two threads: python's main thread and one sleeping in a thread of its own.
		// The command exits once python says its thread runs (a minute at most): under emulation
		// (the VM harness) python takes longer than any fixed pause to get there.
		Args: []string{"sh", "-c", `python3 -c 'import threading, time; threading.Thread(target=time.sleep, args=(300,)).start(); open("/tmp/ready", "w").close(); time.sleep(300)' &
i=0; while [ ! -e /tmp/ready ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done`},
		Cwd: t.TempDir(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	destroyed := false
	defer func() {
		if !destroyed {
			sb.Destroy()
		}
	}()
	r, err := sb.Start()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Freeze(); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	if got := freezerStates(sb.ID); !slices.Contains(got, "FROZEN") {
		t.Errorf("freezer states %v, want FROZEN", got)
	}
	pids, err := sb.Pids()
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := sb.Tasks()
	if err != nil {
		t.Fatalf("Tasks: %v", err)
	}
	var leftover int
	for _, pid := range pids {
		if pid != sb.InitPid() {
			leftover = pid
		}
	}
	threads := threadsOf(t, leftover)
	if len(threads) < 2 {
		t.Fatalf("leftover %d has threads %v, want at least 2", leftover, threads)
	}
	for _, tid := range threads {
		if !slices.Contains(tasks, tid) {
			t.Errorf("Tasks() = %v lacks thread %d of the leftover", tasks, tid)
		}
	}
	// A killed sbx leaves a frozen sandbox behind: gc thaws it before it kills.
	cgroup.Thaw(cgroup.Dirs(sb.ID))
	if got := freezerStates(sb.ID); slices.Contains(got, "FROZEN") {
		t.Errorf("after cgroup.Thaw: freezer states %v", got)
	}
	if err := sb.Freeze(); err != nil {
		t.Fatalf("Freeze again: %v", err)
	}
	if err := sb.Destroy(); err != nil {
		t.Errorf("Destroy of a frozen sandbox: %v", err)
	}
	destroyed = true
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(leftover, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if syscall.Kill(leftover, 0) == nil {
		t.Errorf("leftover %d survived Destroy", leftover)
	}
	if dirs := cgroup.Dirs(sb.ID); len(dirs) > 0 {
		t.Errorf("cgroups left: %v", dirs)
	}
}

func freezerStates(id string) []string {
	var states []string
	for _, dir := range cgroup.Dirs(id) {
		if b, err := os.ReadFile(filepath.Join(dir, "freezer.state")); err == nil {
			states = append(states, strings.TrimSpace(string(b)))
		}
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.freeze")); err == nil && strings.TrimSpace(string(b)) == "1" {
			states = append(states, "FROZEN")
		}
	}
	return states
}

func threadsOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

// TestNoSockets checks the glance at the sandbox's socket tables: none after a command that left
// nothing, and some for each kind of socket a snapshot lists, held by a leftover process.
func TestNoSockets(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	for _, c := range []struct {
		name, script string
		none         bool
	}{
		{"nothing", "true", true},
		{"tcp", "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', 8781)); s.listen(); open('ready','w').close(); time.sleep(300)", false},
		{"tcp6", "import socket,time; s=socket.socket(socket.AF_INET6); s.bind(('::1', 8782)); s.listen(); open('ready','w').close(); time.sleep(300)", false},
		{"udp", "import socket,time; s=socket.socket(type=socket.SOCK_DGRAM); s.bind(('127.0.0.1', 8783)); open('ready','w').close(); time.sleep(300)", false},
		{"unix", "import socket,time; a,b=socket.socketpair(); open('ready','w').close(); time.sleep(300)", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"true"}
			if c.script != "true" {
				// The shell ends once the socket exists (under emulation a fixed half second was too
				// short for python to make it).
				args = []string{"sh", "-c", "python3 -c \"$0\" & i=0; until [ -e ready ] || [ $i -ge 600 ]; do sleep 0.05; i=$((i+1)); done", c.script}
			}
			sb, err := Create(Config{Plan: testPlan(t), StateRoot: testutil.StateRoot(t), Command: Command{Args: args, Cwd: t.TempDir()}})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Destroy()
			r, err := sb.Start()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Wait(); err != nil {
				t.Fatal(err)
			}
			if got := sb.NoSockets(); got != c.none {
				t.Errorf("NoSockets() = %v, want %v", got, c.none)
			}
		})
	}
}
