package state

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestKillRecordedInit: gc kills the supervisor a dead rootless run recorded (a rootless sandbox has no
// cgroup that would list it), and only while that pid is still the supervisor of the recorded pid
// namespace: a pid reused by another process is left alone.
func TestKillRecordedInit(t *testing.T) {
	testutil.RequireRoot(t, "starts a process in a pid namespace of its own, as a sandbox's supervisor")
	for _, tc := range []struct {
		name       string
		record     func(t *testing.T, dir string, pid int)
		wantKilled bool
	}{
		{"recorded supervisor", func(t *testing.T, dir string, pid int) {
			if err := RecordInit(dir, pid); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"pid reused by another pid namespace", func(t *testing.T, dir string, pid int) {
			ns, _ := os.Readlink("/proc/self/ns/pid") // the test's own: never the supervisor's
			if err := os.WriteFile(filepath.Join(dir, initFile), []byte(strconv.Itoa(pid)+" "+ns+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"nothing recorded", func(*testing.T, string, int) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "60")
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			defer func() { cmd.Process.Kill(); <-exited }()
			dir := t.TempDir()
			tc.record(t, dir, cmd.Process.Pid)
			killRecordedInit(dir)
			select {
			case <-exited:
				if !tc.wantKilled {
					t.Errorf("the process was killed; want it left alone")
				}
			case <-time.After(time.Second):
				// gc waits for the kill to land: a process still there a second later was spared.
				if tc.wantKilled {
					t.Errorf("the recorded supervisor is still alive after gc")
				}
			}
		})
	}
}

// TestOpenWorkDirs: every directory that an overlay leaves with mode 0 in a rootless run dir's work
// dirs (the volatile option's markers too) is opened for its owner, so that one pass of os.RemoveAll
// removes the run dir without the permissions root has and an ordinary user has not.
func TestOpenWorkDirs(t *testing.T) {
	dir := t.TempDir()
	var closed []string
	for _, work := range []string{"layer/work/etc", "layer/work/tmp", "layer/work-cwd"} {
		if err := os.MkdirAll(filepath.Join(dir, work, "work/incompat/volatile/dirty"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"work", "work/incompat", "work/incompat/volatile"} {
			closed = append(closed, filepath.Join(dir, work, w))
		}
	}
	for i := len(closed) - 1; i >= 0; i-- {
		if err := os.Chmod(closed[i], 0); err != nil {
			t.Fatal(err)
		}
	}
	openWorkDirs(dir)
	for _, d := range closed {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o700 != 0o700 {
			t.Errorf("%s: mode %v after openWorkDirs", d, st.Mode())
		}
	}
}
