package netcontract

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

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

// parsePrefix accepts a CIDR or a bare address (a /32 or /128).
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("cidr %q: %v", s, err)
		}
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("cidr %q: %v", s, err)
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked(), nil
}

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

// protoRanges maps a rule's proto to l4proto values: "" means both tcp and udp.
func protoRanges(proto string) []uint8 {
	switch proto {
	case "tcp":
		return []uint8{unix.IPPROTO_TCP}
	case "udp":
		return []uint8{unix.IPPROTO_UDP}
	}
	return []uint8{unix.IPPROTO_TCP, unix.IPPROTO_UDP}
}

// portRange is the rule's ports: 0 means any port.
func portRange(r policy.NetRule) (uint16, uint16) {
	switch {
	case r.Port == 0:
		return 0, anyPortHi
	case r.PortEnd == 0:
		return uint16(r.Port), uint16(r.Port)
	}
	return uint16(r.Port), uint16(r.PortEnd)
}

// ruleSpans turns address rules into set elements; host rules are skipped (the DNS filter handles them).
func ruleSpans(rules []policy.NetRule) []span {
	var out []span
	for _, r := range rules {
		if r.CIDR == "" {
			continue
		}
		p, _ := parsePrefix(r.CIDR) // validated before
		lo, hi := prefixRange(p)
		out = append(out, addrSpans(lo, hi, r)...)
	}
	return out
}

// addrSpans is one element per protocol of r for the addresses lo..hi.
func addrSpans(lo, hi netip.Addr, r policy.NetRule) []span {
	plo, phi := portRange(r)
	var out []span
	for _, p := range protoRanges(r.Proto) {
		out = append(out, span{lo: lo, hi: hi, protoLo: p, protoHi: p, portLo: plo, portHi: phi})
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
