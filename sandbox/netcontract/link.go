package netcontract

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// sandboxIf is the name of the veth end inside the sandbox.
const sandboxIf = "eth0"

// plumbing is the built-in uplink: a veth pair whose peer lives in the uplink namespace.
type plumbing struct {
	linkAddrs
	peerName string
	uplinkFd int
	route6   bool // add an IPv6 default route (not with the host as uplink: no IPv6 forwarding)
	mtu      int
	peerMAC  net.HardwareAddr
	sbxMAC   net.HardwareAddr
}

var _ uplink = plumbing{}

// addrs implements uplink.
func (p plumbing) addrs() linkAddrs { return p.linkAddrs }

// remove implements uplink: it deletes the veth pair, and if that fails, takes at least the peer's
// addresses away so that the address slot can be reused.
func (p plumbing) remove() error {
	if err := p.deletePeer(); err != nil {
		return errors.Join(err, p.unaddressPeer())
	}
	return nil
}

// macs are the addresses of the two veth ends, derived from the slot (locally administered, unique per
// slot) so that each side can know the other's without asking.
func macs(n int) (peer, sbx net.HardwareAddr) {
	return net.HardwareAddr{0x02, 0x5b, 0, byte(n >> 8), byte(n), 1}, net.HardwareAddr{0x02, 0x5b, 0, byte(n >> 8), byte(n), 2}
}

// addNeighbours makes the other end's addresses permanent neighbours. Without them the first IPv6
// packets wait seconds for neighbour discovery while the fresh link settles; with them no ARP or ND is
// needed on the veth at all.
func addNeighbours(h *netlink.Handle, link netlink.Link, mac net.HardwareAddr, addrs ...netip.Prefix) error {
	for _, a := range addrs {
		n := &netlink.Neigh{
			LinkIndex: link.Attrs().Index, Family: family4or6(a.Addr()), State: netlink.NUD_PERMANENT,
			IP: net.IP(a.Addr().AsSlice()), HardwareAddr: mac,
		}
		if err := h.NeighAdd(n); err != nil {
			return fmt.Errorf("adding neighbour %s on %s: %w", a.Addr(), link.Attrs().Name, err)
		}
	}
	return nil
}

// family4or6 is the netlink family of a.
func family4or6(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// loUp brings lo up in the calling thread's namespace.
func loUp(h *netlink.Handle) error {
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	return nil
}

// sandboxSide runs inside the new sandbox namespace: it creates the veth with its peer placed straight into
// the uplink namespace (no move afterwards, no window in which the peer is visible in the wrong place),
// addresses it and routes through the peer.
func (p plumbing) sandboxSide() error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink in sandbox namespace: %w", err)
	}
	defer h.Close()
	if err := loUp(h); err != nil {
		return err
	}
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: sandboxIf, MTU: p.mtu, HardwareAddr: p.sbxMAC},
		PeerName:         p.peerName,
		PeerHardwareAddr: p.peerMAC,
		PeerNamespace:    netlink.NsFd(p.uplinkFd),
	}
	if err := h.LinkAdd(veth); err != nil {
		return fmt.Errorf("creating veth %s/%s: %w", sandboxIf, p.peerName, err)
	}
	link, err := h.LinkByName(sandboxIf)
	if err != nil {
		return fmt.Errorf("finding %s: %w", sandboxIf, err)
	}
	if err := addAddrs(h, link, p.sbx4, p.sbx6); err != nil {
		return err
	}
	if err := addNeighbours(h, link, p.peerMAC, p.peer4, p.peer6); err != nil {
		return err
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing %s up: %w", sandboxIf, err)
	}
	return p.routes(h, link)
}

// routes sends everything through the peer.
func (p plumbing) routes(h *netlink.Handle, link netlink.Link) error {
	gw := []netip.Addr{p.peer4.Addr()}
	if p.route6 {
		gw = append(gw, p.peer6.Addr())
	}
	for _, g := range gw {
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.IP(g.AsSlice()), Flags: int(netlink.FLAG_ONLINK)}
		if err := h.RouteAdd(r); err != nil {
			return fmt.Errorf("adding default route via %s: %w", g, err)
		}
	}
	return nil
}

// addAddrs puts an IPv4 and an IPv6 address on link. IPv6 skips duplicate address detection: the pool
// guarantees uniqueness, and DAD would leave the address unusable for a second.
func addAddrs(h *netlink.Handle, link netlink.Link, v4, v6 netip.Prefix) error {
	for _, p := range []netip.Prefix{v4, v6} {
		a := &netlink.Addr{IPNet: ipNet(p)}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(link, a); err != nil {
			return fmt.Errorf("adding %s to %s: %w", p, link.Attrs().Name, err)
		}
	}
	return nil
}

// ipNet converts a prefix keeping the host part (an interface address, not a network).
func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// uplinkHandle is a netlink socket opened in the uplink namespace.
func (p plumbing) uplinkHandle() (*netlink.Handle, error) {
	h, err := netlink.NewHandleAt(netns.NsHandle(p.uplinkFd), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink in uplink namespace: %w", err)
	}
	return h, nil
}

// uplinkSide addresses the peer and brings it up, through a netlink socket opened in the uplink namespace.
func (p plumbing) uplinkSide() error {
	h, err := p.uplinkHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(p.peerName)
	if err != nil {
		return fmt.Errorf("finding veth peer %s: %w", p.peerName, err)
	}
	if err := addAddrs(h, link, p.peer4, p.peer6); err != nil {
		return err
	}
	if err := addNeighbours(h, link, p.sbxMAC, p.sbx4, p.sbx6); err != nil {
		return err
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing %s up: %w", p.peerName, err)
	}
	return nil
}

// waitUp waits until the sandbox's end of the veth is operationally up. Until the kernel's link watch
// has run after the peer came up, the link's queue discards what is sent (silently: a first DNS query
// would be lost and wait for the resolver's retry). Bounded by a second; a link that is not up by then
// is left to the command's retries.
func waitUp(nsFd int) error {
	h, err := netlink.NewHandleAt(netns.NsHandle(nsFd), unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink in sandbox namespace: %w", err)
	}
	defer h.Close()
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		link, err := h.LinkByName(sandboxIf)
		if err != nil {
			return fmt.Errorf("finding %s: %w", sandboxIf, err)
		}
		if link.Attrs().OperState == netlink.OperUp {
			return nil
		}
	}
	return nil
}

// deletePeer deletes the veth pair through its uplink end, so that nothing of the run is left in the
// uplink namespace when Close returns (the kernel's cleanup of a dropped namespace would remove it only
// later, in the background). Already gone is fine.
func (p plumbing) deletePeer() error {
	return p.withPeer(func(h *netlink.Handle, link netlink.Link) error {
		if err := h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("deleting veth peer %s: %w", p.peerName, err)
		}
		return nil
	})
}

// unaddressPeer removes the peer's addresses so the slot can be reused at once while the kernel frees the
// veth in the background. The peer may already be gone.
func (p plumbing) unaddressPeer() error {
	return p.withPeer(func(h *netlink.Handle, link netlink.Link) error {
		for _, a := range []netip.Prefix{p.peer4, p.peer6} {
			_ = h.AddrDel(link, &netlink.Addr{IPNet: ipNet(a)}) // gone with the link is fine too
		}
		return nil
	})
}

// withPeer runs f on the veth's uplink end through a netlink handle of the uplink namespace; a peer that
// is gone already is not an error.
func (p plumbing) withPeer(f func(*netlink.Handle, netlink.Link) error) error {
	h, err := p.uplinkHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(p.peerName)
	if err != nil {
		return nil
	}
	return f(h, link)
}
