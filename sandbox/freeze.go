package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/sandbox/cgroup"
	"golang.org/x/sys/unix"
)

// ErrNoFreezer is returned by Freeze when the sandbox has no cgroup with a freezer (a rootless run on a
// host without cgroup delegation): the observation then races with what still runs.
var ErrNoFreezer = errors.New("the sandbox has no cgroup freezer")

// Freeze stops every task of the sandbox with the cgroup freezer (v1 freezer.state, v2 cgroup.freeze),
// so that an observation sees one state: a process cannot fork a successor and exit between the listing
// of the processes and the reading of each, nor open or close what is being read. It returns once the
// kernel reports the cgroup frozen.
//
// A frozen sandbox is torn down as any other: Destroy's SIGKILL thaws it (a v1 freezer holds a signal
// until the thaw), and gc thaws what a killed sbx left frozen.
//
// Without root and a cgroup systemd delegates (package cgroup) there is no cgroup: Freeze stops the
// sandbox's processes with SIGSTOP instead (see stopAll).
func (s *Sandbox) Freeze() error {
	if s.cgroups == nil && s.initPid > 0 {
		return s.stopAll()
	}
	if dir, _ := s.tasksDir(); s.container == nil || dir == "" {
		return ErrNoFreezer
	}
	if err := s.container.Pause(); err != nil {
		return fmt.Errorf("freezing the sandbox: %w", err)
	}
	return nil
}

// OnlyInit reports whether nothing but the sandbox's init is left: every task of its cgroups is a thread
// of the init; without a cgroup (rootless, no delegation), every child of the init's threads has ended
// or is ending (ending): every other process of its pid namespace would descend from the init (nsScan). A daemon
// the command stopped before it ended (gpgconf --kill all) can still be in its exit here, releasing its
// files, or the init's zombie, not yet reaped. Nothing can then start any more (the init starts
// nothing after the command), so there is nothing to freeze.
func (s *Sandbox) OnlyInit() bool {
	if s.cgroups == nil {
		kids, gone, err := children(s.initPid)
		if err != nil || gone || slices.ContainsFunc(kids, func(pid int) bool { return !ending(pid) }) {
			return false
		}
		// An ending child hands its own children to the init at the end of its exit, which may have
		// come between the listing and its check (a fork chain): none may be new in a second listing.
		again, gone, err := children(s.initPid)
		return err == nil && !gone && !slices.ContainsFunc(again, func(pid int) bool { return !slices.Contains(kids, pid) })
	}
	tasks, err := s.Tasks()
	if err != nil {
		return false
	}
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(s.initPid) + "/task")
	if err != nil {
		return false
	}
	init := make(map[int]bool, len(entries))
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			init[tid] = true
		}
	}
	for _, tid := range tasks {
		if !init[tid] {
			return false
		}
	}
	return true
}

// Tasks lists the host thread ids of every task in the sandbox's cgroup, threads included (v1 tasks of
// the freezer hierarchy, else v2 cgroup.threads; nested cgroups too: every task is in one cgroup of each
// hierarchy, so one hierarchy lists them all). A process whose main thread exited while another thread
// runs shows in /proc as a zombie; its live threads are here.
func (s *Sandbox) Tasks() ([]int, error) {
	dir, name := s.tasksDir()
	if dir == "" {
		return nil, fmt.Errorf("listing the sandbox's tasks: %w", ErrNoFreezer)
	}
	var tids []int
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join(path, name))
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			if tid, err := strconv.Atoi(f); err == nil {
				tids = append(tids, tid)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the sandbox's tasks: %w", err)
	}
	slices.Sort(tids)
	return slices.Compact(tids), nil
}

