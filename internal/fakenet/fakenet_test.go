package fakenet

import (
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestFakeNet: the servers answer inside the namespace, the DNS server records names, Close removes it.
func TestFakeNet(t *testing.T) {
	testutil.RequireRoot(t, "fakenet creates a network namespace")
	n, err := New()
	if err != nil {
		t.Fatal(err)
	}
	err = RunIn(n.Path, func() error {
		c, err := net.DialTimeout("tcp", Public+":443", time.Second)
		if err != nil {
			return err
		}
		c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		b, _ := io.ReadAll(c)
		c.Close()
		if !strings.Contains(string(b), "fakenet "+Public+":443") {
			t.Errorf("HTTP answer %q does not name %s:443", b, Public)
		}
		r, _, err := new(dns.Client).Exchange(new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA), DNS+":53")
		if err != nil || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != Public {
			t.Errorf("allowed.test: %v %v, want %s", r, err, Public)
		}
		u, err := net.Dial("udp", LAN+":5353")
		if err != nil {
			return err
		}
		defer u.Close()
		u.SetDeadline(time.Now().Add(time.Second))
		u.Write([]byte("ping"))
		buf := make([]byte, 8)
		if k, err := u.Read(buf); err != nil || string(buf[:k]) != "ping" {
			t.Errorf("UDP echo: %q %v", buf[:k], err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if q := n.Queries(); len(q) != 1 || q[0] != "allowed.test." {
		t.Errorf("Queries() = %v", q)
	}
	if c := n.Connections(); len(c) != 1 || c[0] != Public+":443" {
		t.Errorf("Connections() = %v", c)
	}
	if l, err := n.Links(); err != nil || len(l) != 0 {
		t.Errorf("Links() = %v, %v; want none", l, err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.Path); !os.IsNotExist(err) {
		t.Errorf("%s after Close: %v", n.Path, err)
	}
}
