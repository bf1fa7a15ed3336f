package netcontract

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/sbx-dev/sbx/policy"
	"golang.org/x/sys/unix"
)

// Names inside the sandbox's namespace. Nothing here is visible from the host.
const (
	tableName  = "sbx"
	chainOut   = "output"
	chainIn    = "input"
	chainDeny4 = "refuse4"
	chainDeny6 = "refuse6"
)

// Registers. Concatenated keys are built in 32-bit registers: address from reg32Key on, then l4proto,
// then port, each field padded to 4 bytes (the kernel zeroes the padding on 1- and 2-byte loads).
const (
	reg1     = unix.NFT_REG_1
	reg32Key = 8 // NFT_REG32_00
)

// family is what differs between the IPv4 and IPv6 halves of the contract.
type family struct {
	nfproto  byte
	addrOff  uint32 // offset of the destination address in the network header
	addrLen  uint32
	refuse   string // chain that records and refuses
	keyType  nftables.SetDatatype
	suffix   string // of set names: "4" or "6"
	addrType nftables.SetDatatype
}

var (
	fam4 = family{nfproto: unix.NFPROTO_IPV4, addrOff: 16, addrLen: 4, refuse: chainDeny4, suffix: "4", addrType: nftables.TypeIPAddr}
	fam6 = family{nfproto: unix.NFPROTO_IPV6, addrOff: 24, addrLen: 16, refuse: chainDeny6, suffix: "6", addrType: nftables.TypeIP6Addr}
)

// Inbound halves: the key is the source address . l4proto . destination port, recorded in their own
// denied sets by their own refuse chains.
var (
	fam4in = family{nfproto: unix.NFPROTO_IPV4, addrOff: 12, addrLen: 4, refuse: "refusein4", suffix: "in4", addrType: nftables.TypeIPAddr}
	fam6in = family{nfproto: unix.NFPROTO_IPV6, addrOff: 8, addrLen: 16, refuse: "refusein6", suffix: "in6", addrType: nftables.TypeIP6Addr}
)

func init() {
	for _, f := range []*family{&fam4, &fam6, &fam4in, &fam6in} {
		f.keyType = nftables.MustConcatSetType(f.addrType, nftables.TypeInetProto, nftables.TypeInetService)
	}
}

// inbound is the inbound family of the same IP version.
func (f family) inbound() family {
	if f.nfproto == unix.NFPROTO_IPV4 {
		return fam4in
	}
	return fam6in
}

// protoReg and portReg are the registers of the l4proto and port fields after the address.
func (f family) protoReg() uint32 { return reg32Key + f.addrLen/4 }
func (f family) portReg() uint32  { return f.protoReg() + 1 }

// contractSets are the sets of one family.
type contractSets struct {
	deny, except, never, allow, dnsAllow, denied *nftables.Set
	deniedIn                                     *nftables.Set // inbound attempts refused
}

// contractInput is what the contract is built from.
type contractInput struct {
	dnsFilter    netip.Addr // the DNS filter's address, the only destination for port 53
	deny, except []span
	never, allow []span
	ingress      []policy.Listener // inbound ports open to the uplink side
}

// newSet declares a concatenated-range set of f in t.
func newSet(t *nftables.Table, f family, name string, timeout bool) *nftables.Set {
	return &nftables.Set{
		Table: t, Name: name + f.suffix, KeyType: f.keyType,
		Interval: true, Concatenation: true, HasTimeout: timeout,
	}
}

// loadContract builds the whole contract in one batch on c, which talks to the sandbox's namespace. The
// kernel applies the batch atomically: the sandbox never sees a half-built contract.
func loadContract(c *nftables.Conn, in contractInput) (map[byte]*contractSets, error) {
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: tableName})
	sets := map[byte]*contractSets{}
	for _, f := range []family{fam4, fam6} {
		s, err := addSets(c, t, f, in)
		if err != nil {
			return nil, err
		}
		sets[f.nfproto] = s
		addRefuseChain(c, t, f, s.denied)
		s.deniedIn = deniedSet(t, f.inbound())
		if err := addSet(c, s.deniedIn, nil); err != nil {
			return nil, fmt.Errorf("declaring set %s: %w", s.deniedIn.Name, err)
		}
		addRefuseChain(c, t, f.inbound(), s.deniedIn)
	}
	addOutputChain(c, t, in.dnsFilter, sets)
	addInputChain(c, t, in.ingress)
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("loading nftables contract: %w", err)
	}
	return sets, nil
}

