package netcontract

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/sbx-dev/sbx/report"
	"golang.org/x/sys/unix"
)

// The record of a sandbox without network (mode none). Its namespace has only lo, so a connect() to any
// other address fails with ENETUNREACH at routing, before a netfilter hook sees a packet, and the attempt
// would be recorded nowhere. So the namespace gets a default route through lo (IPv4 and IPv6): every such
// packet then passes the output hook, where a small table records it in the same denied sets as the
// contract (address . l4proto . port, with packet counters) and refuses it at once (a TCP reset, ICMP administratively prohibited). Nothing leaves: lo is the only
// interface, and nothing but loopback addresses is accepted. DNS questions (UDP port 53 to any address
// but loopback) are copied to an NFLOG group before the refusal; sbx reads their names at the end from
// the socket's queue, whose size bounds what sbx keeps (the socket's drop counter says what it lost).
//
// The sockets come from inside: the supervisor of a direct start, root of the sandbox's user namespace
// and in its network namespace before the command exists, makes a rtnetlink and two nfnetlink sockets
// there and sends them to sbx on the channel of SetupNone (supervisor.Setup.NetRecord). The kernel
// checks the opener's rights on them, so they work in sbx's hands, with or without root. When
// libcontainer's init started the sandbox, sbx with root makes them itself in the init's namespace;
// without root that sandbox has no record, and Notes says so.

// NFLOG's netlink protocol (linux/netfilter/nfnetlink_log.h), which x/sys/unix does not name.
const (
	nfulnlMsgPacket  = 0
	nfulnlMsgConfig  = 1
	nfulaPayload     = 9
	nfulaCfgCmd      = 1
	nfulaCfgMode     = 2
	nfulnlCfgCmdBind = 1
	nfulnlCopyPacket = 2
	nlaTypeMask      = ^uint16(1<<15 | 1<<14)
)

// nflogGroup is the NFLOG group of the DNS copies (per network namespace).
const nflogGroup = 1

// nflogSnap is how much of each DNS packet is copied: the IP and UDP headers and a question (a name is
// at most 255 bytes).
const nflogSnap = 40 + 8 + 12 + 256 + 4

// nflogBuffer is the receive buffer of the NFLOG socket: what a run's DNS record can hold before the
// kernel drops further copies (counted). About 700 questions at the kernel's accounting per message.
const nflogBuffer = 1 << 20

// noneRecord is a mode-none Net's own state.
type noneRecord struct {
	parent, child *os.File // the channel the supervisor sends its sockets on
	nflog         int      // the NFLOG socket; -1 = none
	missing       string   // why there is no record, for Notes
	once          sync.Once
	log           dnsLog
	drops         int // copies the kernel could not queue (the socket's drop counter)
}

// SetupNone prepares the record of a sandbox in mode none: nothing is built yet, the supervisor makes the
// namespace. SupervisorChannel is the end to pass to the supervisor; AttachNone does the rest once the
// sandbox's init exists. Ready returns after AttachNone's work, Close is safe at any point.
func SetupNone(cfg Config) (*Net, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("making the network record's channel: %w", err)
	}
	rec := &noneRecord{parent: os.NewFile(uintptr(fds[0]), "netrecord"), child: os.NewFile(uintptr(fds[1]), "netrecord"), nflog: -1}
	n := &Net{cfg: cfg, fd: -1, uplinkFd: -1, nftSock: -1, ready: make(chan struct{}), none: rec}
	if cfg.StateDir != "" {
		if err := n.writeNoneResolvConf(); err != nil {
			n.closeNone()
			return nil, err
		}
	}
	return n, nil
}

// NoneResolver is the name server of a mode-none sandbox's /etc/resolv.conf: an address of RFC 5737's
// documentation block, which nothing answers. The host's resolv.conf says nothing the sandbox can use
// and would send the questions where the record may not see them: to a stub on loopback
// (systemd-resolved's 127.0.0.53), to 127.0.0.1 when the host has none (glibc's default), with the
// host's search domains appended. Questions sent here are copied to the record and refused at once; they
// are judged by their names (DNS), not as attempts to reach this address.
var NoneResolver = netip.MustParseAddr("192.0.2.53")

