package netcontract

import "net/netip"

// uplink is how a sandbox's namespace reaches the outside. The contract, the DNS filter and the host NAT
// need only what this interface gives, so that another kind of uplink (a user-mode network stack for
// rootless runs) can plug in beside the veth pair (plumbing, link.go) by implementing it and being chosen
// in Net.newUplink.
type uplink interface {
	// sandboxSide runs on a thread inside the new, empty sandbox namespace, before anything else is
	// there: it makes the sandbox's end of the link, its addresses and routes.
	sandboxSide() error
	// uplinkSide finishes the link from sbx's side once the sandbox side exists.
	uplinkSide() error
	// addrs are the addresses of both ends. The DNS filter listens on the gateway's IPv4 address in the
	// uplink namespace and answers only the sandbox's; the contract denies the link's own subnets.
	addrs() linkAddrs
	// remove deletes what the uplink made outside the sandbox's namespace; nothing of it may remain when
	// it returns. It may run concurrently with the rest of the teardown, and on a partial setup.
	remove() error
}

// linkAddrs are the addresses of the two ends of a sandbox's link, with their prefix lengths.
type linkAddrs struct {
	peer4, sbx4 netip.Prefix // the gateway (uplink side) and the sandbox, IPv4
	peer6, sbx6 netip.Prefix // the same, IPv6
}
