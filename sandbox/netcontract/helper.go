package netcontract

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/selfexe"
)

// helper is the process that makes the sockets of a rootless sandbox inside its namespaces (see
// rootless.go), as sbx sees it.
type helper struct {
	cmd           *exec.Cmd
	conn          int // sbx's end of the socket pair
	nft, udp, tcp int // the received sockets; -1 once handed on
}

// helperFD is the helper's end of the socket pair.
const helperFD = 3

// startHelper runs the helper in the init's user and network namespaces and receives its sockets.
// nsenter (util-linux) enters both before anything else runs in the new process: a Go program cannot
// enter a user namespace once its runtime has started threads.
func startHelper(initPid int) (*helper, error) {
	self, err := selfexe.Path()
	if err != nil {
		return nil, fmt.Errorf("finding sbx's binary: %w", err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket pair for the network helper: %w", err)
	}
	h := &helper{conn: sp[0], nft: -1, udp: -1, tcp: -1}
	tv := unix.NsecToTimeval(helperTimeout.Nanoseconds())
	unix.SetsockoptTimeval(h.conn, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	theirs := os.NewFile(uintptr(sp[1]), "helper")
	h.cmd = exec.Command("nsenter", "--preserve-credentials", "-U", "-n", "-t", strconv.Itoa(initPid), "--", self, HelperRole)
	h.cmd.ExtraFiles = []*os.File{theirs}
	h.cmd.Stderr = &boundedBuffer{max: maxPastaOut}
	h.cmd.SysProcAttr = &unix.SysProcAttr{Pdeathsig: unix.SIGKILL}
	err = h.cmd.Start()
	theirs.Close()
	if err != nil {
		unix.Close(h.conn)
		return nil, fmt.Errorf("starting the network helper: %w", err)
	}
	if err := h.receive(); err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

// receive reads the three sockets the helper sends first.
func (h *helper) receive() error {
	oob := make([]byte, unix.CmsgSpace(3*4))
	var oobn int
	err := retryEINTR(func() (err error) {
		_, oobn, _, _, err = unix.Recvmsg(h.conn, make([]byte, 1), oob, 0)
		return err
	})
	if err == nil && oobn == 0 {
		err = errors.New("no sockets in the message")
	}
	if err != nil {
		return fmt.Errorf("receiving the sandbox's sockets from the network helper: %w%s", err, h.stderr())
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return fmt.Errorf("the network helper's message: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 3 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return fmt.Errorf("the network helper sent %d sockets, want 3: %v", len(fds), err)
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
	}
	h.nft, h.udp, h.tcp = fds[0], fds[1], fds[2]
	return nil
}

// stderr is what the helper said, for an error message.
func (h *helper) stderr() string {
	if b, ok := h.cmd.Stderr.(*boundedBuffer); ok && b.String() != "" {
		return ": " + b.String()
	}
	return ""
}

// waitUplink waits for the helper's word that pasta's interface is up in the sandbox, or for pasta's
// end, whichever comes first.
func (h *helper) waitUplink(pastaDone <-chan struct{}) error {
	word := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		var n int
		err := retryEINTR(func() (err error) { n, err = unix.Read(h.conn, buf); return err })
		if err == nil && (n < 2 || string(buf[:2]) != "ok") {
			err = fmt.Errorf("the network helper said %q", buf[:n])
		}
		word <- err
	}()
	select {
	case err := <-word:
		if err != nil {
			return fmt.Errorf("the sandbox's uplink did not come up: %w%s", err, h.stderr())
		}
		return nil
	case <-pastaDone:
		return errors.New("pasta ended before the sandbox's uplink came up")
	}
}

// retryEINTR calls f again while it is interrupted by a signal (the Go runtime's own, among others).
func retryEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// dnsConns are the DNS filter's sockets.
func (h *helper) dnsConns() (net.PacketConn, net.Listener, error) {
	uf, tf := os.NewFile(uintptr(h.udp), "dns-udp"), os.NewFile(uintptr(h.tcp), "dns-tcp")
	h.udp, h.tcp = -1, -1
	defer uf.Close()
	defer tf.Close()
	pc, err := net.FilePacketConn(uf)
	if err != nil {
		return nil, nil, fmt.Errorf("the DNS filter's UDP socket: %w", err)
	}
	ln, err := net.FileListener(tf)
	if err != nil {
		pc.Close()
		return nil, nil, fmt.Errorf("the DNS filter's TCP socket: %w", err)
	}
	return pc, ln, nil
}

// close ends the helper and releases what was not handed on.
func (h *helper) close() {
	h.cmd.Process.Kill() // gone already when all went well; else its end of the pair closes
	h.cmd.Wait()
	for _, fd := range []int{h.nft, h.udp, h.tcp, h.conn} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// HelperMain is the helper, inside the sandbox's user and network namespaces with the capabilities of
// that user namespace (and no other): it brings lo up, makes the DNS filter's sockets and a nftables
// socket, sends them on fd 3, waits until pasta's interface is up, says "ok" and exits. Every thread of
// this process is in the sandbox's namespace: nsenter put the process there before it started.
func HelperMain(args []string) int {
	conn := helperFD
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "network helper: %v\n", err)
		return 1
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fail(err)
	}
	defer h.Close()
	if err := loUp(h); err != nil {
		return fail(err)
	}
	fds, err := helperSockets()
	if err != nil {
		return fail(err)
	}
	if err := unix.Sendmsg(conn, []byte{0}, unix.UnixRights(fds...), nil, 0); err != nil {
		return fail(fmt.Errorf("sending the sockets: %w", err))
	}
	tap, err := waitTap(h, helperTimeout)
	if err != nil {
		return fail(err)
	}
	if err := route6(h, tap); err != nil {
		return fail(err)
	}
	if _, err := unix.Write(conn, []byte("ok")); err != nil {
		return fail(err)
	}
	return 0
}

// helperSockets makes the nftables socket and the DNS filter's UDP and TCP sockets on dnsAddr port 53.
func helperSockets() ([]int, error) {
	nft, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("nftables socket: %w", err)
	}
	if err := unix.Bind(nft, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("binding the nftables socket: %w", err)
	}
	addr := net.JoinHostPort(dnsAddr.String(), "53")
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		return nil, err
	}
	uf, err := pc.(*net.UDPConn).File()
	if err != nil {
		return nil, err
	}
	tf, err := ln.(*net.TCPListener).File()
	if err != nil {
		return nil, err
	}
	return []int{nft, int(uf.Fd()), int(tf.Fd())}, nil
}

