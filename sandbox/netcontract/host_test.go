package netcontract

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/miekg/dns"
	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
)

// loopbackDNS serves allowed.test on the host's loopback, so that the host-uplink test never asks a real
// resolver. It returns "127.0.0.1:port".
func loopbackDNS(t *testing.T) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg).SetReply(r)
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
			A: net.ParseIP("203.0.113.10")})
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

// hostTables is the host's nft table list.
func hostTables(t *testing.T) string { return run(t, "nft", "list", "tables") }

// TestHostUplink: with the host as uplink the NAT table exists while any sandbox runs and goes with the
// last one. The sandbox only talks to the host side of its veth: the DNS filter (allowed) and another
// port there (refused: the host's own addresses are always denied). Nothing is sent beyond the host.
func TestHostUplink(t *testing.T) {
	testutil.RequireRoot(t, "changes the host's nftables rules and ip_forward")
	if !natUsersEmpty() || strings.Contains(hostTables(t), natTable) {
		t.Skip("another sbx holds the host NAT: the refcount cannot be observed")
	}
	forward, _ := os.ReadFile(ipForwardSy)
	nw := policy.Network{Mode: policy.NetContract,
		Allow: []policy.NetRule{{Host: "allowed.test", Proto: "tcp", Port: 443}},
		DNS:   policy.DNS{Upstream: loopbackDNS(t)}}
	a := setup(t, Config{Net: nw})
	b := setup(t, Config{Net: nw})
	if !strings.Contains(hostTables(t), natTable) {
		t.Fatalf("no %s table while sandboxes run:\n%s", natTable, hostTables(t))
	}
	peer := a.link.addrs().peer4.Addr().String()
	in(t, a, func() {
		r, err := dnsLookup(resolver(t, a.ResolvConf()), "allowed.test")
		if err != nil || len(r.Answer) != 1 {
			t.Errorf("allowed.test through the filter on the host: %v %v", r, err)
		}
		if at := tcpGet(net.JoinHostPort(peer, "22")); at.reachable() || !isRefused(at.err) {
			t.Errorf("host side of the veth on port 22: %v, want refused", at)
		}
	})
	denied, _ := a.Denied()
	if len(denied) != 1 || denied[0].Address != peer || denied[0].Port != 22 {
		t.Errorf("Denied() = %+v, want the host-side address on port 22", denied)
	}
	a.Close()
	if !strings.Contains(hostTables(t), natTable) {
		t.Errorf("%s removed while a sandbox still runs", natTable)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if out := hostTables(t); strings.Contains(out, "sbx") {
		t.Errorf("host tables after the last sandbox:\n%s", out)
	}
	if after, _ := os.ReadFile(ipForwardSy); string(after) != string(forward) {
		t.Errorf("ip_forward %q after the last sandbox, was %q", after, forward)
	}
}