// addSets declares the sets of one family with their static elements.
func addSets(c *nftables.Conn, t *nftables.Table, f family, in contractInput) (*contractSets, error) {
	s := &contractSets{
		deny: newSet(t, f, "deny", false), except: newSet(t, f, "except", false),
		never: newSet(t, f, "never", false), allow: newSet(t, f, "allow", false),
		dnsAllow: newSet(t, f, "dnsallow", true),
		denied:   deniedSet(t, f),
	}
	s.never.Counter = true // per-range counts that the dynamic set's overflow cannot hide
	for _, p := range []struct {
		set   *nftables.Set
		spans []span
	}{{s.deny, in.deny}, {s.except, in.except}, {s.never, in.never}, {s.allow, in.allow}, {s.dnsAllow, nil}, {s.denied, nil}} {
		v4, v6 := elements(p.spans)
		elems := v4
		if f.nfproto == unix.NFPROTO_IPV6 {
			elems = v6
		}
		if err := addSet(c, p.set, elems); err != nil {
			return nil, fmt.Errorf("declaring set %s: %w", p.set.Name, err)
		}
	}
	return s, nil
}

// setIDs numbers the sets sbx declares, every batch's from one counter.
var setIDs atomic.Uint32

// addSet declares set in c's batch with an id of its own (the batch's rules refer to a new set by it).
// The library numbers a set that has none from a global counter it increments unguarded, so that two
// sandboxes built at once (a pool's refill beside a run) raced on it, and a set could get the id of
// another of its own batch.
func addSet(c *nftables.Conn, set *nftables.Set, elems []nftables.SetElement) error {
	if set.ID == 0 {
		set.ID = setIDs.Add(1)
	}
	return c.AddSet(set, elems)
}

// deniedSet is the dynamic record of refused attempts of f, with a packet counter per key.
func deniedSet(t *nftables.Table, f family) *nftables.Set {
	return &nftables.Set{Table: t, Name: "denied" + f.suffix, KeyType: f.keyType,
		Concatenation: true, Dynamic: true, Counter: true, Size: deniedMax}
}

// addInputChain judges what reaches the sandbox: lo, replies to its own connections and neighbour
// discovery pass, so do new connections to the profile's ingress ports; anything else from the uplink
// side (a connection to a listener of the command, a datagram to its socket) is recorded and refused.
// Without this, the established-state acceptance of the output chain would carry the command's side of
// any connection the uplink side opens.
func addInputChain(c *nftables.Conn, t *nftables.Table, ingress []policy.Listener) {
	drop := nftables.ChainPolicyDrop
	ch := c.AddChain(&nftables.Chain{
		Name: chainIn, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop,
	})
	add := func(e ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e}) }
	add(cat(iifname("lo"), accept())...)
	add(cat(ctEstablished(), accept())...)
	add(cat(matchNfproto(unix.NFPROTO_IPV6), matchL4(unix.IPPROTO_ICMPV6), icmp6TypeRange(133, 136), accept())...)
	for _, l := range ingress {
		p := byte(unix.IPPROTO_TCP)
		if l.Proto == "udp" {
			p = unix.IPPROTO_UDP
		}
		if l.Port == 0 {
			add(cat(matchL4(p), accept())...)
			continue
		}
		add(cat(matchL4(p), matchDport(uint16(l.Port)), accept())...)
	}
	for _, f := range []family{fam4in, fam6in} {
		add(cat(matchNfproto(f.nfproto), jump(f.refuse))...)
	}
}

