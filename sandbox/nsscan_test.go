package sandbox

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestNSScanWalksTheTree: the walk down from a pid namespace's init finds what a scan of all of /proc
// finds (its processes, an orphan reparented to it, not one in a nested namespace), and nothing else.
func TestNSScanWalksTheTree(t *testing.T) {
	testutil.RequireRoot(t, "creates a pid namespace")
	if !haveChildrenFiles() {
		t.Skip("no /proc/PID/task/TID/children on this kernel: nsScan scans /proc")
	}
	// init: sh; two sleeps, one of them orphaned (its parent sh exits), and a sleep in a nested pid
	// namespace, which neither listing counts.
	cmd := exec.Command("sh", "-c", `sleep 30 & sh -c 'sleep 30 &' ; unshare --pid --fork sleep 30 & echo ready; wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill() // pid 1 of the namespace: the kernel kills the rest
		cmd.Wait()
	}()
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the nested namespace's sleep starts
	want, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	walked, _, err := nsScan(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	all, _, err := nsScanAll(want)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(all)
	if !slices.Equal(walked, all) {
		t.Errorf("walk %v, scan of /proc %v", walked, all)
	}
	var comms []string
	for _, pid := range walked {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		comms = append(comms, strings.TrimSpace(string(b)))
	}
	slices.Sort(comms)
	// sh, the orphan and the first sleep, and unshare (its own child is in the nested namespace)
	if strings.Join(comms, " ") != "sh sleep sleep unshare" {
		t.Errorf("processes %v, want sh, two sleeps and unshare", comms)
	}
}
