package netcontract

import (
	"fmt"
	"syscall"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"
)

// nlProxy carries a nftables connection over a netlink socket sbx did not make itself (one made inside a
// rootless sandbox's namespace): google/nftables dials its own sockets and takes no existing one, but it
// accepts a dial function (WithTestDial), whose socket hands each request to f and asks f again for
// every receive. f sends the requests on fd and returns what the kernel answers, with the port id the
// library expects. Errors of the kernel (NLMSG_ERROR) pass through as messages, as on a dialled socket.
func nlProxy(fd int) nltest.Func {
	return func(req []netlink.Message) ([]netlink.Message, error) {
		if req != nil {
			return nil, nlSend(fd, req)
		}
		return nlReceive(fd)
	}
}

// nlSend writes the messages as one datagram to the kernel.
func nlSend(fd int, req []netlink.Message) error {
	var b []byte
	for _, m := range req {
		mb, err := m.MarshalBinary()
		if err != nil {
			return err
		}
		b = append(b, mb...)
	}
	if err := retryEINTR(func() error { return unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}) }); err != nil {
		return fmt.Errorf("sending to nftables: %w", err)
	}
	return nil
}

// nlReceive reads one datagram (its size peeked first: a set's dump can be large) and splits it into
// messages.
func nlReceive(fd int) ([]netlink.Message, error) {
	var n int
	err := retryEINTR(func() (err error) { n, _, err = unix.Recvfrom(fd, nil, unix.MSG_PEEK|unix.MSG_TRUNC); return err })
	if err != nil {
		return nil, fmt.Errorf("receiving from nftables: %w", err)
	}
	buf := make([]byte, n)
	if err = retryEINTR(func() (err error) { n, _, err = unix.Recvfrom(fd, buf, 0); return err }); err != nil {
		return nil, fmt.Errorf("receiving from nftables: %w", err)
	}
	raw, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return nil, fmt.Errorf("parsing nftables' answer: %w", err)
	}
	out := make([]netlink.Message, 0, len(raw))
	for _, r := range raw {
		h := netlink.Header{Length: r.Header.Len, Type: netlink.HeaderType(r.Header.Type),
			Flags: netlink.HeaderFlags(r.Header.Flags), Sequence: r.Header.Seq, PID: nltest.PID}
		out = append(out, netlink.Message{Header: h, Data: r.Data})
	}
	return out, nil
}
