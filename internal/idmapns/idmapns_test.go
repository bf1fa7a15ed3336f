package idmapns

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain: started as "exec" (as sbx exec is), the test binary has a child made ahead at init; it
// answers for the test below with what the roles ask.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "exec" {
		switch os.Args[2] {
		case "early":
			fmt.Println(early != nil)
			Drop()
		case "owner":
			uid, err := ownerThrough(os.Args[3], Mapping{FromUID: 0, FromGID: 0, ToUID: 1234, ToGID: 4321})
			if err != nil {
				fmt.Println(err)
				os.Exit(1)
			}
			fmt.Println(uid, children())
		case "drop":
			// The child is started on a goroutine of the package's init: wait until it is there, stopped
			// at its exec. (Go's os package forks a child of its own once, to see whether the kernel
			// gives pidfds, which ends at once: only the stopped ones count.)
			before := stoppedChildren()
			for i := 0; before == 0 && i < 2000; i++ {
				time.Sleep(time.Millisecond)
				before = stoppedChildren()
			}
			Drop()
			fmt.Println(before, children())
		case "orphan":
			// Ends without taking or dropping its child, as an sbx that fails early or is killed.
			for i := 0; stoppedChildren() == 0 && i < 2000; i++ {
				time.Sleep(time.Millisecond)
			}
			fmt.Println(strings.Join(stoppedPids(), " "))
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// children counts this process's children (over all its threads).
func children() int {
	n := 0
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		n += len(strings.Fields(string(b)))
	}
	return n
}

// stoppedChildren counts this process's children that are stopped by their tracer.
func stoppedChildren() int { return len(stoppedPids()) }

// stoppedPids lists this process's children that are stopped by their tracer.
func stoppedPids() []string {
	var pids []string
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, pid := range strings.Fields(string(b)) {
			stat, _ := os.ReadFile("/proc/" + pid + "/stat")
			// pid (comm) state ...: the state follows the comm's closing parenthesis.
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i:]), ") t") {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// ownerThrough binds dir idmapped with the namespace New makes for m, and returns the owner of dir's
// file "f" as seen through that mount.
func ownerThrough(dir string, m Mapping) (string, error) {
	ns, err := New(m)
	if err != nil {
		return "", err
	}
	defer ns.Close()
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(fd, "f", &st, 0); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid), nil
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("user namespaces with maps of other ids and idmapped mounts need root")
	}
}

func run(t *testing.T, args ...string) string {
	out, err := exec.Command(os.Args[0], args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestEarly: sbx exec (as root) has its child made at init, which New maps and takes; sbx started in
// another role has none.
func TestEarly(t *testing.T) {
	needRoot(t)
	if got := run(t, "exec", "early"); got != "true" {
		t.Errorf("started as exec: early child = %s, want true", got)
	}
	if early != nil {
		t.Error("the test binary, started as itself, made a child ahead")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Through the namespace made ahead: the owner shows mapped, and the child is gone after New.
	if got := run(t, "exec", "owner", dir); got != "1234:4321 0" {
		t.Errorf("through the early namespace: owner and children left = %q, want \"1234:4321 0\"", got)
	}
	// The same through one made on the spot.
	got, err := ownerThrough(dir, Mapping{FromUID: 0, FromGID: 0, ToUID: 1234, ToGID: 4321})
	if err != nil {
		t.Fatal(err)
	}
	if got != "1234:4321" {
		t.Errorf("through a fresh namespace: owner %s, want 1234:4321", got)
	}
}

// TestDrop: a sandbox that needs no idmapping ends the child made ahead.
func TestDrop(t *testing.T) {
	needRoot(t)
	if got := run(t, "exec", "drop"); got != "1 0" {
		t.Errorf("children before and after Drop = %q, want \"1 0\"", got)
	}
}

// TestChildRunsNothing: the child that holds a namespace, if it ever runs (its tracer died before it
// could kill it), ends at once: the test binary started as that child neither runs its tests nor prints.
func TestChildRunsNothing(t *testing.T) {
	cmd := &exec.Cmd{Path: os.Args[0], Args: []string{childArg0}}
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Errorf("started as %s: %v, output %q", childArg0, err, out)
	}
}

// TestOrphanKilled: a process that ends while its child made ahead still stops at its exec (an sbx that
// failed early, or was killed) takes the child with it: its parent-death signal, and the kernel's kill of
// a tracee whose tracer ends (PTRACE_O_EXITKILL), each end it. The test is the subreaper of what the
// role leaves, so that it can see how the child ended.
func TestOrphanKilled(t *testing.T) {
	needRoot(t)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	out := run(t, "exec", "orphan")
	pid, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("the role's child: %q", out)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WALL|unix.WNOHANG, nil)
		if err != nil {
			t.Fatalf("waiting for the orphaned child %d: %v", pid, err)
		}
		if got == pid && ws.Signaled() && ws.Signal() == unix.SIGKILL {
			return
		}
		if got == pid {
			t.Fatalf("the orphaned child %d: %v, want killed", pid, ws)
		}
		if time.Now().After(deadline) {
			unix.Kill(pid, unix.SIGKILL)
			t.Fatalf("the orphaned child %d is still there, stopped at its exec", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
