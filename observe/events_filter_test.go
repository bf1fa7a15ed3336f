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

// TestEventsFilter: the socket filter lets execs and whole processes' forks and exits through, and
// drops threads' forks and exits in the kernel.
func TestEventsFilter(t *testing.T) {
	testutil.RequireRoot(t, "subscribes to the kernel's process events")
	fd, err := procConnectorSocket(attachClassic)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	cmd := exec.Command("/usr/bin/python3", "-c", "import threading\n"+
		"ts = [threading.Thread(target=lambda: None) for _ in range(20)]\n"+
		"[t.start() for t in ts]\n[t.join() for t in ts]")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	var forks, execs, exits, threads int
	buf := make([]byte, 4096)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && exits == 0 {
		n, err := unix.Read(fd, buf)
		if err == unix.EAGAIN {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n < procEventDataOff+16 {
			continue
		}
		d := buf[procEventDataOff:n]
		u32 := func(i int) uint32 { return binary.NativeEndian.Uint32(d[4*i:]) }
		switch binary.NativeEndian.Uint32(buf[procEventOffset:]) {
		case procEventFork:
			if u32(2) != u32(3) {
				threads++
			} else if u32(3) == pid {
				forks++
			}
		case procEventExec:
			if u32(1) == pid {
				execs++
			}
		case procEventExit:
			if u32(0) != u32(1) {
				threads++
			} else if u32(1) == pid {
				exits++
			}
		}
	}
	if forks != 1 || execs != 1 || exits != 1 {
		t.Errorf("python3's fork, exec and exit: %d, %d, %d events, want 1 each", forks, execs, exits)
	}
	if threads != 0 {
		t.Errorf("%d thread forks or exits got through the filter", threads)
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
