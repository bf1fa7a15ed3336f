package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
func (s *Sandbox) Freeze() error {
	if s.container == nil || len(CgroupDirs(s.ID)) == 0 {
		return ErrNoFreezer
	}
	if err := s.container.Pause(); err != nil {
		return fmt.Errorf("freezing the sandbox: %w", err)
	}
	return nil
}

// Thaw lets a frozen sandbox run again.
func (s *Sandbox) Thaw() error {
	if err := s.container.Resume(); err != nil {
		return fmt.Errorf("thawing the sandbox: %w", err)
	}
	return nil
}

// Tasks lists the host thread ids of every task in the sandbox's cgroups, threads included (v1 tasks,
// v2 cgroup.threads, nested cgroups too). A process whose main thread exited while another thread runs
// shows in /proc as a zombie; its live threads are here.
func (s *Sandbox) Tasks() ([]int, error) {
	var tids []int
	var errs []error
	found := false
	for _, dir := range CgroupDirs(s.ID) {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			for _, name := range []string{"tasks", "cgroup.threads"} {
				b, err := os.ReadFile(filepath.Join(path, name))
				if errors.Is(err, os.ErrNotExist) {
					continue
				}
				if err != nil {
					return err
				}
				found = true
				for _, f := range strings.Fields(string(b)) {
					if tid, err := strconv.Atoi(f); err == nil {
						tids = append(tids, tid)
					}
				}
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("listing the sandbox's tasks: %w", err)
	}
	if !found {
		return nil, fmt.Errorf("listing the sandbox's tasks: %w", ErrNoFreezer)
	}
	slices.Sort(tids)
	return slices.Compact(tids), nil
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
