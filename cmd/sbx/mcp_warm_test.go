package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMCPWarmCrash: the sandboxes a warm pool built ahead (--warm 2) are ordinary runs of the server's
// state root: when the server is killed (SIGKILL, no shutdown), `sbx gc` removes them, processes and
// mounts included.
func TestMCPWarmCrash(t *testing.T) {
	root := mcpStateRoot(t, "warm-")
	bin, err := exec.LookPath("sbx")
	if err != nil {
		t.Fatalf("sbx is not on PATH (testscript.Main puts it there): %v", err)
	}
	srv := exec.Command(bin, "mcp", "-w", t.TempDir(), "--warm", "2")
	srv.Env = append(os.Environ(), stateRootEnv+"="+root)
	in, err := srv.StdinPipe() // the server waits for a client that never speaks
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(20*time.Second, func() bool { return len(supervisorsOf(srv.Process.Pid)) == 2 }) {
		srv.Process.Kill()
		srv.Wait()
		t.Fatalf("the pool holds %d built sandboxes after 20s, want 2", len(supervisorsOf(srv.Process.Pid)))
	}
	pids := supervisorsOf(srv.Process.Pid)
	srv.Process.Kill()
	srv.Wait()
	if err := checkClean(root); err == nil {
		t.Fatal("nothing of the pool was left behind to collect: the test proves nothing")
	}
	gc := exec.Command(bin, "gc")
	gc.Env = srv.Env
	if out, err := gc.CombinedOutput(); err != nil {
		t.Fatalf("sbx gc: %v: %s", err, out)
	}
	if err := checkClean(root); err != nil {
		t.Error(err)
	}
	// Killed by gc, reaped by the host's init (the server, their parent, is gone): a moment later.
	for _, pid := range pids {
		if !waitFor(5*time.Second, func() bool { return !alive(pid) }) {
			t.Errorf("the supervisor of a pooled sandbox (pid %s) outlived sbx gc", pid)
		}
	}
}

// supervisorsOf lists the pids of the sandbox supervisors that are children of pid.
func supervisorsOf(pid int) []string {
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		status, err := os.ReadFile(filepath.Join("/proc", p.Name(), "status"))
		if err != nil {
			continue
		}
		s := string(status)
		if strings.HasPrefix(s, "Name:\t.sbx-init\n") && strings.Contains(s, "\nPPid:\t"+strconv.Itoa(pid)+"\n") {
			out = append(out, p.Name())
		}
	}
	return out
}

// alive says whether pid exists and is not a zombie.
func alive(pid string) bool {
	status, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	return err == nil && !strings.Contains(string(status), "\nState:\tZ")
}
