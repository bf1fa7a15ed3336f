//go:build cgo

package vspawn

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// child starts sh -c script in new user, pid and mount namespaces (uid and gid 0 mapped to the host's
// root), with w at fd 3, and returns what it wrote there and how it ended.
func child(t *testing.T, script string, mutate func(*exec.Cmd)) (string, *os.ProcessState, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: maps the host's root into a user namespace")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := &exec.Cmd{
		Path:       "/bin/sh",
		Args:       []string{"sh", "-c", script},
		Env:        []string{"PATH=/usr/bin:/bin", "ONLY=this"},
		Dir:        "/",
		ExtraFiles: []*os.File{w},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS,
			Setsid:                     true,
			Pdeathsig:                  unix.SIGKILL,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
		},
	}
	if mutate != nil {
		mutate(cmd)
	}
	err = Start(cmd)
	w.Close()
	if err != nil {
		return "", nil, err
	}
	out, _ := io.ReadAll(r)
	st, werr := cmd.Process.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	return string(out), st, nil
}

func TestStart(t *testing.T) {
	// cat's stat: its parent (the shell, by its host pid, as this /proc is the host's) leads its session.
	out, st, err := child(t, `echo "ids $(id -u) $(id -g) pid $$ env $ONLY cwd $(pwd)" >&3
cut -d' ' -f4,6 /proc/self/stat | sed 's/^/parent,session /' >&3
grep -E '^(SigBlk|CapEff)' /proc/self/status >&3
exec ls /proc/self/fd >&3`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode() != 0 {
		t.Errorf("exit status %v", st)
	}
	// pid 1 of its namespace, root with every capability in its user namespace, nothing blocked.
	for _, want := range []string{"ids 0 0 pid 1 env this cwd /\n", "SigBlk:\t0000000000000000", "CapEff:\t000001ffffffffff"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%q", want, out)
		}
	}
	var parent, session string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "parent,session" {
			parent, session = f[1], f[2]
		}
	}
	if parent == "" || parent != session {
		t.Errorf("the shell (%s) does not lead its session (%s): %q", parent, session, out)
	}
	// The fds Go's own start leaves the same command (the test's environment may pass some on), and
	// none of Start's pipes.
	rest := out[strings.Index(out, "CapEff:"):]
	fds := strings.Join(strings.Fields(rest[strings.Index(rest, "\n")+1:]), " ")
	if want := goFDs(t); fds != want {
		t.Errorf("the child's fds: %s, with os/exec: %s", fds, want)
	}
}

// goFDs lists the fds of the same command started by os/exec.
func goFDs(t *testing.T) string {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", "exec ls /proc/self/fd >&3")
	cmd.ExtraFiles = []*os.File{w}
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	cmd.Wait()
	return strings.Join(strings.Fields(string(out)), " ")
}

func TestStartExecFails(t *testing.T) {
	_, _, err := child(t, "", func(c *exec.Cmd) { c.Path = "/nonexistent/sbx-vspawn" })
	if !errors.Is(err, unix.ENOENT) {
		t.Fatalf("err = %v, want ENOENT", err)
	}
	var ws unix.WaitStatus
	if pid, _ := unix.Wait4(-1, &ws, unix.WNOHANG, nil); pid > 0 {
		t.Errorf("child %d left to reap", pid)
	}
}

func TestStartMapFails(t *testing.T) {
	_, _, err := child(t, "", func(c *exec.Cmd) {
		// Two ranges over the same ids inside: the kernel refuses the map.
		c.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 2}, {ContainerID: 1, HostID: 5, Size: 1}}
	})
	if err == nil || !strings.Contains(err.Error(), "id maps") {
		t.Fatalf("err = %v, want the id maps' error", err)
	}
}

func TestUnsupported(t *testing.T) {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := Start(cmd); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Setpgid: %v, want ErrUnsupported", err)
	}
	cmd = exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	cmd.Stdout = os.Stdout
	if err := Start(cmd); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Stdout: %v, want ErrUnsupported", err)
	}
}

// TestStartWithoutMaps starts a child without a user namespace: no id maps to wait for.
func TestStartWithoutMaps(t *testing.T) {
	out, st, err := child(t, `echo "pid $$" >&3`, func(c *exec.Cmd) {
		c.SysProcAttr.Cloneflags = unix.CLONE_NEWPID
		c.SysProcAttr.UidMappings, c.SysProcAttr.GidMappings, c.SysProcAttr.Credential = nil, nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode() != 0 || out != "pid 1\n" {
		t.Errorf("exit %v, output %q", st, out)
	}
}

// TestStartTraced: with Ptrace the child stops at its exec, traced by the starting thread, before it
// runs anything of the new program: what idmapns needs of a child that only holds a user namespace.
func TestStartTraced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a user namespace with maps")
	}
	runtime.LockOSThread() // the tracer
	defer runtime.UnlockOSThread()
	cmd := &exec.Cmd{Path: "/bin/sh", Args: []string{"sh", "-c", "exit 7"}, Env: []string{},
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER, Ptrace: true, Pdeathsig: unix.SIGKILL,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}}}
	if err := Start(cmd); err != nil {
		t.Fatal(err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(cmd.Process.Pid, &ws, unix.WALL, nil); err != nil {
		t.Fatal(err)
	}
	if !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP {
		t.Fatalf("child %v, want stopped by SIGTRAP at its exec", ws)
	}
	// Its user namespace holds the maps written before it ran.
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/uid_map"); err != nil || len(strings.Fields(string(b))) != 3 {
		t.Errorf("uid_map %q %v", b, err)
	}
	cmd.Process.Kill()
	if _, err := unix.Wait4(cmd.Process.Pid, &ws, unix.WALL, nil); err != nil || !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Errorf("after the kill: %v %v (the program never ran: it would have exited 7)", ws, err)
	}
}
