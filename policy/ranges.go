package policy

import (
	"net/netip"
	"strings"
)

// alwaysDeny are the ranges a sandbox never reaches (the network contract enforces them) unless the profile names an exact exception. Cloud
// metadata addresses are listed on their own although most sit inside a larger range, so that the list
// reads as the promise it makes.
var alwaysDeny = mustPrefixes(
	"169.254.169.254/32", // cloud metadata (AWS, GCP, Azure, ...)
	"100.100.100.200/32", // cloud metadata (Alibaba)
	"168.63.129.16/32",   // Azure WireServer (reachable on Azure although it is a public address)
	"fd00:ec2::254/128",  // cloud metadata (AWS, IPv6)
	"0.0.0.0/8",          // "this network"
	"10.0.0.0/8",         // RFC1918
	"172.16.0.0/12",      // RFC1918
	"192.168.0.0/16",     // RFC1918
	"100.64.0.0/10",      // CGNAT
	"127.0.0.0/8",        // loopback, reached only through lo (accepted before)
	"169.254.0.0/16",     // link-local
	"224.0.0.0/4",        // multicast
	"240.0.0.0/4",        // reserved and broadcast
	"::/128",             // unspecified
	"::1/128",            // loopback
	"::ffff:0:0/96",      // IPv4-mapped: would sidestep the IPv4 ranges
	"64:ff9b::/96",       // NAT64 well-known prefix: reaches IPv4 space, private ranges included
	"64:ff9b:1::/48",     // NAT64 local-use prefix (RFC 8215)
	"2002::/16",          // 6to4: embeds an IPv4 address, private ranges included
	"fc00::/7",           // ULA
	"fe80::/10",          // link-local
	"ff00::/8",           // multicast
)

// mustPrefixes parses a fixed list.
func mustPrefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// AlwaysDeny returns the ranges a sandbox never reaches unless the profile names an exact exception,
// cloud metadata first. The network contract (sandbox/netcontract) enforces them; other renderings of a
// profile (Kubernetes NetworkPolicy) use them too.
func AlwaysDeny() []netip.Prefix { return append([]netip.Prefix(nil), alwaysDeny...) }

// metadataNames are cloud metadata services' names. A wildcard never makes them resolve (Name.Matches):
// only a profile that names one exactly (and opens its address with network.except) reaches it.
var metadataNames = [][]string{
	{"metadata", "google", "internal"},
	{"metadata", "goog"},
	{"instance-data", "ec2", "internal"},
}

// MetadataNames returns the cloud metadata names that no wildcard matches, as "metadata.google.internal".
func MetadataNames() []string {
	out := make([]string, len(metadataNames))
	for i, n := range metadataNames {
		out[i] = strings.Join(n, ".")
	}
	return out
}

// IsMetadataName says whether the name with these labels (without the root, in any case) is a cloud
// metadata name.
func IsMetadataName(labels []string) bool {
	for _, n := range metadataNames {
		if labelsEqual(labels, n) {
			return true
		}
	}
	return false
}
