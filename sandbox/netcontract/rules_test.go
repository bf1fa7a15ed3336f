package netcontract

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/sbx-dev/sbx/internal/fakenet"
	"github.com/sbx-dev/sbx/policy"
)

// TestRuleOrder: an exact exception opens one always-denied destination and nothing next to it; an
// extra deny beats an allow; an allow entry cannot open an always-denied range.
func TestRuleOrder(t *testing.T) {
	fake := newFake(t)
	nw := contractNet(fake)
	nw.Allow = append(nw.Allow, policy.NetRule{CIDR: "10.0.0.0/8", Proto: "tcp"}, policy.NetRule{CIDR: fakenet.Public2, Proto: "tcp", Port: 443})
	nw.Except = []policy.NetRule{{CIDR: fakenet.LAN, Proto: "tcp", Port: 6379}}
	nw.Deny = []policy.NetRule{{CIDR: fakenet.Public2 + "/32", Proto: "tcp", Port: 443}}
	n := setup(t, Config{Net: nw})
	tests := []struct {
		addr      string
		reachable bool
	}{
		{fakenet.LAN + ":6379", true},     // the exception
		{fakenet.LAN + ":5432", false},    // next to it: still denied although 10/8 is "allowed"
		{fakenet.Public2 + ":443", false}, // allowed, then denied by the extra deny
		{fakenet.Public + ":443", true},
	}
	in(t, n, func() {
		for _, tc := range tests {
			if a := tcpGet(tc.addr); a.reachable() != tc.reachable {
				t.Errorf("%s: %v, want reachable=%v", tc.addr, a, tc.reachable)
			}
		}
	})
}

// TestMappedRules: a rule written with IPv4-mapped IPv6 addresses (as a network made in code may carry
// it) is the IPv4 rule it reaches, in allow, deny and except alike. Before policy owned the meaning of a
// rule, such a range made Setup panic.
func TestMappedRules(t *testing.T) {
	fake := newFake(t)
	nw := contractNet(fake)
	nw.Allow = []policy.NetRule{{CIDR: "::ffff:" + fakenet.Public + "/128", Proto: "tcp", Port: 443},
		{CIDR: "::ffff:" + fakenet.Public2 + "/120", Proto: "tcp"}}
	nw.Deny = []policy.NetRule{{CIDR: "::ffff:" + fakenet.Public2, Proto: "tcp", Port: 22}}
	nw.Except = []policy.NetRule{{CIDR: "::ffff:" + fakenet.LAN + "/128", Proto: "tcp", Port: 6379}}
	n := setup(t, Config{Net: nw})
	tests := []struct {
		addr      string
		reachable bool
	}{
		{fakenet.Public + ":443", true},
		{fakenet.Public + ":80", false},
		{fakenet.Public2 + ":443", true},
		{fakenet.Public2 + ":22", false},
		{fakenet.LAN + ":6379", true},
		{fakenet.LAN + ":5432", false},
	}
	in(t, n, func() {
		for _, tc := range tests {
			if a := tcpGet(tc.addr); a.reachable() != tc.reachable {
				t.Errorf("%s: %v, want reachable=%v", tc.addr, a, tc.reachable)
			}
		}
	})
}

