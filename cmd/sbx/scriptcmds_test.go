package main

// The testscript commands of the scripts and of the battery: checks of reports, exit statuses and
// leftovers, and the "nothing escapes, nothing leaks" commands (crash recovery, signals, timeouts,
// concurrency, limits and bad input). Each command says what it proves; the scripts say which case it
// serves. They are registered in scriptCmds (main_test.go); the network's are in scriptnet_test.go.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/sandbox/cgroup"
)

// hostproc NAME: start a host process (sleep 600) owned by the test and set $NAME to its pid. It is
// killed, by that pid, when the script ends. Battery cases aim signals at it.
func cmdHostProc(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: hostproc NAME")
	}
	cmd := exec.Command("sleep", "600")
	ts.Check(cmd.Start())
	pid := cmd.Process.Pid
	ts.Setenv(args[0], strconv.Itoa(pid))
	ts.Defer(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
}

// alive PID...: each host process PID exists and is not a zombie (with !: each is gone). A PID
// argument may hold several pids separated by spaces ($RUNPIDS).
func cmdAlive(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: alive PID...")
	}
	for _, a := range args {
		for _, f := range strings.Fields(a) {
			pid, err := strconv.Atoi(f)
			ts.Check(err)
			if ok := processAlive(pid); ok == neg {
				ts.Fatalf("host pid %d alive: %v, want %v", pid, ok, !neg)
			}
		}
	}
}

func processAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

// hostfile VAR: create a file with a unique name in the host's /tmp holding "host-secret-<random>", set
// $VAR to its path and $VAR_CONTENT to its content. It is removed when the script ends.
func cmdHostFile(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: hostfile VAR")
	}
	tag := randHex(6)
	path := "/tmp/sbx-battery-host-" + tag
	content := "host-secret-" + tag
	ts.Check(os.WriteFile(path, []byte(content+"\n"), 0o644))
	ts.Setenv(args[0], path)
	ts.Setenv(args[0]+"_CONTENT", content)
	ts.Defer(func() { os.Remove(path) })
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// scaled [-ms] NAME DURATION: sets NAME to DURATION stretched by SBX_TEST_TIME_SCALE (testutil.Scaled),
// for a bound a script hands sbx itself (--timeout) that the command must reach something within; with
// -ms, as a number of milliseconds (for a bound a script computes, in jq).
func cmdScaled(ts *testscript.TestScript, neg bool, args []string) {
	ms := len(args) > 0 && args[0] == "-ms"
	if ms {
		args = args[1:]
	}
	if neg || len(args) != 2 {
		ts.Fatalf("usage: scaled [-ms] NAME DURATION")
	}
	d, err := time.ParseDuration(args[1])
	ts.Check(err)
	d = testutil.Scaled(d)
	v := d.String()
	if ms {
		v = strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64)
	}
	ts.Setenv(args[0], v)
}

// within MAX N PROG [ARG...]: PROG exits with status N in at most MAX (a Go duration), stretched by
// SBX_TEST_TIME_SCALE (testutil.Scaled: the VM harness sets it under emulation).
func cmdWithin(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 3 {
		ts.Fatalf("usage: within MAX N PROG [ARG...]")
	}
	max, err := time.ParseDuration(args[0])
	ts.Check(err)
	max = testutil.Scaled(max)
	t0 := time.Now()
	cmdStatus(ts, false, args[1:])
	if d := time.Since(t0); d > max {
		ts.Fatalf("took %v, want at most %v", d.Round(time.Millisecond), max)
	}
	ts.Logf("took %v", time.Since(t0).Round(time.Millisecond))
}

// bgSbx is an sbx started by sbxbg.
type bgSbx struct {
	cmd     *exec.Cmd
	out     *countingWriter
	errb    bytes.Buffer
	started time.Time
	sigAt   time.Time
	done    chan struct{}
	elapsed time.Duration // from the last sbxsig (or the start) to the exit
	hwm     atomic.Int64  // sbx's peak resident memory in KiB, sampled from /proc while it runs
}

