// Package fakenet builds a fake upstream network inside a network namespace of its own, for tests of the
// network contract: a metadata server, LAN hosts, public hosts, a DNS server and UDP echo servers, all on
// that namespace's lo. A sandbox whose veth peer is placed in this namespace (policy.Network.UplinkNetNS
// = Net.Name) sees these hosts as its internet; nothing a test sends through it can leave the machine.
//
// It is test infrastructure: it needs root, and every Net must be closed.
package fakenet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/miekg/dns"
	"github.com/sbx-dev/sbx/internal/netnsdir"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Addresses of the fake hosts.
const (
	Metadata4   = "169.254.169.254" // cloud metadata, HTTP on 80
	Metadata6   = "fd00:ec2::254"   // cloud metadata over IPv6, HTTP on 80
	MetadataAli = "100.100.100.200" // Alibaba's metadata, HTTP on 80
	LAN         = "10.0.0.5"        // a LAN host: TCP 22, 5432, 6379; UDP echo 5353
	Gateway10   = "10.0.0.1"        // typical gateways: TCP 22, 5432, 6379
	Gateway172  = "172.16.0.1"
	Gateway192  = "192.168.1.1"
	Public      = "203.0.113.10"     // fake public host: TCP 443, UDP echo 7
	Public2     = "198.51.100.20"    // another fake public host: TCP 443
	DNS         = "198.51.100.53"    // fake DNS server, port 53
	WireServer  = "168.63.129.16"    // Azure's WireServer, HTTP on 80
	NAT64       = "64:ff9b::a00:5"   // 10.0.0.5 through the NAT64 well-known prefix
	NAT64Local  = "64:ff9b:1::a00:5" // 10.0.0.5 through a local-use NAT64 prefix
	SixToFour   = "2002:a00:5::1"    // a 6to4 address embedding 10.0.0.5
	Public6     = "2001:db8:5b::10"  // fake public IPv6 host: TCP 443
)

// TCPPorts are served by every fake host (an HTTP server that names the address it was reached on).
var TCPPorts = []int{22, 80, 443, 5432, 6379}

// UDPPorts are UDP echo ports on every fake IPv4 host.
var UDPPorts = []int{7, 161, 5353}

// Records are the fake DNS server's A records; TTL is theirs.
var Records = map[string]string{
	"allowed.test.":             Public,
	"other.test.":               Public2,
	"metadata.google.internal.": Metadata4,
}

// CNAMEs are aliases the fake DNS server answers with a CNAME record, followed by the target's A record
// when it has one.
var CNAMEs = map[string]string{
	"chain.allowed.test.": "target.allowed.test.",      // a chain that stays inside *.allowed.test
	"alias.allowed.test.": "metadata.google.internal.", // a chain out to a name nobody allows
}

// Smuggle is a name whose answer carries, besides its own A record (Public), an A record of an
// unrelated owner (Unrelated, with the address Public2): a filter must learn only the first.
const (
	Smuggle   = "smuggle.allowed.test."
	Unrelated = "unrelated.test."
)

// TTL of the fake DNS answers.
const TTL = 5

func init() {
	Records["target.allowed.test."] = Public2
	Records[Smuggle] = Public
}

// hosts are the addresses put on the namespace's lo.
var hosts = []string{Metadata4, Metadata6, MetadataAli, LAN, Gateway10, Gateway172, Gateway192, Public, Public2, DNS,
	WireServer, NAT64, NAT64Local, SixToFour, Public6}

var counter atomic.Int32

// Net is one fake upstream namespace with its servers.
type Net struct {
	Name string // namespace name under /run/netns: pass as UplinkNetNS
	Path string // namespace file

	closers []io.Closer
	mu      sync.Mutex
	queries []string
	msgs    []*dns.Msg
	conns   []string
}

// New creates the namespace "sbx-test-up-<pid>-<n>" and starts the servers.
func New() (*Net, error) {
	n := &Net{Name: fmt.Sprintf("sbx-test-up-%d-%d", os.Getpid(), counter.Add(1))}
	n.Path = filepath.Join("/run/netns", n.Name)
	if err := netnsdir.Prepare("/run/sbx/netns.lock"); err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine, in the fake namespace
		errc <- n.build()
	}()
	if err := <-errc; err != nil {
		n.Close()
		return nil, fmt.Errorf("fakenet: %w", err)
	}
	return n, nil
}

// ForTest is New for a test: it fails the test on error and closes the Net after it, failing the test
// if that leaves something behind.
func ForTest(tb testing.TB) *Net {
	tb.Helper()
	n, err := New()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := n.Close(); err != nil {
			tb.Errorf("closing fakenet: %v", err)
		}
	})
	return n
}

// build runs on a locked thread: it moves it into a new namespace, pins it, adds the addresses and opens
// every socket there.
func (n *Net) build() error {
	f, err := os.OpenFile(n.Path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return err
	}
	if err := unix.Mount("/proc/thread-self/ns/net", n.Path, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if err := addHosts(); err != nil {
		return err
	}
	return n.startServers()
}

// addHosts brings lo up with every fake address on it.
func addHosts() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	for _, h := range hosts {
		a := netip.MustParseAddr(h)
		ipn := &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
		if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: ipn}); err != nil {
			return fmt.Errorf("adding %s: %w", h, err)
		}
	}
	return netlink.LinkSetUp(lo)
}

