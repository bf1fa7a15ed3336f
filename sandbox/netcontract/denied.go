package netcontract

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/google/nftables"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"golang.org/x/sys/unix"
)

// Denied reads back every destination the contract refused, with the number of packets that tried it.
// Call it before Close. In mode none (and before any refusal) the list is empty.
func (n *Net) Denied() ([]report.Denied, error) {
	n.nftMu.Lock()
	defer n.nftMu.Unlock()
	out := []report.Denied{}
	if n.sets == nil {
		return out, nil
	}
	for _, f := range []family{fam4, fam6} {
		elems, err := n.nft.GetSetElements(n.sets[f.nfproto].denied)
		if err != nil {
			return nil, fmt.Errorf("reading denied attempts: %w", err)
		}
		for _, e := range elems {
			out = append(out, decodeDenied(f, e))
		}
	}
	slices.SortFunc(out, func(a, b report.Denied) int {
		return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port))
	})
	return out, nil
}

// decodeDenied turns a key address . l4proto . port (fields padded to 32 bits) into a report entry.
func decodeDenied(f family, e nftables.SetElement) report.Denied {
	k := e.Key
	a, _ := netip.AddrFromSlice(k[:f.addrLen])
	d := report.Denied{
		Proto:   protoName(k[f.addrLen]),
		Address: a.String(),
		Port:    int(binary.BigEndian.Uint16(k[f.addrLen+4:])),
	}
	if e.Counter != nil {
		d.Count = int(e.Counter.Packets)
	}
	return d
}

// protoName names the layer-4 protocols a sandbox is likely to try; others are numbers.
func protoName(p byte) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	case unix.IPPROTO_ICMPV6:
		return "icmpv6"
	case unix.IPPROTO_SCTP:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}

// learn adds addresses the DNS filter resolved for an allowed name to the allow set, for the protocols and
// ports of the name's allow rules, expiring after ttl. One element per batch: an element that overlaps one
// already there (the same name resolved again, or two names sharing an address) is refused by the kernel
// and is already covered, so it is skipped without failing the others.
func (n *Net) learn(addrs []netip.Addr, rules []policy.NetRule, ttl time.Duration) {
	n.nftMu.Lock()
	defer n.nftMu.Unlock()
	if n.sets == nil {
		return
	}
	for _, a := range addrs {
		for _, r := range rules {
			for _, s := range addrSpans(a, a, r) {
				n.addAllowed(s, ttl)
			}
		}
	}
}

// addAllowed adds one element to the family's DNS allow set.
func (n *Net) addAllowed(s span, ttl time.Duration) {
	f := fam4
	if s.lo.Is6() {
		f = fam6
	}
	e := nftables.SetElement{Key: key(s.lo, s.protoLo, s.portLo), KeyEnd: key(s.hi, s.protoHi, s.portHi), Timeout: ttl}
	if err := n.nft.SetAddElements(n.sets[f.nfproto].dnsAllow, []nftables.SetElement{e}); err == nil {
		_ = n.nft.Flush() // an overlapping element is already covered; see learn
	}
}
