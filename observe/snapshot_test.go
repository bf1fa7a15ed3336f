package observe

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/report"
)

// TestSnapshotVictim runs a small sandbox (a reaping init, a command that exits, a renamed daemon started
// from a binary it then deletes, a double-forked sleeper) and checks what a snapshot reports of it.
func TestSnapshotVictim(t *testing.T) {
	testutil.RequireRoot(t, "creates pid and net namespaces, reads other processes' /proc entries")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "victim-copy")
	copyFile(t, self, bin)
	s := startVictim(t, victimEnv+"=init", copyEnv+"="+bin)
	var ready victimReady
	if err := json.Unmarshal(waitFile(t, filepath.Join(s.dir, "ready")), &ready); err != nil {
		t.Fatal(err)
	}
	// The daemon and the sleeper, once the command and middle exited: two processes are not enough, the
	// middle one may still be there while the sleeper is not yet.
	snap := settledSnapshot(t, s, "renamed-daemon", "sleep")
	daemon := findProc(t, snap, func(p report.Process) bool { return p.Comm == "renamed-daemon" })
	sleeper := findProc(t, snap, func(p report.Process) bool { return p.Comm == "sleep" })

	t.Run("process", func(t *testing.T) {
		tests := []struct {
			name string
			got  any
			want any
		}{
			{"init left out", slices.ContainsFunc(snap.Processes, func(p report.Process) bool { return p.Pid == 1 }), false},
			{"daemon real exe despite rename", daemon.Exe, bin},
			{"daemon exe deleted", daemon.Deleted, true},
			{"daemon orphaned", daemon.Orphaned, true},
			{"daemon ppid", daemon.PPid, 1},
			{"daemon uid", daemon.UID, 0},
			{"daemon argv", daemon.Argv[0], bin},
			{"daemon started", !daemon.Started.IsZero(), true},
			{"sleeper orphaned", sleeper.Orphaned, true},
			{"sleeper argv", strings.Join(sleeper.Argv, " "), "/bin/sleep 300"},
			{"sleeper exe not deleted", sleeper.Deleted, false},
			{"sandbox pids", daemon.Pid > 1 && daemon.Pid < 100 && daemon.HostPid != daemon.Pid, true},
		}
		for _, tt := range tests {
			if tt.got != tt.want {
				t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
			}
		}
	})

	t.Run("fds", func(t *testing.T) {
		tests := []struct {
			name       string
			kind       string
			target     string // exact target, or "" to match on socket description
			socketHas  string // substring of the socket description
			wantSocket bool
		}{
			{"log file", "file", ready.Log, "", false},
			{"tcp listener", "socket", "", "127.0.0.1:" + itoa(ready.TCPPort) + " LISTEN", true},
			{"tcp established", "socket", "", "-> 127.0.0.1:" + itoa(ready.TCPPort) + " ESTABLISHED", true},
			{"udp6 socket", "socket", "", "udp6 [::]:" + itoa(ready.UDPPort) + " UNCONN", true},
			{"abstract unix", "socket", "", "unix stream " + ready.Unix + " LISTEN", true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				i := slices.IndexFunc(daemon.FDs, func(fd report.FD) bool {
					if tt.target != "" {
						return fd.Target == tt.target
					}
					return strings.Contains(fd.Socket, tt.socketHas)
				})
				if i < 0 {
					t.Fatalf("no fd matches; fds: %v", describeFDs(daemon.FDs))
				}
				if fd := daemon.FDs[i]; fd.Kind != tt.kind || (fd.Socket != "") != tt.wantSocket {
					t.Errorf("fd %s: kind %q socket %q, want kind %q", fd.Target, fd.Kind, fd.Socket, tt.kind)
				}
			})
		}
	})

	t.Run("listening", func(t *testing.T) {
		tests := []struct {
			name, proto, address string
			port                 int
		}{
			{"tcp", "tcp", "127.0.0.1", ready.TCPPort},
			{"udp6", "udp6", "::", ready.UDPPort},
			{"abstract unix", "unix", ready.Unix, 0},
		}
		for _, tt := range tests {
			i := slices.IndexFunc(snap.Listening, func(s report.Socket) bool {
				return s.Proto == tt.proto && s.Address == tt.address && s.Port == tt.port
			})
			if i < 0 {
				t.Errorf("%s: no listener %s %s:%d in %+v", tt.name, tt.proto, tt.address, tt.port, snap.Listening)
				continue
			}
			if l := snap.Listening[i]; l.Pid != daemon.Pid || l.Exe != bin {
				t.Errorf("%s: owner pid %d exe %q, want %d %q", tt.name, l.Pid, l.Exe, daemon.Pid, bin)
			}
		}
		if len(snap.Listening) != len(tests) {
			t.Errorf("got %d listeners, want %d: %+v", len(snap.Listening), len(tests), snap.Listening)
		}
	})

	t.Run("established", func(t *testing.T) {
		// Both ends of the loopback connection are in the namespace; the daemon accepted, so it holds both.
		if len(snap.Established) != 2 {
			t.Fatalf("got %d established sockets, want 2: %+v", len(snap.Established), snap.Established)
		}
		for _, e := range snap.Established {
			if e.Pid != daemon.Pid || e.Remote == "" {
				t.Errorf("established %+v: want owner %d and a remote end", e, daemon.Pid)
			}
		}
	})

	t.Run("left running", func(t *testing.T) {
		before := &Snap{Processes: []report.Process{sleeper}}
		left := LeftRunning(before, snap)
		if len(left) != 1 || left[0].HostPid != daemon.HostPid {
			t.Errorf("LeftRunning = %v, want only the daemon %d", left, daemon.HostPid)
		}
	})
}

