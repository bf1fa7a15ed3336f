package main

// The test binary (TestMain) and the script suites: testdata/script here, and the battery and rootless
// suites built on scriptParams, with the registry of their custom commands.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/sandbox"
)

// TestMain: the test binary is also the sandboxes' init and supervisor (sandbox.Reexec), and sbx itself
// for the scripts.
func TestMain(m *testing.M) {
	testutil.Main(m, testutil.Binary{
		Reexec:   sandbox.Reexec,
		Commands: map[string]func() int{"sbx": func() int { return run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr) }},
	})
}

// TestScripts runs the CLI tests in testdata/script: one txtar file per subcommand or feature.
func TestScripts(t *testing.T) { testscript.Run(t, scriptParams("testdata/script", "")) }

// scriptParams are the testscript parameters every script suite shares: the [root] condition, sbx's
// custom commands, and a state root of its own per script (prefixed), so that "clean" sees only its runs.
func scriptParams(dir, prefix string) testscript.Params {
	return testscript.Params{
		Dir: dir,
		Condition: func(cond string) (bool, error) {
			if cond == "root" {
				return os.Geteuid() == 0, nil
			}
			if cond == "rootless" {
				return false, nil // true in the suites that run sbx as an ordinary user
			}
			if cond == "service" {
				return false, nil // true when sbx exec hands its runs to sbx serve (TestScriptsService)
			}
			if cond == "memfd_secret" {
				return memfdSecret(), nil
			}
			if cond == "procevents_unprivileged" {
				return proceventsUnprivileged(), nil
			}
			if cond == "pip" {
				// Debian's python3 has no pip without python3-pip (the VM image's).
				return exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run() == nil, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: scriptCmds(),
		Setup: func(env *testscript.Env) error {
			env.Setenv("SBX_TEST_SECRET", "hunter2")
			env.Setenv(serviceEnv, "off") // unless a suite runs them through sbx serve
			// Files the scripts share (testdata/compat: the everyday tools both compat_tools run).
			testdata, err := filepath.Abs("testdata")
			if err != nil {
				return err
			}
			env.Setenv("TESTDATA", testdata)
			root := filepath.Join(testStateParent(), prefix+filepath.Base(env.WorkDir))
			env.Setenv(stateRootEnv, root)
			env.Defer(func() {
				testutil.RemoveStateRoot(root)
				os.Remove(filepath.Dir(root))
			})
			return nil
		},
	}
}

// memfdSecret says whether this kernel gives memfd_secret: before 6.5 it is off unless booted with
// secretmem.enable=1 (Debian 12's 6.1 answers ENOSYS).
func memfdSecret() bool {
	fd, _, errno := unix.Syscall(unix.SYS_MEMFD_SECRET, 0, 0, 0)
	if errno != 0 {
		return false
	}
	unix.Close(int(fd))
	return true
}

// proceventsUnprivileged says whether the kernel's process-events connector takes a listener without
// CAP_NET_ADMIN (Linux 6.6 and later; before, sbx without root has no exec events): an ordinary uid
// (nobody) binds a connector socket to the process-events group.
var proceventsUnprivileged = sync.OnceValue(func() bool {
	probe := "import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 11).bind((0, 1))" // NETLINK_CONNECTOR, CN_IDX_PROC
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "python3", "-c", probe)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"} // the rootless scripts' (testUser.argv)
	return cmd.Run() == nil
})

// testStateParent is the directory of the tests' state roots, searchable by the sandboxes' roots
// (unprivileged host uids that reach their run dirs by path).
func testStateParent() string {
	dir := sandbox.DefaultStateRoot + "-test"
	os.MkdirAll(dir, 0o711)
	os.Chmod(dir, 0o711)
	return dir
}

// scriptCmds are the custom commands of the scripts and the battery: checks of reports, exit statuses
// and leftovers, crash, signal, limit and bad-input commands (scriptcmds_test.go), the fake upstream and
// the network's leftovers (scriptnet_test.go).
func scriptCmds() map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	return map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"jsonhas":     cmdJSONHas,
		"jsoneq":      cmdJSONEq,
		"hostgone":    cmdHostGone,
		"clean":       cmdClean,
		"status":      cmdStatus,
		"linesdiffer": cmdLinesDiffer,
		"fakenet":     cmdFakenet,
		"fakequeries": cmdFakeQueries,
		"nsclean":     cmdNSClean,
		"hostproc":    cmdHostProc,
		"alive":       cmdAlive,
		"hostfile":    cmdHostFile,
		"within":      cmdWithin,
		"scaled":      cmdScaled,
		"sbxbg":       cmdSbxBg,
		"sbxsig":      cmdSbxSig,
		"sbxwait":     cmdSbxWait,
		"waitrun":     cmdWaitRun,
		"runclean":    cmdRunClean,
		"crashsweep":  cmdCrashSweep,
		"argvtrip":    cmdArgvTrip,
		"fakeconns":   cmdFakeConns,
		"suidcopy":    cmdSuidCopy,
		"natclean":    cmdNATClean,
		"pause":       cmdPause,
		"waitout":     cmdWaitOut,
	}
}
