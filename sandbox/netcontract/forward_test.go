package netcontract

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/internal/fakenet"
	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
)

// testHost is a namespace that plays the host: two links to namespaces A (198.18.1.2) and B
// (198.18.2.2), each of which routes through it. Everything lives in namespaces of this test.
type testHost struct{ h, a, b string } // namespace names

// newTestHost builds the three namespaces, with IPv4 forwarding of the host set to forward.
func newTestHost(t *testing.T, forward string) testHost {
	t.Helper()
	p := fmt.Sprintf("sbx-test-up-%d-%s", os.Getpid(), testID()[1:])
	th := testHost{h: p + "h", a: p + "a", b: p + "b"}
	host := fakenet.NSForTest(t, th.h)
	for i, name := range []string{th.a, th.b} {
		side := fakenet.NSForTest(t, name)
		if err := host.Veth(fmt.Sprintf("h%d", i), fmt.Sprintf("198.18.%d.1/24", i+1),
			side, fmt.Sprintf("s%d", i), fmt.Sprintf("198.18.%d.2/24", i+1)); err != nil {
			t.Fatal(err)
		}
		if err := side.IP("route", "add", "default", "via", fmt.Sprintf("198.18.%d.1", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	run(t, "ip", "netns", "exec", th.h, "sysctl", "-qw", "net.ipv4.ip_forward="+forward)
	return th
}

// forwarded says whether a datagram from A to B passes through the host.
func (th testHost) forwarded(t *testing.T) bool {
	t.Helper()
	var pc net.PacketConn
	if err := fakenet.RunIn(nsFile(th.b), func() (err error) {
		pc, err = net.ListenPacket("udp4", "198.18.2.2:9999")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if err := fakenet.RunIn(nsFile(th.a), func() error {
		c, err := net.Dial("udp4", "198.18.2.2:9999")
		if err != nil {
			return err
		}
		defer c.Close()
		for range 3 {
			c.Write([]byte("through the host"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, _, err := pc.ReadFrom(make([]byte, 64))
	return err == nil
}

func nsFile(name string) string { return filepath.Join(netnsDir, name) }

// hostForwarding is the host namespace's ip_forward.
func (th testHost) hostForwarding(t *testing.T) string {
	return strings.TrimSpace(run(t, "ip", "netns", "exec", th.h, "sysctl", "-n", "net.ipv4.ip_forward"))
}

// TestHostForwardsOnlySandboxTraffic: while a contract run uses a host that did not forward, the host
// forwards the sandbox's traffic and nothing else; a host that already forwarded keeps forwarding. After
// the run, forwarding is as it was and sbx's table is gone.
func TestHostForwardsOnlySandboxTraffic(t *testing.T) {
	testutil.RequireRoot(t, "builds network namespaces and changes their ip_forward and nftables rules")
	for _, tc := range []struct {
		name          string
		forward       string
		crashed       bool // a run of sbx that turned forwarding on died before restoring it
		wantForwarded bool
		after         string
	}{
		{"host did not forward", "0", false, false, "0"},
		{"host already forwarded", "1", false, true, "1"},
		{"forwarding left on by a dead run", "1", true, false, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := newTestHost(t, tc.forward)
			if got := th.forwarded(t); got != (tc.forward == "1") {
				t.Fatalf("before the run: forwarded = %v with ip_forward=%s", got, tc.forward)
			}
			state := t.TempDir()
			if tc.crashed {
				if err := os.WriteFile(hostSide{dir: state}.forwarding(), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var ln net.Listener
			if err := fakenet.RunIn(nsFile(th.b), func() (err error) { ln, err = net.Listen("tcp4", "198.18.2.2:80"); return err }); err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for c, err := ln.Accept(); err == nil; c, err = ln.Accept() {
					c.Close()
				}
			}()
			nw := policy.Network{Mode: policy.NetContract, UplinkNetNS: th.h, DNS: policy.DNS{Upstream: "127.0.0.1:53"},
				Except: []policy.NetRule{{CIDR: "198.18.2.2/32", Proto: "tcp", Port: 80}}}
			n := setup(t, Config{Net: nw, hostState: state})
			if got := th.hostForwarding(t); got != "1" {
				t.Fatalf("ip_forward of the host during the run = %s, want 1", got)
			}
			table := run(t, "ip", "netns", "exec", th.h, "nft", "list", "table", "ip", natTable)
			for _, want := range []string{"ip saddr 10.199.0.0/16 ip daddr != 10.199.0.0/16 masquerade", `iifname "sbx*" ip daddr 10.199.0.0/16 udp dport 53 accept`} {
				if !strings.Contains(table, want) {
					t.Errorf("the host's table lacks %q:\n%s", want, table)
				}
			}
			if got := th.forwarded(t); got != tc.wantForwarded {
				t.Errorf("during the run: a datagram between two other links forwarded = %v, want %v", got, tc.wantForwarded)
			}
			in(t, n, func() {
				c, err := net.DialTimeout("tcp4", "198.18.2.2:80", 2*time.Second)
				if err != nil {
					t.Errorf("the sandbox through the host: %v, want connected", err)
					return
				}
				c.Close()
			})
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			if got := th.hostForwarding(t); got != tc.after {
				t.Errorf("ip_forward after the run = %s, want %s", got, tc.after)
			}
			if out := run(t, "ip", "netns", "exec", th.h, "nft", "list", "tables"); strings.Contains(out, natTable) {
				t.Errorf("the host keeps %s after the run:\n%s", natTable, out)
			}
		})
	}
}

// TestHostLateAddressGuarded: an address added to the host after the contract was loaded, inside a
// range the profile allows, is still not reachable from the sandbox: the host's input guard drops new
// connections from a sandbox's veth to the host itself. The host's subnets, broadcast included, are
// refused by the contract although the profile allows the range.
func TestHostLateAddressGuarded(t *testing.T) {
	testutil.RequireRoot(t, "builds network namespaces and changes their ip_forward and nftables rules")
	th := newTestHost(t, "0")
	nw := policy.Network{Mode: policy.NetContract, UplinkNetNS: th.h, DNS: policy.DNS{Upstream: "127.0.0.1:53"},
		Allow: []policy.NetRule{{CIDR: "198.18.0.0/15", Proto: "tcp", Port: 22}}}
	n := setup(t, Config{Net: nw, hostState: t.TempDir()})
	run(t, "ip", "-n", th.h, "addr", "add", "198.18.9.1/32", "dev", "lo")
	var ln net.Listener
	if err := fakenet.RunIn(nsFile(th.h), func() (err error) { ln, err = net.Listen("tcp4", "198.18.9.1:22"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	in(t, n, func() {
		c, err := net.DialTimeout("tcp4", "198.18.9.1:22", 500*time.Millisecond)
		if err == nil {
			c.Close()
			t.Errorf("the sandbox reached an address added to the host after setup")
		}
		// The host's subnets are always denied: a neighbour and the broadcast address.
		for _, addr := range []string{"198.18.2.2:22", "198.18.1.255:22"} {
			if a := tcpGet(addr); a.reachable() || !isRefused(a.err) {
				t.Errorf("%s on the host's subnet: %v, want refused", addr, a)
			}
		}
	})
	denied, err := n.Denied()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(denied, func(d report.Denied) bool { return d.Address == "198.18.1.255" }) {
		t.Errorf("Denied() = %+v, want the broadcast attempt", denied)
	}
}
