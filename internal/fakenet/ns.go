package fakenet

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NS is a named network namespace of a test (/run/netns/NAME, as `ip netns add` makes it): a host, a
// router or an upstream that a test wires to others with veths. Its methods run ip(8) and open no
// socket, so nothing they do sends a packet from the host's namespace.
type NS string

// AddNS creates the namespace name with lo up. Remove it with Del.
func AddNS(name string) (NS, error) {
	ns := NS(name)
	if err := ip("netns", "add", name); err != nil {
		return "", err
	}
	if err := ns.IP("link", "set", "lo", "up"); err != nil {
		ns.Del()
		return "", err
	}
	return ns, nil
}

// NSForTest is AddNS for a test: it fails the test on error and removes the namespace after it.
func NSForTest(tb testing.TB, name string) NS {
	tb.Helper()
	ns, err := AddNS(name)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ns.Del() })
	return ns
}

// Del removes the namespace.
func (ns NS) Del() error { return ip("netns", "del", string(ns)) }

// Path is the namespace's file, for setns or an uplink given as a path.
func (ns NS) Path() string { return filepath.Join("/run/netns", string(ns)) }

// IP runs "ip -n NS args...".
func (ns NS) IP(args ...string) error { return ip(append([]string{"-n", string(ns)}, args...)...) }

// Veth links ns to peer with a veth pair, both ends up: link in ns with the address cidr, peerLink in
// peer with peerCIDR.
func (ns NS) Veth(link, cidr string, peer NS, peerLink, peerCIDR string) error {
	steps := [][]string{
		{"-n", string(ns), "link", "add", link, "type", "veth", "peer", "name", peerLink, "netns", string(peer)},
		{"-n", string(ns), "addr", "add", cidr, "dev", link},
		{"-n", string(peer), "addr", "add", peerCIDR, "dev", peerLink},
		{"-n", string(ns), "link", "set", link, "up"},
		{"-n", string(peer), "link", "set", peerLink, "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// ip runs ip(8), with its output in the error.
func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