// sampleHWM follows sbx's VmHWM until it exits. The exit record's ru_maxrss would not do: a process
// started from Go keeps, at its exec, the high-water mark of the test process it was forked from.
// Nor does a sample taken while /proc still shows the test binary at the pid (seen in a slow VM, tens
// of milliseconds after Start returned): that is the test process's memory, not sbx's.
func (b *bgSbx) sampleHWM() {
	proc := fmt.Sprintf("/proc/%d/", b.cmd.Process.Pid)
	self, _ := os.Executable()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if exe, err := os.Readlink(proc + "exe"); err == nil && exe != self {
			if kb := vmHWM(proc + "status"); kb > b.hwm.Load() {
				b.hwm.Store(kb)
			}
		}
		select {
		case <-b.done:
			return
		case <-tick.C:
		}
	}
}

// vmHWM reads the VmHWM line of a /proc status file, in KiB; 0 once the process is gone or a zombie.
func vmHWM(status string) int64 {
	b, err := os.ReadFile(status)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

// countingWriter keeps the first 64 KiB written to it and counts the rest.
type countingWriter struct {
	mu   sync.Mutex
	n    int64
	head bytes.Buffer
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += int64(len(p))
	if room := 64<<10 - w.head.Len(); room > 0 {
		w.head.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

var bgs sync.Map // WORK + "\x00" + NAME -> *bgSbx

func bgKey(ts *testscript.TestScript, name string) string { return ts.Getenv("WORK") + "\x00" + name }

// sbxCommand is an exec.Cmd for the test's sbx (the test binary under the name sbx) in the script's
// environment and working directory.
func sbxCommand(ts *testscript.TestScript, args ...string) *exec.Cmd {
	path, err := exec.LookPath("sbx")
	ts.Check(err)
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), stateRootEnv+"="+ts.Getenv(stateRootEnv), "SBX_TEST_SECRET=hunter2", serviceEnv+"="+ts.Getenv(serviceEnv))
	cmd.Dir = ts.MkAbs(".")
	return cmd
}

// sbxbg NAME sbx ARG...: start sbx ARG... in the background, in a process group of its own. Its stdout is
// counted and its first 64 KiB kept (so that a huge output costs the test nothing); sbxwait ends it.
// Nothing is left running: an sbx still running when the script ends is SIGKILLed by its pid.
func cmdSbxBg(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 3 || args[1] != "sbx" {
		ts.Fatalf("usage: sbxbg NAME sbx ARG...")
	}
	b := &bgSbx{out: &countingWriter{}, done: make(chan struct{})}
	b.cmd = sbxCommand(ts, args[2:]...)
	b.cmd.Stdout, b.cmd.Stderr = b.out, &b.errb
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The sandbox's processes share sbx's stdout: when sbx is killed they keep the pipe open until gc.
	b.cmd.WaitDelay = 500 * time.Millisecond
	b.started = time.Now()
	ts.Check(b.cmd.Start())
	go b.sampleHWM()
	go func() {
		b.cmd.Wait()
		b.elapsed = time.Since(b.sigAt)
		if b.sigAt.IsZero() {
			b.elapsed = time.Since(b.started)
		}
		close(b.done)
	}()
	bgs.Store(bgKey(ts, args[0]), b)
	ts.Defer(func() {
		select {
		case <-b.done:
		default:
			b.cmd.Process.Kill()
			<-b.done
		}
	})
}

func findBg(ts *testscript.TestScript, name string) *bgSbx {
	v, ok := bgs.Load(bgKey(ts, name))
	if !ok {
		ts.Fatalf("no background sbx %q", name)
	}
	return v.(*bgSbx)
}

var signalNames = map[string]syscall.Signal{
	"INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "HUP": syscall.SIGHUP, "KILL": syscall.SIGKILL,
}

// sbxsig NAME SIG: send SIG (INT, TERM, HUP, KILL) to the background sbx NAME, by its pid.
func cmdSbxSig(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: sbxsig NAME SIG")
	}
	b := findBg(ts, args[0])
	sig, ok := signalNames[args[1]]
	if !ok {
		ts.Fatalf("unknown signal %s", args[1])
	}
	b.sigAt = time.Now()
	ts.Check(b.cmd.Process.Signal(sig))
}

