package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sbx-dev/sbx/internal/fakenet"
	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestRootless runs the scripts in testdata/rootless with sbx started by an ordinary user, made for the
// test with useradd and removed after it: stdio reopened by name, leftovers, a large working tree,
// fresh namespaces and no network, nothing left behind. The scripts run sbx with usbx (as that user,
// stdio being the test's pipes) or through $USBX in a shell (for redirections the root shell opens).
func TestRootless(t *testing.T) { runRootless(t, "testdata/rootless", "rootless-") }

// TestBatteryRootless runs the escape battery with sbx started by an ordinary user: "sbx" in the
// scripts is the user's (a wrapper first in PATH). Cases that need what sbx refuses without root (the
// network contract) skip on [rootless].
func TestBatteryRootless(t *testing.T) {
	runRootless(t, filepath.Join("testdata", "battery"), "battery-rootless-")
}

func runRootless(t *testing.T, dir, prefix string) {
	u, bin := rootlessUser(t, "creates the ordinary user the scripts run sbx as")
	params := scriptParams(dir, prefix)
	params.Cmds["usbx"] = u.cmdUsbx
	params.Cmds["upstream"] = cmdUpstream
	params.Cmds["usbxnet"] = u.cmdUsbxNet
	cond := params.Condition
	params.Condition = func(c string) (bool, error) {
		if c == "rootless" {
			return true, nil
		}
		return cond(c)
	}
	setup := params.Setup
	params.Setup = func(env *testscript.Env) error {
		if err := setup(env); err != nil {
			return err
		}
		// The user's state root, out of the working tree; the working tree is the user's.
		state := filepath.Join(filepath.Dir(env.WorkDir), "state-"+filepath.Base(env.WorkDir))
		for _, d := range []string{env.WorkDir, state} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return err
			}
			if err := os.Chown(d, u.uid, u.gid); err != nil {
				return err
			}
		}
		if err := os.Chmod(filepath.Dir(env.WorkDir), 0o711); err != nil {
			return err
		}
		env.Setenv(stateRootEnv, state)
		env.Setenv("SBXUSER", u.name)
		env.Setenv("SBXUID", strconv.Itoa(u.uid))
		env.Setenv("USBX", strings.Join(u.argv(bin, env.WorkDir, state), " "))
		// "sbx" in the scripts is the user's.
		wrapper := filepath.Join(state, "bin")
		if err := os.Mkdir(wrapper, 0o755); err != nil {
			return err
		}
		script := "#!/bin/sh\nexec " + strings.Join(u.argv(bin, env.WorkDir, state), " ") + " \"$@\"\n"
		if err := writeExecutable(filepath.Join(wrapper, "sbx"), []byte(script)); err != nil {
			return err
		}
		env.Setenv("PATH", wrapper+":"+env.Getenv("PATH"))
		env.Defer(func() { u.checkGone(env, state) })
		return nil
	}
	u.bin = bin
	testscript.Run(t, params)
}

// rootlessUser makes the test's ordinary user and a copy of sbx it can run (why: what the test needs
// root for). Once the test ends (after every script: they run in parallel, as the same user) nothing
// of the user may be left running.
func rootlessUser(t *testing.T, why string) (*testUser, string) {
	testutil.RequireRoot(t, why)
	for _, tool := range []string{"useradd", "userdel", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing", tool)
		}
	}
	u := newTestUser(t)
	t.Cleanup(func() { u.checkNoProcesses(t) })
	return u, installSbx(t)
}

// testUser is an ordinary user made for a test.
type testUser struct {
	name     string
	uid, gid int
	bin      string
}

// newTestUser adds a user with a group of its own and no home; it is removed when the test ends.
func newTestUser(t *testing.T) *testUser {
	name := fmt.Sprintf("sbxt%d", os.Getpid()%100000)
	if out, err := exec.Command("useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel: %v: %s", err, out)
		}
	})
	id := func(flag string) int {
		out, err := exec.Command("id", flag, name).Output()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		return n
	}
	return &testUser{name: name, uid: id("-u"), gid: id("-g")}
}

