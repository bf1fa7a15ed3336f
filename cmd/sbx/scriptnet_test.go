package main

// The testscript commands about the network: the script's fake upstream (fakenet), what it saw, and
// that no namespace, link, NAT table or forwarding change is left.

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sbx-dev/sbx/internal/fakenet"
)

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

// fakeconns ADDR: the script's fake upstream saw no connection to ADDR (with !: it saw one).
func cmdFakeConns(ts *testscript.TestScript, neg bool, args []string) {
	v, ok := fakenets.Load(ts.Getenv("WORK"))
	if !ok {
		ts.Fatalf("no fakenet in this script")
	}
	conns := v.(interface{ Connections() []string }).Connections()
	seen := slices.ContainsFunc(conns, func(c string) bool { return strings.Contains(c, args[0]) })
	if seen != neg {
		ts.Fatalf("fake upstream saw a connection to %s: %v (connections %v)", args[0], seen, conns)
	}
}

// natclean FILE: when no live run holds a reference on the host NAT (/run/sbx/nat/users), the sbx_nat
// table is gone from the host and IPv4 forwarding is what FILE says it was before the test.
func cmdNATClean(ts *testscript.TestScript, neg bool, args []string) {
	users, _ := os.ReadDir("/run/sbx/nat/users")
	for _, u := range users {
		ns, err := os.ReadFile(filepath.Join("/run/sbx/nat/users", u.Name()))
		if err == nil {
			if _, err := os.Stat(strings.TrimSpace(string(ns))); err == nil {
				ts.Logf("NAT still referenced by live run %s: not checked", u.Name())
				return
			}
		}
	}
	if out, err := exec.Command("nft", "list", "table", "ip", "sbx_nat").CombinedOutput(); err == nil {
		ts.Fatalf("host NAT table sbx_nat left with no live user:\n%s", out)
	}
	want := strings.TrimSpace(ts.ReadFile(args[0]))
	got, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	ts.Check(err)
	if strings.TrimSpace(string(got)) != want {
		ts.Fatalf("ip_forward is %s, was %s before the test", strings.TrimSpace(string(got)), want)
	}
}
