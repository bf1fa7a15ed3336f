package netcontract

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Host NAT. With the host as uplink, sandbox traffic leaves through the host's routes, masqueraded. The
// table is shared by every sandbox: each run holds a reference (a file under natUsers naming its namespace
// file), and the last one out removes the table. A reference whose namespace file is gone belongs to a
// crashed run and does not count.
const (
	natTable    = "sbx_nat"
	natUsers    = runDir + "/nat/users"
	natLock     = runDir + "/nat/lock"
	natForward  = runDir + "/nat/forwarding-enabled" // sbx turned IPv4 forwarding on and turns it off again
	ipForwardSy = "/proc/sys/net/ipv4/ip_forward"
)

// natAcquire takes a reference on the host NAT, creating it for the first user.
func natAcquire(hostFd int, name, nsPath string) error {
	unlock, err := lockFile(natLock)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.MkdirAll(natUsers, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", natUsers, err)
	}
	first := len(natLiveUsers()) == 0
	if err := os.WriteFile(filepath.Join(natUsers, name), []byte(nsPath), 0o600); err != nil {
		return fmt.Errorf("taking NAT reference: %w", err)
	}
	if !first {
		return nil
	}
	if err := enableForwarding(); err != nil {
		os.Remove(filepath.Join(natUsers, name))
		return err
	}
	if err := addNATTable(hostFd); err != nil {
		os.Remove(filepath.Join(natUsers, name))
		return err
	}
	return nil
}

// natRelease drops a reference; the last one removes the table and restores forwarding.
func natRelease(hostFd int, name string) error {
	unlock, err := lockFile(natLock)
	if err != nil {
		return err
	}
	defer unlock()
	os.Remove(filepath.Join(natUsers, name))
	if len(natLiveUsers()) > 0 {
		return nil
	}
	return errors.Join(delNATTable(hostFd), restoreForwarding())
}

// natLiveUsers lists references whose namespace still exists, removing those of crashed runs.
func natLiveUsers() []string {
	entries, _ := os.ReadDir(natUsers)
	var live []string
	for _, e := range entries {
		file := filepath.Join(natUsers, e.Name())
		owner, err := os.ReadFile(file)
		if err == nil && exists(string(owner)) {
			live = append(live, e.Name())
			continue
		}
		os.Remove(file)
	}
	return live
}

// enableForwarding turns IPv4 forwarding on, remembering when sbx was the one to do it.
func enableForwarding() error {
	b, err := os.ReadFile(ipForwardSy)
	if err != nil {
		return fmt.Errorf("reading %s: %w", ipForwardSy, err)
	}
	if len(b) > 0 && b[0] == '1' {
		return nil
	}
	if err := os.WriteFile(natForward, nil, 0o600); err != nil {
		return fmt.Errorf("recording forwarding state: %w", err)
	}
	if err := os.WriteFile(ipForwardSy, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enabling IPv4 forwarding: %w", err)
	}
	return nil
}

// restoreForwarding turns forwarding off again if sbx turned it on.
func restoreForwarding() error {
	if !exists(natForward) {
		return nil
	}
	os.Remove(natForward)
	if err := os.WriteFile(ipForwardSy, []byte("0"), 0o644); err != nil {
		return fmt.Errorf("restoring IPv4 forwarding: %w", err)
	}
	return nil
}

// addNATTable masquerades traffic from the pool leaving for anywhere outside it.
func addNATTable(hostFd int) error {
	c, err := nftables.New(nftables.WithNetNSFd(hostFd))
	if err != nil {
		return fmt.Errorf("nftables in host namespace: %w", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: natTable})
	c.FlushTable(t) // a table left by a crash is rebuilt, not duplicated
	ch := c.AddChain(&nftables.Chain{
		Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	mask := []byte{255, 255, 0, 0}
	net := pool4.Addr().AsSlice()
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: net},
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: net},
		&expr.Masq{},
	}})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("adding host NAT table %s: %w", natTable, err)
	}
	return nil
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