// settledSnapshot snapshots the victim until it holds want live processes besides the init: the command
// and the middle process exit on their own time.
// settledSnapshot snapshots the sandbox until it holds exactly the processes named comms, none a zombie.
func settledSnapshot(t *testing.T, s *sandboxUnderTest, comms ...string) *Snap {
	t.Helper()
	var snap *Snap
	for deadline := time.Now().Add(testutil.Scaled(2 * time.Second)); snap == nil || time.Now().Before(deadline); {
		var err error
		snap, err = Snapshot(SnapshotOptions{
			HostPids:    testutil.Descendants(s.init.Process.Pid),
			InitHostPid: s.init.Process.Pid,
			NetNS:       "/proc/" + itoa(s.init.Process.Pid) + "/ns/net",
		})
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		var got []string
		for _, p := range snap.Processes {
			if p.State != "Z" {
				got = append(got, p.Comm)
			}
		}
		slices.Sort(got)
		if len(got) == len(snap.Processes) && slices.Equal(got, slices.Sorted(slices.Values(comms))) {
			return snap
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("victim never settled: %+v", snap.Processes)
	return nil
}

func findProc(t *testing.T, s *Snap, f func(report.Process) bool) report.Process {
	t.Helper()
	i := slices.IndexFunc(s.Processes, f)
	if i < 0 {
		t.Fatalf("process not found in %+v", s.Processes)
	}
	return s.Processes[i]
}

func describeFDs(fds []report.FD) []string {
	var out []string
	for _, fd := range fds {
		out = append(out, fd.Describe())
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestSnapshotPartial checks that a part that cannot be read (here the sockets: no such namespace) is an
// error beside a snapshot that still holds the processes.
func TestSnapshotPartial(t *testing.T) {
	testutil.RequireRoot(t, "creates pid and net namespaces, reads other processes' /proc entries")
	snap, err := Snapshot(SnapshotOptions{HostPids: []int{os.Getpid()}, NetNS: filepath.Join(t.TempDir(), "no-netns")})
	if err == nil {
		t.Error("Snapshot with a missing network namespace: no error")
	}
	if snap == nil || len(snap.Processes) != 1 || snap.Processes[0].HostPid != os.Getpid() {
		t.Fatalf("Snapshot = %+v, want this process despite the error", snap)
	}
}

// TestProcessesOfThreads checks that a thread id names its process, so that a task list from a cgroup
// finds the processes whose main thread exited.
func TestProcessesOfThreads(t *testing.T) {
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var others []int
	for _, e := range tids {
		if tid, _ := strconv.Atoi(e.Name()); tid != os.Getpid() {
			others = append(others, tid)
		}
	}
	if len(others) == 0 {
		t.Skip("the test binary has one thread")
	}
	for _, known := range [][]int{nil, {os.Getpid()}} {
		pids, err := processesOf(known, others)
		if err != nil || !slices.Equal(pids, []int{os.Getpid()}) {
			t.Errorf("processesOf(%v, threads of this process) = %v, %v; want [%d]", known, pids, err, os.Getpid())
		}
	}
}

func TestLeftRunning(t *testing.T) {
	p := func(host int, start uint64, state string) report.Process {
		return report.Process{HostPid: host, Start: start, State: state}
	}
	before := &Snap{Processes: []report.Process{p(10, 100, "S"), p(11, 100, "S")}}
	after := &Snap{Processes: []report.Process{
		p(10, 100, "S"), // there before: not left by the command
		p(11, 555, "S"), // same pid, new start time: a reused pid, new
		p(12, 600, "S"), // new
		p(13, 600, "Z"), // exited, not reaped yet
		p(14, 500, "S"), // new, with the host pid the command had (reaped before the snapshot)
	}}
	var got []int
	for _, l := range LeftRunning(before, after) {
		got = append(got, l.HostPid)
	}
	if !slices.Equal(got, []int{11, 12, 14}) {
		t.Errorf("LeftRunning = %v, want [11 12 14]", got)
	}
}
