package netcontract

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/sbx-dev/sbx/internal/fakenet"
	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
	"golang.org/x/sys/unix"
)

// rootWhy is why the tests that build a contract need root.
const rootWhy = "builds network namespaces, veths and nftables rules"

// testPrefix marks namespaces made by this test binary: sbx + "t" + pid-based counter.
const testPrefix = "t"

var idCounter atomic.Int32

// testID is a run ID unique to this process and call.
func testID() string {
	return fmt.Sprintf("%s%03x", testIDPrefix(), idCounter.Add(1)&0xfff)
}

// testIDPrefix begins the run IDs of this process (the namespaces are sbx + ID).
func testIDPrefix() string { return fmt.Sprintf("%s%05x", testPrefix, os.Getpid()&0xfffff) }

// newFake builds a fake upstream and closes it with the test.
func newFake(t testing.TB) *fakenet.Net {
	t.Helper()
	testutil.RequireRoot(t, rootWhy)
	return fakenet.ForTest(t)
}

// setup builds a Net and closes it with the test (Close is idempotent).
func setup(t testing.TB, cfg Config) *Net {
	t.Helper()
	testutil.RequireRoot(t, rootWhy)
	if cfg.ID == "" {
		cfg.ID = testID()
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	n, err := Setup(cfg)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// contractNet is the network of the "done when": one fake public server allowed by address, one by
// name, DNS forwarded to the fake resolver.
func contractNet(fake *fakenet.Net) policy.Network {
	return policy.Network{
		Mode: policy.NetContract,
		Allow: []policy.NetRule{
			{CIDR: fakenet.Public + "/32", Proto: "tcp", Port: 443},
			{Host: "allowed.test", Proto: "tcp", Port: 443},
		},
		DNS:         policy.DNS{Upstream: fakenet.DNS + ":53"},
		UplinkNetNS: fake.Name,
	}
}

// in runs f inside the sandbox's namespace.
func in(t testing.TB, n *Net, f func()) {
	t.Helper()
	if err := fakenet.RunIn(n.NetNSPath(), func() error { f(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// attempt is the outcome of one connection attempt.
type attempt struct {
	err  error
	took time.Duration
	echo string // what came back (HTTP body or UDP echo)
}

func (a attempt) reachable() bool { return a.err == nil }

func (a attempt) String() string {
	if a.err != nil {
		return fmt.Sprintf("error after %v: %v", a.took.Round(time.Microsecond), a.err)
	}
	return fmt.Sprintf("reachable after %v: %q", a.took.Round(time.Microsecond), a.echo)
}

// tcpGet connects to addr, sends an HTTP request and reads the answer. Call inside a namespace.
func tcpGet(addr string) attempt {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return attempt{err: err, took: time.Since(start)}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\n\r\n")
	b, err := io.ReadAll(c)
	body := string(b)
	if i := strings.Index(body, "\r\n\r\n"); i >= 0 {
		body = strings.TrimSpace(body[i+4:])
	}
	return attempt{err: err, took: time.Since(start), echo: body}
}

// udpEcho sends a datagram to addr and waits for it to come back.
func udpEcho(addr string) attempt {
	start := time.Now()
	c, err := net.Dial("udp", addr)
	if err != nil {
		return attempt{err: err, took: time.Since(start)}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return attempt{err: err, took: time.Since(start)}
	}
	b := make([]byte, 16)
	k, err := c.Read(b)
	return attempt{err: err, took: time.Since(start), echo: string(b[:k])}
}

// dnsLookup asks server for name's A record over UDP.
func dnsLookup(server, name string) (*dns.Msg, error) {
	c := &dns.Client{Timeout: 2 * time.Second}
	m := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, _, err := c.Exchange(m, server)
	return r, err
}

// resolver is the nameserver in a resolv.conf, as ip:53.
func resolver(t testing.TB, path string) string {
	t.Helper()
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil || len(cc.Servers) == 0 {
		t.Fatalf("reading %s: %v", path, err)
	}
	return net.JoinHostPort(cc.Servers[0], "53")
}

// isRefused says whether err is a fast refusal: a reset, or an ICMP unreachable of any kind.
func isRefused(err error) bool {
	return errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.EHOSTUNREACH) ||
		errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)
}

// run runs a command and returns its output, failing the test on error.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func itoa(i int) string { return fmt.Sprint(i) }

// runInFake runs f inside the namespace at path (the uplink side).
func runInFake(path string, f func()) error {
	return fakenet.RunIn(path, func() error { f(); return nil })
}
