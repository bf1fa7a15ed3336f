package netcontract

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
)

// Net is the network of one running sandbox. Its methods are safe for concurrent use; Close ends it.
type Net struct {
	cfg      Config
	path     string // bind-mounted namespace file; "" once removed
	fd       int    // the sandbox's namespace, -1 when not open
	uplinkFd int
	host     bool // the uplink is sbx's own namespace: NAT and forwarding are needed
	hostSide hostSide
	slot     slot
	nat      bool
	resolv   string
	dns      *dnsFilter
	own      []netip.Prefix // the uplink's own addresses, always denied

	link     uplink        // nil in mode none
	linkGone chan error    // the result of removing the link, once StartClose has begun it
	ready    chan struct{} // closed once the background part of the setup is done
	readyErr error

	nftMu       sync.Mutex // one netlink conversation at a time on nft
	nft         *nftables.Conn
	sets        map[byte]*contractSets
	pieces      []piece  // the always-deny set's elements, with their labels
	deniedNotes []string // what Denied found incomplete

	// Without root (rootless.go): the contract attaches to a namespace the container made.
	rootless   bool
	attachOnce atomic.Bool    // Attach has been called, or the setup abandoned
	nftSock    int            // the netlink socket made in the sandbox by the helper; -1 = none
	pasta      *exec.Cmd      // the uplink; nil when not running
	pastaDone  chan struct{}  // closed once pasta has been waited for
	pastaLog   *boundedBuffer // what pasta said

	none *noneRecord // mode none: the record of attempts (none.go); nil in mode contract
}

// Setup builds the network of one run: in mode none a namespace with lo up, in mode contract everything
// described in the package documentation. Nothing runs in the namespace yet; the contract is in force
// before anything can. On error Setup leaves nothing behind.
func Setup(cfg Config) (*Net, error) {
	n, err := SetupAsync(cfg)
	if err != nil {
		return nil, err
	}
	if err := n.Ready(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// SetupAsync is Setup that returns as soon as the namespace, its veth and resolv.conf exist, so that the
// container can be started into the namespace while the contract loads and the DNS filter starts in the
// background (the nftables commit alone can take milliseconds of RCU grace periods). Nothing may run in
// the namespace until Ready has returned nil: the caller starts the untrusted command only after it.
// On error SetupAsync leaves nothing behind.
func SetupAsync(cfg Config) (n *Net, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n = &Net{cfg: cfg, fd: -1, uplinkFd: -1, nftSock: -1, ready: make(chan struct{})}
	if cfg.Net.Mode != policy.NetContract {
		defer close(n.ready)
		if err := n.setupNone(); err != nil {
			return nil, err
		}
		return n, nil
	}
	if err := n.setupPlumbing(); err != nil {
		close(n.ready)
		n.Close()
		return nil, err
	}
	go func() {
		defer close(n.ready)
		n.readyErr = n.setupContract()
	}()
	return n, nil
}

// Ready waits until the contract is loaded and the DNS filter serves, and says whether they are. A
// contract that failed to load fails the run: the caller must not start anything in the namespace.
func (n *Net) Ready() error {
	<-n.ready
	return n.readyErr
}

// setupNone is the fast path run by every sbx exec without a network: a namespace with only lo.
func (n *Net) setupNone() error {
	fd, err := newNetNS(n.cfg.nsPath(), func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("netlink in sandbox namespace: %w", err)
		}
		defer h.Close()
		return loUp(h)
	})
	if err != nil {
		return fmt.Errorf("setting up network namespace: %w", err)
	}
	n.fd, n.path = fd, n.cfg.nsPath()
	return nil
}

// setupPlumbing builds the namespace, the veth pair and resolv.conf. Each step records what it made in
// n first, so that Close can undo a partial setup.
func (n *Net) setupPlumbing() error {
	var err error
	if n.uplinkFd, n.host, err = openUplink(n.cfg.Net.UplinkNetNS); err != nil {
		return err
	}
	n.hostSide = hostSide{fd: n.uplinkFd, dir: realHostDir}
	if n.cfg.hostState != "" {
		n.host, n.hostSide.dir = true, n.cfg.hostState
	}
	own, err := hostAddrs(n.host, n.uplinkFd)
	if err != nil {
		return err
	}
	if n.slot, err = allocSlot(n.cfg.nsPath()); err != nil {
		return err
	}
	n.link = n.newUplink()
	if n.fd, err = newNetNS(n.cfg.nsPath(), n.link.sandboxSide); err != nil {
		return fmt.Errorf("setting up network namespace: %w", err)
	}
	n.path = n.cfg.nsPath()
	if err := n.link.uplinkSide(); err != nil {
		return err
	}
	n.own = own
	return n.writeResolvConf()
}

