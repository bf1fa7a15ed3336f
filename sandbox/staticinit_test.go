package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestStaticInit runs sandboxes with the small static supervisor (sbx-init, built here with cgo off) the
// way make build ships it: status, Landlock, the user and fail-closed behave as with sbx itself.
func TestStaticInit(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	bin := filepath.Join(t.TempDir(), InitName)
	build := exec.Command("go", "build", "-o", bin, "github.com/sbx-dev/sbx/internal/cmd/sbx-init")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("cannot build sbx-init here (%v): %s", err, out)
	}
	p := testPlan(t)
	p.UID, p.GID = 65534, 65534
	code, out, stderr := runPlanWith(t, p, bin, "/", "sh", "-c", `id -u; echo x > /usr/sbx-static 2>/dev/null || echo refused; exit 5`)
	if code != 5 || out != "65534\nrefused\n" {
		t.Errorf("status %d, stdout %q, stderr %q; want 5, uid 65534 and a refused write", code, out, stderr)
	}
	code, _, stderr = runPlanWith(t, p, bin, "/", "no-such-command-sbx")
	if code != ExitNotFound || !strings.Contains(stderr, "command not found") {
		t.Errorf("unknown command: status %d, stderr %q", code, stderr)
	}
}
