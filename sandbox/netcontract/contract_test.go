package netcontract

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/sbx-dev/sbx/internal/fakenet"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
)

// target is one destination the tests try from inside the sandbox.
type target struct {
	name  string
	udp   bool
	addr  string
	allow bool // reachable under contractNet
}

var targets = []target{
	{"allowed public", false, fakenet.Public + ":443", true},
	{"other public", false, fakenet.Public2 + ":443", false},
	{"metadata v4", false, fakenet.Metadata4 + ":80", false},
	{"metadata v6", false, "[" + fakenet.Metadata6 + "]:80", false},
	{"metadata alibaba", false, fakenet.MetadataAli + ":80", false},
	{"LAN ssh", false, fakenet.LAN + ":22", false},
	{"LAN redis", false, fakenet.LAN + ":6379", false},
	{"LAN postgres", false, fakenet.LAN + ":5432", false},
	{"gateway ssh", false, fakenet.Gateway192 + ":22", false},
	{"udp echo public", true, fakenet.Public + ":7", false},
	{"udp echo LAN", true, fakenet.LAN + ":5353", false},
	{"azure wireserver", false, fakenet.WireServer + ":80", false},
	{"nat64 well-known", false, "[" + fakenet.NAT64 + "]:80", false},
	{"nat64 local-use", false, "[" + fakenet.NAT64Local + "]:80", false},
	{"6to4", false, "[" + fakenet.SixToFour + "]:80", false},
}

// TestWithoutContractEverythingIsReachable shows that the fake upstream answers on every target when no
// contract is loaded: the refusals of the other tests are the contract's doing, not a broken setup.
func TestWithoutContractEverythingIsReachable(t *testing.T) {
	fake := newFake(t)
	n := setup(t, Config{Net: contractNet(fake), noContract: true})
	in(t, n, func() {
		for _, tg := range targets {
			a := try(tg)
			if !a.reachable() {
				t.Errorf("%s %s without contract: %v, want reachable", tg.name, tg.addr, a)
			}
		}
		if r, err := dnsLookup(fakenet.DNS+":53", "other.test"); err != nil || len(r.Answer) != 1 {
			t.Errorf("direct DNS without contract: %v %v, want an answer", r, err)
		}
	})
}

// try connects to a target.
func try(tg target) attempt {
	if tg.udp {
		return udpEcho(tg.addr)
	}
	return tcpGet(tg.addr)
}

// TestContract is the "done when" list, from inside the sandbox.
func TestContract(t *testing.T) {
	fake := newFake(t)
	n := setup(t, Config{Net: contractNet(fake)})
	in(t, n, func() {
		for _, tg := range targets {
			a := try(tg)
			switch {
			case tg.allow && !a.reachable():
				t.Errorf("%s %s: %v, want reachable", tg.name, tg.addr, a)
			case !tg.allow && (a.reachable() || !isRefused(a.err)):
				t.Errorf("%s %s: %v, want refused", tg.name, tg.addr, a)
			case !tg.allow && a.took > 100*time.Millisecond:
				t.Errorf("%s %s refused after %v, want under 100ms (a reset, not a timeout)", tg.name, tg.addr, a.took)
			}
		}
		if r, err := dnsLookup(fakenet.DNS+":53", "allowed.test"); err == nil {
			t.Errorf("DNS straight to %s: answer %v, want refused", fakenet.DNS, r)
		}
	})
	wantDenied := []report.Denied{
		{Proto: "tcp", Address: fakenet.Metadata4, Port: 80, Count: 1},
		{Proto: "udp", Address: fakenet.DNS, Port: 53, Count: 1},
		{Proto: "tcp", Address: fakenet.Public2, Port: 443, Count: 1},
		{Proto: "udp", Address: fakenet.Public, Port: 7, Count: 1},
		{Proto: "tcp", Address: fakenet.LAN, Port: 22, Count: 1},
		{Proto: "tcp", Address: fakenet.Metadata6, Port: 80, Count: 1},
		{Proto: "tcp", Address: fakenet.WireServer, Port: 80, Count: 1},
		{Proto: "tcp", Address: fakenet.NAT64, Port: 80, Count: 1},
		{Proto: "tcp", Address: fakenet.NAT64Local, Port: 80, Count: 1},
		{Proto: "tcp", Address: fakenet.SixToFour, Port: 80, Count: 1},
	}
	denied, err := n.Denied()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wantDenied {
		if !slices.ContainsFunc(denied, func(d report.Denied) bool {
			return d.Proto == w.Proto && d.Address == w.Address && d.Port == w.Port && d.Count >= w.Count
		}) {
			t.Errorf("Denied() lacks %+v; got %+v", w, denied)
		}
	}
	if slices.ContainsFunc(denied, func(d report.Denied) bool { return d.Address == fakenet.Public && d.Port == 443 }) {
		t.Errorf("Denied() lists the allowed destination: %+v", denied)
	}
}