// addOutputChain adds the base chain that judges every packet the sandbox sends. Its policy drops what no
// rule decided (nothing should reach it: the last rules refuse every IPv4 and IPv6 packet).
func addOutputChain(c *nftables.Conn, t *nftables.Table, dnsFilter netip.Addr, sets map[byte]*contractSets) {
	drop := nftables.ChainPolicyDrop
	ch := c.AddChain(&nftables.Chain{
		Name: chainOut, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop,
	})
	add := func(e ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e}) }
	// Headers that steer routing come first, before lo and established flows: with an IPv6 routing
	// header (segment routing, type 0, any type) or an IPv4 source route, the address the contract sees
	// is only the first hop, not where the packet ends. A socket option sets them without privileges.
	add(cat(matchNfproto(unix.NFPROTO_IPV6), exthdrExists(expr.ExthdrOpIpv6, unix.IPPROTO_ROUTING), jump(fam6.refuse))...)
	for _, opt := range []uint8{ipoptLSRR, ipoptSSRR} {
		add(cat(matchNfproto(unix.NFPROTO_IPV4), exthdrExists(exthdrOpIPv4, opt), jump(fam4.refuse))...)
	}
	add(cat(oifname("lo"), accept())...)
	add(cat(ctEstablished(), accept())...)
	add(cat(matchNfproto(unix.NFPROTO_IPV6), matchL4(unix.IPPROTO_ICMPV6), icmp6TypeRange(133, 136), accept())...)
	add(cat(matchNfproto(unix.NFPROTO_IPV6), matchL4(unix.IPPROTO_ICMPV6), icmp6TypeRange(143, 143), accept())...)
	for _, p := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
		add(cat(matchNfproto(unix.NFPROTO_IPV4), matchL4(p), matchDport(53), matchDaddr(fam4, dnsFilter), accept())...)
	}
	for _, f := range []family{fam4, fam6} {
		for _, p := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
			add(cat(matchNfproto(f.nfproto), matchL4(p), matchDport(53), jump(f.refuse))...)
		}
	}
	for _, f := range []family{fam4, fam6} {
		s := sets[f.nfproto]
		add(cat(matchNfproto(f.nfproto), lookup(f, s.deny), jump(f.refuse))...)
		add(cat(matchNfproto(f.nfproto), lookup(f, s.except), accept())...)
		add(cat(matchNfproto(f.nfproto), lookup(f, s.never), jump(f.refuse))...)
		add(cat(matchNfproto(f.nfproto), lookup(f, s.allow), accept())...)
		add(cat(matchNfproto(f.nfproto), lookup(f, s.dnsAllow), accept())...)
		add(cat(matchNfproto(f.nfproto), jump(f.refuse))...)
	}
}

// addRefuseChain adds the chain that records a refused destination in the family's denied set and answers
// at once: a reset for TCP, ICMP administratively prohibited for the rest. Never a silent drop: connect()
// would hang until its timeout and the command would look slow rather than refused. Recording and
// refusing are separate rules: when the denied set is full the dynset fails and ends its rule, and the
// refusal must still happen.
func addRefuseChain(c *nftables.Conn, t *nftables.Table, f family, denied *nftables.Set) {
	ch := c.AddChain(&nftables.Chain{Name: f.refuse, Table: t})
	add := func(e ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e}) }
	add(&expr.Counter{}) // every refusal: what the denied set lacks of it overflowed (see Net.Denied)
	add(cat(matchL4(unix.IPPROTO_TCP), loadKey(f, true), record(denied))...)
	add(cat(matchL4(unix.IPPROTO_UDP), loadKey(f, true), record(denied))...)
	// Other protocols have no port: record port 0 rather than whatever bytes sit where a port would be.
	add(cat(notL4(unix.IPPROTO_TCP, unix.IPPROTO_UDP), loadKey(f, false), record(denied))...)
	add(cat(matchL4(unix.IPPROTO_TCP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}})...)
	add(&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED})
}

