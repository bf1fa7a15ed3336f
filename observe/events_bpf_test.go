package observe

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/report"
)

// treeScript waits for a line on stdin, then forks a child (/bin/true) and a child that forks a
// grandchild (the first /bin/true of the inner sh). The exit keeps sh from exec'ing the inner sh in place.
const treeScript = "read x; /bin/true; sh -c '/bin/true; /bin/true'; exit 0"

// minForeignEvents is how many events of treeScript's run reach a listener that passes everything: the
// forks, execs and exits of the child, the inner sh and its first /bin/true, and the script's exit.
const minForeignEvents = 10

// heldTree is a treeScript started and waiting for its go.
type heldTree struct {
	cmd *exec.Cmd
	in  io.WriteCloser
}

func holdTree(t *testing.T) *heldTree {
	t.Helper()
	cmd := exec.Command("sh", "-c", treeScript)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &heldTree{cmd: cmd, in: in}
}

func (h *heldTree) release(t *testing.T) {
	t.Helper()
	_, _ = io.WriteString(h.in, "go\n")
	h.in.Close()
}

func (h *heldTree) wait(t *testing.T) {
	t.Helper()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("%s: %v", treeScript, err)
	}
}

// TestEventsKernelFilter: a stream tracking one process tree records its children's and grandchildren's
// forks, execs and exits. With the eBPF filter, the reader reads nothing else: an unrelated tree started at
// the same time never reaches the socket. When the filter's map is full, or the filter cannot be loaded,
// everything reaches the reader again (the classic filter's behaviour) and the recording is as complete.
func TestEventsKernelFilter(t *testing.T) {
	testutil.RequireRoot(t, "subscribes to the kernel's process events, loads eBPF")
	tests := []struct {
		name string
		load func(fd, maxPids int, pids []int) (*tracker, error)
		// sequential runs the unrelated tree after the tracked one, so that all of its events come
		// after a fallback the tracked tree caused.
		sequential bool
		// late tracks the tree with Track once the stream runs, as the runner does for a pooled
		// sandbox's init; the stream starts tracking a pid that never exists.
		late    bool
		wantErr error // FilterDegraded: nil, ErrFilterFull, or errAny
		foreign bool  // the unrelated tree's events reach the reader
	}{
		{name: "eBPF: own tree only", load: loadTracker},
		{
			// Room for the tracked process and one child: the grandchild's fork cannot be inserted.
			name:       "eBPF map full: passes everything",
			load:       func(fd, _ int, pids []int) (*tracker, error) { return startTracker(fd, 2, pids) },
			sequential: true, wantErr: ErrFilterFull, foreign: true,
		},
		{name: "eBPF: tracked late", load: loadTracker, late: true},
		{
			// Room for the pid the stream starts with only: Track itself cannot insert.
			name:       "eBPF map full at Track: passes everything",
			load:       func(fd, _ int, pids []int) (*tracker, error) { return startTracker(fd, 1, pids) },
			late:       true,
			sequential: true, wantErr: ErrFilterFull, foreign: true,
		},
		{
			// A map of no entries: the kernel refuses to create it.
			name:    "eBPF refused: classic filter",
			load:    func(fd, _ int, pids []int) (*tracker, error) { return startTracker(fd, 0, pids) },
			wantErr: errAny, foreign: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func(l func(int, int, []int) (*tracker, error)) { loadTracker = l }(loadTracker)
			loadTracker = tt.load
			own, other := holdTree(t), holdTree(t)
			track := []int{own.cmd.Process.Pid}
			if tt.late {
				track = []int{1 << 30}
			}
			ev, err := StartEvents(EventsOptions{Track: track})
			if err != nil {
				t.Fatal(err)
			}
			if tt.late {
				ev.Track(own.cmd.Process.Pid)
			}
			own.release(t)
			if tt.sequential {
				own.wait(t)
			}
			other.release(t)
			if !tt.sequential {
				own.wait(t)
			}
			other.wait(t)
			if tt.wantErr == nil {
				// Every process of the tree exited, and its exit removed it from the map; what is left
				// is the pid that never existed, in the late case.
				if left := mapKeys(ev.tr.pids); tt.late && !slices.Equal(left, []uint32{1 << 30}) ||
					!tt.late && len(left) != 0 {
					t.Errorf("the filter still tracks %v after the tree exited", left)
				}
			}
			execs, err := ev.Stop([]int{own.cmd.Process.Pid})
			if err != nil {
				t.Fatal(err)
			}
			checkTree(t, ev, own.cmd.Process.Pid, execs)
			for _, x := range ev.log {
				if x.pid == other.cmd.Process.Pid || x.parent == other.cmd.Process.Pid {
					t.Errorf("the unrelated tree's event %+v was recorded", x)
				}
			}
			degraded := ev.FilterDegraded()
			switch {
			case tt.wantErr == errAny && degraded == nil, tt.wantErr != errAny && !errors.Is(degraded, tt.wantErr):
				t.Errorf("FilterDegraded() = %v, want %v", degraded, tt.wantErr)
			case degraded != nil:
				t.Logf("FilterDegraded: %v", degraded)
			}
			if ev.Lost() != 0 {
				t.Fatalf("Lost = %d, want 0", ev.Lost())
			}
			// Every datagram the tracked tree caused is recorded; the rest woke the reader for nothing.
			extra := ev.datagrams - len(ev.log)
			if !tt.foreign && extra != 0 {
				t.Errorf("the reader read %d datagrams of other processes, want 0", extra)
			}
			if tt.foreign && extra < minForeignEvents {
				t.Errorf("the reader read %d datagrams of other processes, want at least the unrelated tree's %d",
					extra, minForeignEvents)
			}
		})
	}
}