// startServers opens the sockets on the calling (namespaced) thread and serves them on goroutines.
func (n *Net) startServers() error {
	for _, p := range TCPPorts {
		if err := n.serveHTTP(net.JoinHostPort("::", strconv.Itoa(p))); err != nil {
			return err
		}
	}
	for _, h := range hosts {
		if netip.MustParseAddr(h).Is6() {
			continue
		}
		for _, p := range UDPPorts {
			// One socket per address: a wildcard socket may answer from another address of lo, which a
			// connected client discards.
			if err := n.serveEcho(net.JoinHostPort(h, strconv.Itoa(p))); err != nil {
				return err
			}
		}
	}
	return n.serveDNS(net.JoinHostPort(DNS, "53"))
}

// serveHTTP answers every request with the address and port it was reached on, and records connections.
func (n *Net) serveHTTP(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "fakenet %s\n", r.Context().Value(http.LocalAddrContextKey))
		}),
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateNew {
				n.mu.Lock()
				n.conns = append(n.conns, c.LocalAddr().String())
				n.mu.Unlock()
			}
		},
		ReadHeaderTimeout: 5 * time.Second,
	}
	go srv.Serve(ln)
	n.closers = append(n.closers, srv)
	return nil
}

// serveEcho sends every datagram back.
func (n *Net) serveEcho(addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:k], from)
		}
	}()
	n.closers = append(n.closers, pc)
	return nil
}

// serveDNS answers the names in Records and NXDOMAIN for the rest, recording every name asked.
func (n *Net) serveDNS(addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return err
	}
	h := dns.HandlerFunc(n.answer)
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go s.ActivateAndServe()
		<-started
		n.closers = append(n.closers, shutdowner{s})
	}
	return nil
}

// answer is the fake DNS server's handler.
func (n *Net) answer(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg).SetReply(req)
	n.mu.Lock()
	n.msgs = append(n.msgs, req.Copy())
	n.mu.Unlock()
	for _, q := range req.Question {
		n.mu.Lock()
		n.queries = append(n.queries, q.Name)
		n.mu.Unlock()
		name := dns.CanonicalName(q.Name)
		if target, ok := CNAMEs[name]; ok {
			m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: TTL}, Target: target})
			name = target
		}
		ip, ok := Records[name]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, aRecord(name, ip))
			if name == Smuggle {
				m.Answer = append(m.Answer, aRecord(Unrelated, Public2))
			}
		}
	}
	w.WriteMsg(m)
}

// aRecord is an A record of the fake server.
func aRecord(name, ip string) *dns.A {
	return &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: TTL}, A: net.ParseIP(ip)}
}

// Messages lists every message the fake DNS server received, in order.
func (n *Net) Messages() []*dns.Msg {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*dns.Msg{}, n.msgs...)
}

// shutdowner adapts a dns.Server to io.Closer.
type shutdowner struct{ s *dns.Server }

func (s shutdowner) Close() error { return s.s.Shutdown() }

// Queries lists the names the fake DNS server was asked, fully qualified, in order.
func (n *Net) Queries() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string{}, n.queries...)
}

// Connections lists the local address ("ip:port") of every TCP connection the fake hosts accepted.
func (n *Net) Connections() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string{}, n.conns...)
}

// Refuse makes the given IPv4 hosts act as if every port were closed: TCP answered with a reset, UDP with
// ICMP port unreachable (an nftables table in the fake namespace). Their servers stay up but unreachable.
func (n *Net) Refuse(addrs ...string) error {
	fd, err := unix.Open(n.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	c, err := nftables.New(nftables.WithNetNSFd(fd))
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "fakenet"})
	ch := c.AddChain(&nftables.Chain{Name: "closed", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter})
	for _, a := range addrs {
		daddr := []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: netip.MustParseAddr(a).AsSlice()},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		}
		tcp := append(append([]expr.Any{}, daddr...), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
		udp := append(append([]expr.Any{}, daddr...), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
			&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 3}) // port unreachable
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: tcp})
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: udp})
	}
	return c.Flush()
}

// Links lists the links in the namespace other than lo: after a sandbox ends there should be none.
func (n *Net) Links() ([]string, error) {
	var names []string
	err := RunIn(n.Path, func() error {
		links, err := netlink.LinkList()
		for _, l := range links {
			if l.Attrs().Name != "lo" {
				names = append(names, l.Attrs().Name)
			}
		}
		return err
	})
	return names, err
}

// Close stops the servers and removes the namespace.
func (n *Net) Close() error {
	var errs []error
	for _, c := range n.closers {
		errs = append(errs, c.Close())
	}
	n.closers = nil
	if err := unix.Unmount(n.Path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, err)
	}
	if err := os.Remove(n.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RunIn runs f on a fresh OS thread inside the network namespace at path (sockets f creates belong to
// that namespace). The thread is never unlocked, so it is discarded afterwards. Test binaries should
// lock the main thread to the main goroutine (runtime.LockOSThread in an init function): a locked
// goroutine that ends on the main thread cannot discard it and leaves it, and the namespace, pinned.
func RunIn(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("entering %s: %w", path, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}
