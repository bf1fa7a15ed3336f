package sandbox

import (
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/sandbox/rootfs"
)

// TestCreateFailureReleasesLayer: a Create that fails before its run dir exists releases the disk
// layer it attached ahead (rootfs.StartLayer), as rootfs's TestLayerPrepRelease checks of a layer
// released by hand.
func TestCreateFailureReleasesLayer(t *testing.T) {
	testutil.RequireRoot(t, "loop devices and mounts")
	old := rootfs.LayerDir
	t.Cleanup(func() { rootfs.LayerDir = old })
	rootfs.LayerDir = t.TempDir()
	// A Create that fails at once (an unreachable state root) releases what it attached. The garbage
	// collector is off meanwhile: a leaked device's file would otherwise be closed by its finalizer.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	loops := func() int {
		m, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		return len(m)
	}
	before := loops()
	plan := testPlan(t)
	if _, err := Create(Config{Plan: plan, StateRoot: "/proc/sbx-cannot", Command: Command{Args: []string{"true"}, Cwd: "/"}}); err == nil {
		t.Fatal("Create with a state root in /proc worked")
	}
	// Create may return before its device is attached: look for 2 s, and pass only once the count is
	// back after at least 300 ms (a leaked device would stay).
	start := time.Now()
	for {
		time.Sleep(20 * time.Millisecond)
		after := loops()
		if after <= before && time.Since(start) > 300*time.Millisecond {
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("%d loop devices attached after a failed Create, %d before", after, before)
		}
	}
}
