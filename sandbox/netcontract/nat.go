package netcontract

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Host NAT. With the host as uplink, sandbox traffic leaves through the host's routes, masqueraded. The
// table is shared by every sandbox: each run holds a reference (a file under the users directory naming
// its namespace file), and the last one out removes the table. A reference whose namespace file is gone
// belongs to a crashed run and does not count.
//
// Turning IPv4 forwarding on makes the host a router between all its interfaces, not only for sbx. When
// sbx is the one that turned it on, the table also holds a forward chain that drops whatever neither
// comes from nor goes to a sandbox's veth; a host that already forwarded keeps its own behaviour. An
// input chain drops new connections from a sandbox's veth to the host itself, except DNS to the filter:
// the contract inside the sandbox already refuses the host's addresses known at setup, this covers the
// ones added later and the broadcast addresses.
const (
	natTable    = "sbx_nat"
	ipForwardSy = "/proc/sys/net/ipv4/ip_forward"
	vethPrefix  = "sbx" // every veth peer sbx makes in the uplink namespace is named sbx...
)

// hostSide is the namespace that acts as the host for NAT and forwarding, with the directory holding its
// shared state (references, lock, whether sbx turned forwarding on).
type hostSide struct {
	fd  int
	dir string
}

// realHostDir is the state directory of sbx's own namespace, the real host.
const realHostDir = runDir + "/nat"

func (h hostSide) users() string      { return filepath.Join(h.dir, "users") }
func (h hostSide) lock() string       { return filepath.Join(h.dir, "lock") }
func (h hostSide) forwarding() string { return filepath.Join(h.dir, "forwarding-enabled") }

// natAcquire takes a reference on the host NAT, creating it for the first user.
func natAcquire(h hostSide, name, nsPath string) error {
	unlock, err := lockFile(h.lock())
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.MkdirAll(h.users(), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", h.users(), err)
	}
	first := len(natLiveUsers(h)) == 0
	ref := filepath.Join(h.users(), name)
	if err := os.WriteFile(ref, []byte(nsPath), 0o600); err != nil {
		return fmt.Errorf("taking NAT reference: %w", err)
	}
	if !first {
		return nil
	}
	enabled, err := enableForwarding(h)
	if err == nil {
		err = addNATTable(h.fd, enabled)
	}
	if err != nil {
		os.Remove(ref)
		return errors.Join(err, restoreForwarding(h))
	}
	return nil
}

// natRelease drops a reference; the last one removes the table and restores forwarding.
func natRelease(h hostSide, name string) error {
	unlock, err := lockFile(h.lock())
	if err != nil {
		return err
	}
	defer unlock()
	os.Remove(filepath.Join(h.users(), name))
	if len(natLiveUsers(h)) > 0 {
		return nil
	}
	return errors.Join(delNATTable(h.fd), restoreForwarding(h))
}

// natLiveUsers lists references whose namespace still exists, removing those of crashed runs.
func natLiveUsers(h hostSide) []string {
	entries, _ := os.ReadDir(h.users())
	var live []string
	for _, e := range entries {
		file := filepath.Join(h.users(), e.Name())
		owner, err := os.ReadFile(file)
		if err == nil && exists(string(owner)) {
			live = append(live, e.Name())
			continue
		}
		os.Remove(file)
	}
	return live
}

// sysctl reads or writes IPv4 forwarding of h's namespace: /proc/sys/net shows the namespace of the
// thread that opens it.
func (h hostSide) sysctl(write []byte) (got []byte, err error) {
	err = inNetNS(h.fd, func() error {
		if write != nil {
			return os.WriteFile(ipForwardSy, write, 0o644)
		}
		got, err = os.ReadFile(ipForwardSy)
		return err
	})
	return got, err
}

