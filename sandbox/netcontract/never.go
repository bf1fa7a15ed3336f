package netcontract

import (
	"net/netip"
	"slices"
)

// piece is one interval of the always-deny set, labelled with the most specific listed prefix that
// covers it. The set's elements are the pieces, each with its own packet counter: attempts on an
// always-deny range are counted per range in a record nothing can fill (the set is static), whatever
// happens to the dynamic denied set.
type piece struct {
	lo, hi netip.Addr
	label  netip.Prefix
}

// neverPieces splits prefixes into disjoint intervals, so that a /32 inside a /16 (cloud metadata inside
// link-local) keeps its own element and its own counter.
func neverPieces(prefixes []netip.Prefix) []piece {
	var bounds []netip.Addr
	for _, p := range prefixes {
		lo, hi := prefixRange(p)
		bounds = append(bounds, lo)
		if next := hi.Next(); next.IsValid() {
			bounds = append(bounds, next)
		}
	}
	slices.SortFunc(bounds, func(a, b netip.Addr) int { return a.Compare(b) })
	bounds = slices.Compact(bounds)
	var out []piece
	for i, b := range bounds {
		label, ok := mostSpecific(prefixes, b)
		if !ok {
			continue
		}
		_, hi := prefixRange(label)
		if i+1 < len(bounds) && bounds[i+1].BitLen() == b.BitLen() && bounds[i+1].Compare(hi) <= 0 {
			hi = bounds[i+1].Prev()
		}
		if n := len(out); n > 0 && out[n-1].label == label && out[n-1].hi.Next() == b {
			out[n-1].hi = hi
			continue
		}
		out = append(out, piece{lo: b, hi: hi, label: label})
	}
	return out
}

// mostSpecific is the longest prefix of ps containing a.
func mostSpecific(ps []netip.Prefix, a netip.Addr) (netip.Prefix, bool) {
	var best netip.Prefix
	found := false
	for _, p := range ps {
		if p.Contains(a) && (!found || p.Bits() > best.Bits()) {
			best, found = p, true
		}
	}
	return best, found
}

// pieceSpans are the set elements of the pieces: every protocol and port.
func pieceSpans(ps []piece) []span {
	out := make([]span, len(ps))
	for i, p := range ps {
		out[i] = span{lo: p.lo, hi: p.hi, protoHi: anyProtoHi, portHi: anyPortHi}
	}
	return out
}

// labelOf is the label of the piece holding a.
func labelOf(ps []piece, a netip.Addr) (netip.Prefix, bool) {
	for _, p := range ps {
		if p.lo.Compare(a) <= 0 && a.Compare(p.hi) <= 0 {
			return p.label, true
		}
	}
	return netip.Prefix{}, false
}

// outside keeps the prefixes of ps that no prefix of within, nor a wider one of ps, already covers: they
// would add nothing to the verdict, only elements to the set (a host with many sandboxes has many pool
// addresses, and each element costs time in the set's commit).
func outside(ps, within []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for i, p := range ps {
		covered := slices.ContainsFunc(within, func(w netip.Prefix) bool { return covers(w, p) })
		for j, q := range ps {
			covered = covered || (j != i && covers(q, p) && (q != p || j < i))
		}
		if !covered {
			out = append(out, p)
		}
	}
	return out
}

// covers says whether every address of p is in w.
func covers(w, p netip.Prefix) bool {
	return w.Addr().BitLen() == p.Addr().BitLen() && w.Bits() <= p.Bits() && w.Contains(p.Addr())
}
