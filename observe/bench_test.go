package observe

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// benchSandbox starts a pid+net namespace holding 20 processes besides its init and returns the options
// of its after-snapshot.
func benchSandbox(b *testing.B) SnapshotOptions {
	s := startVictim(b, victimEnv+"=bench-init", countEnv+"=21")
	waitFor(b, func() bool { return len(testutil.Descendants(s.init.Process.Pid)) == 21 })
	return SnapshotOptions{
		HostPids:    testutil.Descendants(s.init.Process.Pid),
		InitHostPid: s.init.Process.Pid,
		NetNS:       "/proc/" + itoa(s.init.Process.Pid) + "/ns/net",
	}
}

func benchSnapshot(b *testing.B, opts SnapshotOptions) {
	b.ReportAllocs()
	for b.Loop() {
		snap, err := Snapshot(opts)
		if err != nil {
			b.Fatal(err)
		}
		if len(snap.Processes) != 20 {
			b.Fatalf("got %d processes, want 20", len(snap.Processes))
		}
	}
}

// BenchmarkSnapshot is the after-snapshot of a sandbox with 20 processes. Target: 1 ms.
func BenchmarkSnapshot(b *testing.B) {
	testutil.RequireRoot(b, "creates pid and net namespaces, reads other processes' /proc entries")
	benchSnapshot(b, benchSandbox(b))
}

// BenchmarkSnapshotBusyHost is the same with 500 more idle processes on the host: the cost must not
// grow, since the snapshot never walks the host's /proc.
func BenchmarkSnapshotBusyHost(b *testing.B) {
	testutil.RequireRoot(b, "creates pid and net namespaces, reads other processes' /proc entries")
	startIdleHostProcesses(b, 500)
	benchSnapshot(b, benchSandbox(b))
}

// startIdleHostProcesses starts n sleepers of its own in the host namespaces; they are killed by pid and
// waited for in Cleanup.
func startIdleHostProcesses(b *testing.B, n int) {
	cmds := make([]*exec.Cmd, 0, n)
	b.Cleanup(func() {
		for _, c := range cmds {
			_ = c.Process.Signal(syscall.SIGKILL)
			_ = c.Wait()
		}
	})
	for range n {
		c := exec.Command("/bin/sleep", "600")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, c)
	}
}

// BenchmarkExecTrue measures what the event stream costs a command: run /bin/true with and without it
// recording (and reading each exec from /proc, as the command is a descendant of this process).
func BenchmarkExecTrue(b *testing.B) {
	testutil.RequireRoot(b, "creates pid and net namespaces, reads other processes' /proc entries")
	run := func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("without events", run)
	b.Run("with events", func(b *testing.B) {
		ev, err := StartEvents(EventsOptions{})
		if err != nil {
			b.Fatal(err)
		}
		run(b)
		execs, err := ev.Stop([]int{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(ev.Lost()), "lost")
		_ = execs
	})
}

// BenchmarkEventsStartStop is the fixed cost of the stream for one run.
func BenchmarkEventsStartStop(b *testing.B) {
	testutil.RequireRoot(b, "creates pid and net namespaces, reads other processes' /proc entries")
	for b.Loop() {
		ev, err := StartEvents(EventsOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ev.Stop(nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshotParts splits the after-snapshot's cost: the socket dump and the process walk alone.
func BenchmarkSnapshotParts(b *testing.B) {
	testutil.RequireRoot(b, "creates pid and net namespaces, reads other processes' /proc entries")
	opts := benchSandbox(b)
	b.Run("sockets", func(b *testing.B) {
		for b.Loop() {
			if _, err := readSockets(opts.NetNS); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("processes sequential", func(b *testing.B) {
		for b.Loop() {
			if _, err := readProcRange(opts.HostPids); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("processes", func(b *testing.B) {
		for b.Loop() {
			if _, err := readProcs(opts); err != nil {
				b.Fatal(err)
			}
		}
	})
}