// writeNoneResolvConf writes the resolv.conf of a mode-none sandbox into its state dir.
func (n *Net) writeNoneResolvConf() error {
	path := filepath.Join(n.cfg.StateDir, "resolv.conf")
	conf := fmt.Sprintf("# written by sbx: no network (mode none); questions sent here are refused and recorded\nnameserver %s\noptions attempts:1 timeout:1\n", NoneResolver)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("writing resolv.conf: %w", err)
	}
	n.resolv = path
	return nil
}

// SupervisorChannel is the socket the sandbox's supervisor sends its netlink sockets on (to pass to a
// direct start, see supervisor.Setup.NetRecord); nil when n is no mode-none record.
func (n *Net) SupervisorChannel() *os.File {
	if n == nil || n.none == nil {
		return nil
	}
	return n.none.child
}

// Mode is the network mode that applies, as the report names it.
func (n *Net) Mode() string {
	if n.none != nil {
		return report.NetworkNone
	}
	return report.NetworkContract
}

// AttachNone builds the record of a mode-none sandbox whose init (host pid initPid) exists and has not
// started the command; sent says whether its supervisor got SupervisorChannel. It returns at once; Ready
// says how it went.
func (n *Net) AttachNone(initPid int, sent bool) {
	if n.none == nil || n.attachOnce.Swap(true) {
		return
	}
	n.none.child.Close() // the supervisor has its copy, or none: either way a closed peer ends the wait
	go func() {
		defer close(n.ready)
		n.readyErr = n.attachNone(initPid, sent)
	}()
}

// noneTimeout bounds the wait for the supervisor's sockets.
const noneTimeout = 10 * time.Second

// attachNone gets the sockets, loads the table, then adds the routes (nothing passes the hook unjudged),
// and binds the NFLOG group.
func (n *Net) attachNone(initPid int, sent bool) error {
	var socks [3]int
	var err error
	switch {
	case sent:
		socks, err = receiveSockets(n.none.parent)
	case os.Geteuid() == 0:
		socks, err = n.ownSockets(initPid)
	default:
		n.none.missing = "network attempts not recorded: without root, sbx records them only when its supervisor starts the sandbox (libcontainer's init did)"
		return nil
	}
	if err != nil {
		return fmt.Errorf("the network record: %w", err)
	}
	route, nft, nflog := socks[0], socks[1], socks[2]
	defer unix.Close(route)
	n.nftSock, n.none.nflog = nft, nflog
	if n.nft, err = n.newNftConn(); err != nil {
		return fmt.Errorf("nftables in the sandbox's namespace: %w", err)
	}
	if n.sets, err = loadNoneTable(n.nft); err != nil {
		n.sets = nil
		return err
	}
	if err := bindNflog(nflog); err != nil {
		return err
	}
	return defaultRoutes(route)
}

// receiveSockets reads the supervisor's three sockets: rtnetlink, nfnetlink for the table, nfnetlink
// for NFLOG.
func receiveSockets(ch *os.File) (socks [3]int, err error) {
	ch.SetReadDeadline(time.Now().Add(noneTimeout))
	raw, err := ch.SyscallConn()
	if err != nil {
		return socks, err
	}
	oob := make([]byte, unix.CmsgSpace(4*len(socks)))
	var oobn, n int
	var rerr error
	if err := raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), make([]byte, 1), oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	}); err != nil {
		return socks, fmt.Errorf("waiting for the supervisor's sockets: %w", err)
	}
	if rerr != nil {
		return socks, fmt.Errorf("receiving the supervisor's sockets: %w", rerr)
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
		fds, _ = unix.ParseUnixRights(&msgs[0])
	}
	if n == 0 || len(fds) != len(socks) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return socks, errors.New("the supervisor sent no sockets")
	}
	copy(socks[:], fds)
	return socks, nil
}