// sbxwait NAME STATUS [[MIN-]MAX]: the background sbx NAME exits with STATUS (128+N when signal N killed
// sbx itself), no sooner than MIN and within MAX (Go durations; default: within 30s; MAX stretched by
// SBX_TEST_TIME_SCALE) of the last sbxsig, or of its start. Its stdout
// (the first 64 KiB) and stderr become the script's stdout and stderr; $BYTES is the stdout's size and
// $MAXRSS_KB sbx's peak resident memory (sampled every 10 ms while it ran; empty without a sample).
func cmdSbxWait(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: sbxwait NAME STATUS [[MIN-]MAX]")
	}
	b := findBg(ts, args[0])
	want, err := strconv.Atoi(args[1])
	ts.Check(err)
	minD, max := time.Duration(0), 30*time.Second
	if len(args) == 3 {
		lo, hi, ok := strings.Cut(args[2], "-")
		if ok {
			minD, err = time.ParseDuration(lo)
			ts.Check(err)
		} else {
			hi = lo
		}
		max, err = time.ParseDuration(hi)
		ts.Check(err)
	}
	max = testutil.Scaled(max) // the lower bound stays: a slow machine never makes a run end early
	select {
	case <-b.done:
	case <-time.After(max + 10*time.Second):
		ts.Fatalf("sbx %s still running after %v", args[0], max+10*time.Second)
	}
	ps := b.cmd.ProcessState
	got := ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		got = 128 + int(ws.Signal())
	}
	// No sample of sbx itself (it ended before one): unset, so that a script that reads it fails.
	rss := ""
	if kb := b.hwm.Load(); kb > 0 {
		rss = strconv.FormatInt(kb, 10)
	}
	ts.Setenv("MAXRSS_KB", rss)
	ts.Setenv("BYTES", strconv.FormatInt(b.out.n, 10))
	fmt.Fprintf(ts.Stdout(), "%s", b.out.head.String())
	ts.Logf("sbx %s: status %d after %v; stdout %d bytes; stderr:\n%s", args[0], got, b.elapsed.Round(time.Millisecond), b.out.n, b.errb.String())
	// Expose stdout/stderr to the usual stdout/stderr assertions through files in $WORK.
	ts.Check(os.WriteFile(ts.MkAbs(args[0]+".stdout"), b.out.head.Bytes(), 0o644))
	ts.Check(os.WriteFile(ts.MkAbs(args[0]+".stderr"), b.errb.Bytes(), 0o644))
	if (got == want) == neg {
		ts.Fatalf("sbx %s: exit status %d, want %d; stderr:\n%s", args[0], got, want, b.errb.String())
	}
	if b.elapsed < minD {
		ts.Fatalf("sbx %s took %v after the signal (or start), want at least %v", args[0], b.elapsed.Round(time.Millisecond), minD)
	}
	if b.elapsed > max {
		ts.Fatalf("sbx %s took %v after the signal (or start), want at most %v", args[0], b.elapsed.Round(time.Millisecond), max)
	}
}

// waitrun [N]: wait (up to 20s) until this script's state root holds exactly one run whose cgroup holds
// at least N processes (default 1), then set $RUNID to its id, $RUNPIDS to the host pids in its cgroup
// (space-separated) and $SBXPID to the pid of the sbx that owns it (from its lock file).
func cmdWaitRun(ts *testscript.TestScript, neg bool, args []string) {
	n := 1
	if len(args) > 0 {
		var err error
		n, err = strconv.Atoi(args[0])
		ts.Check(err)
	}
	root := ts.Getenv(stateRootEnv)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ids := runIDs(root)
		if len(ids) == 1 {
			pids := runPids(ids[0])
			if len(pids) >= n {
				ts.Setenv("RUNID", ids[0])
				ts.Setenv("RUNPIDS", joinInts(pids))
				lock, _ := os.ReadFile(filepath.Join(root, "runs", ids[0], "lock"))
				ts.Setenv("SBXPID", strings.TrimSpace(string(lock)))
				return
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("no run with %d processes in %s (runs %v)", n, root, ids)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func runIDs(root string) []string {
	entries, _ := os.ReadDir(filepath.Join(root, "runs"))
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Name())
	}
	return ids
}

// runCgroupDirs lists the run's cgroup directories in every mounted hierarchy.
func runCgroupDirs(id string) []string { return cgroup.Dirs(id) }

// runPids are the host pids in the run's cgroups.
func runPids(id string) []int {
	seen := map[int]bool{}
	for _, d := range runCgroupDirs(id) {
		data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				seen[pid] = true
			}
		}
	}
	var pids []int
	for p := range seen {
		pids = append(pids, p)
	}
	slices.Sort(pids)
	return pids
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, " ")
}