// setupContract loads the contract, starts the DNS filter and, with the host as uplink, takes the NAT.
func (n *Net) setupContract() error {
	if err := n.loadContract(n.own); err != nil {
		return err
	}
	if err := n.startDNS(); err != nil {
		return err
	}
	if err := waitUp(n.fd); err != nil {
		return err
	}
	if n.host {
		if err := natAcquire(n.hostSide, n.cfg.name(), n.path); err != nil {
			return err
		}
		n.nat = true
	}
	return nil
}

// newUplink describes the link of the run: the veth pair of the run's slot.
func (n *Net) newUplink() uplink {
	p := plumbing{peerName: n.cfg.name(), uplinkFd: n.uplinkFd, route6: !n.host}
	p.peer4, p.sbx4, p.peer6, p.sbx6 = n.slot.addrs()
	p.peerMAC, p.sbxMAC = macs(n.slot.n)
	return p
}

// hostAddrs are the subnets of sbx's own namespace's addresses: the sandbox never reaches the host
// itself, whichever namespace its uplink is, nor its neighbours on those subnets, nor their broadcast
// addresses (a profile that needs a host there names it in network.except).
func hostAddrs(isHost bool, uplinkFd int) ([]netip.Prefix, error) {
	fd := uplinkFd
	if !isHost {
		var err error
		if fd, err = hostNS(); err != nil {
			return nil, fmt.Errorf("opening sbx's network namespace: %w", err)
		}
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(fd), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink in sbx's network namespace: %w", err)
	}
	defer h.Close()
	return addrPrefixes(h)
}

// addrPrefixes are the addresses of h's namespace, each alone and with its subnet.
func addrPrefixes(h *netlink.Handle) ([]netip.Prefix, error) {
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing host addresses: %w", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		if bits, _ := a.Mask.Size(); bits > 0 && a.Mask != nil {
			out = append(out, netip.PrefixFrom(ip, bits).Masked())
		}
	}
	return out, nil
}

// loadContract loads the nftables contract into the sandbox's namespace through a lasting connection that
// Denied and the DNS filter reuse.
func (n *Net) loadContract(own []netip.Prefix) error {
	c, err := n.newNftConn()
	if err != nil {
		return fmt.Errorf("nftables in sandbox namespace: %w", err)
	}
	n.nft = c
	if n.cfg.noContract {
		return nil
	}
	a := n.link.addrs()
	extra := append(append([]netip.Prefix{}, own...), a.peer4.Masked(), a.peer6.Masked())
	deny := policy.AlwaysDeny()
	n.pieces = neverPieces(append(append([]netip.Prefix{}, deny...), outside(extra, deny)...))
	n.sets, err = loadContract(c, contractInput{
		dnsFilter: a.peer4.Addr(),
		deny:      ruleSpans(n.cfg.Net.Deny),
		except:    ruleSpans(n.cfg.Net.Except),
		never:     pieceSpans(n.pieces),
		allow:     ruleSpans(n.cfg.Net.Allow),
		ingress:   n.cfg.Net.Ingress,
	})
	return err
}

// startDNS starts the DNS filter on the peer's address and writes the sandbox's resolv.conf.
func (n *Net) startDNS() error {
	d, err := startDNSFilter(dnsFilterConfig{
		net:      n.cfg.Net,
		listen:   n.link.addrs().peer4.Addr(),
		client:   n.link.addrs().sbx4.Addr(),
		uplinkFd: n.uplinkFd,
		learn:    n.learn,
	})
	if err != nil {
		return err
	}
	n.dns = d
	return nil
}