// installSbx copies the test binary where the user can run it, named sbx (testscript dispatches on
// the name).
func installSbx(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sbx-rootless-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sbx")
	if err := writeExecutable(bin, data); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// argv runs bin as the user, in a clean environment, with its state root.
func (u *testUser) argv(bin, work, state string) []string {
	return []string{"setpriv", "--reuid=" + strconv.Itoa(u.uid), "--regid=" + strconv.Itoa(u.gid), "--clear-groups",
		"env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + work, stateRootEnv + "=" + state, bin}
}

// usbx N ARG...: run sbx ARG... as the user, in the script's directory, and expect exit status N. Its
// stdio are the test's pipes (root's, mode 0600).
func (u *testUser) cmdUsbx(ts *testscript.TestScript, neg bool, args []string) {
	u.runUsbx(ts, neg, args, nil)
}

// usbxnet N ARG...: usbx inside the script's upstream namespace (see upstream): sbx, its pasta and its
// DNS filter see only the addresses made there.
func (u *testUser) cmdUsbxNet(ts *testscript.TestScript, neg bool, args []string) {
	up := ts.Getenv("UPSTREAM")
	if up == "" {
		ts.Fatalf("no upstream in this script")
	}
	u.runUsbx(ts, neg, args, []string{"nsenter", "--net=" + up, "--"})
}

// runUsbx runs sbx as the user, prefixed by wrap.
func (u *testUser) runUsbx(ts *testscript.TestScript, neg bool, args, wrap []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: usbx N ARG...")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	argv := append(append(wrap, u.argv(u.bin, ts.Getenv("WORK"), ts.Getenv(stateRootEnv))...), args[1:]...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = ts.Getenv("WORK")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Stdin = strings.NewReader(ts.Getenv("USBX_STDIN"))
	err = cmd.Run()
	io.Copy(ts.Stdout(), &out)
	io.Copy(ts.Stderr(), &errb)
	checkStatus(ts, neg, err, want)
}

// checkNoProcesses fails the test when the user has a process left, and kills them (by pid) so that
// userdel can remove the user.
func (u *testUser) checkNoProcesses(t *testing.T) {
	// Zombies are dead: a killed sbx's children are reparented to pid 1, which reaps them when it
	// pleases (this machine's init does so late), and hold nothing but a pid.
	out, err := exec.Command("pgrep", "--runstates", "RSDTt", "-u", strconv.Itoa(u.uid)).Output()
	if err != nil || len(out) == 0 {
		return
	}
	t.Errorf("processes of %s left behind: %s", u.name, strings.Fields(string(out)))
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// checkGone fails the script when the user's state root holds a run.
func (u *testUser) checkGone(env *testscript.Env, state string) {
	runs, _ := os.ReadDir(filepath.Join(state, "runs"))
	os.RemoveAll(filepath.Join(state, "bin"))
	if len(runs) > 0 {
		env.T().Fatal(fmt.Sprintf("%d run dirs left in %s", len(runs), state))
	}
	os.RemoveAll(state)
}

// TestRootlessMCP drives `sbx mcp`, started by an ordinary user, with the SDK's client: a run reopens
// its stdout, leaves a process behind (a violation), says it ran without root, and leaves no run.
func TestRootlessMCP(t *testing.T) {
	testutil.RequireRoot(t, "creates the ordinary user sbx runs as")
	u := newTestUser(t)
	t.Cleanup(func() { u.checkNoProcesses(t) })
	bin := installSbx(t)
	base := t.TempDir()
	work, state := filepath.Join(base, "work"), filepath.Join(base, "state")
	for _, d := range []string{work, state} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, u.uid, u.gid); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	argv := append(u.argv(bin, work, state), "mcp", "-w", work)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "sbx-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to sbx mcp: %v", err)
	}
	defer sess.Close()
	_, out := callRun(ctx, t, sess, map[string]any{"command": "echo hi > /dev/stdout; nohup sleep 300 >/dev/null 2>&1 & exit 0"})
	if out["stdout"] != "hi\n" || out["verdict"] != "violation" {
		t.Errorf("stdout %q, verdict %v; want hi and a violation (sleep left running)", out["stdout"], out["verdict"])
	}
	if notes, _ := json.Marshal(out["notes"]); !strings.Contains(string(notes), "rootless") {
		t.Errorf("notes %s do not say the run had no root", notes)
	}
	// Runs in the warm pool's sandboxes (built ahead, their filter loaded before the command was known)
	// are filtered, and a refused syscall is recorded, in each.
	for i := range 3 {
		_, out = callRun(ctx, t, sess, map[string]any{"command": "unshare -n true 2>/dev/null || echo refused; sh -c 'grep -c \"Seccomp:.2\" /proc/self/status'"})
		all, _ := json.Marshal(out)
		if out["stdout"] != "refused\n1\n" || !strings.Contains(string(all), "CLONE_NEWNET") {
			t.Errorf("run %d: %s, want unshare refused and recorded, the shell filtered", i, all)
		}
	}
	sess.Close()
	if runs, _ := os.ReadDir(filepath.Join(state, "runs")); len(runs) > 0 {
		t.Errorf("%d runs left in the state root", len(runs))
	}
}

// upstream: build the fake upstream (fakenet, $FAKENET) and an upstream namespace for a rootless sbx
// ($UPSTREAM, a path): a veth pair from it into the fake upstream, with a default route through it, as
// pasta needs an external routable interface. sbx started there (usbxnet) gives pasta only these
// addresses to see. /dev/net/tun is opened to everyone (stock distributions do) until the script ends.
func cmdUpstream(ts *testscript.TestScript, neg bool, args []string) {
	cmdFakenet(ts, false, nil)
	fake := fakenet.NS(ts.Getenv("FAKENET"))
	name := fmt.Sprintf("sbx-test-up-rootless-%d-%s", os.Getpid(), filepath.Base(ts.Getenv("WORK")))
	up, err := fakenet.AddNS(name[:min(len(name), 60)])
	ts.Check(err)
	ts.Defer(func() { up.Del() })
	ts.Check(up.Veth("up0", "192.0.2.2/24", fake, "world0", "192.0.2.1/24"))
	ts.Check(up.IP("route", "add", "default", "via", "192.0.2.1", "dev", "up0"))
	ts.Setenv("UPSTREAM", up.Path())
	st, err := os.Stat("/dev/net/tun")
	ts.Check(err)
	if st.Mode().Perm() != 0o666 {
		ts.Check(os.Chmod("/dev/net/tun", 0o666))
		ts.Defer(func() { os.Chmod("/dev/net/tun", st.Mode().Perm()) })
	}
}

// writeExecutable writes a program that is run at once, with forks held off meanwhile: the scripts run
// in parallel, and a child forked by another one while the file was open for writing would hold that fd
// until its exec, failing the exec of this program with ETXTBSY ("text file busy", Go issue 22315).
func writeExecutable(path string, data []byte) error {
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	return os.WriteFile(path, data, 0o755)
}
