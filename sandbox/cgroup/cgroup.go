package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Root is where the host's cgroup hierarchies are mounted.
const Root = "/sys/fs/cgroup"

// Name is the cgroup of run id, directly below the root of every hierarchy. Each run has its own
// top-level cgroup rather than a child of a shared /sbx: a shared parent would have to be removed by the
// last run out while another run creates its child in it.
func Name(id string) string { return "sbx-" + id }

// Dirs lists the run's cgroup in every mounted hierarchy where it exists: below each v1 controller
// and the v2 tree of a hybrid host (/sys/fs/cgroup/NAME/sbx-ID), or below a v2 tree mounted at the root.
func Dirs(id string) []string {
	rel := Name(id)
	var dirs []string
	candidates := []string{filepath.Join(Root, rel)}
	entries, _ := os.ReadDir(Root)
	for _, e := range entries {
		candidates = append(candidates, filepath.Join(Root, e.Name(), rel))
	}
	for _, d := range candidates {
		if st, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil && !st.IsDir() {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// Pids reads the processes of a run's cgroup dirs, one in every hierarchy.
func Pids(dirs []string) []int {
	seen := map[int]bool{}
	var pids []int
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// Kill SIGKILLs every process in the cgroups dirs (a run's) and waits briefly until they are gone.
func Kill(dirs []string) {
	for range 50 {
		pids := Pids(dirs)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Thaw thaws the cgroups dirs (a run's), which a killed sbx may have left frozen: a v1 freezer holds
// gc's SIGKILL until the thaw.
func Thaw(dirs []string) {
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "freezer.state")); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0)
		}
		if _, err := os.Stat(filepath.Join(dir, "cgroup.freeze")); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0)
		}
	}
}

// Counter reads "key N" from a cgroup's flat keyed file; 0 when absent.
func Counter(file, key string) int {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
