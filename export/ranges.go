package export

import (
	"net/netip"

	"github.com/sbx-dev/sbx/sandbox/netcontract"
)

// alwaysDeny are the ranges sbx's network contract never reaches unless a profile names an exact
// exception; metadata addresses come first.
var alwaysDeny = netcontract.AlwaysDeny()

// metadataHosts are the cloud metadata names the DNS filter never resolves.
var metadataHosts = []string{"metadata.google.internal"}

// exceptWithin returns the always-denied ranges strictly inside p (NetworkPolicy's except must be).
func exceptWithin(p netip.Prefix, exceptions []netip.Prefix) []string {
	var out []string
	for _, d := range alwaysDeny {
		if d.Addr().Is4() != p.Addr().Is4() || d.Bits() <= p.Bits() || !p.Contains(d.Addr()) || contains(exceptions, d) {
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
