package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// This file is the one place that says what a network rule means: which names, addresses, protocols and
// ports it lets through, whether one rule covers another, and which rules are valid. The network contract
// (sandbox/netcontract) enforces rules through Dest and Name; the MCP server's "never widen" check
// (AllowCovers) uses the very same code, so that what a call may ask for is what the contract would let
// through.

// Dest is what a NetRule means to the network contract, parsed once.
type Dest struct {
	// Name is the names a host rule lets resolve; the zero Name for an address rule.
	Name Name
	// Prefix is the addresses of an address rule: masked, an IPv4-mapped range written as the IPv4 range
	// it reaches. Not valid for a host rule.
	Prefix netip.Prefix
	// Protos are the layer-4 protocols, "tcp", "udp" or both in that order.
	Protos []string
	// PortLo..PortHi are the ports, inclusive: 0..65535 for every port.
	PortLo, PortHi uint16
}

// IsHost says whether d is a host rule (matched by name through the DNS filter) rather than an address
// rule.
func (d Dest) IsHost() bool { return !d.Prefix.IsValid() }

// Dest parses r into its meaning, checking it as the contract reads it: exactly one of Host and CIDR; a
// host is a name or "*.suffix" in any case, with or without the final dot (see Name); a CIDR may be a bare
// address (a /32 or /128), bits outside its mask are ignored and an IPv4-mapped range means the IPv4
// range; Proto "" means tcp and udp; Port 0 means every port and PortEnd 0 a single port.
func (r NetRule) Dest() (Dest, error) {
	var d Dest
	var err error
	switch {
	case (r.Host == "") == (r.CIDR == ""):
		return d, badValue(destHint, "needs exactly one of a host name and a CIDR")
	case r.Host != "":
		d.Name, err = ParseName(r.Host)
	default:
		d.Prefix, err = parseCIDR(r.CIDR)
	}
	if err != nil {
		return d, err
	}
	if d.Protos, err = protos(r.Proto); err != nil {
		return d, err
	}
	d.PortLo, d.PortHi, err = ports(r.Port, r.PortEnd)
	return d, err
}

// protos reads a rule's Proto.
func protos(p string) ([]string, error) {
	switch p {
	case "":
		return []string{"tcp", "udp"}, nil
	case "tcp", "udp":
		return []string{p}, nil
	}
	return nil, badValue("use tcp or udp", "unknown protocol %q", p)
}

// ports reads a rule's Port and PortEnd.
func ports(port, end int) (lo, hi uint16, err error) {
	switch {
	case port < 0 || port > 65535 || end < 0 || end > 65535:
		return 0, 0, badValue("ports are 1-65535", "port %d-%d out of range", port, end)
	case end != 0 && port == 0:
		return 0, 0, badValue("set the low end of the range, or neither for every port", "port range 0-%d has no low end", end)
	case end != 0 && end < port:
		return 0, 0, badValue("write the range low-high", "port range %d-%d runs backwards", port, end)
	case port == 0:
		return 0, 65535, nil
	case end == 0:
		return uint16(port), uint16(port), nil
	}
	return uint16(port), uint16(end), nil
}

// parseCIDR reads a rule's CIDR as the contract matches it.
func parseCIDR(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		p = netip.PrefixFrom(a, a.BitLen())
	} else if p, err = netip.ParsePrefix(s); err != nil {
		return p, badValue(destHint, "%q is not a CIDR", s)
	}
	return unmapPrefix(p.Masked()), nil
}

// unmapPrefix writes an IPv4-mapped IPv6 range (inside ::ffff:0:0/96) as the IPv4 range it reaches: a
// connection to ::ffff:192.0.2.1 leaves as IPv4 to 192.0.2.1.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.Addr().Is4In6() || p.Bits() < 96 {
		return p
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
}

// Covers reports whether d lets through everything o lets through: every protocol and port of o, and
// every name o resolves (a name only under a name, see Name.Covers) or every address o reaches (a prefix
// only under a prefix of its family). A name never covers an address, nor an address a name: a name may
// resolve to any address, and an address rule lets no name resolve.
func (d Dest) Covers(o Dest) bool {
	if d.PortLo > o.PortLo || d.PortHi < o.PortHi {
		return false
	}
	for _, p := range o.Protos {
		if !slices.Contains(d.Protos, p) {
			return false
		}
	}
	switch {
	case d.IsHost() && o.IsHost():
		return d.Name.Covers(o.Name)
	case !d.IsHost() && !o.IsHost():
		return d.Prefix.Addr().Is4() == o.Prefix.Addr().Is4() && d.Prefix.Bits() <= o.Prefix.Bits() && d.Prefix.Contains(o.Prefix.Addr())
	}
	return false
}

// AllowCovers reports whether the allow list lets through everything r would, reading both as entries of
// a profile's network.allow (an entry without a protocol is tcp, as Compile reads it). It is the check
// behind narrowing a profile's network, never widening it. An entry that does not parse covers nothing.
func AllowCovers(allow []NetRule, r NetRule) bool {
	want, err := r.orProto("tcp").Dest()
	if err != nil {
		return false
	}
	for _, a := range allow {
		if have, err := a.orProto("tcp").Dest(); err == nil && have.Covers(want) {
			return true
		}
	}
	return false
}