// tasksDir finds the cgroup directory whose task list Tasks reads, and that list's name; it remembers
// what it found (a sandbox is observed from one goroutine).
func (s *Sandbox) tasksDir() (dir, name string) {
	if s.tasks[0] != "" {
		return s.tasks[0], s.tasks[1]
	}
	var dirs []string
	if paths := s.cgroupPaths(); paths != nil {
		// freezer (v1) or the one tree (v2): where the probes below find their file.
		for _, name := range []string{"freezer", ""} {
			if d, ok := paths[name]; ok {
				dirs = append(dirs, d)
			}
		}
	} else {
		dirs = cgroup.Dirs(s.ID)
	}
	for _, list := range []struct{ probe, name string }{{"freezer.state", "tasks"}, {"cgroup.threads", "cgroup.threads"}} {
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, list.probe)); err == nil {
				s.tasks = [2]string{d, list.name}
				return d, list.name
			}
		}
	}
	return "", ""
}

// maxStopRounds bounds how many listings stopAll makes before it gives up.
const maxStopRounds = 200

// stopAll stops every process of the sandbox's pid namespace but its init (which starts nothing after
// the command) with SIGSTOP, listing them again until two listings in a row find none it has not
// stopped, none of the sandbox's that vanished while listed (nsScan) and none of those it stopped
// running again. A process with SIGSTOP pending cannot fork (the kernel restarts a fork that a signal
// interrupts), so a chain of forks ends at the process the last round stopped; but one not yet stopped
// can send SIGCONT to one stopped before it, which then runs on through the observation (a process
// spinning on kill(SIGCONT) kept its sibling running, state S in the report, 3 runs in 3), so every
// stopped process is checked to be stopped, thread by thread, and stopped again when it is not. Each
// process is signalled through a pidfd checked to be in the sandbox's pid namespace, so that a reused
// pid is never hit. Destroy's SIGKILL ends stopped processes as any other.
func (s *Sandbox) stopAll() error {
	stopped := map[int]bool{}
	calm := 0
	for range maxStopRounds {
		pids, vanished, err := nsScan(s.initPid)
		if err != nil {
			return fmt.Errorf("stopping the sandbox's processes: %w", err)
		}
		fresh := vanished // what vanished may have left a successor this scan could not see
		for _, pid := range pids {
			if pid == s.initPid || stopped[pid] && isStopped(pid) {
				continue
			}
			fresh = true
			if s.stopOne(pid) {
				stopped[pid] = true
			}
		}
		calm++
		if fresh {
			calm = 0
			// A stop takes effect when the process next returns to user space: let it.
			time.Sleep(time.Millisecond)
		}
		if calm == 2 {
			return nil
		}
	}
	return fmt.Errorf("stopping the sandbox's processes: new or resumed ones still appeared after %d rounds of SIGSTOP", maxStopRounds)
}

// isStopped tells whether no thread of process pid can run the process's code before it stops: every
// one is stopped (T), traced (t) or dead (Z, X; a process whose leader exited shows Z for it while its
// other threads run on), or in uninterruptible sleep (D) with the SIGSTOP still pending, which it takes
// before it returns to the process's code (a vfork parent waits so for its child, which may itself be
// stopped before it executes: that parent never shows T).
func isStopped(pid int) bool {
	return eachTask(pid, func(_ string, stat []byte) bool {
		switch statState(stat) {
		case 'T', 't', 'Z', 'X':
			return true
		case 'D':
			return stopPending(pid)
		}
		return false
	})
}

// eachTask calls f with the /proc directory and the stat file of every thread of process pid, and says
// whether f returned true for all of them. A process gone from /proc has no thread left (true), and a
// thread gone meanwhile is passed over; any other error reading one is false.
func eachTask(pid int, f func(dir string, stat []byte) bool) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tids, err := os.ReadDir(dir)
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	for _, t := range tids {
		stat, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		switch {
		case errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH):
			continue
		case err != nil || !f(dir+"/"+t.Name(), stat):
			return false
		}
	}
	return true
}