// errAny stands for any error in a want.
var errAny = errors.New("any error")

// checkTree checks that the recording holds the tree of root: the fork, exec and exit of its child, of the
// inner sh and of the inner sh's child, and root's own exit.
func checkTree(t *testing.T, ev *Events, root int, execs []report.Exec) {
	t.Helper()
	children := map[int][]int{}
	execd, exited := map[int]bool{}, map[int]bool{}
	for _, x := range ev.log {
		switch x.what {
		case procEventFork:
			children[x.parent] = append(children[x.parent], x.pid)
		case procEventExec:
			execd[x.pid] = true
		case procEventExit:
			exited[x.pid] = true
		}
	}
	kids := children[root]
	if len(kids) != 2 {
		t.Fatalf("forks of the tracked process: %v, want 2 (log %+v)", kids, ev.log)
	}
	grandkids := children[kids[1]]
	if len(grandkids) == 0 {
		t.Fatalf("the inner sh %d forked nothing that was seen (log %+v)", kids[1], ev.log)
	}
	for _, p := range []int{kids[0], kids[1], grandkids[0]} {
		if !execd[p] || !exited[p] {
			t.Errorf("process %d: exec seen %v, exit seen %v, want both", p, execd[p], exited[p])
		}
	}
	if !exited[root] {
		t.Errorf("the tracked process's exit was not seen")
	}
	// Stop's list: the same execs, of the tree only.
	var listed []int
	for _, x := range execs {
		listed = append(listed, x.HostPid)
	}
	for _, p := range []int{kids[0], kids[1], grandkids[0]} {
		if !slices.Contains(listed, p) {
			t.Errorf("Stop listed the execs of %v, want %d among them", listed, p)
		}
	}
}

func mapKeys(m *ebpf.Map) []uint32 {
	var keys []uint32
	var k, v uint32
	for it := m.Iterate(); it.Next(&k, &v); {
		keys = append(keys, k)
	}
	return keys
}

// TestEventsFilterLeavesNothing: once Stop closed the socket and the maps, the kernel frees the filter's
// maps, and with them the program that held them: nothing is pinned or kept per run.
func TestEventsFilterLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t, "subscribes to the kernel's process events, loads eBPF")
	var ids []ebpf.MapID
	for range 3 {
		ev, err := StartEvents(EventsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ev.tr == nil {
			t.Fatalf("no eBPF filter: %v", ev.FilterDegraded())
		}
		for _, m := range []*ebpf.Map{ev.tr.pids, ev.tr.open} {
			info, err := m.Info()
			if err != nil {
				t.Fatal(err)
			}
			id, ok := info.ID()
			if !ok {
				t.Skip("the kernel does not report map ids")
			}
			ids = append(ids, id)
		}
		if _, err := ev.Stop(nil); err != nil {
			t.Fatal(err)
		}
		if fds := bpfFDs(t); len(fds) != 0 {
			t.Fatalf("eBPF fds left open after Stop: %v", fds)
		}
	}
	// The socket's filter is released after an RCU grace period.
	waitFor(t, func() bool {
		for _, id := range ids {
			if m, err := ebpf.NewMapFromID(id); err == nil {
				m.Close()
				return false
			}
		}
		return true
	})
}

// bpfFDs lists the process's fds that refer to eBPF maps or programs.
func bpfFDs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && strings.HasPrefix(target, "anon_inode:bpf") {
			out = append(out, e.Name()+" -> "+target)
		}
	}
	return out
}

