package export

import (
	"net/netip"

	"github.com/sbx-dev/sbx/policy"
)

// alwaysDeny are the ranges sbx's network contract never reaches unless a profile names an exact
// exception; metadata addresses come first.
var alwaysDeny = policy.AlwaysDeny()

// exceptWithin returns the always-denied ranges strictly inside p and of its family, as the API server
// requires of an ipBlock's except. IPv4-mapped IPv6 ranges (::ffff:0:0/96) are never written: Kubernetes
// reads them as IPv4 (Go's net.IPNet.Contains does), so they are no strict subset of any IPv6 block and the
// API server refuses the policy. Nothing is lost: a pod's packets never carry an IPv4-mapped destination on
// the wire (the kernel sends them as IPv4, where the IPv4 excepts hold).
func exceptWithin(p netip.Prefix, exceptions []netip.Prefix) []string {
	var out []string
	for _, d := range alwaysDeny {
		if !sameFamily(d, p) || d.Bits() <= p.Bits() || !p.Contains(d.Addr()) || contains(exceptions, d) {
			continue
		}
		if coveredByEarlier(out, d) {
			continue
		}
		out = append(out, d.String())
	}
	return out
}

func coveredByEarlier(list []string, d netip.Prefix) bool {
	for _, s := range list {
		if q := netip.MustParsePrefix(s); q.Bits() <= d.Bits() && q.Contains(d.Addr()) {
			return true
		}
	}
	return false
}

func contains(list []netip.Prefix, p netip.Prefix) bool {
	for _, q := range list {
		if q == p {
			return true
		}
	}
	return false
}

// insideAlwaysDeny reports whether every address of p is always denied (and not excepted).
func insideAlwaysDeny(p netip.Prefix, exceptions []netip.Prefix) bool {
	if contains(exceptions, p) {
		return false
	}
	for _, d := range alwaysDeny {
		if d.Addr().Is4() == p.Addr().Is4() && d.Bits() <= p.Bits() && d.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// sameFamily reports whether both prefixes are plain IPv4 or both plain IPv6; an IPv4-mapped IPv6
// prefix is neither.
func sameFamily(a, b netip.Prefix) bool {
	if a.Addr().Is4In6() || b.Addr().Is4In6() {
		return false
	}
	return a.Addr().Is4() == b.Addr().Is4()
}
