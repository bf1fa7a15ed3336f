package netcontract

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/internal/fakenet"
	"github.com/sbx-dev/sbx/report"
)

// fillDenied sends one UDP datagram to each of deniedMax+100 ports of host: more distinct refused
// destinations than the denied record holds.
func fillDenied(t *testing.T, host string) {
	t.Helper()
	network := "udp4"
	if strings.Contains(host, ":") {
		network = "udp6"
	}
	c, err := net.ListenPacket(network, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for p := 1; p <= deniedMax+100; p++ {
		c.WriteTo([]byte("x"), &net.UDPAddr{IP: net.ParseIP(host), Port: p}) // refused: errors expected
	}
}

// TestDeniedOverflow: once the per-destination record is full, later attempts on always-deny targets are
// still in the report (counted per range) and a note says how much was not itemized.
func TestDeniedOverflow(t *testing.T) {
	fake := newFake(t)
	n := setup(t, Config{Net: contractNet(fake)})
	in(t, n, func() {
		fillDenied(t, fakenet.Public)
		fillDenied(t, fakenet.Public6)
		for _, addr := range []string{fakenet.Metadata4 + ":80", fakenet.Gateway10 + ":22", "[" + fakenet.Metadata6 + "]:80"} {
			if a := tcpGet(addr); a.reachable() {
				t.Errorf("%s: %v, want refused", addr, a)
			}
		}
	})
	denied, err := n.Denied()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"169.254.169.254/32", "10.0.0.0/8", "fd00:ec2::254/128"} {
		if !slices.ContainsFunc(denied, func(d report.Denied) bool { return d.Address == want && d.Proto == "any" && d.Count >= 1 }) {
			t.Errorf("Denied() lacks the always-deny range %s after the record filled up", want)
		}
	}
	notes := strings.Join(n.Notes(), "\n")
	if !strings.Contains(notes, "IPv4 full") || !strings.Contains(notes, "IPv6 full") || !strings.Contains(notes, "not itemized") {
		t.Errorf("notes %q do not say the denied record overflowed", notes)
	}
}
