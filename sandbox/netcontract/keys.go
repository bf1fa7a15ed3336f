package netcontract

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/sbx-dev/sbx/policy"
	"golang.org/x/sys/unix"
)

// span is one element of a contract set: a range of addresses of one family, a range of layer-4 protocols
// and a range of ports. Every set of the contract is keyed by address . l4proto . port.
type span struct {
	lo, hi           netip.Addr
	protoLo, protoHi uint8
	portLo, portHi   uint16
}

// anyProto and anyPort are the full ranges of the proto and port fields.
const (
	anyProtoHi = 255
	anyPortHi  = 65535
)

// prefixRange is the first and last address of p.
func prefixRange(p netip.Prefix) (netip.Addr, netip.Addr) {
	lo := p.Masked().Addr()
	b := lo.AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	hi, _ := netip.AddrFromSlice(b)
	return lo, hi
}

// l4protos are the l4proto values of a rule's protocols.
func l4protos(protos []string) []uint8 {
	out := make([]uint8, 0, len(protos))
	for _, p := range protos {
		switch p {
		case "tcp":
			out = append(out, unix.IPPROTO_TCP)
		case "udp":
			out = append(out, unix.IPPROTO_UDP)
		}
	}
	return out
}

// ruleSpans turns address rules into set elements; host rules are skipped (the DNS filter handles them).
// The rules were checked by Config.validate.
func ruleSpans(rules []policy.NetRule) []span {
	var out []span
	for _, r := range rules {
		d, err := r.Dest()
		if err != nil || d.IsHost() {
			continue
		}
		lo, hi := prefixRange(d.Prefix)
		out = append(out, addrSpans(lo, hi, d)...)
	}
	return out
}

// addrSpans is one element per protocol of d for the addresses lo..hi.
func addrSpans(lo, hi netip.Addr, d policy.Dest) []span {
	var out []span
	for _, p := range l4protos(d.Protos) {
		out = append(out, span{lo: lo, hi: hi, protoLo: p, protoHi: p, portLo: d.PortLo, portHi: d.PortHi})
	}
	return out
}

// dropContained removes elements wholly inside another one: they add nothing, and the kernel's
// concatenated-range sets refuse an element that starts inside an existing one.
func dropContained(spans []span) []span {
	var out []span
	for i, s := range spans {
		inside := false
		for j, o := range spans {
			if i != j && o.contains(s) && (!s.contains(o) || j < i) {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, s)
		}
	}
	return out
}

// contains says whether every key of o is a key of s.
func (s span) contains(o span) bool {
	return s.lo.Compare(o.lo) <= 0 && s.hi.Compare(o.hi) >= 0 &&
		s.protoLo <= o.protoLo && s.protoHi >= o.protoHi && s.portLo <= o.portLo && s.portHi >= o.portHi
}

// key encodes one end of the element as the kernel expects a concatenation: every field padded to 32
// bits, the address and port in network byte order.
func key(a netip.Addr, proto uint8, port uint16) []byte {
	b := append([]byte{}, a.AsSlice()...)
	b = append(b, proto, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, port)
	return append(b, 0, 0)
}

// elements splits spans by family into set elements.
func elements(spans []span) (v4, v6 []nftables.SetElement) {
	for _, s := range dropContained(spans) {
		e := nftables.SetElement{Key: key(s.lo, s.protoLo, s.portLo), KeyEnd: key(s.hi, s.protoHi, s.portHi)}
		if s.lo.Is4() {
			v4 = append(v4, e)
		} else {
			v6 = append(v6, e)
		}
	}
	return v4, v6
}
