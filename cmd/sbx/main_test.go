package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sbx-dev/sbx/internal/fakenet"

	"github.com/sbx-dev/sbx/sandbox"
)

func init() { runtime.LockOSThread() }

func TestMain(m *testing.M) {
	if sandbox.Reexec() {
		return
	}
	testscript.Main(m, map[string]func(){
		"sbx": func() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
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
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: scriptCmds(),
		Setup: func(env *testscript.Env) error {
			env.Setenv("SBX_TEST_SECRET", "hunter2")
			root := filepath.Join(testStateParent(), prefix+filepath.Base(env.WorkDir))
			env.Setenv(stateRootEnv, root)
			env.Defer(func() {
				// Only empty directories go: what a run left behind stays for the next look.
				for _, d := range []string{"runs", "lc", ""} {
					os.Remove(filepath.Join(root, d))
				}
				os.Remove(filepath.Dir(root))
			})
			return nil
		},
	}
}

// testStateParent is the directory of the tests' state roots, searchable by the sandboxes' roots
// (unprivileged host uids that reach their run dirs by path).
func testStateParent() string {
	dir := sandbox.DefaultStateRoot + "-test"
	os.MkdirAll(dir, 0o711)
	os.Chmod(dir, 0o711)
	return dir
}

// scriptCmds are the custom commands of the scripts; the crash, signal, limit and bad-input ones are in
// battery_test.go.
func scriptCmds() map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	return map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"jsonhas":     cmdJSONHas,
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

// jsonhas FILE PATH [VALUE]: the JSON value at the dotted PATH (list indexes as numbers, "len" for the
// length of a list) exists, and its JSON encoding contains VALUE when given.
func cmdJSONHas(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: jsonhas FILE PATH [VALUE]")
	}
	var doc any
	ts.Check(json.Unmarshal([]byte(ts.ReadFile(args[0])), &doc))
	v, ok := lookup(doc, strings.Split(args[1], "."))
	if ok && len(args) > 2 {
		enc, _ := json.Marshal(v)
		ok = strings.Contains(string(enc), args[2])
		if !ok && !neg {
			ts.Fatalf("%s = %s, want it to contain %s", args[1], enc, args[2])
		}
	}
	if ok == neg {
		ts.Fatalf("jsonhas %s: got %v, want %v", strings.Join(args, " "), ok, !neg)
	}
}

