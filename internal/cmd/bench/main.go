// Command bench times `sbx exec -- true` side by side with runc (a busybox bundle) and bubblewrap from
// Debian's packages, interleaved in one run so that the machine's noise falls on all of them alike, and
// prints medians and ratios. It is run by `make bench`, as root.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sbx-dev/sbx/internal/fakenet"
)

type contender struct {
	name string
	argv func(i int) []string
	time func(i int) (float64, error) // instead of argv: the contender times itself (an MCP call)
	off  *contender                   // the same command with sbx recording nothing, for the listener's cost
	dir  string                       // working directory; "" = the bench's scratch directory
	// env is added to the bench's environment for argv; nil: SBX_SERVICE=off, so that no sbx service
	// on the machine takes the bench's cold runs.
	env []string
	// settle: the run hands its sandbox back to a pool that refills after it answers (the MCP server,
	// sbx serve): the bench waits for that as for a warm call (settleAfterWarm).
	settle bool
	ms     []float64
}

func main() {
	sbx := flag.String("sbx", "bin/sbx", "path of the sbx binary")
	n := flag.Int("n", 40, "iterations per contender")
	rssOnly := flag.Bool("rss", false, "only the peak-memory floods")
	flag.StringVar(&floodOnly, "flood", "", "with -rss: only the floods whose name holds this")
	rounds := flag.Int("rounds", 8, "rounds of runs started at once")
	burstsOnly := flag.Bool("bursts", false, "only the rounds of runs started at once")
	quick := flag.Bool("quick", false, "only the headline ratios: cold sbx exec, runc, bwrap and a warm sbx_run")
	files := flag.Int("files", 100000, "files of the create/delete/create cycle (0: none)")
	filesOnly := flag.Bool("files-only", false, "only the create/delete/create cycle")
	flag.BoolVar(&runsOnly, "runs", false, "only the interleaved single runs (cold, rootless, runc, bwrap, warm, through sbx serve)")
	flag.Parse()

	if *filesOnly {
		sbxAbs, _ := filepath.Abs(*sbx)
		dir, err := os.MkdirTemp("", "sbx-bench-")
		if err == nil {
			err = benchFiles(sbxAbs, dir, *files)
			os.RemoveAll(dir)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}

	if *rssOnly {
		sbxAbs, _ := filepath.Abs(*sbx)
		if err := reportRSS(sbxAbs, os.TempDir()); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := benchmark(*sbx, *n, *rounds, *burstsOnly, *quick, *files); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func benchmark(sbx string, n, rounds int, burstsOnly, quick bool, files int) error {
	sbx, _ = filepath.Abs(sbx)
	dir, err := os.MkdirTemp("", "sbx-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bundle, err := busyboxBundle(dir)
	if err != nil {
		return err
	}
	runc := func(i int) []string {
		return []string{"runc", "--root", filepath.Join(dir, "runc-state"), "run", "--bundle", bundle, fmt.Sprintf("sbx-bench-%d", i)}
	}
	if burstsOnly {
		return benchBursts(sbx, dir, runc, rounds)
	}
	if quick {
		return benchQuick(sbx, dir, runc, n)
	}
	// runc again with the bundle sbx spec writes for the default profile: the same seccomp filter,
	// namespaces, masked paths and limits as sbx's sandbox, on the busybox rootfs.
	sameBundle, err := specBundle(sbx, dir, filepath.Join(bundle, "rootfs"))
	if err != nil {
		return err
	}
	// The contract's cost is measured against a fake upstream namespace of the bench's own, so that no
	// run has the host's network as its uplink.
	up, err := fakenet.New()
	if err != nil {
		return fmt.Errorf("fake upstream: %w", err)
	}
	defer up.Close()
	// The working tree is the command's through an idmapped mount: setup must not grow with its size.
	small, err := tree(dir, "tree-10", 10)
	if err != nil {
		return err
	}
	big, err := tree(dir, "tree-50000", 50000)
	if err != nil {
		return err
	}
	// --apply's cost: 10 files changed in a tree of 100,000 (proportional to the change, not the tree),
	// and 10,000 files written (each run removes the last run's and writes them anew), each beside the
	// same run without --apply.
	huge, err := tree(dir, "tree-100000", 100000)
	if err != nil {
		return err
	}
	scratch := filepath.Join(dir, "apply-10000")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return err
	}
	ten := "for i in 0 1 2 3 4 5 6 7 8 9; do echo $$ > d123/f$i; done"
	many := "rm -rf w; mkdir w; cd w; seq 10000 | xargs touch"
	cs := []*contender{
		{name: "sbx exec, 10 changed of 100,000", dir: huge, argv: func(int) []string { return []string{sbx, "exec", "-q", "--", "sh", "-c", ten} }},
		{name: "sbx exec --apply, 10 of 100,000", dir: huge, argv: func(int) []string { return []string{sbx, "exec", "-q", "--apply", "--", "sh", "-c", ten} }},
		{name: "sbx exec, 10,000 files written", dir: scratch, argv: func(int) []string { return []string{sbx, "exec", "-q", "--", "sh", "-c", many} }},
		{name: "sbx exec --apply, 10,000 written", dir: scratch, argv: func(int) []string { return []string{sbx, "exec", "-q", "--apply", "--", "sh", "-c", many} }},
		{name: "sbx exec -- true", argv: func(int) []string { return []string{sbx, "exec", "-q", "--", "true"} }},
		{name: "sbx exec --allow (contract)", argv: func(int) []string {
			return []string{sbx, "exec", "-q", "--uplink-netns", up.Name, "--allow", fakenet.Public + ":443", "--", "true"}
		}},
		{name: "sbx exec, tree of 10", dir: small, argv: func(int) []string { return []string{sbx, "exec", "-q", "--", "true"} }},
		{name: "sbx exec, tree of 50,000", dir: big, argv: func(int) []string { return []string{sbx, "exec", "-q", "--", "true"} }},
		{name: "runc run (busybox)", argv: runc},
		{name: "runc run (sbx spec default)", argv: func(i int) []string {
			return []string{"runc", "--root", filepath.Join(dir, "runc-state"), "run", "--bundle", sameBundle, fmt.Sprintf("sbx-bench-same-%d", i)}
		}},
		{name: "bwrap --unshare-all", argv: bwrapArgv},
	}
	notify, err := notifyContenders(sbx, dir)
	if err != nil {
		return err
	}
	cs = append(cs, notify...)
	// The same, started by an ordinary user (made for the bench, removed after it).
	u, err := newUser(dir)
	if err != nil {
		return err
	}
	defer u.remove()
	cs = append(cs,
		&contender{name: "sbx exec -- true (user)", dir: u.work, argv: func(int) []string {
			return u.argv(sbx, "exec", "-q", "--", "true")
		}},
		&contender{name: "bwrap --unshare-all (user)", dir: u.work, argv: func(int) []string {
			return u.argv("bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true")
		}},
	)
	srv, warm, err := warmContender(sbx, dir)
	if err != nil {
		return err
	}
	defer srv.close()
	// The same server run by the ordinary user, as an agent on a workstation runs it.
	usrv, err := startServer(u.argv(sbx, "mcp", "-w", u.work, "--warm", "2", "--concurrency", "1"))
	if err != nil {
		return err
	}
	defer usrv.close()
	cs = append(cs, warm, &contender{name: "sbx_run true, warm pool (MCP, user)",
		time: func(int) (float64, error) { return usrv.call("true") }})
	svc, err := rootService(sbx, dir, 2)
	if err != nil {
		return err
	}
	defer svc.close()
	usvc, err := userService(sbx, dir, u)
	if err != nil {
		return err
	}
	defer usvc.close()
	cs = append(cs, serviceContender(sbx, svc), goClientContender(sbx, svc),
		&contender{name: "sbx exec -- true, sbx serve (user)", dir: u.work, settle: true, argv: func(int) []string {
			return u.argvEnv(usvc.env(), sbx, "exec", "-q", "--", "true")
		}})
	for _, c := range cs {
		if c.argv == nil {
			continue
		}
		if _, err := exec.LookPath(c.argv(0)[0]); err != nil {
			return fmt.Errorf("%s: %w (make deps installs it)", c.name, err)
		}
	}
	if err := runAll(cs, n, dir); err != nil {
		return err
	}
	report(cs, n)
	targets(cs)
	fmt.Printf("peak RSS of the sbx mcp server (pool of 2): %.1f MB\n", float64(srv.peakRSS())/(1<<20))
	fmt.Printf("peak RSS of sbx serve (pool of 2): %.1f MB\n", float64(svc.peakRSS())/(1<<20))
	if runsOnly {
		return nil
	}
	if err := benchBursts(sbx, dir, runc, rounds); err != nil {
		return err
	}
	if files > 0 {
		if err := benchFiles(sbx, dir, files); err != nil {
			return err
		}
	}
	return reportRSS(sbx, dir)
}

// benchQuick times only what the performance targets compare: a cold sbx exec, runc, bwrap, a warm
// sbx_run and sbx exec through sbx serve.
func benchQuick(sbx, dir string, runc func(int) []string, n int) error {
	srv, warm, err := warmContender(sbx, dir)
	if err != nil {
		return err
	}
	defer srv.close()
	svc, err := rootService(sbx, dir, 2)
	if err != nil {
		return err
	}
	defer svc.close()
	// --apply's cost: 10 files changed in a tree of 100,000 (proportional to the change, not the tree),
	// and 10,000 files written (each run removes the last run's and writes them anew), each beside the
	// same run without --apply.
	huge, err := tree(dir, "tree-100000", 100000)
	if err != nil {
		return err
	}
	scratch := filepath.Join(dir, "apply-10000")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return err
	}
	ten := "for i in 0 1 2 3 4 5 6 7 8 9; do echo $$ > d123/f$i; done"
	many := "rm -rf w; mkdir w; cd w; seq 10000 | xargs touch"
	cs := []*contender{
		{name: "sbx exec, 10 changed of 100,000", dir: huge, argv: func(int) []string { return []string{sbx, "exec", "-q", "--", "sh", "-c", ten} }},
		{name: "sbx exec --apply, 10 of 100,000", dir: huge, argv: func(int) []string { return []string{sbx, "exec", "-q", "--apply", "--", "sh", "-c", ten} }},
		{name: "sbx exec, 10,000 files written", dir: scratch, argv: func(int) []string { return []string{sbx, "exec", "-q", "--", "sh", "-c", many} }},
		{name: "sbx exec --apply, 10,000 written", dir: scratch, argv: func(int) []string { return []string{sbx, "exec", "-q", "--apply", "--", "sh", "-c", many} }},
		{name: "sbx exec -- true", argv: func(int) []string { return []string{sbx, "exec", "-q", "--", "true"} }},
		{name: "runc run (busybox)", argv: runc},
		{name: "bwrap --unshare-all", argv: bwrapArgv},
		warm,
		serviceContender(sbx, svc), goClientContender(sbx, svc),
	}
	if err := runAll(cs, n, dir); err != nil {
		return err
	}
	report(cs, n)
	targets(cs)
	return nil
}

// warmContender is sbx_run of true through `sbx mcp` with its warm pool (2 sandboxes), timed by the
// bench as the MCP client.
func warmContender(sbx, dir string) (*mcpServer, *contender, error) {
	srv, err := startMCP(sbx, dir, "--warm", "2", "--concurrency", "1")
	if err != nil {
		return nil, nil, err
	}
	return srv, &contender{name: "sbx_run true, warm pool (MCP)", time: func(int) (float64, error) { return srv.call("true") }}, nil
}

// serviceContender is sbx exec of true handed to the sbx serve svc (its pool of warm sandboxes).
// runsOnly: -runs, only the interleaved single runs.
var runsOnly bool

func serviceContender(sbx string, svc *service) *contender {
	return &contender{name: "sbx exec -- true, sbx serve", env: svc.env(), settle: true,
		argv: func(int) []string { return []string{sbx, "exec", "-q", "--", "true"} }}
}

// goClientContender is serviceContender with the CLI's Go client (_SBX_NO_FAST: no fast client).
func goClientContender(sbx string, svc *service) *contender {
	return &contender{name: "sbx exec -- true, sbx serve, Go client", env: append(svc.env(), "_SBX_NO_FAST=1"), settle: true,
		argv: func(int) []string { return []string{sbx, "exec", "-q", "--", "true"} }}
}

func bwrapArgv(int) []string {
	return []string{"bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"}
}

// settleAfterWarm is the pause, not timed, after a warm run through the MCP server.
const settleAfterWarm = 300 * time.Millisecond

// runAll runs every contender n times, interleaved, after three warm-up rounds that are not counted.
//
// Each round runs the contenders in an order of its own: whatever the one before leaves behind (a
// warm call's refill, page cache, a scheduler's state) falls on every contender alike, not always on
// the one that comes next in a fixed order (measured: sbx exec, always first, came out 5-7 ms slower
// than the same command later in the round).
func runAll(cs []*contender, n int, dir string) error {
	for i := -3; i < n; i++ {
		for _, k := range rand.Perm(len(cs)) {
			c := cs[k]
			wd := dir
			if c.dir != "" {
				wd = c.dir
			}
			var d float64
			var err error
			if c.time != nil || c.settle {
				if c.time != nil {
					d, err = c.time(i + 3)
				} else {
					d, err = timeOne(c.argv(i+3), wd, c.env)
				}
				// The server tears the used sandbox down and refills its pool after it answers: let that
				// end (as an agent's time between two commands would) before the next contender is timed,
				// which would otherwise share the CPU with it.
				time.Sleep(settleAfterWarm)
			} else {
				d, err = timeOne(c.argv(i+3), wd, c.env)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if i >= 0 {
				c.ms = append(c.ms, d)
			}
		}
	}
	return nil
}

// timeOne runs argv in dir (a scratch directory: sbx's overlay shows the working directory, and the
// benchmark should not depend on where it was started) and returns its wall time in ms.
func timeOne(argv []string, dir string, env []string) (float64, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	if env == nil {
		env = []string{"SBX_SERVICE=off"}
	}
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t := time.Now()
	err := cmd.Run()
	d := time.Since(t)
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return float64(d.Microseconds()) / 1000, nil
}

func report(cs []*contender, n int) {
	fmt.Printf("wall time of one run, %d interleaved runs each (ms)\n", n)
	fmt.Printf("%-40s %8s %8s %8s %10s\n", "", "median", "p10", "p90", "vs sbx")
	base := median(cs[0].ms)
	for _, c := range cs {
		m := median(c.ms)
		fmt.Printf("%-40s %8.1f %8.1f %8.1f %9.2fx\n", c.name, m, pct(c.ms, 10), pct(c.ms, 90), m/base)
	}
	for _, c := range cs {
		if c.name == "sbx exec --allow (contract)" {
			fmt.Printf("network contract adds %.1f ms to a run (median, contract vs none)\n", median(c.ms)-base)
		}
	}
	for _, c := range cs {
		if c.off != nil {
			fmt.Printf("recording refused syscalls and writes (seccomp notify) adds %.1f ms to %s\n", median(c.ms)-median(c.off.ms), c.name)
		}
	}
}

// targets prints the ratios docs/performance.md sets targets for, each with its target.
func targets(cs []*contender) {
	byName := map[string][]float64{}
	for _, c := range cs {
		byName[c.name] = c.ms
	}
	for _, t := range []struct {
		a, b   string
		target float64
	}{
		{"sbx_run true, warm pool (MCP)", "bwrap --unshare-all", 1},
		{"sbx exec -- true", "runc run (busybox)", 1},
		{"sbx exec -- true, sbx serve", "bwrap --unshare-all", 1},
		{"sbx exec -- true", "bwrap --unshare-all", 3},
		{"sbx exec -- true, sbx serve (user)", "bwrap --unshare-all (user)", 1},
		{"sbx exec -- true (user)", "bwrap --unshare-all (user)", 2.5},
	} {
		if byName[t.a] != nil && byName[t.b] != nil {
			fmt.Printf("%s / %s: %.2fx (target <= %.2fx)\n", t.a, t.b, median(byName[t.a])/median(byName[t.b]), t.target)
		}
	}
	const userWarm, userBwrap = "sbx_run true, warm pool (MCP, user)", "bwrap --unshare-all (user)"
	if byName[userWarm] != nil && byName[userBwrap] != nil {
		fmt.Printf("%s / %s: %.2fx\n", userWarm, userBwrap, median(byName[userWarm])/median(byName[userBwrap]))
	}
}

// Syscall-heavy commands for the seccomp notify listener's cost: allowed syscalls (getpid, opens for
// reading) stay plain filter rules; opens for writing go through the listener.
const (
	loopAllowed = "import os\nfor _ in range(100000):\n    os.getpid(); os.close(os.open('/etc/hostname', os.O_RDONLY))"
	loopWrites  = "import os\nfor _ in range(10000):\n    os.close(os.open('/tmp/f', os.O_WRONLY|os.O_CREAT))"
)

// notifyContenders time sbx with the listener (the default profile) side by side with a profile that
// records nothing (syscalls.record: false, filesystem.record_writes: false).
func notifyContenders(sbx, dir string) ([]*contender, error) {
	off := filepath.Join(dir, "record-off.yaml")
	if err := os.WriteFile(off, []byte("version: 1\nname: record-off\nextends: default\n"+
		"syscalls:\n  record: false\nfilesystem:\n  record_writes: false\n"), 0o644); err != nil {
		return nil, err
	}
	var out []*contender
	for _, c := range []struct{ name, py string }{
		{"true", ""}, {"100k getpid+open/close", loopAllowed}, {"10k opens for writing", loopWrites},
	} {
		argv := []string{"true"}
		if c.py != "" {
			argv = []string{"python3", "-c", c.py}
		}
		offC := &contender{name: "  " + c.name + ", record off", argv: func(int) []string {
			return append([]string{sbx, "exec", "-q", "-p", off, "--"}, argv...)
		}}
		on := &contender{name: "  " + c.name + ", record on", off: offC, argv: func(int) []string {
			return append([]string{sbx, "exec", "-q", "--"}, argv...)
		}}
		out = append(out, offC, on)
	}
	return out, nil
}

func median(v []float64) float64 { return pct(v, 50) }

func pct(v []float64, p int) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

// user is an ordinary user the bench runs sbx and bwrap as.
type user struct {
	name, uid, gid string
	work, state    string
}

// users counts the users newUser made: the floods make one while the whole runs' is still there.
var users atomic.Int32

// newUser adds a user with a group of its own, a working directory and a state root below dir.
func newUser(dir string) (*user, error) {
	n := users.Add(1)
	u := &user{name: fmt.Sprintf("sbxbench%d-%d", os.Getpid()%100000, n), work: filepath.Join(dir, fmt.Sprintf("user-%d", n)),
		state: filepath.Join(dir, fmt.Sprintf("user-state-%d", n))}
	if out, err := exec.Command("useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", u.name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("useradd: %v: %s", err, out)
	}
	for _, id := range []struct {
		flag string
		to   *string
	}{{"-u", &u.uid}, {"-g", &u.gid}} {
		out, err := exec.Command("id", id.flag, u.name).Output()
		if err != nil {
			u.remove()
			return nil, err
		}
		*id.to = strings.TrimSpace(string(out))
	}
	for _, d := range []string{u.work, u.state} {
		if err := os.Mkdir(d, 0o700); err != nil {
			u.remove()
			return nil, err
		}
		if out, err := exec.Command("chown", u.uid+":"+u.gid, d).CombinedOutput(); err != nil {
			u.remove()
			return nil, fmt.Errorf("chown: %v: %s", err, out)
		}
	}
	return u, os.Chmod(dir, 0o711)
}

// argv runs prog as the user.
func (u *user) argv(prog string, args ...string) []string {
	return u.argvEnv([]string{"SBX_SERVICE=off"}, prog, args...)
}

// argvEnv runs prog as the user with env added to its environment.
func (u *user) argvEnv(env []string, prog string, args ...string) []string {
	a := append([]string{"setpriv", "--reuid=" + u.uid, "--regid=" + u.gid, "--clear-groups",
		"env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + u.work, "SBX_STATE_ROOT=" + u.state}, env...)
	return append(append(a, prog), args...)
}

func (u *user) remove() { exec.Command("userdel", u.name).Run() }

// tree makes a working tree of n entries (directories of 100 files) below dir.
func tree(dir, name string, n int) (string, error) {
	root := filepath.Join(dir, name)
	for i := 0; i < n; i++ {
		sub := filepath.Join(root, fmt.Sprintf("d%03d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return "", err
			}
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", i%100)), []byte("x\n"), 0o644); err != nil {
			return "", err
		}
	}
	return root, nil
}

// busyboxBundle makes an OCI bundle whose rootfs holds only Debian's static busybox, for runc.
func busyboxBundle(dir string) (string, error) {
	bundle := filepath.Join(dir, "bundle")
	bin := filepath.Join(bundle, "rootfs", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", err
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return "", fmt.Errorf("busybox: %w (make deps installs busybox-static)", err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), data, 0o755); err != nil {
		return "", err
	}
	for _, name := range []string{"true", "sh"} {
		if err := os.Symlink("busybox", filepath.Join(bin, name)); err != nil {
			return "", err
		}
	}
	if out, err := exec.Command("runc", "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		return "", fmt.Errorf("runc spec: %v: %s", err, out)
	}
	path := filepath.Join(bundle, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return "", err
	}
	spec.Process.Terminal = false
	spec.Process.Args = []string{"/bin/true"}
	raw, err = json.MarshalIndent(&spec, "", "  ")
	if err != nil {
		return "", err
	}
	return bundle, os.WriteFile(path, raw, 0o644)
}

// specBundle writes a bundle whose config.json is `sbx spec -p default -- /bin/true` over rootfs.
func specBundle(sbx, dir, rootfs string) (string, error) {
	bundle := filepath.Join(dir, "same")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command(sbx, "spec", "-p", "default", "--rootfs", rootfs, "-o", filepath.Join(bundle, "config.json"), "--", "/bin/true")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("sbx spec: %v: %s", err, out)
	}
	return bundle, nil
}
