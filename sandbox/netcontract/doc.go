// Package netcontract builds, enforces and removes the network of one sandbox: its network namespace,
// the uplink to the outside (a veth pair into an uplink namespace with root, pasta without), the
// nftables contract that decides what the sandbox may reach, the DNS filter that resolves only allowed
// names and learns their addresses into the contract, and the record of what was refused (denied
// destinations, the DNS log). It also holds the probe (ProbeTargets, RunProbe) that checks a contract
// from inside a sandbox, the rootless helper that makes the sockets inside a sandbox's namespaces
// (HelperMain), and the cleanup of what a crashed run left (Cleanup, KillPasta).
//
// # What it does not decide
//
// What a network rule means belongs to package policy: which names a pattern matches (policy.Name, by
// wire labels without regard to case, a wildcard never over a cloud metadata name), which addresses,
// protocols and ports a rule covers (policy.Dest, from NetRule.Dest), which rules are valid
// (policy.Network.CheckRules) and the always-deny ranges (policy.AlwaysDeny). netcontract turns those into
// nftables set elements and DNS answers; it keeps no reading of a rule of its own, so that what sbx's MCP
// server lets a call narrow to (policy.AllowCovers) is what the contract enforces. Nor does it decide what
// counts as a violation: it reports what it saw.
//
// # Modes
//
// In mode none the sandbox gets a fresh network namespace with only lo up. In mode contract it gets a veth
// whose peer lives in the uplink namespace (the host's, or a named one), a per-run address pair from a pool
// (10.199.0.0/16 split into /30s, and a ULA /64 per run), and one nftables batch in an inet table inside the
// sandbox's namespace, loaded before anything runs there. The veth is one implementation of the uplink
// interface (uplink.go); the contract and the DNS filter depend only on that interface. Without root
// (SetupRootless, rootless.go), libcontainer makes the namespace with the sandbox's user namespace, pasta
// is the uplink, and a helper inside hands sbx the sockets it needs; the contract and the DNS filter are
// the same.
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
package netcontract
