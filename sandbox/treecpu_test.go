package sandbox

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestTreeCPU checks that a process tree's CPU time counts its live descendants: a shell whose child,
// still running, has spent CPU time that neither the shell's own nor its reaped children's holds (the
// budget without a cgroup, cpuUsage).
func TestTreeCPU(t *testing.T) {
	cmd := exec.Command("sh", "-c", `sh -c 'i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; sleep 30' & wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a group of its own, ended whole
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		own, ok := procCPU(cmd.Process.Pid)
		tree, tok := treeCPU(cmd.Process.Pid)
		if !ok || !tok {
			t.Fatalf("procCPU %v, treeCPU %v", ok, tok)
		}
		if tree >= 100*time.Millisecond && own < tree/2 {
			return // the busy child's time, counted while it lives
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: the shell's own %v, the tree's %v: the live child's time is not counted", own, tree)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
