package netcontract

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// The DNS filter's UDP side. The DNS library's server starts a goroutine per datagram, so under a flood
// of queries sbx's memory was set by timing (thousands of parked goroutines, 35 to 135 MB for 100,000
// refused queries). Here a fixed number of workers read the socket, each with its own buffer, and answer
// in turn: what a flood costs sbx is udpWorkers goroutines and buffers, and what they cannot keep up with
// waits in the socket's queue, whose size the kernel bounds; what it drops is counted from the socket's
// drop counter and noted.

// udpWorkers is the number of goroutines that read and answer the UDP socket. A worker that forwards an
// allowed name waits for the upstream (forwardTimeout at most, twice with TCP); refused names are answered
// at once.
const udpWorkers = 32

// udpReadSize is each worker's buffer: a query is a header and one question (a name is at most 255
// bytes) with an EDNS record; a longer datagram is cut and refused as malformed, with its name.
const udpReadSize = 4096

// udpQueueBytes is the receive buffer asked for the filter's socket.
const udpQueueBytes = 1 << 20

// drainTimeout bounds the wait, at the end of a run, for the queries still queued when the command
// ended: they belong to the record.
const drainTimeout = 2 * time.Second

// udpServer answers the sandbox's queries on pc with udpWorkers workers.
type udpServer struct {
	d      *dnsFilter
	pc     *net.UDPConn
	wg     sync.WaitGroup
	busy   atomic.Int32 // workers between reading a datagram and answering it
	closed atomic.Bool
}

// serveUDP starts the workers on pc, which must be a UDP socket.
func (d *dnsFilter) serveUDP(pc net.PacketConn) error {
	u, ok := pc.(*net.UDPConn)
	if !ok {
		return fmt.Errorf("DNS filter: %T is not a UDP socket", pc)
	}
	// A burst of a few thousand queries waits in the kernel rather than being dropped (the default queue
	// holds a few hundred); past it the drops are counted. Kernel memory, bounded by rmem_max.
	_ = u.SetReadBuffer(udpQueueBytes)
	d.udp = &udpServer{d: d, pc: u}
	for range udpWorkers {
		d.udp.wg.Add(1)
		go d.udp.work()
	}
	return nil
}

// work reads and answers datagrams until the socket is closed.
func (s *udpServer) work() {
	defer s.wg.Done()
	buf := make([]byte, udpReadSize)
	for {
		n, _, flags, addr, err := s.pc.ReadMsgUDP(buf, nil)
		if err != nil {
			if s.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient error (an ICMP error queued on the socket): the next datagram
		}
		s.busy.Add(1)
		s.handle(buf[:n], flags&unix.MSG_TRUNC != 0, addr)
		s.busy.Add(-1)
	}
}

// handle judges one datagram as the library's server did: from another address it is dropped unanswered
// and counted; a response is logged with its name and dropped; what does not parse is logged and answered
// FORMERR; a query goes to the filter's handler.
func (s *udpServer) handle(m []byte, cut bool, addr *net.UDPAddr) {
	d := s.d
	if !d.fromClient(addr) {
		d.log.addForeign()
		return
	}
	if len(m) < 12 {
		d.invalid(m, errors.New("shorter than a DNS header"))
		return
	}
	if m[2]&0x80 != 0 {
		d.logResponse(m)
		return
	}
	w := &udpWriter{s: s, addr: addr}
	req := new(dns.Msg)
	err := req.Unpack(m)
	if cut {
		err = fmt.Errorf("longer than %d bytes", udpReadSize)
	}
	if err != nil {
		d.invalid(m, err)
		bad := new(dns.Msg)
		bad.Id, bad.Response, bad.Opcode, bad.Rcode = uint16(m[0])<<8|uint16(m[1]), true, int(m[2]>>3&0xf), dns.RcodeFormatError
		reply(w, bad)
		return
	}
	d.ServeDNS(w, req)
}

// drain waits until the queries queued so far are judged and logged (the socket's queue is empty and no
// worker holds one), drainTimeout at most, and says whether they were.
func (s *udpServer) drain() bool {
	for deadline := time.Now().Add(drainTimeout); ; time.Sleep(time.Millisecond) {
		if s.queued() == 0 && s.busy.Load() == 0 {
			// A worker may have read the last datagram and not yet counted itself busy: look again.
			time.Sleep(time.Millisecond)
			if s.queued() == 0 && s.busy.Load() == 0 {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// queued is the size of the next datagram in the socket's queue (SIOCINQ), 0 when it is empty or the
// socket cannot be asked.
func (s *udpServer) queued() int {
	n := 0
	if rc, err := s.pc.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	}
	return n
}

// drops is the socket's drop counter: datagrams the kernel could not queue for the workers.
func (s *udpServer) drops() int {
	n := 0
	if rc, err := s.pc.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { n = socketDrops(int(fd)) })
	}
	return n
}

// close closes the socket and waits for the workers; one forwarding a query returns within the
// exchange's timeout.
func (s *udpServer) close() {
	s.closed.Store(true)
	s.pc.Close()
	s.wg.Wait()
}

// udpWriter is the dns.ResponseWriter of one datagram's answer.
type udpWriter struct {
	s    *udpServer
	addr *net.UDPAddr
}

func (w *udpWriter) LocalAddr() net.Addr  { return w.s.pc.LocalAddr() }
func (w *udpWriter) RemoteAddr() net.Addr { return w.addr }
func (w *udpWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
func (w *udpWriter) Write(b []byte) (int, error) { return w.s.pc.WriteToUDP(b, w.addr) }
func (w *udpWriter) Close() error                { return nil }
func (w *udpWriter) TsigStatus() error           { return nil }
func (w *udpWriter) TsigTimersOnly(bool)         {}
func (w *udpWriter) Hijack()                     {}