// enableForwarding turns IPv4 forwarding on and says whether sbx was the one to do it (remembered in a
// file, for the last user and for gc).
func enableForwarding(h hostSide) (bool, error) {
	b, err := h.sysctl(nil)
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", ipForwardSy, err)
	}
	if len(b) > 0 && b[0] == '1' {
		// On already: the host's own doing, unless a run of sbx that died turned it on.
		return exists(h.forwarding()), nil
	}
	if err := os.WriteFile(h.forwarding(), nil, 0o600); err != nil {
		return false, fmt.Errorf("recording forwarding state: %w", err)
	}
	if _, err := h.sysctl([]byte("1")); err != nil {
		return false, fmt.Errorf("enabling IPv4 forwarding: %w", err)
	}
	return true, nil
}

// restoreForwarding turns forwarding off again if sbx turned it on.
func restoreForwarding(h hostSide) error {
	if !exists(h.forwarding()) {
		return nil
	}
	os.Remove(h.forwarding())
	if _, err := h.sysctl([]byte("0")); err != nil {
		return fmt.Errorf("restoring IPv4 forwarding: %w", err)
	}
	return nil
}

// addNATTable masquerades traffic from the pool leaving for anywhere outside it, guards the host's own
// input from the sandboxes and, when sbx turned forwarding on, forwards only sandbox traffic.
func addNATTable(hostFd int, forwardFilter bool) error {
	c, err := nftables.New(nftables.WithNetNSFd(hostFd))
	if err != nil {
		return fmt.Errorf("nftables in host namespace: %w", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: natTable})
	c.FlushTable(t) // a table left by a crash is rebuilt, not duplicated
	addMasquerade(c, t)
	addInputGuard(c, t)
	if forwardFilter {
		addForwardFilter(c, t)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("adding host NAT table %s: %w", natTable, err)
	}
	return nil
}

// addMasquerade is the postrouting chain: traffic from the pool to anywhere outside it is masqueraded.
func addMasquerade(c *nftables.Conn, t *nftables.Table) {
	ch := c.AddChain(&nftables.Chain{
		Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	notToPool := inPool(16)
	notToPool[2].(*expr.Cmp).Op = expr.CmpOpNeq
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: cat(inPool(12), notToPool, []expr.Any{&expr.Masq{}})})
}

// inPool matches an IPv4 packet whose address at offset off (12 source, 16 destination) is in pool4.
func inPool(off uint32) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: net.CIDRMask(pool4.Bits(), 32), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: pool4.Addr().AsSlice()},
	}
}

// addInputGuard drops new connections from a sandbox's veth to the host, DNS (to the filter) excepted.
func addInputGuard(c *nftables.Conn, t *nftables.Table) {
	policy := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{
		Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &policy,
	})
	add := func(e ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e}) }
	add(cat(ifnamePrefix(expr.MetaKeyIIFNAME, vethPrefix), ctEstablished(), accept())...)
	for _, p := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
		add(cat(ifnamePrefix(expr.MetaKeyIIFNAME, vethPrefix), inPool(16), matchL4(p), matchDport(53), accept())...)
	}
	add(cat(ifnamePrefix(expr.MetaKeyIIFNAME, vethPrefix), []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}})...)
}

// addForwardFilter forwards what comes from or goes to a sandbox's veth and drops the rest.
func addForwardFilter(c *nftables.Conn, t *nftables.Table) {
	policy := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{
		Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &policy,
	})
	add := func(e ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e}) }
	add(cat(ifnamePrefix(expr.MetaKeyIIFNAME, vethPrefix), accept())...)
	add(cat(ifnamePrefix(expr.MetaKeyOIFNAME, vethPrefix), accept())...)
	add(&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
}

// ifnamePrefix is `iifname "sbx*"` (or oifname): the comparison covers only the prefix's bytes.
func ifnamePrefix(key expr.MetaKey, prefix string) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: reg1}, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte(prefix)}}
}

// delNATTable removes the NAT table; already gone is fine.
func delNATTable(hostFd int) error {
	c, err := nftables.New(nftables.WithNetNSFd(hostFd))
	if err != nil {
		return fmt.Errorf("nftables in host namespace: %w", err)
	}
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: natTable})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing host NAT table %s: %w", natTable, err)
	}
	return nil
}
