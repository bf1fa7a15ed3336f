package cgroup

import (
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"

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
	root := t.TempDir()
	p := StartPrimer(root)
	if p == nil {
		t.Fatal("no primer although a cgroup.procs file was found")
	}
	time.Sleep(5 * primeEvery)
	p.Stop()
	// It wrote, and noted the time of its last write for the other runs.
	if b, err := os.ReadFile(filepath.Join(root, "primed")); err != nil || len(b) != 8 {
		t.Errorf("primed file: %v %x", err, b)
	} else if at := time.Unix(0, int64(binary.NativeEndian.Uint64(b))); time.Since(at) > time.Second {
		t.Errorf("the last priming noted at %v", at)
	}
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Errorf("cgroups changed:\n%s\nto\n%s", before, after)
	}
	var nilPrimer *Primer
	nilPrimer.Stop() // a Create without a primer stops nothing
}

// TestPrimeDue: the runs of a host share their priming: a write another run made less than primeEvery
// ago is not repeated.
func TestPrimeDue(t *testing.T) {
	dir := t.TempDir()
	one, other := openPrimed(dir), openPrimed(dir) // two runs under one state root
	if one == nil || other == nil {
		t.Fatal("the primed file cannot be mapped")
	}
	defer one.close()
	defer other.close()
	if !one.due() {
		t.Fatal("first write not due")
	}
	if other.due() || one.due() {
		t.Error("a second write right after the first is due")
	}
	time.Sleep(primeEvery + time.Millisecond)
	if !other.due() {
		t.Error("a write primeEvery after the last is not due")
	}
	var none *primed
	if !none.due() {
		t.Error("without the shared file every write is due")
	}
	none.close()
}

// TestCgroupPrep: the run's cgroups are made ahead in every hierarchy, with no process in them, where
// libcontainer will look for them, and removed again by a Create that never got its container.
func TestCgroupPrep(t *testing.T) {
	testutil.RequireRoot(t, "makes cgroups")
	id := fmt.Sprintf("test%x", os.Getpid())
	p := Start(id, nil, "")
	p.Wait()
	dirs := Dirs(id)
	if len(dirs) == 0 {
		t.Fatal("no cgroup made")
	}
	if p.m == nil {
		t.Fatal("no manager")
	}
	for name, path := range p.m.GetPaths() {
		if filepath.Base(path) != Name(id) {
			t.Errorf("%s: %s is not the run's cgroup", name, path)
		}
		if pids := cgroupProcsOf(t, path); pids != "" {
			t.Errorf("%s has processes: %q", path, pids)
		}
	}
	if len(dirs) != len(p.m.GetPaths()) {
		t.Errorf("made %d cgroups, the manager has %d paths", len(dirs), len(p.m.GetPaths()))
	}
	p.Remove()
	if left := Dirs(id); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	var none *Prep
	none.Wait()
	none.Remove()
}

func cgroupProcsOf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestCgroupManagerPathsLearnt checks that a manager made from the learnt hierarchy directories
// (v1Bases) has the paths libcontainer computes itself.
func TestCgroupManagerPathsLearnt(t *testing.T) {
	if os.Geteuid() != 0 || cgroups.IsCgroup2UnifiedMode() {
		t.Skip("needs root on a cgroup v1 host")
	}
	v1Bases.Lock()
	v1Bases.dirs = nil
	v1Bases.Unlock()
	first, err := NewManager(&cgroups.Cgroup{Path: "/sbx-learn1", Resources: &cgroups.Resources{}})
	if err != nil {
		t.Fatal(err)
	}
	if v1Paths("/sbx-learn2") == nil {
		t.Fatal("the hierarchies' directories were not learnt")
	}
	c := &cgroups.Cgroup{Path: "/sbx-learn2", Resources: &cgroups.Resources{}}
	learnt, err := NewManager(c)
	if err != nil {
		t.Fatal(err)
	}
	own, err := manager.New(c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for name, p := range own.GetPaths() {
		if sandboxControllers[name] {
			want[name] = p
		}
	}
	if got := learnt.GetPaths(); !maps.Equal(got, want) || len(got) != len(sandboxControllers) {
		t.Errorf("learnt paths %v, libcontainer's %v", got, want)
	}
	if len(first.GetPaths()) != len(want) {
		t.Errorf("first manager's paths %v", first.GetPaths())
	}
}

// TestMountinfoV1Bases holds the bases read from mountinfo to libcontainer's own paths for the same
// cgroup.
func TestMountinfoV1Bases(t *testing.T) {
	if cgroups.IsCgroup2UnifiedMode() {
		t.Skip("cgroup v2 only: no v1 hierarchies")
	}
	dirs := mountinfoV1Bases()
	if dirs == nil {
		t.Skip("this host's v1 hierarchies are not each mounted once below /sys/fs/cgroup")
	}
	m, err := manager.New(&cgroups.Cgroup{Path: "/sbx-test-bases", Resources: &cgroups.Resources{}})
	if err != nil {
		t.Fatal(err)
	}
	lc := m.GetPaths()
	for name, dir := range dirs {
		if want := lc[name]; want != dir+"/sbx-test-bases" {
			t.Errorf("%s: %s/sbx-test-bases, libcontainer says %s", name, dir, want)
		}
	}
}
