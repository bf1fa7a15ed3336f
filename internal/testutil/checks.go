package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CheckFDs fails the suite when the tests leave file descriptors open in the test process.
func CheckFDs() func() error {
	// The runtime opens its poller's epoll fd and eventfd on first use: make that happen before counting.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before := openFDs()
	return func() error {
		after := openFDs()
		for i := 0; i < 20 && after > before; i++ { // an fd a test's goroutine is about to close
			time.Sleep(50 * time.Millisecond)
			after = openFDs()
		}
		if after > before {
			return fmt.Errorf("leaked %d fds", after-before)
		}
		return nil
	}
}

// openFDs counts the test process's open file descriptors, but not the Go runtime's own cgroup files
// (it keeps the CPU limit's files open to follow changes, and opens them at a moment of its choosing)
// nor an fd closed while they are counted (the listing's own, one a finishing goroutine closes).
func openFDs() int {
	entries, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, e := range entries {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && !strings.HasPrefix(target, "/sys/fs/cgroup/") {
			n++
		}
	}
	return n
}

// CheckChildren fails the suite when a process the tests started, or one of its descendants, is left.
func CheckChildren() func() error {
	return func() error {
		if kids := Descendants(os.Getpid())[1:]; len(kids) > 0 {
			return fmt.Errorf("left child processes %v", kids)
		}
		return nil
	}
}

// Descendants lists pid and its descendants through /proc/PID/task/TID/children (what a cgroup gives
// sbx).
func Descendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(out[i]) + "/task/*/children")
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, c := range strings.Fields(string(b)) {
				n, _ := strconv.Atoi(c)
				out = append(out, n)
			}
		}
	}
	return out
}
