package cgprime

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sbx-dev/sbx/internal/supervisor"
	"time"

	"golang.org/x/sys/unix"
)

func TestStartsNow(t *testing.T) {
	for _, c := range []struct {
		args []string
		euid int
		want bool
	}{
		{[]string{"sbx", "exec", "--", "true"}, 0, true},
		{[]string{"sbx", "probe"}, 0, true},
		{[]string{"sbx", "exec", "--", "true"}, 1000, false}, // no cgroup without root
		{[]string{"sbx", "init"}, 0, false},                  // libcontainer's init, in the sandbox's namespaces
		{[]string{"sbx", "mcp"}, 0, false},
		{[]string{"sbx", "version"}, 0, false},
		{[]string{"sbx"}, 0, false},
	} {
		if got := StartsNow(c.args, c.euid); got != c.want {
			t.Errorf("StartsNow(%q, %d) = %v, want %v", c.args, c.euid, got, c.want)
		}
	}
}

// TestPrimeMovesNothing: the write names the cgroup the process is in already, in every hierarchy.
func TestPrimeMovesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("writes cgroup.procs: needs root")
	}
	p := Procs()
	if p == "" {
		t.Skip("no unified or pids hierarchy here")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !listed(b, []byte(strconv.Itoa(os.Getpid()))) {
		t.Fatalf("%s does not list this process", p)
	}
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	Prime()
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Errorf("cgroups changed:\n%s\nto\n%s", before, after)
	}
}

func TestListed(t *testing.T) {
	if listed([]byte("1\n12\n123\n"), []byte("2")) {
		t.Error("2 found in 1 12 123")
	}
	if !listed([]byte("1\n12\n123\n"), []byte("12")) {
		t.Error("12 not found")
	}
}

// TestMain: started as "exec", "probe" or "init", the test binary reports whether early.c's constructor
// started the write, as sbx would have.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[2] == "slack" {
		// TestTimerSlack: this process's timer slack, and its caller's as the constructor saw it.
		b, err := os.ReadFile("/proc/self/timerslack_ns")
		fmt.Println(strings.TrimSpace(string(b)), CallerTimerSlack(), err)
		os.Exit(0)
	}
	if len(os.Args) > 2 && os.Args[2] == "stdio" {
		// TestClosedStdio: which stdio the constructor found closed, and what fds 0-2 are now.
		var kinds []string
		for fd := range 3 {
			var st unix.Stat_t
			switch err := unix.Fstat(fd, &st); {
			case err != nil:
				kinds = append(kinds, "closed")
			case st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == unix.Mkdev(1, 3):
				kinds = append(kinds, "null")
			default:
				kinds = append(kinds, "other")
			}
		}
		fmt.Fprintln(os.NewFile(3, "out"), ClosedStdio(), kinds)
		os.Exit(0)
	}
	if len(os.Args) > 3 && (os.Args[1] == "exec" || os.Args[1] == "mcp") && os.Args[2] == "mount" {
		// TestPrivateMounts: a tmpfs mounted here must not show in the parent's mount namespace.
		err := syscall.Mount("tmpfs", os.Args[3], "tmpfs", 0, "")
		ns, _ := os.Readlink("/proc/self/ns/mnt")
		fmt.Println(PrivateMounts(), ns, err)
		os.Exit(0)
	}
	if len(os.Args) > 1 && (os.Args[1] == "exec" || os.Args[1] == "probe" || os.Args[1] == "init") {
		path := ""
		for i := 0; startedEarly() && path == "" && i < 1000; i++ {
			time.Sleep(time.Millisecond)
			path = earlyPath()
		}
		fmt.Println(startedEarly(), path)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStartedEarly: the constructor starts the write for root's exec and probe only, as StartsNow says,
// to the file Procs finds.
func TestStartedEarly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the constructor writes only as root")
	}
	procs := Procs()
	for role, want := range map[string]string{"exec": "true " + procs, "probe": "true " + procs, "init": "false"} {
		out, err := exec.Command(os.Args[0], role).Output()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("started as %q: constructor started = %s, want %s", role, got, want)
		}
	}
}