// stopPending tells whether SIGSTOP is pending for process pid (its ShdPnd mask: stopAll signals the
// process, not a thread). A SIGCONT since would have taken it away.
func stopPending(pid int) bool {
	v, ok := procField("/proc/"+strconv.Itoa(pid)+"/status", "ShdPnd")
	if !ok {
		return false
	}
	mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
	return err == nil && mask&(1<<(uint(unix.SIGSTOP)-1)) != 0
}

// stopOne sends SIGSTOP to pid if it is still a process of the sandbox's pid namespace; false when it
// is gone (or no longer the sandbox's).
func (s *Sandbox) stopOne(pid int) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	want, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", s.initPid))
	got, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err1 != nil || err2 != nil || want != got {
		return false
	}
	return unix.PidfdSendSignal(fd, unix.SIGSTOP, nil, 0) == nil
}

// NoSockets reports whether the sandbox's network namespace holds no TCP, UDP or unix socket a snapshot
// would list: the namespace's own counts of hashed TCP and UDP sockets (/proc/PID/net/sockstat and
// sockstat6 of its init, "inuse") are 0 and its unix socket table has only its header. (Reading
// /proc/PID/net/tcp walks the host's whole TCP hash: 4 ms here.) The init is sbx's child, so its pid
// cannot be another's before sbx reaps it. false when a file cannot be read.
func (s *Sandbox) NoSockets() bool {
	if s.initPid <= 0 {
		return false
	}
	dir := "/proc/" + strconv.Itoa(s.initPid) + "/net/"
	for _, f := range []string{"sockstat", "sockstat6"} {
		b, err := readSmall(dir + f)
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 3 || !listedProtocols[fields[0]] {
				continue
			}
			if fields[1] != "inuse" || fields[2] != "0" {
				return false
			}
		}
	}
	b, err := readSmall(dir + "unix")
	return err == nil && bytes.Count(b, []byte{'\n'}) == 1
}

// listedProtocols are the lines of sockstat and sockstat6 that count sockets a snapshot lists.
var listedProtocols = map[string]bool{"TCP:": true, "UDP:": true, "UDPLITE:": true, "TCP6:": true, "UDP6:": true, "UDPLITE6:": true}

// readSmall reads at most 4 KiB of a /proc file: enough to tell an empty table from one that is not.
func readSmall(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 4096))
}

// Childless reports whether the sandbox's init has no child at all, not even one in its exit or a
// zombie: every process the command started is gone for good, its files released. Without a cgroup
// (rootless) OnlyInit is true already while a child is in its exit, and the kernel may still hold that
// child's sockets.
func (s *Sandbox) Childless() bool {
	kids, gone, err := children(s.initPid)
	return err == nil && !gone && len(kids) == 0
}

// pfExiting is the kernel's PF_EXITING flag of a task in /proc/PID/stat: it is in its exit.
const pfExiting = 0x4

// ending tells whether process pid can run nothing more and start nothing: every thread of it has
// exited (a zombie) or is in its exit (PF_EXITING, with no way back to the program), and none has a
// child left (an exiting process gives its children to the init only at the end of its exit). A process
// gone from /proc has ended.
func ending(pid int) bool {
	return eachTask(pid, func(dir string, stat []byte) bool {
		if state := statState(stat); state != 'Z' && state != 'X' && statFlags(stat)&pfExiting == 0 {
			return false
		}
		kids, err := os.ReadFile(dir + "/children")
		return err != nil || len(bytes.TrimSpace(kids)) == 0
	})
}

// statFlags is the flags field of a /proc stat file (the task's PF_* flags), 0 when it cannot be read.
func statFlags(stat []byte) uint64 {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	// After the comm: state ppid pgrp session tty_nr tpgid flags.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 7 {
		return 0
	}
	v, _ := strconv.ParseUint(f[6], 10, 64)
	return v
}

// statState is the state letter of a /proc stat file, 0 when it cannot be read. It follows the
// parenthesised comm, which may itself hold parentheses.
func statState(stat []byte) byte {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}
