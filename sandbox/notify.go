package sandbox

// The Sandbox's side of the seccomp notifications (package seccomp): starting the listener, the CPU
// time its budget is judged against, and what it recorded.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	libseccomp "github.com/seccomp/libseccomp-golang"

	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/sandbox/cgroup"
	"github.com/sbx-dev/sbx/sandbox/seccomp"
)

// startNotify starts the listener of the seccomp notifications when the plan records anything.
func (s *Sandbox) startNotify() error {
	plan := s.cfg.Plan
	if plan.Seccomp == nil || (len(plan.Record.Syscalls) == 0 && !plan.Record.Writes) {
		return nil
	}
	if api, _ := libseccomp.GetAPI(); api < 6 {
		// Recording is no enforcement: without it the deny list still refuses, as a plain errno rule.
		s.notifyOff = fmt.Sprintf("seccomp user notification needs libseccomp 2.5 and Linux 5.7 (libseccomp API 6, this one has %d)", api)
		return nil
	}
	l, err := seccomp.NewListener(plan.Seccomp, plan.Record, s.writePaths(), s.cpuUsage)
	if err != nil {
		return err
	}
	s.notify = l
	return nil
}

// cpuUsage is the CPU time the sandbox has used: its cgroup's (v2 cpu.stat, v1 cpuacct.usage), else,
// with no cgroup to read (without root, where none is delegated), that of every live process that
// descends from the sandbox's pid 1 (the supervisor), each with the children it reaped: a process that
// ended was reaped by its parent, or, orphaned, by pid 1, so its time is in theirs (treeCPU). Counting
// only pid 1 and the notifying task left out the live processes that had reaped the run's work so far
// (a shell that runs a build's steps): rootless compat_tools under qemu's emulation had 3.3 s of
// recording against 53 s of the sandbox's CPU, and 130 writes unread past a budget that saw little.
func (s *Sandbox) cpuUsage(pid int) (time.Duration, bool) {
	var dirs []string
	if paths := s.cgroupPaths(); paths != nil {
		for _, k := range []string{"", "cpuacct", "cpu,cpuacct", "cpu"} {
			if d, ok := paths[k]; ok {
				dirs = append(dirs, d)
			}
		}
	} else {
		dirs = cgroup.Dirs(s.ID)
	}
	for _, d := range dirs {
		if n := cgroup.Counter(filepath.Join(d, "cpu.stat"), "usage_usec"); n > 0 {
			return time.Duration(n) * time.Microsecond, true
		}
		if b, err := os.ReadFile(filepath.Join(d, "cpuacct.usage")); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
				return time.Duration(n), true
			}
		}
	}
	if s.initPid > 0 {
		if t, ok := treeCPU(s.initPid); ok {
			return t, true
		}
	}
	return procCPU(pid)
}

// treeCPU is the CPU time of pid and of every live process that descends from it, each with the
// children it reaped (procCPU): the time of all that the tree ran, but for processes that ended
// unreaped. Each process is counted once, at most maxTreeCPU of them.
func treeCPU(pid int) (time.Duration, bool) {
	total, ok := procCPU(pid)
	if !ok {
		return 0, false
	}
	seen := map[int]bool{pid: true}
	queue := []int{pid}
	for len(queue) > 0 && len(seen) < maxTreeCPU {
		kids, _, _ := children(queue[0])
		queue = queue[1:]
		for _, k := range kids {
			if seen[k] {
				continue
			}
			seen[k] = true
			queue = append(queue, k)
			if t, ok := procCPU(k); ok {
				total += t
			}
		}
	}
	return total, true
}

// maxTreeCPU bounds the processes treeCPU reads (a sandbox's pids limit is usually far below).
const maxTreeCPU = 4096

// procCPU is the user and system CPU time of pid's thread group and of the children it reaped (and
// theirs), from /proc/PID/stat (clock ticks of 1/100 s).
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, false
	}
	var ticks int64
	for _, v := range f[11:15] { // utime, stime, cutime, cstime
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, true
}

// Denials returns what sbx recorded itself of what the sandbox refused so far (seccomp-notify and
// write-notify); Available is false when it records nothing (the profile turned it off, the sandbox
// has no seccomp filter, or libseccomp is too old: then Sources say so).
func (s *Sandbox) Denials() report.Denials {
	if s.notify != nil {
		return s.notify.Records(s.cfg.Plan.Record)
	}
	return seccomp.NotRecorded(s.cfg.Plan.Record, s.notifyOff)
}