// ownSockets makes the three sockets in the init's network namespace (sbx with root).
func (n *Net) ownSockets(initPid int) (socks [3]int, err error) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(initPid)+"/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return socks, fmt.Errorf("opening the sandbox's network namespace: %w", err)
	}
	n.fd = fd
	err = inNetNS(fd, func() error {
		got, err := netlinkSockets()
		socks = got
		return err
	})
	return socks, err
}

// netlinkSockets makes, in the calling thread's network namespace, the sockets the record of mode none
// is built with: rtnetlink, nfnetlink (nftables), nfnetlink (NFLOG), as the supervisor makes them
// (supervisor.Setup.NetRecord).
func netlinkSockets() (socks [3]int, err error) {
	for i, proto := range []int{unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER, unix.NETLINK_NETFILTER} {
		if socks[i], err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto); err != nil {
			for _, fd := range socks[:i] {
				unix.Close(fd)
			}
			return socks, fmt.Errorf("netlink socket: %w", err)
		}
	}
	return socks, nil
}

// loadNoneTable loads the record's table in one batch: the contract's denied sets and refuse chains,
// with an output chain that accepts loopback, copies DNS questions to NFLOG, and refuses everything
// else. It has no always-deny set: its per-range counters (a concatenated interval set) would cost about
// 2 ms per run here, and everything is refused anyway; past the denied set's bound Notes says how many
// refusals were not itemized.
func loadNoneTable(c *nftables.Conn) (map[byte]*contractSets, error) {
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: tableName})
	sets := map[byte]*contractSets{}
	for _, f := range []family{fam4, fam6} {
		s := &contractSets{denied: deniedSet(t, f), deniedIn: deniedSet(t, f.inbound())}
		for _, set := range []*nftables.Set{s.denied, s.deniedIn} {
			if err := addSet(c, set, nil); err != nil {
				return nil, fmt.Errorf("declaring set %s: %w", set.Name, err)
			}
		}
		addRefuseChain(c, t, f, s.denied)
		addRefuseChain(c, t, f.inbound(), s.deniedIn) // stays empty: Denied reads it as in contract mode
		sets[f.nfproto] = s
	}
	drop := nftables.ChainPolicyDrop
	ch := c.AddChain(&nftables.Chain{Name: chainOut, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	add := func(e ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e}) }
	// Loopback stays the command's own: 127.0.0.0/8 and ::1 (the default route sends all else to lo too).
	add(cat(matchNfproto(unix.NFPROTO_IPV4), []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{127}}}, accept())...)
	add(cat(matchNfproto(unix.NFPROTO_IPV6), matchDaddr(fam6, netip.IPv6Loopback()), accept())...)
	// The kernel's own answers to a refusal (the reset, the ICMP error) are related to it.
	add(cat(ctEstablished(), accept())...)
	add(cat(matchL4(unix.IPPROTO_UDP), matchDport(53), []expr.Any{&expr.Log{Group: nflogGroup, Snaplen: nflogSnap, QThreshold: 1,
		Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_SNAPLEN | 1<<unix.NFTA_LOG_QTHRESHOLD}})...)
	// A question to the sandbox's own resolver (NoneResolver) is judged by its name alone, as a question
	// to the contract's DNS filter is: refused without entering the denied set. One to any other address
	// is also an attempt to reach it.
	add(cat(matchNfproto(unix.NFPROTO_IPV4), matchDaddr(fam4, NoneResolver), matchL4(unix.IPPROTO_UDP), matchDport(53),
		[]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}})...)
	for _, f := range []family{fam4, fam6} {
		add(cat(matchNfproto(f.nfproto), jump(f.refuse))...)
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("loading the network record: %w", err)
	}
	return sets, nil
}

