package netcontract

import (
	"net"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// recorder is a dns.ResponseWriter that keeps the reply.
type recorder struct{ m *dns.Msg }

func (r *recorder) LocalAddr() net.Addr       { return &net.UDPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 53} }
func (r *recorder) RemoteAddr() net.Addr      { return &net.UDPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 5353} }
func (r *recorder) WriteMsg(m *dns.Msg) error { r.m = m; return nil }
func (r *recorder) Write(b []byte) (int, error) {
	return len(b), nil
}
func (r *recorder) Close() error        { return nil }
func (r *recorder) TsigStatus() error   { return nil }
func (r *recorder) TsigTimersOnly(bool) {}
func (r *recorder) Hijack()             {}

// TestLocalNames: the sandbox's own names (localhost and below it, its host name) are answered by the
// filter, whatever the profile allows, as a host's resolver answers them, and logged as allowed: an AAAA
// question for localhost (getent asks it first when /etc/hosts has no ::1) is no refused query and no
// violation. Any other name, one that merely ends in the host name included, goes through the rules
// (here: none, so refused).
func TestLocalNames(t *testing.T) {
	d := &dnsFilter{inFlight: make(chan struct{}, 1)}
	ask := func(name string, qtype uint16) *dns.Msg {
		t.Helper()
		var w recorder
		d.ServeDNS(&w, new(dns.Msg).SetQuestion(name, qtype))
		if w.m == nil {
			t.Fatalf("%s %s: no reply", name, dns.TypeToString[qtype])
		}
		return w.m
	}
	for _, c := range []struct {
		name  string
		qtype uint16
		want  string // the A record's address, "" for an empty answer
	}{
		{"localhost.", dns.TypeAAAA, ""},
		{"LocalHost.", dns.TypeA, "127.0.0.1"},
		{"db.localhost.", dns.TypeA, "127.0.0.1"},
		{"sbx.", dns.TypeA, "127.0.1.1"},
		{"sbx.", dns.TypeAAAA, ""},
		{"localhost.", dns.TypeMX, ""},
	} {
		m := ask(c.name, c.qtype)
		if m.Rcode != dns.RcodeSuccess {
			t.Errorf("%s %s: %s, want NOERROR", c.name, dns.TypeToString[c.qtype], dns.RcodeToString[m.Rcode])
			continue
		}
		got := ""
		if len(m.Answer) == 1 {
			if a, ok := m.Answer[0].(*dns.A); ok {
				got = a.A.String()
			}
		}
		if got != c.want || len(m.Answer) > 1 {
			t.Errorf("%s %s: answer %v, want %q", c.name, dns.TypeToString[c.qtype], m.Answer, c.want)
		}
	}
	for _, name := range []string{"sbx.example.", "localhost.example.", "notlocalhost."} {
		if m := ask(name, dns.TypeA); m.Rcode != dns.RcodeRefused {
			t.Errorf("%s: %s, want REFUSED (not a name of the sandbox's own)", name, dns.RcodeToString[m.Rcode])
		}
	}
	for _, q := range d.queries() {
		n := strings.ToLower(q.Name)
		local := n == "localhost" || n == "db.localhost" || n == "sbx"
		if q.Allowed != local {
			t.Errorf("logged %+v: allowed %v, want %v", q, q.Allowed, local)
		}
	}
}