// TestValidate: bad configs are refused before anything is built, naming the field.
func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"empty id", Config{Net: policy.Network{Mode: policy.NetNone}}},
		{"long id", Config{ID: "sbx0123456789abc", Net: policy.Network{Mode: policy.NetNone}}},
		{"bad id", Config{ID: "sbx/../x", Net: policy.Network{Mode: policy.NetNone}}},
		{"bad mode", Config{ID: "sbx1", Net: policy.Network{Mode: "open"}}},
		{"no state dir", Config{ID: "sbx1", Net: policy.Network{Mode: policy.NetContract}}},
		{"host and cidr", Config{ID: "sbx1", StateDir: "/tmp", Net: policy.Network{Mode: policy.NetContract,
			Allow: []policy.NetRule{{Host: "a.test", CIDR: "1.2.3.4/32"}}}}},
		{"host in deny", Config{ID: "sbx1", StateDir: "/tmp", Net: policy.Network{Mode: policy.NetContract,
			Deny: []policy.NetRule{{Host: "a.test"}}}}},
		{"host in except", Config{ID: "sbx1", StateDir: "/tmp", Net: policy.Network{Mode: policy.NetContract,
			Except: []policy.NetRule{{Host: "metadata.google.internal", Port: 80}}}}},
		{"bad dns name", Config{ID: "sbx1", StateDir: "/tmp", Net: policy.Network{Mode: policy.NetContract,
			DNS: policy.DNS{Allow: []string{"not a name"}}}}},
		{"bad cidr", Config{ID: "sbx1", StateDir: "/tmp", Net: policy.Network{Mode: policy.NetContract,
			Allow: []policy.NetRule{{CIDR: "1.2.3/8"}}}}},
		{"bad proto", Config{ID: "sbx1", StateDir: "/tmp", Net: policy.Network{Mode: policy.NetContract,
			Allow: []policy.NetRule{{CIDR: "1.2.3.4", Proto: "icmp"}}}}},
		{"bad range", Config{ID: "sbx1", StateDir: "/tmp", Net: policy.Network{Mode: policy.NetContract,
			Allow: []policy.NetRule{{CIDR: "1.2.3.4", Port: 90, PortEnd: 80}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Setup(tc.cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("Setup: %v, want ErrConfig", err)
			}
		})
	}
}

// TestKeyLayout: concatenated keys pad every field to 32 bits, in network byte order.
func TestKeyLayout(t *testing.T) {
	got := key(netip.MustParseAddr("203.0.113.10"), 6, 443)
	want := []byte{203, 0, 113, 10, 6, 0, 0, 0, 1, 187, 0, 0}
	if string(got) != string(want) {
		t.Errorf("key = %v, want %v", got, want)
	}
	if k := key(netip.MustParseAddr("fd00:ec2::254"), 17, 53); len(k) != 24 {
		t.Errorf("IPv6 key is %d bytes, want 24", len(k))
	}
}

// TestNeverPieces: the always-deny set is cut into disjoint intervals; a prefix inside another keeps its
// own piece and label, and the pieces around it carry the outer label.
func TestNeverPieces(t *testing.T) {
	got := neverPieces(mustPrefixes("169.254.0.0/16", "169.254.169.254/32", "10.0.0.0/8", "10.0.0.0/8", "fd00:ec2::254/128", "fc00::/7"))
	want := []struct{ lo, hi, label string }{
		{"10.0.0.0", "10.255.255.255", "10.0.0.0/8"},
		{"169.254.0.0", "169.254.169.253", "169.254.0.0/16"},
		{"169.254.169.254", "169.254.169.254", "169.254.169.254/32"},
		{"169.254.169.255", "169.254.255.255", "169.254.0.0/16"},
		{"fc00::", "fd00:ec2::253", "fc00::/7"},
		{"fd00:ec2::254", "fd00:ec2::254", "fd00:ec2::254/128"},
		{"fd00:ec2::255", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fc00::/7"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d pieces %v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		if got[i].lo.String() != w.lo || got[i].hi.String() != w.hi || got[i].label.String() != w.label {
			t.Errorf("piece %d = %s-%s (%s), want %s-%s (%s)", i, got[i].lo, got[i].hi, got[i].label, w.lo, w.hi, w.label)
		}
	}
}

// TestOutside: prefixes already covered by the always-deny list or by a wider prefix of their own list add
// no element; duplicates keep one.
func TestOutside(t *testing.T) {
	got := outside(mustPrefixes("10.199.3.1/32", "10.199.3.0/30", "192.0.2.2/32", "192.0.2.0/24", "192.0.2.0/24", "2001:db8::1/128"),
		mustPrefixes("10.0.0.0/8"))
	want := mustPrefixes("192.0.2.0/24", "2001:db8::1/128")
	if !slices.Equal(got, want) {
		t.Errorf("outside = %v, want %v", got, want)
	}
}

// mustPrefixes parses a fixed list.
func mustPrefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}
