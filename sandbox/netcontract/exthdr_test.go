package netcontract

import (
	"errors"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/internal/fakenet"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"golang.org/x/sys/unix"
)

// srh is an IPv6 segment routing header (routing type 4) with two segments. Set as a sticky option, the
// kernel puts the connect() address in segment 0 (the final destination) and sends the packet to
// segment 1 (the first hop): an unprivileged process can choose both.
func srh(firstHop string) []byte {
	b := []byte{0, 4, 4, 1, 1, 0, 0, 0} // next header, length 4 (x8 bytes after the first 8), type 4, segments left 1, last entry 1
	b = append(b, make([]byte, 16)...)  // segment 0: filled in by the kernel
	return append(b, net.ParseIP(firstHop).To16()...)
}

// dialWithRoutingHeader connects to addr with a routing header whose first hop is firstHop.
func dialWithRoutingHeader(addr, firstHop string) attempt {
	d := net.Dialer{Timeout: 2 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RTHDR, string(srh(firstHop)))
		})
		if err != nil {
			return err
		}
		return serr
	}}
	start := time.Now()
	c, err := d.Dial("tcp", addr)
	if err == nil {
		c.Close()
	}
	return attempt{err: err, took: time.Since(start)}
}

// TestRoutingHeaderRefused: a connection to cloud metadata routed through an allowed first hop with a
// segment routing header is dropped and recorded (under the first hop's address, the allowed one); the
// allowed address itself stays reachable.
func TestRoutingHeaderRefused(t *testing.T) {
	fake := newFake(t)
	nw := contractNet(fake)
	nw.Allow = append(nw.Allow, policy.NetRule{CIDR: fakenet.Public6 + "/128", Proto: "tcp", Port: 443})
	n := setup(t, Config{Net: nw})
	in(t, n, func() {
		if a := tcpGet("[" + fakenet.Public6 + "]:443"); !a.reachable() {
			t.Fatalf("the allowed IPv6 host: %v, want reachable", a)
		}
		a := dialWithRoutingHeader("["+fakenet.Metadata6+"]:443", fakenet.Public6)
		if errors.Is(a.err, unix.EINVAL) { // from setsockopt: an older kernel without segment routing
			t.Skipf("the kernel refuses an unprivileged segment routing header: %v", a.err)
		}
		// The contract's reset or ICMP error names the first hop, which the socket does not expect: the
		// connect times out. What matters is that nothing passed and the attempt is recorded.
		if a.reachable() {
			t.Errorf("metadata through a routing header: %v, want dropped", a)
		}
	})
	denied, err := n.Denied()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(denied, func(d report.Denied) bool { return d.Address == fakenet.Public6 && d.Port == 443 }) {
		t.Errorf("Denied() = %+v, want the routed attempt recorded", denied)
	}
}

// lsrr is an IPv4 loose source route option through firstHop, padded to 8 bytes. The kernel sends the
// packet to firstHop and puts the connect() address at the end of the route.
func lsrr(firstHop string) []byte {
	return append([]byte{ipoptLSRR, 7, 4}, append(net.ParseIP(firstHop).To4(), 1)...) // 1: NOP padding
}

// TestSourceRouteRefused: an IPv4 connection to cloud metadata source-routed through an allowed first hop
// is dropped and recorded. (Setting the option needs CAP_NET_RAW, which the command lacks; the tests run
// as root, and the contract must not rely on that.)
func TestSourceRouteRefused(t *testing.T) {
	fake := newFake(t)
	n := setup(t, Config{Net: contractNet(fake)})
	in(t, n, func() {
		d := net.Dialer{Timeout: time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptString(int(fd), unix.IPPROTO_IP, unix.IP_OPTIONS, string(lsrr(fakenet.Public)))
			})
			return errors.Join(err, serr)
		}}
		c, err := d.Dial("tcp4", fakenet.Metadata4+":443")
		if err == nil {
			c.Close()
			t.Errorf("metadata through a source route: connected, want dropped")
		}
	})
	denied, err := n.Denied()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(denied, func(d report.Denied) bool { return d.Address == fakenet.Public && d.Port == 443 }) {
		t.Errorf("Denied() = %+v, want the source-routed attempt recorded under its first hop", denied)
	}
}

// TestUnknownNextHeaderRefused: an IPv6 packet whose next header the contract cannot read past (here an
// experimental protocol, 253) to an allowed address is refused and recorded with its protocol number.
func TestUnknownNextHeaderRefused(t *testing.T) {
	fake := newFake(t)
	nw := contractNet(fake)
	nw.Allow = append(nw.Allow, policy.NetRule{CIDR: fakenet.Public6 + "/128", Proto: "tcp", Port: 443})
	n := setup(t, Config{Net: nw})
	in(t, n, func() {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW, 253)
		if err != nil {
			t.Fatalf("raw socket: %v", err)
		}
		defer unix.Close(fd)
		to := &unix.SockaddrInet6{}
		copy(to.Addr[:], net.ParseIP(fakenet.Public6))
		if err := unix.Sendto(fd, []byte("past the contract?"), 0, to); err == nil {
			t.Errorf("sending protocol 253 to an allowed address: accepted, want refused")
		}
	})
	denied, err := n.Denied()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(denied, func(d report.Denied) bool { return d.Address == fakenet.Public6 && d.Proto == "253" }) {
		t.Errorf("Denied() = %+v, want protocol 253 to %s recorded", denied, fakenet.Public6)
	}
}
