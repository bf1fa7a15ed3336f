package sandbox

import (
	"os"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestCgroupPrimerMovesNothing: priming writes sbx's pid to the cgroup it is in, which must leave every
// hierarchy's membership as it was.
func TestCgroupPrimerMovesNothing(t *testing.T) {
	testutil.RequireRoot(t, "writes cgroup.procs")
	if ownCgroupProcs() == "" {
		t.Skip("no unified or pids hierarchy here")
	}
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	p := startCgroupPrimer()
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
