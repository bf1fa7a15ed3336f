package policy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestDest: what a rule means to the contract, for rules as profiles, flags and code write them.
func TestDest(t *testing.T) {
	any := []string{"tcp", "udp"}
	tests := []struct {
		name    string
		rule    NetRule
		want    string // Name or Prefix
		protos  []string
		lo, hi  uint16
		wantErr string
	}{
		{"host", NetRule{Host: "pypi.org", Proto: "tcp", Port: 443}, "pypi.org", []string{"tcp"}, 443, 443, ""},
		{"host case and final dot", NetRule{Host: "PyPI.Org.", Port: 443}, "pypi.org", any, 443, 443, ""},
		{"wildcard", NetRule{Host: "*.Example.COM", Proto: "udp"}, "*.example.com", []string{"udp"}, 0, 65535, ""},
		{"port range", NetRule{Host: "h.test", Port: 8000, PortEnd: 8100}, "h.test", any, 8000, 8100, ""},
		{"ipv4 cidr", NetRule{CIDR: "203.0.113.0/24", Proto: "tcp", Port: 22}, "203.0.113.0/24", []string{"tcp"}, 22, 22, ""},
		{"bare ipv4 is a /32", NetRule{CIDR: "203.0.113.7"}, "203.0.113.7/32", any, 0, 65535, ""},
		{"bits outside the mask are dropped", NetRule{CIDR: "10.1.2.3/8"}, "10.0.0.0/8", any, 0, 65535, ""},
		{"ipv6 cidr", NetRule{CIDR: "2001:DB8::/32"}, "2001:db8::/32", any, 0, 65535, ""},
		{"bare ipv6 is a /128", NetRule{CIDR: "2001:db8::1"}, "2001:db8::1/128", any, 0, 65535, ""},
		{"ipv4-mapped address is ipv4", NetRule{CIDR: "::ffff:192.0.2.1"}, "192.0.2.1/32", any, 0, 65535, ""},
		{"ipv4-mapped range is ipv4", NetRule{CIDR: "::ffff:10.0.0.0/104"}, "10.0.0.0/8", any, 0, 65535, ""},
		{"all ipv4-mapped space is all ipv4", NetRule{CIDR: "::ffff:0:0/96"}, "0.0.0.0/0", any, 0, 65535, ""},
		{"wider than the mapped space stays ipv6", NetRule{CIDR: "::/64"}, "::/64", any, 0, 65535, ""},
		{"neither", NetRule{Port: 80}, "", nil, 0, 0, "exactly one"},
		{"both", NetRule{Host: "a.test", CIDR: "192.0.2.1/32"}, "", nil, 0, 0, "exactly one"},
		{"bad name", NetRule{Host: "a..test"}, "", nil, 0, 0, "not a host name"},
		{"wildcard inside", NetRule{Host: "a.*.test"}, "", nil, 0, 0, "not a host name"},
		{"bare wildcard", NetRule{Host: "*"}, "", nil, 0, 0, "not a host name"},
		{"label starts with -", NetRule{Host: "-a.test"}, "", nil, 0, 0, "not a host name"},
		{"not ascii", NetRule{Host: "\u212aey.test"}, "", nil, 0, 0, "not a host name"},
		{"bad cidr", NetRule{CIDR: "1.2.3/8"}, "", nil, 0, 0, "not a CIDR"},
		{"zone", NetRule{CIDR: "fe80::1%eth0"}, "", nil, 0, 0, "not a CIDR"},
		{"bad proto", NetRule{CIDR: "192.0.2.1", Proto: "icmp"}, "", nil, 0, 0, "unknown protocol"},
		{"upper-case proto", NetRule{CIDR: "192.0.2.1", Proto: "TCP"}, "", nil, 0, 0, "unknown protocol"},
		{"port too high", NetRule{CIDR: "192.0.2.1", Port: 70000}, "", nil, 0, 0, "out of range"},
		{"negative port", NetRule{CIDR: "192.0.2.1", Port: -1}, "", nil, 0, 0, "out of range"},
		{"range backwards", NetRule{CIDR: "192.0.2.1", Port: 90, PortEnd: 80}, "", nil, 0, 0, "runs backwards"},
		{"range without low end", NetRule{CIDR: "192.0.2.1", PortEnd: 80}, "", nil, 0, 0, "no low end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := tt.rule.Dest()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Dest() err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := d.Name.String()
			if !d.IsHost() {
				got = d.Prefix.String()
			}
			if got != tt.want || !slices.Equal(d.Protos, tt.protos) || d.PortLo != tt.lo || d.PortHi != tt.hi {
				t.Errorf("Dest() = %s %v %d-%d, want %s %v %d-%d", got, d.Protos, d.PortLo, d.PortHi, tt.want, tt.protos, tt.lo, tt.hi)
			}
		})
	}
}

