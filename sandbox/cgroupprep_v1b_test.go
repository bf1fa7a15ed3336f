package sandbox

import (
	"testing"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
)

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
