package netcontract

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// noneNet is a mode-none record attached as a direct start attaches it: a namespace with lo up, made
// here in the supervisor's place, whose netlink sockets are sent on the record's channel. It returns
// the namespace's fd (closed with the test).
func noneNet(t testing.TB) (*Net, int) {
	t.Helper()
	testutil.RequireRoot(t, rootWhy)
	n, err := SetupNone(Config{ID: testID(), Net: policy.Network{Mode: policy.NetNone}, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	path := filepath.Join(netnsDir, n.cfg.name())
	fd, err := supervisorSide(n, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd); removeNetNS(path) })
	n.AttachNone(0, true)
	if err := n.Ready(); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	return n, fd
}

// supervisorLoopback brings lo up, as the supervisor does before it sends the sockets.
func supervisorLoopback() error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer h.Close()
	return loUp(h)
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// inOwnNS runs f on a locked thread inside the namespace fd, which the test made, after checking on that
// thread that it is there and not in sbx's own namespace: f's sockets to non-loopback addresses can then
// reach nothing but what the test built.
func inOwnNS(t testing.TB, fd int, f func()) {
	t.Helper()
	hostFd, err := hostNS() // opened here, on a thread never switched
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		var want, here, host unix.Stat_t
		if unix.Fstat(fd, &want) != nil || unix.Stat("/proc/thread-self/ns/net", &here) != nil || unix.Fstat(hostFd, &host) != nil {
			done <- errors.New("cannot tell which namespace the thread is in")
			return
		}
		if here.Ino != want.Ino || here.Ino == host.Ino {
			done <- errors.New("not inside the test's own namespace: aborting before any socket")
			return
		}
		f()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestNoneRecord: in mode none every attempt beyond loopback is refused at once and recorded (TCP, UDP,
// IPv4 and IPv6), DNS questions to any resolver are recorded as refused names (a response's name too),
// and loopback stays the command's. A question to the sandbox's own resolver (its resolv.conf's) is
// judged by its name only, not also as an attempt to reach that address; one for the sandbox's own names
// (localhost's AAAA, which glibc asks when /etc/hosts has only 127.0.0.1) is not refused.
func TestNoneRecord(t *testing.T) {
	n, fd := noneNet(t)
	if b, err := os.ReadFile(n.ResolvConf()); err != nil || !strings.Contains(string(b), "nameserver "+NoneResolver.String()+"\n") {
		t.Errorf("resolv.conf %q: %q, %v; want the nameserver %s", n.ResolvConf(), b, err, NoneResolver)
	}
	question := func(id uint16, qr bool, name string, qtype uint16) []byte {
		m := []byte{byte(id >> 8), byte(id), 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
		if qr {
			m[2] |= 0x80
		}
		for _, l := range strings.Split(name, ".") {
			m = append(append(m, byte(len(l))), l...)
		}
		return append(m, 0, byte(qtype>>8), byte(qtype), 0, 1)
	}
	var took []time.Duration
	inOwnNS(t, fd, func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Error(err)
			return
		}
		defer ln.Close()
		if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err != nil {
			t.Errorf("loopback: %v", err)
		} else {
			c.Close()
		}
		for _, addr := range []string{"169.254.169.254:80", "192.168.0.1:6379", "[fd00:ec2::254]:80", "[2001:db8::1]:443", "203.0.113.9:443"} {
			start := time.Now()
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			took = append(took, time.Since(start))
			if err == nil {
				c.Close()
				t.Errorf("%s: connected", addr)
			} else if !errors.Is(err, unix.ECONNREFUSED) {
				t.Errorf("%s: %v, want connection refused at once", addr, err)
			}
		}
		for _, m := range []struct {
			addr string
			msg  []byte
		}{{"10.0.0.53:53", question(1, false, "meta.test", 1)}, {"[2001:db8::53]:53", question(2, true, "leak.test", 16)}, {"198.51.100.7:5000", []byte("x")},
			{net.JoinHostPort(NoneResolver.String(), "53"), question(3, false, "asked.test", 1)},
			{"10.0.0.54:53", question(4, false, "localhost", 28)}} {
			c, err := net.Dial("udp", m.addr)
			if err != nil {
				t.Error(err)
				continue
			}
			c.Write(m.msg)
			c.Close()
		}
	})
	for _, d := range took {
		if d > 100*time.Millisecond {
			t.Errorf("a refusal took %v, want at once", d)
		}
	}
	got, err := n.Denied()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []report.Denied{
		{Proto: "tcp", Address: "169.254.169.254", Port: 80, Count: 1}, {Proto: "tcp", Address: "192.168.0.1", Port: 6379, Count: 1},
		{Proto: "tcp", Address: "fd00:ec2::254", Port: 80, Count: 1}, {Proto: "tcp", Address: "2001:db8::1", Port: 443, Count: 1},
		{Proto: "tcp", Address: "203.0.113.9", Port: 443, Count: 1}, {Proto: "udp", Address: "10.0.0.53", Port: 53, Count: 1},
		{Proto: "udp", Address: "2001:db8::53", Port: 53, Count: 1}, {Proto: "udp", Address: "198.51.100.7", Port: 5000, Count: 1},
		{Proto: "udp", Address: "10.0.0.54", Port: 53, Count: 1},
	} {
		if !slices.Contains(got, want) {
			t.Errorf("denied record lacks %+v; got %+v", want, got)
		}
	}
	if len(got) != 9 {
		t.Errorf("denied record has %d entries, want 9 (neither loopback nor the sandbox's resolver is in it): %+v", len(got), got)
	}
	dnsGot := n.DNS()
	wantDNS := []report.DNSQuery{{Name: "meta.test", Type: "A", Reason: "no network (mode none)"},
		{Name: "leak.test", Type: "TXT", Reason: "a DNS response, not a query (mode none)"},
		{Name: "asked.test", Type: "A", Reason: "no network (mode none)"},
		{Name: "localhost", Type: "AAAA", Allowed: true, Reason: "a name of the sandbox itself (mode none: not answered)"}}
	if !slices.Equal(dnsGot, wantDNS) {
		t.Errorf("DNS record:\n got %+v\nwant %+v", dnsGot, wantDNS)
	}
	if n.Mode() != report.NetworkNone {
		t.Errorf("Mode() = %q", n.Mode())
	}
	if notes := n.Notes(); len(notes) != 0 {
		t.Errorf("notes: %q", notes)
	}
}

// TestNoneRecordDNSQueueBound: a flood of DNS questions costs sbx nothing during the run (the copies
// wait in the socket's bounded queue), and what the queue could not hold is counted from the socket's
// drop counter and noted.
func TestNoneRecordDNSQueueBound(t *testing.T) {
	n, fd := noneNet(t)
	const sent = 20000
	inOwnNS(t, fd, func() {
		c, err := net.Dial("udp", "10.0.0.53:53")
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		msg := []byte{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 'f', 'l', 'o', 'o', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1}
		for range sent {
			c.Write(msg)
		}
	})
	logged := 0
	for _, q := range n.DNS() {
		logged += max(q.Count, 1)
	}
	if logged == 0 || logged+n.none.drops != sent {
		t.Errorf("logged %d, dropped %d: want a sum of %d, some logged", logged, n.none.drops, sent)
	}
	if n.none.drops > 0 && !slices.ContainsFunc(n.Notes(), func(s string) bool { return len(s) > 0 && s[:10] == "DNS record" }) {
		t.Errorf("no note of %d dropped questions: %q", n.none.drops, n.Notes())
	}
	t.Logf("%d questions: %d logged, %d dropped by the kernel", sent, logged, n.none.drops)
}

// BenchmarkNoneRecord is the record's cost on a cold run in mode none: attaching it (the sockets from
// the supervisor, the table, the NFLOG group, the routes), reading it at the end, closing it. The
// namespace itself is the supervisor's and not counted.
func BenchmarkNoneRecord(b *testing.B) {
	testutil.RequireRoot(b, rootWhy)
	var attachT, readT, closeT time.Duration
	for b.Loop() {
		b.StopTimer()
		n, err := SetupNone(Config{ID: testID(), Net: policy.Network{Mode: policy.NetNone}})
		if err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(netnsDir, n.cfg.name())
		fd, err := supervisorSide(n, path)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		n.AttachNone(0, true)
		if err := n.Ready(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := n.Denied(); err != nil {
			b.Fatal(err)
		}
		n.DNS()
		n.Notes()
		t2 := time.Now()
		n.Close()
		t3 := time.Now()
		b.StopTimer()
		unix.Close(fd)
		removeNetNS(path)
		b.StartTimer()
		attachT, readT, closeT = attachT+t1.Sub(t0), readT+t2.Sub(t1), closeT+t3.Sub(t2)
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(per(attachT), "attach-ms")
	b.ReportMetric(per(readT), "read-ms")
	b.ReportMetric(per(closeT), "close-ms")
}

// supervisorSide makes the sandbox's namespace at path as the supervisor does: lo up, then its netlink
// sockets sent on n's record channel. It returns the namespace's fd.
func supervisorSide(n *Net, path string) (int, error) {
	return newNetNS(path, func() error {
		if err := supervisorLoopback(); err != nil {
			return err
		}
		socks, err := netlinkSockets()
		if err != nil {
			return err
		}
		defer closeAll(socks[:])
		return unix.Sendmsg(int(n.SupervisorChannel().Fd()), []byte{0}, unix.UnixRights(socks[:]...), nil, 0)
	})
}