// notL4 matches packets whose l4proto is none of ps.
func notL4(ps ...byte) []expr.Any {
	e := []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1}}
	for _, p := range ps {
		e = append(e, &expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{p}})
	}
	return e
}

// record adds the key in the registers to the dynamic set; the set's counter counts every packet.
func record(s *nftables.Set) []expr.Any {
	return []expr.Any{&expr.Dynset{SrcRegKey: reg32Key, SetName: s.Name, SetID: s.ID, Operation: unix.NFT_DYNSET_OP_ADD}}
}

// loadKey loads destination address . l4proto . port into the key registers. Without withPort the port
// field is 0.
func loadKey(f family, withPort bool) []expr.Any {
	e := []expr.Any{
		&expr.Payload{DestRegister: reg32Key, Base: expr.PayloadBaseNetworkHeader, Offset: f.addrOff, Len: f.addrLen},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: f.protoReg()},
	}
	if withPort {
		return append(e, &expr.Payload{DestRegister: f.portReg(), Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
	}
	return append(e, &expr.Immediate{Register: f.portReg(), Data: []byte{0, 0, 0, 0}})
}

// lookup matches when the packet's key is in s. For protocols without ports the port field reads other
// bytes; only the always-deny set, which covers every port, can then match, which is what is wanted.
func lookup(f family, s *nftables.Set) []expr.Any {
	return append(loadKey(f, true), &expr.Lookup{SourceRegister: reg32Key, SetName: s.Name, SetID: s.ID})
}

// matchNfproto is `meta nfproto`: in an inet table the family must be checked before reading addresses.
func matchNfproto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1}, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{p}}}
}

// matchL4 is `meta l4proto p`.
func matchL4(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1}, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{p}}}
}

// matchDport is `th dport port`; only meaningful after matchL4 of tcp or udp.
func matchDport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

// matchDaddr is `ip daddr a` (or ip6).
func matchDaddr(f family, a netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: f.addrOff, Len: f.addrLen},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: a.AsSlice()},
	}
}

// IPv4 options that route a packet through addresses of the sender's choosing, and the exthdr operation
// that reads IPv4 options (NFT_EXTHDR_OP_IPV4, Linux 5.3; google/nftables has no name for it).
const (
	ipoptLSRR    = 131
	ipoptSSRR    = 137
	exthdrOpIPv4 = expr.ExthdrOp(2)
)

// exthdrExists is `exthdr TYPE exists` (IPv6 extension header, or IPv4 option).
func exthdrExists(op expr.ExthdrOp, typ uint8) []expr.Any {
	return []expr.Any{
		&expr.Exthdr{DestRegister: reg1, Type: typ, Offset: 0, Len: 1, Flags: unix.NFT_EXTHDR_F_PRESENT, Op: op},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{1}},
	}
}

// icmp6TypeRange matches ICMPv6 types lo..hi (neighbour discovery, MLD reports).
func icmp6TypeRange(lo, hi byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Range{Op: expr.CmpOpEq, Register: reg1, FromData: []byte{lo}, ToData: []byte{hi}},
	}
}

// oifname is `oifname name`.
func oifname(name string) []expr.Any { return ifname(expr.MetaKeyOIFNAME, name) }

// iifname is `iifname name`.
func iifname(name string) []expr.Any { return ifname(expr.MetaKeyIIFNAME, name) }

// ifname compares the whole interface name (padded), not a prefix.
func ifname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: reg1}, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: b}}
}

// ctEstablished is `ct state established,related`.
func ctEstablished() []expr.Any {
	mask := make([]byte, 4)
	binary.NativeEndian.PutUint32(mask, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
	return []expr.Any{
		&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: make([]byte, 4)},
	}
}

func accept() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }

func jump(chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}}
}

// cat joins expression lists.
func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// deniedMax bounds each denied set, so that a sandbox trying millions of destinations cannot grow kernel
// memory without limit. Past it, attempts are still refused, only no longer recorded. The kernel sizes
// the hash table from it up front: 65535 costs about 4 ms per run, this about nothing.
const deniedMax = 4096