// waitTap waits until a link other than lo is up with a default route: pasta has configured its tap.
func waitTap(h *netlink.Handle, limit time.Duration) (netlink.Link, error) {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		links, err := h.LinkList()
		if err != nil {
			return nil, fmt.Errorf("listing links: %w", err)
		}
		for _, l := range links {
			if l.Attrs().Name == "lo" || l.Attrs().Flags&net.FlagUp == 0 {
				continue
			}
			routes, err := h.RouteList(l, netlink.FAMILY_V4)
			if err != nil {
				return nil, fmt.Errorf("listing routes: %w", err)
			}
			for _, r := range routes {
				if r.Dst == nil || r.Dst.IP.IsUnspecified() && r.Gw != nil {
					return l, nil // the default route: pasta is done
				}
			}
		}
	}
	return nil, errors.New("no interface of pasta's came up")
}

// route6 gives IPv6 a default route through the tap when pasta gave none (the host has no IPv6 uplink):
// without a route a connect fails before the contract sees the packet, which then neither refuses nor
// records it. With it every IPv6 packet meets the contract; what the contract lets through finds no
// IPv6 on pasta's side and goes nowhere.
func route6(h *netlink.Handle, tap netlink.Link) error {
	routes, err := h.RouteList(nil, netlink.FAMILY_V6)
	if err != nil {
		return fmt.Errorf("listing IPv6 routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() {
			return nil
		}
	}
	_, all, _ := net.ParseCIDR("::/0")
	if err := h.RouteAdd(&netlink.Route{LinkIndex: tap.Attrs().Index, Dst: all, Priority: 4096}); err != nil {
		return fmt.Errorf("adding an IPv6 default route: %w", err)
	}
	return nil
}