// defaultRoutes adds a default route through lo for IPv4 and IPv6 (ip route add default dev lo).
func defaultRoutes(fd int) error {
	for seq, fam := range []byte{unix.AF_INET, unix.AF_INET6} {
		msg := make([]byte, unix.SizeofNlMsghdr+unix.SizeofRtMsg+8)
		binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
		binary.NativeEndian.PutUint16(msg[4:], unix.RTM_NEWROUTE)
		binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
		binary.NativeEndian.PutUint32(msg[8:], uint32(seq+1))
		rt := msg[unix.SizeofNlMsghdr:]
		rt[0], rt[4], rt[5], rt[6], rt[7] = fam, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_LINK, unix.RTN_UNICAST
		if fam == unix.AF_INET6 {
			rt[6] = unix.RT_SCOPE_UNIVERSE
		}
		attr := rt[unix.SizeofRtMsg:]
		binary.NativeEndian.PutUint16(attr[0:], 8)
		binary.NativeEndian.PutUint16(attr[2:], unix.RTA_OIF)
		binary.NativeEndian.PutUint32(attr[4:], 1) // lo is always ifindex 1
		if err := nlAck(fd, msg); err != nil {
			return fmt.Errorf("adding the IPv%s route through lo: %w", map[byte]string{unix.AF_INET: "4", unix.AF_INET6: "6"}[fam], err)
		}
	}
	return nil
}

// nlAck sends one request and reads the kernel's acknowledgement.
func nlAck(fd int, msg []byte) error {
	if err := retryEINTR(func() error { return unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}) }); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	var n int
	if err := retryEINTR(func() (err error) { n, _, err = unix.Recvfrom(fd, buf, 0); return err }); err != nil {
		return err
	}
	if n < unix.SizeofNlMsghdr+4 || binary.NativeEndian.Uint16(buf[4:]) != unix.NLMSG_ERROR {
		return errors.New("no acknowledgement")
	}
	if e := int32(binary.NativeEndian.Uint32(buf[unix.SizeofNlMsghdr:])); e != 0 {
		return unix.Errno(-e)
	}
	return nil
}

// bindNflog binds the socket to the DNS copies' group, copying packets, and sizes its queue.
func bindNflog(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, nflogBuffer); err != nil {
		return fmt.Errorf("sizing the DNS record's queue: %w", err)
	}
	cmd := nlattr(nfulaCfgCmd, []byte{nfulnlCfgCmdBind})
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode, nflogSnap)
	mode[4] = nfulnlCopyPacket
	for i, attrs := range [][]byte{cmd, nlattr(nfulaCfgMode, mode)} {
		body := append([]byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, nflogGroup}, attrs...)
		msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
		msg = append(msg, body...)
		binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
		binary.NativeEndian.PutUint16(msg[4:], unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgConfig)
		binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
		binary.NativeEndian.PutUint32(msg[8:], uint32(i+1))
		if err := nlAck(fd, msg); err != nil {
			return fmt.Errorf("binding the DNS record to NFLOG: %w", err)
		}
	}
	return unix.SetNonblock(fd, true)
}

// nlattr is one netlink attribute, padded to 4 bytes.
func nlattr(typ uint16, data []byte) []byte {
	b := make([]byte, 4+(len(data)+3)&^3)
	binary.NativeEndian.PutUint16(b, uint16(4+len(data)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[4:], data)
	return b
}

// noneDNS reads the DNS copies queued on the NFLOG socket (once; the command has ended) into the log:
// each a refused question, with its name and type as far as they can be read.
func (n *Net) noneDNS() []report.DNSQuery {
	r := n.none
	r.once.Do(func() {
		if r.nflog < 0 {
			return
		}
		buf := make([]byte, 1<<16) // reused: one datagram holds one or more copies
		for {
			k, _, err := unix.Recvfrom(r.nflog, buf, 0)
			if err == unix.EINTR || err == unix.ENOBUFS {
				continue // ENOBUFS: some were dropped; the counter below says how many
			}
			if err != nil || k <= 0 {
				break
			}
			parseNflog(buf[:k], r.log.add)
		}
		r.drops = socketDrops(r.nflog)
	})
	return r.log.queries()
}

// socketDrops is the socket's drop counter (SO_MEMINFO's SK_MEMINFO_DROPS).
func socketDrops(fd int) int {
	var mem [unix.SK_MEMINFO_VARS]uint32
	size := uint32(len(mem) * 4)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&size)), 0)
	if e != 0 {
		return 0
	}
	return int(mem[unix.SK_MEMINFO_DROPS])
}