// TestEventsFilterSize: the filter's map makes room for what the caller asks, within its bounds.
func TestEventsFilterSize(t *testing.T) {
	testutil.RequireRoot(t, "subscribes to the kernel's process events, loads eBPF")
	for _, tt := range []struct{ ask, want int }{
		{0, defaultTrackMax}, {1024 + 64, defaultTrackMax}, {5000, 5000}, {1 << 20, maxTrackMax},
	} {
		ev, err := StartEvents(EventsOptions{MaxProcesses: tt.ask})
		if err != nil {
			t.Fatal(err)
		}
		if ev.tr == nil {
			t.Fatalf("no eBPF filter: %v", ev.FilterDegraded())
		}
		if got := int(ev.tr.pids.MaxEntries()); got != tt.want {
			t.Errorf("MaxProcesses %d: the map holds %d, want %d", tt.ask, got, tt.want)
		}
		if _, err := ev.Stop(nil); err != nil {
			t.Fatal(err)
		}
	}
}

// leaderExitsScript ends its first thread alone (SYS_exit, as pthread_exit does), and its second thread
// then forks a child (/bin/true) and execs /bin/echo, all under the pid of the process.
const leaderExitsScript = `import ctypes, os, platform, threading, time
SYS_exit = {"x86_64": 60, "aarch64": 93}[platform.machine()]
def worker():
    time.sleep(0.1)
    pid = os.fork()
    if pid == 0:
        os.execv("/bin/true", ["/bin/true", "child"])
    os.waitpid(pid, 0)
    os.execv("/bin/echo", ["/bin/echo", "last"])
threading.Thread(target=worker).start()
ctypes.CDLL(None).syscall(SYS_exit, 0)
`

// TestEventsLeaderExitsFirst: a process whose leader thread exits first lives on in its other threads;
// what they fork and exec is recorded, whichever filter serves. The old stream took the leader's exit for
// the process's and lost everything after it: with the eBPF filter that was fixed by counting threads in
// the kernel, but the classic filter (no eBPF, as without root) and the eBPF one once its map is full
// (which a command without a pids limit can fill) still passed the leader's exit, and the reader ended
// the process there.
func TestEventsLeaderExitsFirst(t *testing.T) {
	testutil.RequireRoot(t, "subscribes to the kernel's process events, loads eBPF")
	tests := []struct {
		name    string
		load    func(fd, maxPids int, pids []int) (*tracker, error)
		wantErr error // FilterDegraded
	}{
		{name: "eBPF", load: loadTracker},
		{
			// Room for sbx only: python3's fork opens the filter.
			name:    "eBPF map full",
			load:    func(fd, _ int, pids []int) (*tracker, error) { return startTracker(fd, 1, pids) },
			wantErr: ErrFilterFull,
		},
		{
			name:    "classic filter",
			load:    func(fd, _ int, pids []int) (*tracker, error) { return startTracker(fd, 0, pids) },
			wantErr: errAny,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func(l func(int, int, []int) (*tracker, error)) { loadTracker = l }(loadTracker)
			loadTracker = tt.load
			checkLeaderExitsFirst(t, tt.wantErr)
		})
	}
}

