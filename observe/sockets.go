package observe

import (
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"syscall"

	"github.com/sbx-dev/sbx/report"
	"golang.org/x/sys/unix"
)

// This file asks sock_diag (NETLINK_SOCK_DIAG, also known as NETLINK_INET_DIAG) for the sockets of one
// network namespace. It speaks the protocol itself rather than through vishvananda/netlink v1.3.1: that
// version decodes unix_diag_msg with family and type swapped (so the dump stops at the first datagram
// socket) and reads 4 bytes past the end of UNIX_DIAG_NAME; one netlink socket for all dumps means one
// namespace switch; and the TCP dump, the one that costs, is done once for both families.
//
// MPTCP sockets (Go >= 1.24 may listen with MPTCP) are not dumped: asking for them makes the kernel load
// the mptcp_diag module, a change to the host. Their TCP subflows still show, with no owner.

// Constants of linux/sock_diag.h, inet_diag.h and unix_diag.h that x/sys/unix does not carry.
const (
	sizeofInetDiagReqV2 = 56
	sizeofInetDiagReqV1 = 60
	tcpDiagGetSock      = 18 // TCPDIAG_GETSOCK: the old request type, which dumps both families at once
	tcpListen           = 10 // TCP_LISTEN
	sizeofInetDiagMsg   = 72
	sizeofUnixDiagReq   = 24
	sizeofUnixDiagMsg   = 16
	udiagShowName       = 0x1
	unixDiagName        = 0
)

// tcpStates names the kernel's TCP states (include/net/tcp_states.h); unix sockets reuse them.
var tcpStates = [...]string{1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1",
	5: "FIN_WAIT2", 6: "TIME_WAIT", 7: "UNCONN", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
	11: "CLOSING", 12: "NEW_SYN_RECV"}

func stateName(s uint8) string {
	if int(s) < len(tcpStates) && tcpStates[s] != "" {
		return tcpStates[s]
	}
	return "STATE" + strconv.Itoa(int(s))
}

// readSockets returns every TCP, UDP and unix socket of the network namespace at nsPath. Sockets that
// no fd holds (in an accept queue, in TIME_WAIT) have inode 0.
func readSockets(nsPath string) ([]report.Socket, error) {
	d, err := openSockDump(nsPath)
	if err != nil {
		return nil, err
	}
	defer d.close()
	if err := d.waiting(); err != nil {
		return nil, err
	}
	if err := d.connected(); err != nil {
		return nil, err
	}
	return d.socks, nil
}

// sockDump reads the sockets of one network namespace in two steps. The sockets that wait for peers are
// cheap to dump; the other TCP sockets need a walk of the kernel's established-socket hash, which all
// namespaces share (unless net.ipv4.tcp_child_ehash_entries gave this one its own) and which costs about
// 0.2 ms however few sockets the namespace has. Snapshot asks for it only when some fd holds a socket the
// first step did not find.
type sockDump struct {
	fd    int
	socks []report.Socket
}

func openSockDump(nsPath string) (*sockDump, error) {
	fd, err := diagSocketIn(nsPath)
	if err != nil {
		return nil, err
	}
	return &sockDump{fd: fd}, nil
}

func (d *sockDump) add(s report.Socket) { d.socks = append(d.socks, s) }

func (d *sockDump) close() { unix.Close(d.fd) }

// waiting dumps listening TCP sockets and every UDP and unix socket.
func (d *sockDump) waiting() error {
	if err := dumpTCP(d.fd, 1<<tcpListen, d.add); err != nil {
		return fmt.Errorf("read tcp listeners: %w", err)
	}
	for _, q := range []struct {
		family uint8
		name   string
	}{{unix.AF_INET, "udp"}, {unix.AF_INET6, "udp6"}} {
		if err := dumpUDP(d.fd, q.family, q.name, d.add); err != nil {
			return fmt.Errorf("read %s sockets: %w", q.name, err)
		}
	}
	if err := dumpUnix(d.fd, d.add); err != nil {
		return fmt.Errorf("read unix sockets: %w", err)
	}
	return nil
}

// connected dumps the TCP sockets in every state but LISTEN.
func (d *sockDump) connected() error {
	if err := dumpTCP(d.fd, ^uint32(1<<tcpListen), d.add); err != nil {
		return fmt.Errorf("read tcp sockets: %w", err)
	}
	return nil
}

// diagSocketIn opens a sock_diag netlink socket inside the network namespace at nsPath. A socket belongs
// to the namespace of the thread that creates it, so the switch happens on a goroutine locked to its
// thread; if switching back fails the goroutine exits still locked and the runtime discards the thread.
func diagSocketIn(nsPath string) (int, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, restored, err := openInNetns(nsPath)
		if restored {
			runtime.UnlockOSThread()
		}
		ch <- result{fd, err}
	}()
	r := <-ch
	return r.fd, r.err
}

// openInNetns switches the calling (locked) thread into nsPath, opens the socket and switches back.
// restored is false when the thread may be left in the wrong namespace.
func openInNetns(nsPath string) (fd int, restored bool, err error) {
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, true, fmt.Errorf("open own network namespace: %w", err)
	}
	defer unix.Close(orig)
	target, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, true, fmt.Errorf("open network namespace: %w", err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return -1, true, fmt.Errorf("enter network namespace %s: %w", nsPath, err)
	}
	fd, sockErr := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		if sockErr == nil {
			unix.Close(fd)
		}
		return -1, false, fmt.Errorf("leave network namespace %s: %w", nsPath, err)
	}
	if sockErr != nil {
		return -1, true, fmt.Errorf("open sock_diag socket: %w", sockErr)
	}
	return fd, true, nil
}

