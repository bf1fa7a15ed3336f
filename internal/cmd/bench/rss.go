package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sbx-dev/sbx/internal/fakenet"
)

// flood is a command that makes sbx observe a lot; its peak RSS shows whether sbx's own memory is
// bounded whatever the command does (issue: sbx at 667 MB for 200,000 created files).
type flood struct {
	name    string
	args    []string
	limit   int64 // peak RSS sbx must stay under, bytes
	network bool  // the run has a network contract, through the bench's fake upstream
	// rootless: the run is an ordinary user's (made for the bench). Its contract's uplink is pasta on
	// the host's network: the flood's queries go to the DNS filter on the sandbox's loopback, which
	// refuses every name and forwards none; nothing else is sent.
	rootless bool
}

// floodOnly, when set (-flood), picks the floods whose name holds it.
var floodOnly string

// dnsFlood sends 100,000 queries for names nobody allows to the sandbox's resolver (the DNS filter) as
// fast as it can, reading no answers: the filter's workers and its socket's queue bound what sbx spends
// (issue: 35 to 135 MB for 100,000 refused queries, one goroutine per datagram).
const dnsFlood = `import socket, struct
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
for i in range(100000):
    name = b"".join(bytes([len(p)]) + p for p in [b"f%d" % i, b"flood", b"test"]) + b"\0"
    try:
        s.sendto(struct.pack(">HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0) + name + b"\0\1\0\1", (ns, 53))
    except BlockingIOError:
        pass
`

var floods = []flood{
	// 5,000 execs with 60 KB of arguments each: what sbx keeps of them is bounded (observe.MaxExecs,
	// MaxArgvBytes). Issue: 1.9 GB RSS and a 280 MB report.
	{name: "5,000 execs, 60 KB argv each", args: []string{"sh", "-c", `a=$(head -c 61440 /dev/zero | tr '\0' x); i=0; while [ $i -lt 5000 ]; do /bin/true $a; i=$((i+1)); done`}, limit: 100 << 20},
	{name: "200,000 files created", args: []string{"sh", "-c", "mkdir d; cd d; seq 200000 | xargs touch"}, limit: 100 << 20},
	{name: "100,000 refused DNS queries", args: []string{"python3", "-c", dnsFlood}, limit: 40 << 20, network: true},
	{name: "100,000 refused DNS (user)", args: []string{"python3", "-c", dnsFlood}, limit: 40 << 20, network: true, rootless: true},
}

// reportRSS runs each flood once under sbx and prints sbx's peak RSS, its wall time and the JSON
// report's size. A flood with a network contract has the bench's own fake upstream as its uplink.
func reportRSS(sbx, dir string) error {
	dir, err := os.MkdirTemp(dir, "sbx-rss-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	up, err := fakenet.New()
	if err != nil {
		return fmt.Errorf("fake upstream: %w", err)
	}
	defer up.Close()
	var u *user
	defer func() {
		if u != nil {
			u.remove()
		}
	}()
	fmt.Printf("\nsbx's own peak memory under floods (limit per row)\n")
	fmt.Printf("%-30s %10s %10s %12s %8s\n", "", "peak RSS", "wall", "JSON report", "")
	for _, f := range floods {
		if !strings.Contains(f.name, floodOnly) {
			continue
		}
		var flags []string
		switch {
		case f.network && f.rootless:
			flags = []string{"--allow", "allowed.test:443"} // refused names are never forwarded
		case f.network:
			flags = []string{"--uplink-netns", up.Name, "--dns-upstream", fakenet.DNS + ":53", "--allow", "allowed.test:443"}
		}
		var as *user
		if f.rootless {
			if u == nil {
				if u, err = newUser(dir); err != nil {
					return err
				}
				// pasta opens /dev/net/tun as the user: open to everyone, as stock distributions
				// have it, until the bench ends.
				if st, err := os.Stat("/dev/net/tun"); err == nil && st.Mode().Perm() != 0o666 {
					if err := os.Chmod("/dev/net/tun", 0o666); err == nil {
						defer os.Chmod("/dev/net/tun", st.Mode().Perm())
					}
				}
			}
			as = u
		}
		rss, wall, size, err := peakRSS(sbx, dir, as, flags, f.args)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		verdict := "ok"
		if rss > f.limit {
			verdict = fmt.Sprintf("OVER %d MB", f.limit>>20)
		}
		fmt.Printf("%-30s %7.1f MB %8.1f s %9.1f MB %8s\n", f.name, float64(rss)/(1<<20), wall.Seconds(), float64(size)/(1<<20), verdict)
	}
	return nil
}

// peakRSS runs `sbx exec --json FILE -- args` in a fresh directory below dir and returns sbx's peak
// RSS (the kernel's ru_maxrss of the process, which covers the children it waited for), the wall time
// and the size of the JSON report.
// With u, the run is that user's, in a directory of its own.
func peakRSS(sbx, dir string, u *user, flags, args []string) (int64, time.Duration, int64, error) {
	if u != nil {
		dir = u.work
	}
	work, err := os.MkdirTemp(dir, "flood-")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(work)
	js := filepath.Join(work, "report.json")
	argv := append(append([]string{sbx, "exec", "-q", "--json", js}, flags...), "--")
	argv = append(argv, args...)
	if u != nil {
		if out, err := exec.Command("chown", u.uid+":"+u.gid, work).CombinedOutput(); err != nil {
			return 0, 0, 0, fmt.Errorf("chown: %v: %s", err, out)
		}
		argv = u.argv(argv[0], argv[1:]...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "SBX_SERVICE=off") // a cold run, whatever service the machine has
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t := time.Now()
	err = cmd.Run()
	wall := time.Since(t)
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		return 0, 0, 0, err
	}
	var rep struct {
		Schema string `json:"schema"`
	}
	raw, rerr := os.ReadFile(js)
	if rerr != nil || json.Unmarshal(raw, &rep) != nil || rep.Schema == "" {
		return 0, 0, 0, fmt.Errorf("no report (%v): %s", err, strings.TrimSpace(stderr.String()))
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return ru.Maxrss << 10, wall, int64(len(raw)), nil
}