// TestProcsStaysInCgroupFS: a path of /proc/self/cgroup that climbs out of the hierarchy's mount (a
// cgroup outside the cgroup namespace's root shows as /../name) never makes Procs name a file outside a
// cgroup file system, even one that lists the process.
func TestProcsStaysInCgroupFS(t *testing.T) {
	dir := t.TempDir()
	pid := os.Getpid()
	if err := os.WriteFile(dir+"/cgroup.procs", []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := strings.Repeat("/..", 12)
	for _, own := range []string{
		"0::" + up + dir + "\n",
		"8:pids:" + up + dir + "\n",
		"8:cpu,pids:/a/../.." + up + dir + "\n0::" + up + dir + "\n",
	} {
		if got := procsIn([]byte(own), pid); got != "" {
			t.Errorf("procsIn(%q) = %q, want none", own, got)
		}
	}
}

// TestClimbs: early.c and the Go lookup skip the same paths: those with a ".." component.
func TestClimbs(t *testing.T) {
	for path, want := range map[string]bool{
		"/": false, "/a/b": false, "/..x": false, "/a/x..": false, "/a..b/c": false,
		"/..": true, "/../x": true, "/a/../b": true, "/a/..": true, "..": true,
	} {
		if got := climbs(path); got != want {
			t.Errorf("climbs(%q) = %v, want %v", path, got, want)
		}
		if got := climbsC(path); got != want {
			t.Errorf("early.c's climbs(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestPrivateMounts: started as root's exec or mcp (a server's pool of sandboxes), the process has a
// mount namespace of its own, and what it mounts stays out of the host's (its caller's) mount table.
func TestPrivateMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root's exec gets a mount namespace of its own")
	}
	for _, role := range []string{"exec", "mcp"} {
		dir := t.TempDir()
		out, err := exec.Command(os.Args[0], role, "mount", dir).Output()
		if err != nil {
			t.Fatal(err)
		}
		own, _ := os.Readlink("/proc/self/ns/mnt")
		f := strings.Fields(string(out))
		if len(f) != 3 || f[0] != "true" || f[1] == own || f[2] != "<nil>" {
			t.Fatalf("%s: %q, want private mounts in a namespace other than %s, and a mount made", role, out, own)
		}
		mounts, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(mounts), " "+dir+" ") {
			syscall.Unmount(dir, syscall.MNT_DETACH)
			t.Errorf("the tmpfs the %s process mounted on %s shows in the caller's mount table", role, dir)
		}
	}
}

// TestTimerSlack: sbx exec and probe run with a 2 ms timer slack and remember their caller's (which the
// command gets back); the others, the server among them, keep the caller's.
func TestTimerSlack(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const caller = 123456
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, caller, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0) // back to the thread's default
	for role, want := range map[string]string{
		"exec":  "2000000 123456 <nil>",
		"probe": "2000000 123456 <nil>",
		"mcp":   "123456 0 <nil>",
		"gc":    "123456 0 <nil>",
	} {
		out, err := exec.Command(os.Args[0], role, "slack").Output()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("started as %q: slack, caller's = %s, want %s", role, got, want)
		}
	}
}

// TestClosedStdio: a stdio fd closed when sbx starts is /dev/null from then on, every time (the
// constructor's thread held fd 0 for a moment while Go's runtime looked for closed stdio, so fd 0 was
// left free, and sbx's next file, its control socket or seccomp listener, took it and passed to the
// command as its stdin), and ClosedStdio names it, so that the command gets it closed.
func TestClosedStdio(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the constructor's thread runs only as root")
	}
	for _, c := range []struct {
		name   string
		closed []bool
		want   string
	}{
		{"stdin", []bool{true, false, false}, "[true false false] [null other other]"},
		{"stdout and stderr", []bool{false, true, true}, "[false true true] [other null null]"},
	} {
		for range 20 {
			if got := runWithClosed(t, c.closed); got != c.want {
				t.Fatalf("%s closed: %s, want %s", c.name, got, c.want)
			}
		}
	}
}

// runWithClosed runs the test binary as "exec stdio" with the stdio fds closed says closed (the others a
// pipe's), and returns what it printed on fd 3.
func runWithClosed(t *testing.T, closed []bool) string {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	files := []*os.File{w, w, w, w}
	for i, c := range closed {
		if c {
			files[i] = nil
		}
	}
	p, err := os.StartProcess(os.Args[0], []string{os.Args[0], "exec", "stdio"}, &os.ProcAttr{Files: files})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	p.Wait()
	return strings.TrimSpace(string(out))
}

// TestFastExitSetup: the fast client's status for sbx's own failure is sbx exec's.
func TestFastExitSetup(t *testing.T) {
	if !cgoBuilt {
		t.Skip("built without cgo: no fast client")
	}
	if got := fastExitSetup(); got != supervisor.ExitSetup {
		t.Errorf("fastclient.h's SBX_EXIT_SETUP is %d, sbx exec's status %d", got, supervisor.ExitSetup)
	}
}
