package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

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
// Without root there is no cgroup here: Freeze stops the sandbox's processes with SIGSTOP instead (see
// stopAll).
func (s *Sandbox) Freeze() error {
	if Rootless() && s.initPid > 0 {
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
// of the init, or, without root (no cgroup), the init is the only process of its pid namespace. Nothing
// can then start any more (the init starts nothing after the command), so there is nothing to freeze,
// and no socket of the command's is left: the kernel releases the files of a process that exited a
// moment after it is gone (a daemon's listeners stayed in the namespace's socket table for a few ms
// after gpgconf --kill ended gpg-agent), which a snapshot would list without an owner.
func (s *Sandbox) OnlyInit() bool {
	if Rootless() {
		// A process that vanished while /proc was read may have left a successor the scan missed.
		pids, vanished, err := nsScan(s.initPid)
		return err == nil && !vanished && len(pids) == 1 && pids[0] == s.initPid
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
	dirs := CgroupDirs(s.ID)
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

// thawCgroup thaws the cgroups of run id, which a killed sbx may have left frozen: a v1 freezer holds
// gc's SIGKILL until the thaw.
func thawCgroup(id string) {
	for _, dir := range CgroupDirs(id) {
		if _, err := os.Stat(filepath.Join(dir, "freezer.state")); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0)
		}
		if _, err := os.Stat(filepath.Join(dir, "cgroup.freeze")); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0)
		}
	}
}

// maxStopRounds bounds how many listings stopAll makes before it gives up.
const maxStopRounds = 200

// stopAll stops every process of the sandbox's pid namespace but its init (which starts nothing after
// the command) with SIGSTOP, listing them again until two listings in a row find none it has not
// stopped and none that vanished while listed (any process of the host counts: the scan cannot tell). A process with SIGSTOP pending cannot fork (the kernel restarts a fork that a signal
// interrupts), so a chain of forks ends at the process the last round stopped. Each process is signalled
// through a pidfd checked to be in the sandbox's pid namespace, so that a reused pid is never hit.
// Destroy's SIGKILL ends stopped processes as any other.
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
			if pid == s.initPid || stopped[pid] {
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
		}
		if calm == 2 {
			return nil
		}
	}
	return fmt.Errorf("stopping the sandbox's processes: new ones still appeared after %d rounds of SIGSTOP", maxStopRounds)
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