// TestDNSFilter: an allowed name resolves through the filter and its address becomes reachable only then;
// another name is REFUSED and never reaches the upstream; every query is recorded.
func TestDNSFilter(t *testing.T) {
	fake := newFake(t)
	nw := contractNet(fake)
	nw.Allow = nw.Allow[1:] // only the name: the address must come from the DNS answer
	n := setup(t, Config{Net: nw})
	server := resolver(t, n.ResolvConf())
	in(t, n, func() {
		if a := tcpGet(fakenet.Public + ":443"); a.reachable() {
			t.Errorf("before resolving allowed.test its address is %v, want refused", a)
		}
		r, err := dnsLookup(server, "allowed.test")
		if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("allowed.test through the filter: %v %v", r, err)
		}
		if a := tcpGet(fakenet.Public + ":443"); !a.reachable() {
			t.Errorf("after resolving allowed.test its address is %v, want reachable", a)
		}
		if a := tcpGet(fakenet.Public + ":22"); a.reachable() {
			t.Errorf("allowed.test on a port not allowed: %v, want refused", a)
		}
		r, err = dnsLookup(server, "other.test")
		if err != nil || r.Rcode != dns.RcodeRefused {
			t.Errorf("other.test through the filter: %v %v, want REFUSED", r, err)
		}
	})
	if q := fake.Queries(); slices.ContainsFunc(q, func(s string) bool { return strings.HasPrefix(s, "other.test") }) {
		t.Errorf("the upstream saw %v: a refused name was forwarded", q)
	}
	want := []report.DNSQuery{{Name: "allowed.test", Type: "A", Allowed: true}, {Name: "other.test", Type: "A", Allowed: false}}
	if got := n.DNS(); !slices.Equal(got, want) {
		t.Errorf("DNS() = %+v, want %+v", got, want)
	}
	out := run(t, "ip", "netns", "exec", n.cfg.name(), "nft", "list", "set", "inet", "sbx", "dnsallow4")
	// nft names the protocol from /etc/protocols, which a minimal system (no netbase) lacks: then 6.
	learnt := strings.Contains(out, fakenet.Public+" . tcp . 443") || strings.Contains(out, fakenet.Public+" . 6 . 443")
	if !learnt || !strings.Contains(out, "expires") {
		t.Errorf("dnsallow4 lacks the learnt address with a timeout:\n%s", out)
	}
}

// TestCloseLeavesNothing: when Close returns the namespace file and the uplink's link are gone.
func TestCloseLeavesNothing(t *testing.T) {
	fake := newFake(t)
	n := setup(t, Config{Net: contractNet(fake)})
	name := n.cfg.name()
	if links, _ := fake.Links(); !slices.Contains(links, name) {
		t.Fatalf("uplink links %v lack the peer %s", links, name)
	}
	start := time.Now()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v", time.Since(start))
	if out := run(t, "ip", "netns", "list"); strings.Contains(out, name) {
		t.Errorf("ip netns list after Close:\n%s", out)
	}
	if links, err := fake.Links(); err != nil || len(links) != 0 {
		t.Errorf("uplink has links %v (%v) when Close returns: the veth peer must be gone", links, err)
	}
}

// TestModeNone: only lo, up; no resolv.conf; nothing left after Close.
func TestModeNone(t *testing.T) {
	n := setup(t, Config{Net: policy.Network{Mode: policy.NetNone}})
	out := run(t, "ip", "-n", n.cfg.name(), "-br", "link")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "lo ") || !strings.Contains(lines[0], "UP") {
		t.Errorf("links in mode none:\n%s\nwant only lo, up", out)
	}
	if n.ResolvConf() != "" {
		t.Errorf("ResolvConf() = %q in mode none, want empty", n.ResolvConf())
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if exists(n.NetNSPath()) {
		t.Errorf("%s still exists after Close", n.NetNSPath())
	}
}
