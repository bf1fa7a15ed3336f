package observe

import (
	"encoding/binary"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestEventsFilter: both socket filters let execs and whole processes' forks and exits through, and drop
// threads' forks and exits in the kernel. The eBPF filter, tracking the test, passes nothing but the
// events of its child.
func TestEventsFilter(t *testing.T) {
	testutil.RequireRoot(t, "subscribes to the kernel's process events, loads eBPF")
	for _, tt := range []struct {
		name     string
		tracking bool
		wantOnly bool // nothing but the child's events
	}{
		{name: "classic"},
		{name: "eBPF", tracking: true, wantOnly: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			attach := attachClassic
			var tr *tracker
			if tt.tracking {
				attach = func(fd int) (err error) {
					tr, err = startTracker(fd, defaultTrackMax, []int{os.Getpid()})
					return err
				}
			}
			fd, err := procConnectorSocket(attach)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			if tr != nil {
				defer tr.close()
			}
			checkFilter(t, fd, tt.wantOnly)
		})
	}
}

// checkFilter runs python3 with 20 threads and reads what fd passes until python3's exit.
func checkFilter(t *testing.T, fd int, wantOnly bool) {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", "import threading\n"+
		"ts = [threading.Thread(target=lambda: None) for _ in range(20)]\n"+
		"[t.start() for t in ts]\n[t.join() for t in ts]")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	var forks, execs, exits, threads, others int
	buf := make([]byte, 4096)
	deadline := time.Now().Add(testutil.Scaled(2 * time.Second))
	for time.Now().Before(deadline) && exits == 0 {
		n, err := unix.Read(fd, buf)
		if err == unix.EAGAIN {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n < procEventDataOff+8 { // an exit the eBPF filter passes as a process's end keeps 8 bytes of data
			continue
		}
		d := buf[procEventDataOff:n]
		u32 := func(i int) uint32 { return binary.NativeEndian.Uint32(d[4*i:]) }
		switch binary.NativeEndian.Uint32(buf[procEventOffset:]) {
		case procEventFork:
			switch {
			case u32(2) != u32(3):
				threads++
			case u32(3) == pid:
				forks++
			default:
				others++
			}
		case procEventExec:
			if u32(1) == pid {
				execs++
			} else {
				others++
			}
		case procEventExit:
			// The eBPF filter passes the exit of the process's last task, which can be a thread
			// still on its way out when the leader exits; the classic one passes the leader's.
			switch {
			case u32(1) == pid && (u32(0) == u32(1) || wantOnly):
				exits++
			case u32(0) != u32(1):
				threads++
			default:
				others++
			}
		default:
			others++
		}
	}
	if forks != 1 || execs != 1 || exits != 1 {
		t.Errorf("python3's fork, exec and exit: %d, %d, %d events, want 1 each", forks, execs, exits)
	}
	if threads != 0 {
		t.Errorf("%d thread forks or exits got through the filter", threads)
	}
	if wantOnly && others != 0 {
		t.Errorf("%d events of other processes got through the filter", others)
	}
}

// TestEventsReaderGivesBackItsThread: the reader raises its thread's priority and restores it before the
// thread returns to the runtime: after a few runs no thread of the process keeps the raised priority.
func TestEventsReaderGivesBackItsThread(t *testing.T) {
	testutil.RequireRoot(t, "subscribes to the kernel's process events")
	for range 3 {
		ev, err := StartEvents(EventsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ev.Stop(nil); err != nil {
			t.Fatal(err)
		}
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		if p, err := unix.Getpriority(unix.PRIO_PROCESS, tid); err == nil && p != 20 {
			t.Errorf("thread %d has nice %d after the readers ended, want 0", tid, 20-p)
		}
	}
}