// dumpTCP dumps the TCP sockets of both families in the given states (a bit mask of 1<<state). The old
// TCPDIAG_GETSOCK request asks for both families in one walk of the kernel's hashes, where
// SOCK_DIAG_BY_FAMILY needs one walk per family.
func dumpTCP(fd int, states uint32, add func(report.Socket)) error {
	req := make([]byte, sizeofInetDiagReqV1)
	binary.NativeEndian.PutUint32(req[52:], states)
	return dump(fd, tcpDiagGetSock, req, func(msg []byte) {
		name := "tcp"
		if len(msg) > 0 && msg[0] == unix.AF_INET6 {
			name = "tcp6"
		}
		if s, ok := parseInetDiag(msg, name); ok {
			add(s)
		}
	})
}

// dumpUDP dumps the UDP sockets of one family; the UDP hash tables are small, a dump costs ~10 µs.
func dumpUDP(fd int, family uint8, name string, add func(report.Socket)) error {
	req := make([]byte, sizeofInetDiagReqV2)
	req[0] = family
	req[1] = unix.IPPROTO_UDP
	binary.NativeEndian.PutUint32(req[4:], ^uint32(0)) // all states
	return dump(fd, unix.SOCK_DIAG_BY_FAMILY, req, func(msg []byte) {
		if s, ok := parseInetDiag(msg, name); ok {
			add(s)
		}
	})
}

// parseInetDiag decodes an inet_diag_msg. Ports and addresses are in network byte order.
func parseInetDiag(b []byte, proto string) (report.Socket, bool) {
	if len(b) < sizeofInetDiagMsg {
		return report.Socket{}, false
	}
	family, state := b[0], b[1]
	sport := int(binary.BigEndian.Uint16(b[4:]))
	dport := int(binary.BigEndian.Uint16(b[6:]))
	alen := net.IPv4len
	if family == unix.AF_INET6 {
		alen = net.IPv6len
	}
	src := net.IP(append([]byte(nil), b[8:8+alen]...))
	dst := net.IP(append([]byte(nil), b[24:24+alen]...))
	s := report.Socket{
		Proto:   proto,
		Address: src.String(),
		Port:    sport,
		State:   stateName(state),
		Inode:   binary.NativeEndian.Uint32(b[68:]),
	}
	if dport != 0 {
		s.Remote = net.JoinHostPort(dst.String(), strconv.Itoa(dport))
	}
	return s, true
}

// dumpUnix dumps the unix sockets with their names.
func dumpUnix(fd int, add func(report.Socket)) error {
	req := make([]byte, sizeofUnixDiagReq)
	req[0] = unix.AF_UNIX
	binary.NativeEndian.PutUint32(req[4:], ^uint32(0)) // all states
	binary.NativeEndian.PutUint32(req[12:], udiagShowName)
	return dump(fd, unix.SOCK_DIAG_BY_FAMILY, req, func(msg []byte) {
		if s, ok := parseUnixDiag(msg); ok {
			add(s)
		}
	})
}

// parseUnixDiag decodes a unix_diag_msg and its UNIX_DIAG_NAME attribute. An abstract name starts with a
// NUL byte and is shown as "@name"; a path name ends with a NUL.
func parseUnixDiag(b []byte) (report.Socket, bool) {
	if len(b) < sizeofUnixDiagMsg || b[0] != unix.AF_UNIX {
		return report.Socket{}, false
	}
	s := report.Socket{Proto: "unix", Type: unixType(b[1]), State: stateName(b[2]),
		Inode: binary.NativeEndian.Uint32(b[4:])}
	for attrs := b[sizeofUnixDiagMsg:]; len(attrs) >= 4; {
		l := int(binary.NativeEndian.Uint16(attrs))
		typ := binary.NativeEndian.Uint16(attrs[2:])
		if l < 4 || l > len(attrs) {
			break
		}
		if typ == unixDiagName {
			s.Address = unixName(attrs[4:l])
		}
		attrs = attrs[min(len(attrs), (l+3)&^3):]
	}
	return s, true
}

func unixName(b []byte) string {
	if len(b) > 0 && b[0] == 0 {
		return "@" + string(b[1:])
	}
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func unixType(t uint8) string {
	switch t {
	case unix.SOCK_STREAM:
		return "stream"
	case unix.SOCK_DGRAM:
		return "dgram"
	case unix.SOCK_SEQPACKET:
		return "seqpacket"
	}
	return "type" + strconv.Itoa(int(t))
}

// dump sends one dump request of the given type and hands each answer's payload to fn.
func dump(fd int, typ uint16, payload []byte, fn func([]byte)) error {
	msg := make([]byte, unix.SizeofNlMsghdr+len(payload))
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	copy(msg[unix.SizeofNlMsghdr:], payload)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("send sock_diag request: %w", err)
	}
	buf := make([]byte, 32<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("receive sock_diag answer: %w", err)
		}
		done, err := parseDump(buf[:n], fn)
		if done || err != nil {
			return err
		}
	}
}

// parseDump handles one datagram of a dump; done is true at NLMSG_DONE or NLMSG_ERROR.
func parseDump(b []byte, fn func([]byte)) (done bool, err error) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return true, fmt.Errorf("parse sock_diag answer: %w", err)
	}
	for _, m := range msgs {
		switch m.Header.Type {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			if len(m.Data) >= 4 {
				if errno := -int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
					return true, syscall.Errno(errno)
				}
			}
			return true, nil
		}
		fn(m.Data)
	}
	return false, nil
}
