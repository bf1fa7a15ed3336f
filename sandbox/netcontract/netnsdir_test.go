package netcontract

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/internal/netnsdir"
	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
	"golang.org/x/sys/unix"
)

// stackHelperEnv makes the test binary run stackScenario instead of the tests (in a private mount
// namespace made by unshare).
const stackHelperEnv = "SBX_TEST_NETNS_STACK"

// TestNetnsDirStacking: when /run/netns is not yet a mount point and someone runs `ip netns add` while a
// sandbox's namespace file is mounted there, the sandbox's Close still removes its file. (iproute2 then
// bind-mounts the directory over itself with every mount in it; the hidden original used to keep the
// file busy for good.) Runs in a private mount namespace, so that the host's mounts are not touched.
func TestNetnsDirStacking(t *testing.T) {
	testutil.RequireRoot(t, "makes a mount namespace and mounts network namespace files")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", self, "-test.run=^$")
	cmd.Env = append(os.Environ(), stackHelperEnv+"="+testID())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// stackScenario runs in the private mount namespace: it undoes /run/netns being a mount point, sets up a
// network (mode none), lets `ip netns add` stack the directory, closes the network and checks its file
// is gone.
func stackScenario(id string) error {
	for isMountPoint(netnsdir.Dir) {
		if err := unix.Unmount(netnsdir.Dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s: %w", netnsdir.Dir, err)
		}
	}
	n, err := Setup(Config{ID: id, Net: policy.Network{Mode: policy.NetNone}})
	if err != nil {
		return fmt.Errorf("Setup: %w", err)
	}
	other := "sbx-test-stack-" + id
	if out, err := exec.Command("ip", "netns", "add", other).CombinedOutput(); err != nil {
		n.Close()
		return fmt.Errorf("ip netns add: %w: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", other).Run()
	closeErr := n.Close()
	if _, err := os.Stat(n.NetNSPath()); err == nil {
		return fmt.Errorf("the namespace file is left after Close: %s (Close: %v)", n.NetNSPath(), closeErr)
	}
	return nil
}

// isMountPoint says whether path is a mount point in this mount namespace.
func isMountPoint(path string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 4 && fields[4] == path {
			return true
		}
	}
	return false
}