func checkLeaderExitsFirst(t *testing.T, wantErr error) {
	t.Helper()
	ev, err := StartEvents(EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", "-c", leaderExitsScript)
	out, err := cmd.Output()
	if err != nil || string(out) != "last\n" {
		t.Fatalf("python3: %q, %v", out, err)
	}
	execs, err := ev.Stop([]int{cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	if degraded := ev.FilterDegraded(); wantErr == nil && degraded != nil || wantErr == errAny && degraded == nil ||
		wantErr != nil && wantErr != errAny && !errors.Is(degraded, wantErr) {
		t.Fatalf("FilterDegraded() = %v, want %v", degraded, wantErr)
	}
	// python3's exec, its child's (/bin/true) and its own second (/bin/echo). An exec too fast to read
	// keeps only its pids.
	pid := cmd.Process.Pid
	want := []struct {
		own  bool
		comm string
	}{{true, "python3"}, {false, "true"}, {true, "echo"}}
	ok := len(execs) == len(want)
	for i := 0; ok && i < len(want); i++ {
		x := execs[i]
		ok = (x.HostPid == pid) == want[i].own && (x.Comm == want[i].comm || x.Incomplete && x.Exe == "")
	}
	if !ok {
		t.Errorf("execs %+v: want python3's, its child's /bin/true and its own /bin/echo", execs)
	}
}

// TestEventsFilterPidReused: a tracked pid that the host hands to an unrelated process (here: one Track
// was given after the process with that pid had gone) is dropped from the map at the new process's fork,
// and nothing of the new process reaches the reader.
func TestEventsFilterPidReused(t *testing.T) {
	testutil.RequireRoot(t, "subscribes to the kernel's process events, loads eBPF, sets ns_last_pid")
	for range 20 {
		gone := exec.Command("/bin/true")
		if err := gone.Run(); err != nil {
			t.Fatal(err)
		}
		x := gone.Process.Pid
		ev, err := StartEvents(EventsOptions{Track: []int{x}})
		if err != nil {
			t.Fatal(err)
		}
		reuser := runAsPid(t, ev, x, "sh", "-c", "/bin/true; /bin/true")
		left := mapKeys(ev.tr.pids)
		if _, err := ev.Stop(nil); err != nil {
			t.Fatal(err)
		}
		if reuser.Process.Pid != x {
			continue
		}
		if len(left) != 0 || ev.datagrams != 0 {
			t.Errorf("pid %d reused by an untracked process: the map holds %v, the reader read %d datagrams, want none",
				x, left, ev.datagrams)
		}
		return
	}
	t.Skip("the host took the pid first 20 times")
}

// TestEventsPidReusedInTree: a pid of a root's tree that the host hands to a process outside that tree
// (here another child of the tracked test, as another run of a server would be) takes none of the tree's
// membership with it, whichever filter serves: with the classic filter a leader's exit no longer ends a
// pid's tracking (TestEventsLeaderExitsFirst), the new process's fork does.
func TestEventsPidReusedInTree(t *testing.T) {
	testutil.RequireRoot(t, "subscribes to the kernel's process events, loads eBPF, sets ns_last_pid")
	for _, tt := range []struct {
		name string
		load func(fd, maxPids int, pids []int) (*tracker, error)
	}{
		{"eBPF", loadTracker},
		{"eBPF map full", func(fd, _ int, pids []int) (*tracker, error) { return startTracker(fd, 1, pids) }},
		{"classic filter", func(fd, _ int, pids []int) (*tracker, error) { return startTracker(fd, 0, pids) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func(l func(int, int, []int) (*tracker, error)) { loadTracker = l }(loadTracker)
			loadTracker = tt.load
			checkPidReusedInTree(t)
		})
	}
}

func checkPidReusedInTree(t *testing.T) {
	t.Helper()
	for range 20 {
		ev, err := StartEvents(EventsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The root's child (sh) prints its pid and exits; the root waits for it, then exits.
		root := exec.Command("sh", "-c", "sh -c 'echo $$'; exit 0")
		out, err := root.Output()
		if err != nil {
			t.Fatal(err)
		}
		x, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatal(err)
		}
		reuser := runAsPid(t, ev, x, "/usr/bin/env", "true") // execs env, then true
		execs, err := ev.Stop([]int{root.Process.Pid})
		if err != nil {
			t.Fatal(err)
		}
		if reuser.Process.Pid != x {
			continue
		}
		for _, e := range execs {
			if e.HostPid != root.Process.Pid && e.HostPid != x || e.HostPid == x && e.Comm != "sh" && e.Comm != "" {
				t.Errorf("exec %+v listed for the root's tree, want only the root's and its child's", e)
			}
		}
		if len(execs) > 2 {
			t.Errorf("%d execs listed for the root's tree, want 2 at most (its own and its child's)", len(execs))
		}
		return
	}
	t.Skip("the host took the pid first 20 times")
}

// runAsPid runs a command as pid x, if no other process takes x first (the caller checks), while ev
// records.
func runAsPid(t *testing.T, ev *Events, x int, args ...string) *exec.Cmd {
	t.Helper()
	// The next pid the host hands out is x again, unless another process takes it first.
	if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(x-1)), 0); err != nil {
		ev.Stop(nil)
		t.Skipf("cannot choose the next pid: %v", err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// TestEventsTrackedBounded: where a leader's exit does not end a pid's tracking (the classic filter),
// the tracked pids are bounded: past maxTracked, those gone from /proc are dropped, and the recording
// says it may have lost an event.
func TestEventsTrackedBounded(t *testing.T) {
	testutil.RequireRoot(t, "subscribes to the kernel's process events")
	defer func(l func(int, int, []int) (*tracker, error), m int) { loadTracker, maxTracked = l, m }(loadTracker, maxTracked)
	loadTracker = func(fd, _ int, pids []int) (*tracker, error) { return startTracker(fd, 0, pids) }
	maxTracked = 8
	ev, err := StartEvents(EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do /bin/true; done").Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := ev.Stop(nil); err != nil {
		t.Fatal(err)
	}
	if n := len(ev.tracked); n > maxTracked+1 || ev.Lost() == 0 {
		t.Errorf("%d pids tracked, %d losses: want at most %d, and the sweep counted", n, ev.Lost(), maxTracked+1)
	}
}
