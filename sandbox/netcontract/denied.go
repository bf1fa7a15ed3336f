package netcontract

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"golang.org/x/sys/unix"
)

// Denied reads back every destination the contract refused, with the number of packets that tried it.
// Call it before Close. In mode none (and before any refusal) the list is empty.
//
// The per-destination record is bounded (deniedMax per family). When it overflowed, the attempts on
// always-deny ranges that it lacks are listed per range (proto "any", the range as address, port 0),
// from the always-deny set's own counters, and Notes says how many other refusals were not itemized.
func (n *Net) Denied() ([]report.Denied, error) {
	n.nftMu.Lock()
	defer n.nftMu.Unlock()
	out := []report.Denied{}
	if n.sets == nil {
		return out, nil
	}
	n.deniedNotes = nil
	for _, f := range []family{fam4, fam6} {
		got, err := n.deniedOf(f)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	slices.SortFunc(out, func(a, b report.Denied) int {
		return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port))
	})
	return out, nil
}

// deniedOf reads one family's record and completes it from the counters when it overflowed.
func (n *Net) deniedOf(f family) ([]report.Denied, error) {
	s := n.sets[f.nfproto]
	elems, err := n.nft.GetSetElements(s.denied)
	if err != nil {
		return nil, fmt.Errorf("reading denied attempts: %w", err)
	}
	var out []report.Denied
	itemized := 0
	for _, e := range elems {
		d := decodeDenied(f, e)
		out = append(out, d)
		itemized += d.Count
	}
	if n.none != nil && len(elems) < deniedMax {
		return out, nil // mode none: nothing inbound, and a record with room itemized every refusal
	}
	inbound, err := n.deniedIn(f)
	if err != nil {
		return nil, err
	}
	out = append(out, inbound...)
	total, err := n.refusals(f)
	if err != nil {
		return nil, err
	}
	if total <= itemized {
		return out, nil
	}
	ipv := map[byte]string{unix.NFPROTO_IPV4: "4", unix.NFPROTO_IPV6: "6"}[f.nfproto]
	if s.never == nil { // mode none: no per-range counters
		n.deniedNotes = append(n.deniedNotes, fmt.Sprintf("denied record of IPv%s full (%d destinations): %d refused packets not itemized", ipv, deniedMax, total-itemized))
		return out, nil
	}
	ranges, err := n.rangeCounts(f, out)
	if err != nil {
		return nil, err
	}
	out = append(out, ranges...)
	n.deniedNotes = append(n.deniedNotes, fmt.Sprintf("denied record of IPv%s full (%d destinations): %d refused packets not itemized; attempts on always-deny ranges are counted per range",
		ipv, deniedMax, total-itemized))
	return out, nil
}

// deniedIn reads the family's refused inbound attempts, noting how many the full record did not itemize.
func (n *Net) deniedIn(f family) ([]report.Denied, error) {
	elems, err := n.nft.GetSetElements(n.sets[f.nfproto].deniedIn)
	if err != nil {
		return nil, fmt.Errorf("reading refused inbound attempts: %w", err)
	}
	var out []report.Denied
	itemized := 0
	for _, e := range elems {
		d := decodeDenied(f.inbound(), e)
		d.Direction = report.DirectionIn
		out = append(out, d)
		itemized += d.Count
	}
	total, err := n.refusals(f.inbound())
	if err != nil {
		return nil, err
	}
	if total > itemized {
		n.deniedNotes = append(n.deniedNotes, fmt.Sprintf("record of refused inbound attempts full (%d senders and ports): %d packets not itemized", deniedMax, total-itemized))
	}
	return out, nil
}

// refusals is the packet count of the counter that opens the family's refuse chain: every refusal.
func (n *Net) refusals(f family) (int, error) {
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName}
	rules, err := n.nft.GetRules(t, &nftables.Chain{Name: f.refuse, Table: t})
	if err != nil {
		return 0, fmt.Errorf("reading the refusal counter: %w", err)
	}
	for _, r := range rules {
		for _, e := range r.Exprs {
			if c, ok := e.(*expr.Counter); ok {
				return int(c.Packets), nil
			}
		}
	}
	return 0, errors.New("reading the refusal counter: not found")
}

// rangeCounts lists, per always-deny range, the attempts that the itemized record lacks.
func (n *Net) rangeCounts(f family, itemized []report.Denied) ([]report.Denied, error) {
	elems, err := n.nft.GetSetElements(n.sets[f.nfproto].never)
	if err != nil {
		return nil, fmt.Errorf("reading always-deny counters: %w", err)
	}
	counts := map[netip.Prefix]int{}
	var order []netip.Prefix
	for _, e := range elems {
		a, _ := netip.AddrFromSlice(e.Key[:f.addrLen])
		label, ok := labelOf(n.pieces, a)
		if !ok || e.Counter == nil || e.Counter.Packets == 0 {
			continue
		}
		if _, seen := counts[label]; !seen {
			order = append(order, label)
		}
		counts[label] += int(e.Counter.Packets)
	}
	for _, d := range itemized {
		if d.Direction != "" {
			continue
		}
		if a, err := netip.ParseAddr(d.Address); err == nil {
			if label, ok := labelOf(n.pieces, a); ok {
				counts[label] -= d.Count
			}
		}
	}
	var out []report.Denied
	for _, l := range order {
		if c := counts[l]; c > 0 {
			out = append(out, report.Denied{Proto: "any", Address: l.String(), Count: c})
		}
	}
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
func (n *Net) learn(addrs []netip.Addr, rules []policy.Dest, ttl time.Duration) {
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