// TestNameMatches: names match label by label without regard to ASCII case, as the DNS filter reads
// them from the wire; a wildcard matches below its suffix only, and never a cloud metadata name.
func TestNameMatches(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"example.com", "example.com", true},
		{"example.com", "EXAMPLE.Com", true},
		{"Example.COM.", "example.com", true},
		{"example.com", "a.example.com", false},
		{"example.com", "example.co", false},
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "A.B.Example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "aexample.com", false},
		{"*.example.com", "a.example.com.evil", false},
		{"*.google.internal", "metadata.google.internal", false},
		{"*.internal", "METADATA.google.internal", false},
		{"*.internal", "instance-data.ec2.internal", false},
		{"*.goog", "metadata.goog", false},
		{"*.google.internal", "other.google.internal", true},
		{"metadata.google.internal", "Metadata.Google.Internal", true},
		{"k.test", "\u212a.test", false}, // the Kelvin sign folds to k in Unicode, never in DNS
	}
	for _, tt := range tests {
		n, err := ParseName(tt.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Matches(strings.Split(tt.name, ".")); got != tt.want {
			t.Errorf("%s matches %s = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
	if (Name{}).Matches([]string{"a"}) {
		t.Error("the zero Name matches a name")
	}
}

// TestDestCovers: a rule covers another when it lets through every name or address, protocol and port
// the other does, and nothing decides that but the meaning Dest gives both.
func TestDestCovers(t *testing.T) {
	tests := []struct {
		name string
		a, b NetRule
		want bool
	}{
		{"same host", host("pypi.org", "tcp", 443), host("pypi.org", "tcp", 443), true},
		{"host case", host("PyPI.org", "tcp", 443), host("pypi.org", "tcp", 443), true},
		{"host final dot", host("pypi.org.", "tcp", 443), host("pypi.org", "tcp", 443), true},
		{"wildcard case", host("*.Example.com", "tcp", 443), host("api.example.COM", "tcp", 443), true},
		{"other host", host("pypi.org", "tcp", 443), host("evil.org", "tcp", 443), false},
		{"wildcard covers a name below", host("*.example.com", "tcp", 443), host("a.b.example.com", "tcp", 443), true},
		{"wildcard covers itself", host("*.example.com", "tcp", 443), host("*.example.com", "tcp", 443), true},
		{"wildcard covers a wildcard below", host("*.example.com", "tcp", 443), host("*.a.example.com", "tcp", 443), true},
		{"wildcard not its apex", host("*.example.com", "tcp", 443), host("example.com", "tcp", 443), false},
		{"name not a wildcard", host("a.example.com", "tcp", 443), host("*.example.com", "tcp", 443), false},
		{"wildcard not a wider wildcard", host("*.a.example.com", "tcp", 443), host("*.example.com", "tcp", 443), false},
		{"wildcard not a metadata name", host("*.google.internal", "tcp", 80), host("metadata.google.internal", "tcp", 80), false},
		{"metadata name named exactly", host("metadata.google.internal", "tcp", 80), host("metadata.google.internal", "tcp", 80), true},
		{"every port covers one", host("h.test", "tcp", 0), host("h.test", "tcp", 22), true},
		{"one port not every port", host("h.test", "tcp", 22), host("h.test", "tcp", 0), false},
		{"other port", host("h.test", "tcp", 443), host("h.test", "tcp", 80), false},
		{"range covers inside", NetRule{Host: "h.test", Proto: "tcp", Port: 8000, PortEnd: 8100}, NetRule{Host: "h.test", Proto: "tcp", Port: 8010, PortEnd: 8020}, true},
		{"range not beyond", NetRule{Host: "h.test", Proto: "tcp", Port: 8000, PortEnd: 8100}, NetRule{Host: "h.test", Proto: "tcp", Port: 8050, PortEnd: 8200}, false},
		{"both protocols cover tcp", host("h.test", "", 443), host("h.test", "tcp", 443), true},
		{"tcp not both protocols", host("h.test", "tcp", 443), host("h.test", "", 443), false},
		{"tcp not udp", host("h.test", "tcp", 53), host("h.test", "udp", 53), false},
		{"cidr covers an address inside", cidr("203.0.113.0/24", 0), cidr("203.0.113.9/32", 443), true},
		{"cidr covers a bare address inside", cidr("203.0.113.0/24", 0), cidr("203.0.113.9", 443), true},
		{"address not its cidr", cidr("203.0.113.9/32", 0), cidr("203.0.113.0/24", 0), false},
		{"cidr not a wider one", cidr("203.0.113.0/24", 0), cidr("203.0.0.0/16", 0), false},
		{"ipv6 cidr covers inside", cidr("2001:db8::/32", 443), cidr("2001:db8:1::/48", 443), true},
		{"ipv6 not ipv4", cidr("::/0", 443), cidr("192.0.2.1", 443), false},
		{"ipv4 not ipv6", cidr("0.0.0.0/0", 443), cidr("2001:db8::1", 443), false},
		{"all ipv6 not the ipv4-mapped space", cidr("::/0", 443), cidr("::ffff:0:0/96", 443), false},
		{"ipv4 covers its mapped form", cidr("192.0.2.0/24", 443), cidr("::ffff:192.0.2.1", 443), true},
		{"host not an address", host("h.test", "tcp", 443), cidr("192.0.2.1", 443), false},
		{"address not a host", cidr("0.0.0.0/0", 0), host("h.test", "tcp", 443), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, errA := tt.a.Dest()
			b, errB := tt.b.Dest()
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			if got := a.Covers(b); got != tt.want {
				t.Errorf("%+v covers %+v = %v, want %v", tt.a, tt.b, got, tt.want)
			}
		})
	}
}

func host(h, proto string, port int) NetRule { return NetRule{Host: h, Proto: proto, Port: port} }

func cidr(c string, port int) NetRule { return NetRule{CIDR: c, Proto: "tcp", Port: port} }

// TestAllowCovers reads both sides as entries of network.allow, where no protocol means tcp (as Compile
// does), and refuses what does not parse.
func TestAllowCovers(t *testing.T) {
	allow := []NetRule{host("pypi.org", "", 443), {CIDR: "203.0.113.0/24", Proto: "udp", Port: 53}}
	tests := []struct {
		name string
		r    NetRule
		want bool
	}{
		{"no protocol is tcp on both sides", host("pypi.org", "", 443), true},
		{"tcp under an entry without protocol", host("pypi.org", "tcp", 443), true},
		{"udp is not under an entry without protocol", host("pypi.org", "udp", 443), false},
		{"address under the udp range", NetRule{CIDR: "203.0.113.53/32", Proto: "udp", Port: 53}, true},
		{"tcp is not under the udp range", NetRule{CIDR: "203.0.113.53/32", Port: 53}, false},
		{"bad rule", NetRule{Host: "bad host", Port: 443}, false},
	}
	for _, tt := range tests {
		if got := AllowCovers(allow, tt.r); got != tt.want {
			t.Errorf("%s: AllowCovers(%v) = %v, want %v", tt.name, tt.r, got, tt.want)
		}
	}
	if AllowCovers([]NetRule{{Host: "bad host", Port: 443}}, host("bad host", "tcp", 443)) {
		t.Error("an allow entry that does not parse covers a rule")
	}
}

// TestCheckRules: the contract's own check of a network made in code, with the list and index named;
// only allow entries name hosts.
func TestCheckRules(t *testing.T) {
	tests := []struct {
		name string
		n    Network
		want string
	}{
		{"good", Network{Allow: []NetRule{host("*.a.test", "tcp", 443), {CIDR: "192.0.2.1"}}, Deny: []NetRule{{CIDR: "10.0.0.0/8"}},
			DNS: DNS{Allow: []string{"b.test", "*.c.test."}}}, ""},
		{"host in deny", Network{Deny: []NetRule{host("a.test", "tcp", 443)}}, "network.deny[0]: "},
		{"host in except", Network{Except: []NetRule{{CIDR: "169.254.169.254/32"}, host("a.test", "tcp", 80)}}, "network.except[1]: "},
		{"bad allow", Network{Allow: []NetRule{host("a.test", "icmp", 0)}}, "network.allow[0]: unknown protocol"},
		{"bad dns name", Network{DNS: DNS{Allow: []string{"ok.test", "not ok"}}}, "network.dns.allow[1]: "},
	}
	for _, tt := range tests {
		err := tt.n.CheckRules()
		if (err == nil) != (tt.want == "") || err != nil && !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: CheckRules() = %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestMetadataNames: the list policy keeps is the one the matching uses.
func TestMetadataNames(t *testing.T) {
	for _, s := range MetadataNames() {
		if !IsMetadataName(strings.Split(strings.ToUpper(s), ".")) {
			t.Errorf("%s is listed but not matched", s)
		}
	}
	if IsMetadataName([]string{"google", "internal"}) {
		t.Error("google.internal counts as a metadata name")
	}
	for _, p := range AlwaysDeny() {
		if p != p.Masked() || !p.IsValid() || p.Addr().Zone() != "" || p.Addr().Is4In6() && p.Bits() != 96 {
			t.Errorf("always-deny range %s is not canonical", p)
		}
	}
	if !slices.Contains(AlwaysDeny(), netip.MustParsePrefix("169.254.169.254/32")) {
		t.Error("AlwaysDeny lacks the cloud metadata address")
	}
}

// FuzzDest: whatever ParseDest accepts, the contract reads (Dest), covers itself, and writes back the
// same; whatever ParseName accepts matches its own labels.
func FuzzDest(f *testing.F) {
	for _, s := range []string{"pypi.org:443", "*.Example.com.:*", "udp:[2001:db8::/32]:53", "[::ffff:10.0.0.0/104]:1-2",
		"203.0.113.7", "metadata.google.internal:80", "*.google.internal:80", "tcp:0.0.0.0/0:8000-8100"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := ParseName(s); err == nil {
			back, err := ParseName(n.String())
			if err != nil || back.String() != n.String() || !n.Covers(n) {
				t.Errorf("name %q: %q does not read back or cover itself: %v", s, n, err)
			}
			if !n.IsWildcard() && !n.Matches(strings.Split(strings.ToUpper(n.String()), ".")) {
				t.Errorf("name %q does not match itself in upper case", n)
			}
		}
		r, err := ParseDest(s)
		if err != nil {
			return
		}
		d, err := r.Dest()
		if err != nil {
			t.Fatalf("ParseDest(%q) = %+v, which the contract refuses: %v", s, r, err)
		}
		if !d.Covers(d) || !AllowCovers([]NetRule{r}, r) {
			t.Errorf("%q does not cover itself", s)
		}
		if back, err := ParseDest(r.String()); err != nil || back != r {
			t.Errorf("%q: String() %q reads back as %+v, %v", s, r.String(), back, err)
		}
	})
}