func lookup(v any, path []string) (any, bool) {
	for _, key := range path {
		switch node := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = node[key]; !ok {
				return nil, false
			}
		case []any:
			if key == "len" {
				return float64(len(node)), true
			}
			i, err := strconv.Atoi(key)
			if err != nil || i >= len(node) {
				return nil, false
			}
			v = node[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// status N PROG [ARG...]: PROG exits with status N (stdout and stderr are kept for the next commands).
func cmdStatus(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: status N PROG [ARG...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	checkStatus(ts, neg, ts.Exec(args[1], args[2:]...), want)
}

// checkStatus checks the exit status of a command that ended with err.
func checkStatus(ts *testscript.TestScript, neg bool, err error, want int) {
	got := 0
	if ee, ok := err.(*exec.ExitError); ok {
		got = ee.ExitCode()
	} else {
		ts.Check(err)
	}
	if (got == want) == neg {
		ts.Fatalf("exit status %d, want %d", got, want)
	}
}

// fakenets are the fake upstream namespaces of the running scripts, by script work dir.
var fakenets sync.Map

// fakenet: build a fake upstream network namespace (fake metadata server, LAN hosts, public hosts, DNS
// server, all on its lo) and set $FAKENET to its name, for --uplink-netns. It goes when the script ends.
// "fakenet refuse ADDR..." makes those fake hosts answer every port as closed.
func cmdFakenet(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) > 0 && args[0] == "refuse" {
		v, ok := fakenets.Load(ts.Getenv("WORK"))
		if !ok {
			ts.Fatalf("no fakenet in this script")
		}
		ts.Check(v.(*fakenet.Net).Refuse(args[1:]...))
		return
	}
	n, err := fakenet.New()
	ts.Check(err)
	fakenets.Store(ts.Getenv("WORK"), n)
	ts.Setenv("FAKENET", n.Name)
	ts.Setenv("FAKEDNS", fakenet.DNS+":53")
	ts.Defer(func() { n.Close() })
}

// fakequeries NAME: the fake upstream DNS server saw a query for NAME.
func cmdFakeQueries(ts *testscript.TestScript, neg bool, args []string) {
	v, ok := fakenets.Load(ts.Getenv("WORK"))
	if !ok {
		ts.Fatalf("no fakenet in this script")
	}
	seen := slices.ContainsFunc(v.(*fakenet.Net).Queries(), func(q string) bool {
		return strings.TrimSuffix(q, ".") == strings.TrimSuffix(args[0], ".")
	})
	if seen == neg {
		ts.Fatalf("fake DNS saw %s: %v, want %v (queries %v)", args[0], seen, !neg, v.(*fakenet.Net).Queries())
	}
}

// nsclean: no sbx network namespace or veth is left, in the host and in the script's fakenet.
func cmdNSClean(ts *testscript.TestScript, neg bool, args []string) {
	if v, ok := fakenets.Load(ts.Getenv("WORK")); ok {
		var links []string
		var err error
		// The kernel frees a veth peer shortly after its namespace goes.
		for range 50 {
			if links, err = v.(*fakenet.Net).Links(); err == nil && len(links) == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		ts.Check(err)
		if len(links) > 0 {
			ts.Fatalf("links left in the fake upstream: %v", links)
		}
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "sbx") && !strings.HasPrefix(e.Name(), "sbx-test-up") {
			// Another script's run may be live; only this script's state root says what is ours.
			if _, err := os.Stat(filepath.Join(ts.Getenv(stateRootEnv), "runs", strings.TrimPrefix(e.Name(), "sbx"))); err == nil {
				ts.Fatalf("network namespace left: %s", e.Name())
			}
		}
	}
}

// hostgone FILE: no process listed as left running in the report still exists on the host.
func cmdHostGone(ts *testscript.TestScript, neg bool, args []string) {
	var rep struct {
		Processes struct {
			LeftRunning []struct {
				HostPid int `json:"host_pid"`
			} `json:"left_running"`
		} `json:"processes"`
	}
	ts.Check(json.Unmarshal([]byte(ts.ReadFile(args[0])), &rep))
	if len(rep.Processes.LeftRunning) == 0 {
		ts.Fatalf("the report lists nothing left running")
	}
	for _, p := range rep.Processes.LeftRunning {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.HostPid)); err == nil {
			ts.Fatalf("host pid %d still exists", p.HostPid)
		}
	}
}

// clean: nothing of sbx's is left on the host: no run state, no mounts, no cgroups.
func cmdClean(ts *testscript.TestScript, neg bool, args []string) {
	ts.Check(checkClean(ts.Getenv(stateRootEnv)))
}

// checkClean checks that root holds no runs and no mounts.
func checkClean(root string) error {
	runs, _ := os.ReadDir(filepath.Join(root, "runs"))
	if len(runs) > 0 {
		return fmt.Errorf("%d run state dirs left in %s/runs", len(runs), root)
	}
	return checkNoMounts(root)
}

// checkCleanBut checks that root holds at most n runs (a server's warm pool) and no mounts but theirs.
func checkCleanBut(root string, n int) error {
	runs, _ := os.ReadDir(filepath.Join(root, "runs"))
	if len(runs) > n {
		return fmt.Errorf("%d run state dirs left in %s/runs, want at most the %d of the warm pool", len(runs), root, n)
	}
	if n > 0 {
		return nil // the pool's sandboxes are mounted
	}
	return checkNoMounts(root)
}

// checkNoMounts checks that nothing is mounted below root.
func checkNoMounts(root string) error {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, root+"/") {
			return fmt.Errorf("mount left behind: %s", line)
		}
	}
	return nil
}

// linesdiffer A B: A and B have the same number of lines and no line in common at the same position.
func cmdLinesDiffer(ts *testscript.TestScript, neg bool, args []string) {
	a := strings.Split(strings.TrimSpace(ts.ReadFile(args[0])), "\n")
	b := strings.Split(strings.TrimSpace(ts.ReadFile(args[1])), "\n")
	if len(a) != len(b) {
		ts.Fatalf("%d lines vs %d", len(a), len(b))
	}
	for i := range a {
		if a[i] == b[i] {
			ts.Fatalf("line %d is the same in both: %s", i+1, a[i])
		}
	}
}