// parseNflog hands each packet copy in a datagram of NFLOG messages to add, as a refused query.
func parseNflog(b []byte, add func(report.DNSQuery)) {
	for len(b) >= unix.SizeofNlMsghdr {
		l := int(binary.NativeEndian.Uint32(b))
		if l < unix.SizeofNlMsghdr || l > len(b) {
			return
		}
		if binary.NativeEndian.Uint16(b[4:]) == unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgPacket {
			if p := nflogPayload(b[unix.SizeofNlMsghdr+4 : l]); p != nil {
				add(dnsCopy(p))
			}
		}
		b = b[min((l+3)&^3, len(b)):]
	}
}

// nflogPayload is the NFULA_PAYLOAD attribute among attrs, nil when absent.
func nflogPayload(attrs []byte) []byte {
	for len(attrs) >= 4 {
		l := int(binary.NativeEndian.Uint16(attrs))
		if l < 4 || l > len(attrs) {
			return nil
		}
		if binary.NativeEndian.Uint16(attrs[2:])&nlaTypeMask == nfulaPayload {
			return attrs[4:l]
		}
		attrs = attrs[min((l+3)&^3, len(attrs)):]
	}
	return nil
}

// dnsCopy reads the question of a copied IPv4 or IPv6 UDP packet.
func dnsCopy(p []byte) report.DNSQuery {
	q := report.DNSQuery{Reason: "no network (mode none)"}
	var off int
	switch {
	case len(p) >= 20 && p[0]>>4 == 4:
		off = int(p[0]&0x0f) * 4
	case len(p) >= 40 && p[0]>>4 == 6:
		off = 40 // extension headers: the contract's own rules refuse what carries routing ones
	default:
		q.Reason = "not a DNS question: unreadable packet"
		return q
	}
	m := p[min(off+8, len(p)):]
	q.Name = rawName(m)
	if len(m) >= 3 && m[2]&0x80 != 0 {
		q.Reason = "a DNS response, not a query (mode none)"
	} else if _, labels := canonicalName(q.Name); ownName(labels) {
		// localhost's AAAA, asked by glibc when /etc/hosts maps localhost to 127.0.0.1 only: the answer
		// is the sandbox's own, as in contract mode (localAnswer); not an attempt to reach anything.
		q.Allowed, q.Reason = true, "a name of the sandbox itself (mode none: not answered)"
	}
	if i := questionEnd(m); i > 0 && i+2 <= len(m) {
		q.Type = typeName(binary.BigEndian.Uint16(m[i:]))
	}
	return q
}

// questionEnd is the offset after the first question's name in m, 0 when it cannot be read.
func questionEnd(m []byte) int {
	for off := 12; off < len(m); {
		n := int(m[off])
		if n == 0 {
			return off + 1
		}
		if n&0xc0 != 0 {
			return 0
		}
		off += 1 + n
	}
	return 0
}

// noneNotes says what the mode-none record lacks.
func (n *Net) noneNotes() []string {
	var out []string
	if n.none.missing != "" {
		out = append(out, n.none.missing)
	}
	n.noneDNS()
	if n.none.drops > 0 {
		out = append(out, fmt.Sprintf("DNS record: %d questions were dropped by the kernel before sbx read them (the record's queue holds about %d KiB)", n.none.drops, nflogBuffer>>10))
	}
	return append(out, n.none.log.notes()...)
}

// closeNone releases the record's sockets.
func (n *Net) closeNone() {
	if n.none == nil {
		return
	}
	n.none.parent.Close()
	n.none.child.Close()
	if n.none.nflog >= 0 {
		unix.Close(n.none.nflog)
		n.none.nflog = -1
	}
}