// orProto is r with Proto p when it names none.
func (r NetRule) orProto(p string) NetRule {
	if r.Proto == "" {
		r.Proto = p
	}
	return r
}

// netList is one list of network rules with its field name.
type netList struct {
	field string
	rules []NetRule
}

// ruleLists names the three lists of network rules.
func ruleLists(allow, deny, except []NetRule) []netList {
	return []netList{{"network.allow", allow}, {"network.deny", deny}, {"network.except", except}}
}

// checkNetRule checks one rule of the list field (network.allow, network.deny, network.except). Only allow
// entries may name hosts: deny and except are matched by address only, and a name there would promise a
// protection the contract cannot give.
func checkNetRule(field string, r NetRule) error {
	if r.Host != "" && field != "network.allow" {
		return badValue("write the addresses as a CIDR, such as 192.0.2.0/24; only network.allow names hosts", "%q is a host name: deny and except match addresses only", r.Host)
	}
	_, err := r.Dest()
	return err
}

// CheckRules checks every rule of n as the contract reads it (see NetRule.Dest and Name), naming the list
// and index of the first bad one. Compile only makes networks that pass; the contract checks again before
// it builds anything, for networks made in code.
func (n Network) CheckRules() error {
	for _, l := range ruleLists(n.Allow, n.Deny, n.Except) {
		for i, r := range l.rules {
			if err := checkNetRule(l.field, r); err != nil {
				return fmt.Errorf("%s[%d]: %w", l.field, i, err)
			}
		}
	}
	for i, s := range n.DNS.Allow {
		if _, err := ParseName(s); err != nil {
			return fmt.Errorf("network.dns.allow[%d]: %w", i, err)
		}
	}
	return nil
}

// Name is a DNS name pattern as the contract's DNS filter matches it: "example.com" is that name only,
// "*.example.com" every name below example.com but not example.com itself. Names are compared label by
// label, as they travel on the wire, without regard to case; a final dot changes nothing. A wildcard never
// matches a cloud metadata name (MetadataNames): only a pattern that names one exactly does.
type Name struct {
	labels []string // lower case, without the wildcard and the root
	wild   bool
}

// ParseName parses a name pattern: a DNS name or "*." followed by one, of labels of letters, digits, -
// and _ (no label starting or ending with -), in any case, with or without the final dot.
func ParseName(s string) (Name, error) {
	h := strings.TrimSuffix(toLowerASCII(s), ".")
	if err := checkHostName(h); err != nil {
		return Name{}, err
	}
	rest, wild := strings.CutPrefix(h, "*.")
	return Name{labels: strings.Split(rest, "."), wild: wild}, nil
}

// checkHostName accepts lower-case DNS names and "*.suffix" wildcards. A name whose last label is all
// digits is refused: no top-level domain is (RFC 3696), and "10.0.0.1." would otherwise be a host rule
// that reads like an address.
func checkHostName(h string) error {
	name := strings.TrimPrefix(h, "*.")
	bad := badValue(destHint, "%q is not a host name, IP or CIDR", h)
	if name == "" || len(name) > 253 || strings.Contains(name, "*") {
		return bad
	}
	labels := strings.Split(name, ".")
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return badValue("write an address without the final dot", "%q is not a host name: its last label is all digits", h)
	}
	for _, label := range labels {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return bad
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return bad
			}
		}
	}
	return nil
}

// IsZero says whether n is the zero Name, which matches nothing.
func (n Name) IsZero() bool { return n.labels == nil }

// IsWildcard says whether n is a "*.suffix" pattern.
func (n Name) IsWildcard() bool { return n.wild }

// String writes the pattern as ParseName reads it, in lower case without the final dot.
func (n Name) String() string {
	s := strings.Join(n.labels, ".")
	if n.wild {
		return "*." + s
	}
	return s
}

// Matches says whether the name with these labels (as on the wire, without the root, in any case) is one
// n lets resolve.
func (n Name) Matches(labels []string) bool {
	if n.IsZero() {
		return false
	}
	if !n.wild {
		return labelsEqual(labels, n.labels)
	}
	return len(labels) > len(n.labels) && labelsEqual(labels[len(labels)-len(n.labels):], n.labels) && !IsMetadataName(labels)
}

// Covers reports whether n lets resolve every name o does: a name covers only itself; a wildcard covers
// the names it matches and the wildcards at or below its own suffix.
func (n Name) Covers(o Name) bool {
	if n.IsZero() || o.IsZero() {
		return false
	}
	if !o.wild {
		return n.Matches(o.labels)
	}
	return n.wild && len(o.labels) >= len(n.labels) && labelsEqual(o.labels[len(o.labels)-len(n.labels):], n.labels)
}

// labelsEqual compares labels without regard to ASCII case, as DNS does (RFC 4343): no other byte
// folds, so that no Unicode lookalike (the Kelvin sign for k) passes for an allowed label.
func labelsEqual(a, b []string) bool {
	return slices.EqualFunc(a, b, asciiEqualFold)
}

func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

// toLowerASCII lower-cases A-Z only: strings.ToLower would turn the Kelvin sign into k.
func toLowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		b[i] = lowerASCII(c)
	}
	return string(b)
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