// runclean ID [PID...]: nothing of run ID is left on the host: none of the PIDs (its sandboxed processes,
// by host pid) is alive in a cgroup of the run, and there is no cgroup /sys/fs/cgroup/*/sbx-ID, no run
// state dir or libcontainer state, no mount of the run, no network namespace /run/netns/sbxID, no link
// sbxID in the host's namespace and no address slot of the run. The kernel frees some of these in the
// background: each check is retried for up to 3s.
func cmdRunClean(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: runclean ID [PID...]")
	}
	var pids []int
	for _, a := range args[1:] {
		for _, f := range strings.Fields(a) {
			pid, err := strconv.Atoi(f)
			ts.Check(err)
			pids = append(pids, pid)
		}
	}
	var err error
	for range 300 {
		if err = runLeftovers(ts.Getenv(stateRootEnv), args[0], pids); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	ts.Fatalf("run %s: %v", args[0], err)
}

// runLeftovers lists what is left of run id.
func runLeftovers(root, id string, pids []int) error {
	var errs []error
	for _, pid := range pids {
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err == nil && processAlive(pid) && strings.Contains(string(cg), "/"+cgroup.Name(id)) {
			errs = append(errs, fmt.Errorf("sandboxed process %d is alive", pid))
		}
	}
	for _, d := range runCgroupDirs(id) {
		errs = append(errs, fmt.Errorf("cgroup left: %s", d))
	}
	for _, p := range []string{filepath.Join(root, "runs", id), filepath.Join(root, "lc", id), "/run/netns/sbx" + id} {
		if _, err := os.Lstat(p); err == nil {
			errs = append(errs, fmt.Errorf("left: %s", p))
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, "/runs/"+id+"/") || strings.Contains(line, "/sbx"+id+" ") {
			errs = append(errs, fmt.Errorf("mount left: %s", line))
		}
	}
	if _, err := net.InterfaceByName("sbx" + id); err == nil {
		errs = append(errs, fmt.Errorf("link sbx%s left in the host's namespace", id))
	}
	slots, _ := filepath.Glob("/run/sbx/net/slots/*")
	for _, s := range slots {
		if data, _ := os.ReadFile(s); strings.Contains(string(data), "/sbx"+id) {
			errs = append(errs, fmt.Errorf("address slot %s of the run left", s))
		}
	}
	return errors.Join(errs...)
}

// crashsweep DELAYS -- SBXARGS...: for each delay of the comma-separated list, start sbx SBXARGS, SIGKILL
// it after that delay (so sbx dies at many points of the lifecycle: claiming its state, building the
// overlay, the network, the container, while the command runs), and note the run it left and that run's
// processes. Then run `sbx gc` once and check with runclean that every run is gone entirely.
func cmdCrashSweep(ts *testscript.TestScript, neg bool, args []string) {
	i := slices.Index(args, "--")
	if i != 1 || len(args) < 3 {
		ts.Fatalf("usage: crashsweep DELAYS -- SBXARGS...")
	}
	root := ts.Getenv(stateRootEnv)
	type crashed struct {
		id   string
		pids []int
	}
	var runs []crashed
	seen := map[string]bool{}
	var last time.Time
	for _, ds := range strings.Split(args[0], ",") {
		d, err := time.ParseDuration(ds)
		ts.Check(err)
		cmd := sbxCommand(ts, args[2:]...)
		cmd.Stdout, cmd.Stderr = nil, nil // /dev/null: a pipe would stay open in the orphaned sandbox
		last = time.Now()
		ts.Check(cmd.Start())
		time.Sleep(d)
		cmd.Process.Kill()
		cmd.Wait()
		found := false
		for _, id := range runIDs(root) {
			if !seen[id] {
				seen[id], found = true, true
				pids := runPids(id)
				runs = append(runs, crashed{id, pids})
				ts.Logf("killed after %v: run %s with %d processes", d, id, len(pids))
			}
		}
		if !found {
			ts.Logf("killed after %v: no run dir yet", d)
		}
	}
	// gc leaves alone a run dir still being created (".new-", under a second old): wait that out.
	time.Sleep(time.Until(last.Add(1500 * time.Millisecond)))
	out, err := sbxCommand(ts, "gc").CombinedOutput()
	ts.Logf("sbx gc: %s", out)
	if err != nil {
		ts.Fatalf("sbx gc: %v: %s", err, out)
	}
	var errs []error
	for _, r := range runs {
		dir := filepath.Join(root, "runs", r.id)
		if entries, err := os.ReadDir(dir); err == nil && len(entries) == 0 {
			// An empty run dir: what a cut-short removal may leave; gc takes it at once, this only tidies.
			ts.Logf("run %s: empty run dir without a lock left for a later gc (known, harmless window)", r.id)
			os.Remove(dir)
		}
		var err error
		for range 300 {
			if err = runLeftovers(root, r.id, r.pids); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", r.id, err))
		}
	}
	if len(runIDs(root)) > 0 {
		errs = append(errs, fmt.Errorf("run dirs left after gc: %v", runIDs(root)))
	}
	ts.Check(errors.Join(errs...))
}

