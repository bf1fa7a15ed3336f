package sandbox

import (
	"strconv"
	"strings"
	"testing"
)

// TestFeatures: one result per row of the table, each named, explained and with a detail; on a kernel new
// enough for a feature sbx depends on, its absence is a failure of the probe, not a skip.
func TestFeatures(t *testing.T) {
	res := Features()
	if len(res) != len(features) {
		t.Fatalf("%d results for %d checks", len(res), len(features))
	}
	byName := map[string]Feature{}
	for _, r := range res {
		if r.Name == "" || r.Detail == "" || r.UsedFor == "" {
			t.Errorf("incomplete result %+v", r)
		}
		if _, dup := byName[r.Name]; dup {
			t.Errorf("%s probed twice", r.Name)
		}
		byName[r.Name] = r
	}
	major, minor := kernelVersion(t)
	for name, since := range map[string][2]int{"seccomp": {3, 5}, "idmapped mounts": {5, 12}, "cgroup": {2, 6}} {
		if (major > since[0] || major == since[0] && minor >= since[1]) && !byName[name].Available {
			t.Errorf("kernel %d.%d has %s since %d.%d, the probe says %q", major, minor, name, since[0], since[1], byName[name].Detail)
		}
	}
}

func kernelVersion(t *testing.T) (int, int) {
	parts := strings.SplitN(KernelRelease(), ".", 3)
	if len(parts) < 2 {
		t.Fatalf("kernel release %q", KernelRelease())
	}
	major, _ := strconv.Atoi(parts[0])
	minor, _ := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major, minor
}
