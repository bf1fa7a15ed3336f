// Package netcontract builds and removes the network of one sandbox: its network namespace, a veth pair to
// an uplink namespace, the nftables contract that decides what the sandbox may reach, and the DNS filter
// that resolves only allowed names. It also holds the probe that checks a contract from inside a sandbox.
//
// # Modes
//
// In mode none the sandbox gets a fresh network namespace with only lo up. In mode contract it gets a veth
// whose peer lives in the uplink namespace (the host's, or a named one), a per-run address pair from a pool
// (10.199.0.0/16 split into /30s, and a ULA /64 per run), and one nftables batch in an inet table inside the
// sandbox's namespace, loaded before anything runs there. The veth is one implementation of the uplink
// interface (uplink.go); the contract and the DNS filter depend only on that interface.
//
// # The contract, in order
//
// Outbound (the output chain):
//
//   - refuse packets with an IPv6 routing header or an IPv4 source route (the address seen is only the
//     first hop);
//   - accept traffic on lo and established or related traffic;
//   - accept IPv6 neighbour discovery (the veth needs it and it never leaves the link);
//   - accept DNS (udp and tcp 53) to sbx's DNS filter only, refuse DNS to anything else;
//   - refuse the profile's extra denies;
//   - accept the profile's exact exceptions to the always-deny ranges;
//   - refuse the always-deny ranges: cloud metadata, RFC1918, link-local, CGNAT, ULA, multicast, loopback,
//     reserved space, NAT64 and 6to4, and the host's own addresses and subnets;
//   - accept the allow sets (static entries, and addresses the DNS filter learnt for allowed names);
//   - refuse everything else.
//
// Inbound (the input chain): lo, established and related traffic, neighbour discovery and the profile's
// ingress ports pass; everything else from the uplink side is refused and recorded apart.
//
// Refusing means answering at once (a TCP reset, or ICMP administratively prohibited) and recording the
// destination in a dynamic set with a packet counter, read back by Net.Denied. That set is bounded; the
// always-deny set keeps a counter per range, which Net.Denied uses when the dynamic set overflowed.
//
// # Host side
//
// With the host as uplink, a table in the host masquerades the pool, drops new connections from a
// sandbox's veth to the host (DNS excepted) and, when sbx had to turn IPv4 forwarding on, forwards only
// traffic from or to a sandbox's veth (nat.go).
//
// # Limits
//
// With the host as uplink, IPv6 has no route out of the sandbox (sbx does not enable IPv6 forwarding on the
// host, which would change how the host accepts router advertisements), so IPv6 connects fail at once.
// The package makes no decision about what counts as a violation; it only reports what it saw.
package netcontract
