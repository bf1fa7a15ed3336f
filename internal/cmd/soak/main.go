// Command soak runs bin/sbx many times, first one run after another and then many at once, and then
// checks that the host is as it was: no process of any run alive, no mount under the soak's state root, no
// cgroup, network namespace, link, nftables table, address slot or state dir of sbx left. It prints a
// summary with counts and timings (median and p90 per run) and exits 1 when a run failed or something
// was left. It is run by `make soak`, as root; it is long, so `make test` leaves it out.
//
// The runs mix three kinds: a plain command (status 0), a command that leaves a process behind (a
// violation, 100: teardown has something to kill) and a network-contract run whose uplink is a fake
// upstream namespace built by internal/fakenet (status 0 after it reaches the one allowed fake host). No
// run sends anything to a real address.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sbx-dev/sbx/internal/fakenet"
)

// The fakenet helpers switch threads into namespaces: keep main's goroutine on the main thread.
func init() { runtime.LockOSThread() }

func main() {
	sbx := flag.String("sbx", "bin/sbx", "path of the sbx binary")
	serial := flag.Int("serial", 200, "runs one after another")
	parallel := flag.Int("parallel", 20, "runs at once")
	root := flag.String("state", "/run/sbx-soak", "state root of the soak's runs (SBX_STATE_ROOT)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "soak: needs root: sbx creates namespaces, cgroups and mounts")
		os.Exit(1)
	}
	ok, err := soak(*sbx, *root, *serial, *parallel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// kind is one sort of run.
type kind struct {
	name string
	want int // exit status
	args func(tag, uplink string) []string
}

var kinds = []kind{
	{"plain", 0, func(tag, _ string) []string {
		return []string{"exec", "-q", "--", "sh", "-c", ": " + tag + "; echo hi > /tmp/f && cat /tmp/f > /dev/null"}
	}},
	{"leftover", 100, func(tag, _ string) []string {
		return []string{"exec", "-q", "--", "sh", "-c", ": " + tag + "; sleep 300 & exit 0"}
	}},
	{"contract", 0, func(tag, uplink string) []string {
		return []string{"exec", "-q", "--allow", fakenet.Public + ":443", "--uplink-netns", uplink, "--",
			"bash", "-c", ": " + tag + "; timeout 5 bash -c 'echo x > /dev/tcp/" + fakenet.Public + "/443'"}
	}},
}

// kindOf spreads the kinds over the runs: mostly plain, every 5th a leftover, every 7th a contract run.
func kindOf(i int) kind {
	switch {
	case i%7 == 3:
		return kinds[2]
	case i%5 == 1:
		return kinds[1]
	}
	return kinds[0]
}

// result is one run.
type result struct {
	kind   string
	status int
	want   int
	dur    time.Duration
	stderr string
}

func soak(sbx, root string, serial, parallel int) (bool, error) {
	sbx, err := filepath.Abs(sbx)
	if err != nil {
		return false, err
	}
	if _, err := os.Stat(sbx); err != nil {
		return false, fmt.Errorf("%w (run make build first)", err)
	}
	up, err := fakenet.New()
	if err != nil {
		return false, fmt.Errorf("building the fake upstream: %w", err)
	}
	defer up.Close()
	tag := "sbx-soak-" + randHex(6)
	before := snapshot(root, tag)
	fmt.Printf("soak: %s, state root %s, marker %s\n", sbx, root, tag)

	t0 := time.Now()
	var serialRes []result
	for i := range serial {
		serialRes = append(serialRes, runOne(sbx, root, tag, up.Name, i))
	}
	serialWall := time.Since(t0)

	t1 := time.Now()
	parRes := make([]result, parallel)
	var wg sync.WaitGroup
	for i := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parRes[i] = runOne(sbx, root, tag, up.Name, i)
		}()
	}
	wg.Wait()
	parWall := time.Since(t1)

	// The kernel frees veths and namespaces in the background: give it a moment before judging.
	// A veth peer in the uplink goes when the kernel has destroyed the sandbox's namespace, which it
	// batches: after 20 at once that can take a few seconds.
	var left []string
	for range 50 {
		left = snapshot(root, tag).since(before)
		links, lerr := up.Links()
		if lerr != nil {
			left = append(left, "fake upstream links: "+lerr.Error())
		}
		for _, l := range links {
			left = append(left, "link in the fake upstream: "+l)
		}
		if len(left) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	// sbx's own files go (the compiled seccomp filters, the primer's file); of the rest only empty
	// directories: whatever a run leaked stays for inspection.
	os.RemoveAll(filepath.Join(root, "cache"))
	os.Remove(filepath.Join(root, "primed"))
	for _, d := range []string{filepath.Join(root, "runs"), filepath.Join(root, "lc"), root} {
		os.Remove(d)
	}
	ok := report("serial", serialRes, serialWall)
	ok = report("parallel", parRes, parWall) && ok
	if len(left) > 0 {
		fmt.Printf("LEFT BEHIND (%d):\n", len(left))
		for _, l := range left {
			fmt.Println("  " + l)
		}
		ok = false
	} else {
		fmt.Println("left behind: nothing (processes, mounts, cgroups, netns, links, nft tables, slots, state dirs)")
	}
	if ok {
		fmt.Println("soak: PASS")
	} else {
		fmt.Println("soak: FAIL")
	}
	return ok, nil
}

func runOne(sbx, root, tag, uplink string, i int) result {
	k := kindOf(i)
	cmd := exec.Command(sbx, k.args(tag, uplink)...)
	cmd.Env = append(os.Environ(), "SBX_STATE_ROOT="+root)
	cmd.Dir = "/"
	var errb bytes.Buffer
	cmd.Stderr = &errb
	t := time.Now()
	err := cmd.Run()
	r := result{kind: k.name, want: k.want, dur: time.Since(t), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.status = ee.ExitCode()
	case err != nil:
		r.status, r.stderr = -1, err.Error()
	}
	return r
}

// report prints the counts and timings of one phase and says whether every run gave its status.
func report(phase string, rs []result, wall time.Duration) bool {
	failed := 0
	byKind := map[string][]time.Duration{}
	var all []time.Duration
	for _, r := range rs {
		all = append(all, r.dur)
		byKind[r.kind] = append(byKind[r.kind], r.dur)
		if r.status != r.want {
			failed++
			if failed <= 5 {
				fmt.Printf("  %s run (%s) exited %d, want %d: %s\n", phase, r.kind, r.status, r.want, strings.TrimSpace(r.stderr))
			}
		}
	}
	fmt.Printf("%-8s %d runs in %v: %d ok, %d failed; per run median %v p90 %v max %v\n", phase, len(rs),
		wall.Round(time.Millisecond), len(rs)-failed, failed, pct(all, 50), pct(all, 90), pct(all, 100))
	for _, k := range kinds {
		if d := byKind[k.name]; len(d) > 0 {
			fmt.Printf("           %-8s %3d runs: median %v p90 %v\n", k.name, len(d), pct(d, 50), pct(d, 90))
		}
	}
	return failed == 0
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	i = max(1, min(i, len(s)))
	return s[i-1].Round(100 * time.Microsecond)
}

// state is what of sbx's is on the host, as a set of descriptions.
type state map[string]bool

// since lists what is in s but was not in before.
func (s state) since(before state) []string {
	var out []string
	for k := range s {
		if !before[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// snapshot records processes carrying the soak's marker or living in an sbx cgroup, mounts of the state
// root, sbx cgroups, named network namespaces, host links and nftables tables named sbx*, address slots
// and the state root's run and container dirs.
func snapshot(root, tag string) state {
	s := state{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(p + "/cmdline")
		if bytes.Contains(cmdline, []byte(tag)) {
			s["process "+filepath.Base(p)+": "+strings.ReplaceAll(string(cmdline), "\x00", " ")] = true
		}
		if cg, _ := os.ReadFile(p + "/cgroup"); bytes.Contains(cg, []byte(":/sbx-")) {
			s["process "+filepath.Base(p)+" in an sbx cgroup"] = true
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mounts), "\n") {
		if strings.Contains(l, root+"/") || strings.Contains(l, "/run/netns/sbx") && !strings.Contains(l, "sbx-test-up") {
			s["mount "+l] = true
		}
	}
	for _, pat := range []string{"/sys/fs/cgroup/*/sbx-*", "/sys/fs/cgroup/sbx-*", "/run/netns/sbx*",
		"/run/sbx/net/slots/*", "/run/sbx/nat/users/*", root + "/runs/*", root + "/lc/*"} {
		matches, _ := filepath.Glob(pat)
		for _, m := range matches {
			if st, err := os.Stat(m); err == nil && (st.IsDir() || !strings.HasPrefix(m, "/sys/")) && !strings.Contains(m, "sbx-test-up") {
				s["path "+m] = true
			}
		}
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, "sbx") {
			s["host link "+i.Name] = true
		}
	}
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "sbx") {
				s["nft "+strings.TrimSpace(l)] = true
			}
		}
	}
	return s
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
