package sandbox

import (
	"os"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/internal/supervisor"
	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestMountProbe: the probe, run through this test binary in the supervisor's role, makes every kind
// of mount a run makes, and each step the direct start needs answers; the direct start is decided by
// it (directProbe agrees, and a second call is the cached answer).
func TestMountProbe(t *testing.T) {
	testutil.RequireRoot(t, "the probe maps the caller as root of a user namespace it makes")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := testutil.StateRoot(t)
	steps, err := MountProbe(self, root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"making / a slave", "a new tmpfs", "a bind of an attached tree", "masking a directory",
		"a file bound onto a file", "a read-only bind"}
	for _, w := range want {
		found := false
		for _, s := range steps {
			if strings.HasPrefix(s.Step, w) {
				found = true
				if s.Err != "" {
					t.Errorf("step %q failed: %s", s.Step, s.Err)
				}
			}
		}
		if !found {
			t.Errorf("no step %q in %+v", w, steps)
		}
	}
	// cachedProbe, not directProbe: another test may have probed through this binary already, and
	// directProbe remembers that per process.
	if why := cachedProbe(root, self, probeKey(self)).why; why != "" {
		t.Errorf("cachedProbe = %q, want \"\"", why)
	}
	if _, err := os.Stat(root + "/" + probeCacheFile); err != nil {
		t.Errorf("no cache: %v", err)
	}
}

// TestProbeFailure: the first failed step the direct start needs is its reason; optional steps never are.
func TestProbeFailure(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []supervisor.ProbeStep
		want  string
	}{
		{"all fine", []supervisor.ProbeStep{{Step: "a"}, {Step: "b"}}, ""},
		{"optional failed", []supervisor.ProbeStep{{Step: "a"}, {Step: "clone", Err: "invalid argument", Optional: true}}, ""},
		{"first needed failure", []supervisor.ProbeStep{{Step: "a"}, {Step: "mask", Err: "invalid argument"}, {Step: "ro", Err: "x"}}, "mask: invalid argument"},
	} {
		if got := ProbeFailure(tc.steps); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
