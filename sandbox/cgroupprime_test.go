package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/internal/cgprime"
	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestCgroupPrimerMovesNothing: priming writes sbx's pid to the cgroup it is in, which must leave every
// hierarchy's membership as it was.
func TestCgroupPrimerMovesNothing(t *testing.T) {
	testutil.RequireRoot(t, "writes cgroup.procs")
	if cgprime.Procs() == "" {
		t.Skip("no unified or pids hierarchy here")
	}
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	p := startCgroupPrimer(t.TempDir())
	if p == nil {
		t.Fatal("no primer although a cgroup.procs file was found")
	}
	time.Sleep(5 * primeEvery)
	p.Stop()
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Errorf("cgroups changed:\n%s\nto\n%s", before, after)
	}
	var nilPrimer *cgroupPrimer
	nilPrimer.Stop() // a Create without a primer stops nothing
}

// TestPrimeDue: the runs of a host share their priming: a write another run made less than primeEvery
// ago is not repeated.
func TestPrimeDue(t *testing.T) {
	f, err := os.OpenFile(t.TempDir()+"/primed", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !due(f) {
		t.Fatal("first write not due")
	}
	if due(f) {
		t.Error("a second write right after the first is due")
	}
	time.Sleep(primeEvery + time.Millisecond)
	if !due(f) {
		t.Error("a write primeEvery after the last is not due")
	}
	if !due(nil) {
		t.Error("without the shared file every write is due")
	}
}

// TestCgroupPrep: the run's cgroups are made ahead in every hierarchy, with no process in them, where
// libcontainer will look for them, and removed again by a Create that never got its container.
func TestCgroupPrep(t *testing.T) {
	testutil.RequireRoot(t, "makes cgroups")
	id, err := newID()
	if err != nil {
		t.Fatal(err)
	}
	p := startCgroups(id)
	p.wait()
	dirs := CgroupDirs(id)
	if len(dirs) == 0 {
		t.Fatal("no cgroup made")
	}
	if p.m == nil {
		t.Fatal("no manager")
	}
	for name, path := range p.m.GetPaths() {
		if filepath.Base(path) != CgroupName(id) {
			t.Errorf("%s: %s is not the run's cgroup", name, path)
		}
		if pids := cgroupProcsOf(t, path); pids != "" {
			t.Errorf("%s has processes: %q", path, pids)
		}
	}
	if len(dirs) != len(p.m.GetPaths()) {
		t.Errorf("made %d cgroups, the manager has %d paths", len(dirs), len(p.m.GetPaths()))
	}
	p.remove()
	if left := CgroupDirs(id); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	var none *cgroupPrep
	none.wait()
	none.remove()
}

func cgroupProcsOf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