// writeResolvConf points the sandbox's resolver at the DNS filter's address.
func (n *Net) writeResolvConf() error {
	path := filepath.Join(n.cfg.StateDir, "resolv.conf")
	conf := fmt.Sprintf("# written by sbx: the DNS filter of this run\nnameserver %s\noptions attempts:2 timeout:2\n", n.link.addrs().peer4.Addr())
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("writing resolv.conf: %w", err)
	}
	n.resolv = path
	return nil
}

// NetNSPath is the bind-mounted namespace file the container joins (the path of the OCI network
// namespace). It stays valid until Close.
func (n *Net) NetNSPath() string {
	if n.rootless || n.none != nil {
		return "" // the container makes it; Attach (AttachNone) joins it
	}
	return n.cfg.nsPath()
}

// ResolvConf is the host path of the resolv.conf to bind-mount at /etc/resolv.conf in the sandbox; "" in
// mode none.
func (n *Net) ResolvConf() string { return n.resolv }

// DNS lists every query the DNS filter saw, in order.
func (n *Net) DNS() []report.DNSQuery {
	if n.none != nil {
		return n.noneDNS()
	}
	if n.dns == nil {
		return []report.DNSQuery{}
	}
	return n.dns.queries()
}

// Notes says where the network's records are incomplete (a log past its bounds, a denied record that
// overflowed) and what was dropped that was not the command's doing. Call it before Close.
func (n *Net) Notes() []string {
	notes := []string{}
	if n.none != nil {
		notes = append(notes, n.noneNotes()...)
	}
	if n.dns != nil {
		notes = append(notes, n.dns.notes()...)
	}
	n.nftMu.Lock()
	notes = append(notes, n.deniedNotes...)
	n.nftMu.Unlock()
	return notes
}

// StartClose begins removing the link (the veth pair) in the background, so that the wait for the kernel overlaps
// the caller's other teardown (killing the container, unmounting); Close waits for it. The sandbox loses
// its network at once: call it only once the command's network records are read or no longer matter.
// Calling it again, or not at all, is fine.
func (n *Net) StartClose() {
	n.abandonAttach()
	if n.ready != nil {
		<-n.ready
	}
	if n.linkGone != nil || n.link == nil || n.uplinkFd < 0 {
		return
	}
	n.linkGone = make(chan error, 1)
	l := n.link
	go func() { n.linkGone <- l.remove() }()
}

// Close tears the network down: the veth pair, DNS filter, NAT reference, slot, the namespace file. The
// veth is deleted while the rest is torn down (deleting a link waits for an RCU grace period) and is
// gone when Close returns; left to the kernel's cleanup of the namespace, its uplink end would outlive
// sbx by up to a few hundred milliseconds. Close is safe to call on a partial setup.
func (n *Net) Close() error {
	n.abandonAttach()
	if n.ready != nil {
		<-n.ready // the background setup owns n until it is done
	}
	n.StartClose()
	var errs []error
	if n.dns != nil {
		errs = append(errs, n.dns.close())
		n.dns = nil
	}
	if n.nft != nil {
		n.nftMu.Lock()
		errs = append(errs, n.nft.CloseLasting())
		n.nft, n.sets = nil, nil
		n.nftMu.Unlock()
	}
	n.closeRootless()
	n.closeNone()
	if n.nat {
		errs = append(errs, natRelease(n.hostSide, n.cfg.name()))
		n.nat = false
	}
	if n.linkGone != nil {
		errs = append(errs, <-n.linkGone)
		n.linkGone, n.link = nil, nil
	}
	if n.slot.file != "" {
		errs = append(errs, n.slot.release()) // after the link's removal: its addresses must be gone
		n.slot = slot{}
	}
	errs = append(errs, n.closeFds()...)
	if n.resolv != "" {
		os.Remove(n.resolv)
		n.resolv = ""
	}
	return errors.Join(errs...)
}

// closeFds releases the namespaces.
func (n *Net) closeFds() []error {
	var errs []error
	if n.fd >= 0 {
		unix.Close(n.fd)
		n.fd = -1
	}
	if n.path != "" {
		errs = append(errs, removeNetNS(n.path))
		n.path = ""
	}
	if n.uplinkFd >= 0 {
		unix.Close(n.uplinkFd)
		n.uplinkFd = -1
	}
	return errs
}