// argvtrip N text|bytes: an argv of N arguments, among them empty ones, newlines, tabs, quotes, shell
// metacharacters, dashes and a 100 KiB one (and with "bytes", non-UTF-8 ones), passes through sbx exec
// to the command byte for byte.
func cmdArgvTrip(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 || (args[1] != "text" && args[1] != "bytes") {
		ts.Fatalf("usage: argvtrip N text|bytes")
	}
	n, err := strconv.Atoi(args[0])
	ts.Check(err)
	want := []string{"", "a\nb", "line1\nline2\n", "\t tab", "caf\xc3\xa9 \u65e5\u672c", "'\"$HOME`id`",
		"--", "-q", "--json", "*", "$(reboot)", strings.Repeat("x", 100<<10), "\x01\x7f"}
	if args[1] == "bytes" {
		want = append(want, "\xff\xfe\x80 not utf-8", "latin-1 caf\xe9", "\xc3")
	}
	for i := len(want); i < n; i++ {
		want = append(want, "arg-"+strconv.Itoa(i))
	}
	sbxArgs := append([]string{"exec", "-q", "--", "/bin/sh", "-c", `for a do printf '%s\0' "$a"; done`, "sh"}, want...)
	cmd := sbxCommand(ts, sbxArgs...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		ts.Fatalf("sbx exec: %v: %s", err, errb.String())
	}
	got := strings.Split(string(out), "\x00")
	got = got[:len(got)-1]
	if len(got) != len(want) {
		ts.Fatalf("got %d arguments, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			ts.Fatalf("argument %d: got %q, want %q", i, trunc(got[i]), trunc(want[i]))
		}
	}
}

func trunc(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// suidcopy SRC DST: copy SRC to DST (in $WORK) as a setuid-root executable, the way a setuid binary
// sits on the host.
func cmdSuidCopy(ts *testscript.TestScript, neg bool, args []string) {
	data, err := os.ReadFile(args[0])
	ts.Check(err)
	dst := ts.MkAbs(args[1])
	ts.Check(os.WriteFile(dst, data, 0o755))
	ts.Check(os.Chown(dst, 0, 0))
	ts.Check(os.Chmod(dst, 0o4755))
}

// pause DURATION: wait that long (a Go duration).
func cmdPause(ts *testscript.TestScript, neg bool, args []string) {
	d, err := time.ParseDuration(args[0])
	ts.Check(err)
	time.Sleep(d)
}

// waitout NAME TEXT: wait (up to 20s) until the background sbx NAME has written TEXT to stdout, so that
// a signal goes to a command that is ready for it (a buffered signal would otherwise meet a command
// that has not set its handlers yet).
func cmdWaitOut(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: waitout NAME TEXT")
	}
	v, ok := bgs.Load(bgKey(ts, args[0]))
	if !ok {
		ts.Fatalf("no background sbx %s", args[0])
	}
	b := v.(*bgSbx)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		b.out.mu.Lock()
		seen := bytes.Contains(b.out.head.Bytes(), []byte(args[1]))
		b.out.mu.Unlock()
		if seen {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	ts.Fatalf("sbx %s never wrote %q", args[0], args[1])
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

// jsoneq FILE PATH VALUE: the JSON value at the dotted PATH (as for jsonhas) is encoded exactly as VALUE
// (a number: 0 is not 10).
func cmdJSONEq(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: jsoneq FILE PATH VALUE")
	}
	var doc any
	ts.Check(json.Unmarshal([]byte(ts.ReadFile(args[0])), &doc))
	v, ok := lookup(doc, strings.Split(args[1], "."))
	enc, _ := json.Marshal(v)
	if ok = ok && string(enc) == args[2]; ok == neg {
		ts.Fatalf("jsoneq %s: %s is %s", strings.Join(args, " "), args[1], enc)
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
