package netcontract

import (
	"encoding/binary"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/sbx-dev/sbx/internal/fakenet"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
)

// wildcardNet allows *.allowed.test on 443 and the name allowed.test itself, through the fake upstream.
func wildcardNet(fake *fakenet.Net) policy.Network {
	return policy.Network{
		Mode: policy.NetContract,
		Allow: []policy.NetRule{
			{Host: "*.allowed.test", Proto: "tcp", Port: 443},
			{Host: "allowed.test", Proto: "tcp", Port: 443},
		},
		DNS:         policy.DNS{Upstream: fakenet.DNS + ":53"},
		UplinkNetNS: fake.Name,
	}
}

// exchangeRaw sends a raw message over UDP and returns the answer, nil on silence.
func exchangeRaw(t *testing.T, server string, msg []byte) *dns.Msg {
	t.Helper()
	c, err := net.Dial("udp", server)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4096)
	k, err := c.Read(b)
	if err != nil {
		return nil
	}
	r := new(dns.Msg)
	if err := r.Unpack(b[:k]); err != nil {
		t.Fatalf("unpacking the filter's answer: %v", err)
	}
	return r
}

// pack packs m, failing the test on error.
func pack(t *testing.T, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawQuery is a query for the wire labels given, built by hand (miekg refuses to pack some of them).
func rawQuery(id uint16, labels ...string) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0) // RD, one question
	for _, l := range labels {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0, 0, 1, 0, 1) // root, type A, class IN
}

// TestDNSFilterAsksItsOwnQuestion: whatever the client sends with an allowed name (its ID, casing, EDNS
// options such as client subnet), the upstream sees only sbx's own question.
func TestDNSFilterAsksItsOwnQuestion(t *testing.T) {
	fake := newFake(t)
	n := setup(t, Config{Net: wildcardNet(fake)})
	server := resolver(t, n.ResolvConf())
	m := new(dns.Msg).SetQuestion("AlLoWeD.TeSt.", dns.TypeA)
	m.Id = 0x5b5b
	m.CheckingDisabled = true
	o := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	o.SetUDPSize(4096)
	o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.ParseIP("192.0.2.0").To4()},
		&dns.EDNS0_LOCAL{Code: 65001, Data: []byte("secret-payload")})
	m.Extra = append(m.Extra, o)
	var r *dns.Msg
	in(t, n, func() { r = exchangeRaw(t, server, pack(t, m)) })
	if r == nil || r.Rcode != dns.RcodeSuccess || r.Id != m.Id || len(r.Answer) != 1 || r.Question[0].Name != "AlLoWeD.TeSt." {
		t.Fatalf("answer to the client: %v, want its ID, its question and one A record (log %+v, upstream saw %v)", r, n.DNS(), fake.Messages())
	}
	msgs := fake.Messages()
	if len(msgs) != 1 {
		t.Fatalf("upstream saw %d messages, want 1: %v", len(msgs), msgs)
	}
	u := msgs[0]
	opt := u.IsEdns0()
	switch {
	case u.Id == m.Id:
		t.Errorf("upstream saw the client's ID %#x", u.Id)
	case len(u.Question) != 1 || u.Question[0].Name != "allowed.test." || u.Question[0].Qclass != dns.ClassINET:
		t.Errorf("upstream question %v, want allowed.test. IN A", u.Question)
	case u.Opcode != dns.OpcodeQuery || u.CheckingDisabled || len(u.Answer)+len(u.Ns) != 0 || len(u.Extra) != 1:
		t.Errorf("upstream message carries more than the question:\n%v", u)
	case opt == nil || len(opt.Option) != 0 || opt.UDPSize() != upstreamUDPSize:
		t.Errorf("upstream EDNS %v, want sbx's own (size %d, no options)", opt, upstreamUDPSize)
	}
	if got := n.DNS(); len(got) != 1 || got[0].Name != "AlLoWeD.TeSt" || !got[0].Allowed {
		t.Errorf("DNS() = %+v, want the name as the client sent it, allowed", got)
	}
}

// TestDNSFilterRefuses: every message that is not a plain query of one allowed name is refused, logged
// with a reason (also those the DNS library would reject before the handler), and never reaches the
// upstream.
func TestDNSFilterRefuses(t *testing.T) {
	fake := newFake(t)
	n := setup(t, Config{Net: wildcardNet(fake)})
	server := resolver(t, n.ResolvConf())
	q := func() *dns.Msg { return new(dns.Msg).SetQuestion("x.allowed.test.", dns.TypeA) }
	notify := q()
	notify.Opcode = dns.OpcodeNotify
	update := new(dns.Msg).SetUpdate("allowed.test.")
	update.Insert([]dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: "x.allowed.test.", Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{"exfil"}}})
	chaos := q()
	chaos.Question[0].Qclass = dns.ClassCHAOS
	two := q()
	two.Question = append(two.Question, dns.Question{Name: "y.allowed.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	authority := q()
	authority.Ns = []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: "x.allowed.test.", Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{"exfil"}}}
	additional := q()
	additional.Extra = []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: "x.allowed.test.", Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{"exfil"}}}
	anyType := new(dns.Msg).SetQuestion("x.allowed.test.", dns.TypeANY)
	response := new(dns.Msg).SetQuestion("c2-exfil.allowed.test.", dns.TypeTXT)
	response.Response = true
	long := make([]string, 5)
	for i := range long {
		long[i] = strings.Repeat("a", 60)
	}
	tests := []struct {
		name   string
		msg    []byte
		reason string // what the log's reason must contain
	}{
		{"notify", pack(t, notify), "opcode NOTIFY"},
		{"update", pack(t, update), "opcode UPDATE"},
		{"class chaos", pack(t, chaos), "class CH"},
		{"two questions", pack(t, two), "2 questions"},
		{"authority section", pack(t, authority), "answer or authority"},
		{"additional section", pack(t, additional), "additional section"},
		{"type ANY", pack(t, anyType), "type ANY"},
		{"a response", pack(t, response), "a DNS response"},
		{"dot inside a label", rawQuery(7, "exfil-data.allowed", "test"), "characters"},
		{"escaped dot", rawQuery(8, `evil\.allowed`, "test"), "characters"},
		{"name over 255 bytes", rawQuery(9, append(long, "allowed", "test")...), "malformed"},
	}
	in(t, n, func() {
		for _, tc := range tests {
			if r := exchangeRaw(t, server, tc.msg); r != nil && r.Rcode == dns.RcodeSuccess {
				t.Errorf("%s: answered %v, want refused", tc.name, r)
			}
		}
	})
	got := n.DNS()
	for _, tc := range tests {
		if !slices.ContainsFunc(got, func(d report.DNSQuery) bool { return !d.Allowed && strings.Contains(d.Reason, tc.reason) }) {
			t.Errorf("%s: no refused entry with reason %q in the log %+v", tc.name, tc.reason, got)
		}
	}
	// A response is dropped unanswered, but the name the command sent in it is logged.
	if !slices.Contains(got, report.DNSQuery{Name: "c2-exfil.allowed.test", Type: "TXT", Reason: "a DNS response, not a query"}) {
		t.Errorf("the response's name and type are not in the log %+v", got)
	}
	if msgs := fake.Messages(); len(msgs) != 0 {
		t.Errorf("the upstream saw %d messages, want none: %v", len(msgs), msgs)
	}
}

// TestDNSFilterLearnsOnlyTheChain: only addresses owned by the asked name or its validated CNAME chain
// become reachable; a chain to a name not allowed is refused and logged.
func TestDNSFilterLearnsOnlyTheChain(t *testing.T) {
	fake := newFake(t)
	n := setup(t, Config{Net: wildcardNet(fake)})
	server := resolver(t, n.ResolvConf())
	in(t, n, func() {
		if r, err := dnsLookup(server, fakenet.Smuggle); err != nil || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("%s: %v %v", fakenet.Smuggle, r, err)
		}
		if a := tcpGet(fakenet.Public + ":443"); !a.reachable() {
			t.Errorf("the asked name's address: %v, want reachable", a)
		}
		if a := tcpGet(fakenet.Public2 + ":443"); a.reachable() {
			t.Errorf("the address of an unrelated owner in the answer: %v, want refused", a)
		}
		if r, err := dnsLookup(server, "chain.allowed.test"); err != nil || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("chain.allowed.test: %v %v", r, err)
		}
		if a := tcpGet(fakenet.Public2 + ":443"); !a.reachable() {
			t.Errorf("the address at the end of an allowed chain: %v, want reachable", a)
		}
		if r, err := dnsLookup(server, "alias.allowed.test"); err != nil || r.Rcode != dns.RcodeRefused {
			t.Errorf("a CNAME to metadata.google.internal: %v %v, want REFUSED", r, err)
		}
		if a := tcpGet(fakenet.Metadata4 + ":443"); a.reachable() {
			t.Errorf("metadata after the CNAME: %v", a)
		}
	})
	if !slices.ContainsFunc(n.DNS(), func(d report.DNSQuery) bool {
		return d.Name == "alias.allowed.test" && !d.Allowed && strings.Contains(d.Reason, "metadata.google.internal")
	}) {
		t.Errorf("the log lacks the refused chain with its target: %+v", n.DNS())
	}
}

// TestDNSFilterOnlyAnswersTheSandbox: a query from the uplink side gets no answer, is not in the run's
// log and teaches the contract nothing; a note counts it.
func TestDNSFilterOnlyAnswersTheSandbox(t *testing.T) {
	fake := newFake(t)
	n := setup(t, Config{Net: wildcardNet(fake)})
	server := resolver(t, n.ResolvConf())
	err := fakenet.RunIn(fake.Path, func() error {
		if r := exchangeRaw(t, server, pack(t, new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA))); r != nil {
			t.Errorf("a query from the uplink side was answered: %v", r)
		}
		if c, err := net.DialTimeout("tcp", server, time.Second); err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			dc := &dns.Conn{Conn: c}
			dc.WriteMsg(new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA))
			if r, err := dc.ReadMsg(); err == nil {
				t.Errorf("a TCP query from the uplink side was answered: %v", r)
			}
			c.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.DNS(); len(got) != 0 {
		t.Errorf("DNS() = %+v, want nothing: the queries were not the sandbox's", got)
	}
	if notes := strings.Join(n.Notes(), "\n"); !strings.Contains(notes, "2 messages from addresses other than the sandbox's") {
		t.Errorf("notes %q lack the count of foreign messages", notes)
	}
	if msgs := fake.Messages(); len(msgs) != 0 {
		t.Errorf("the upstream saw %v", msgs)
	}
}

// TestDNSLogBounds: past its bounds the log counts per name, then only counts, and says so.
func TestDNSLogBounds(t *testing.T) {
	var l dnsLog
	const total = maxDNSEntries + 3*maxDNSCounted
	for i := range total {
		l.add(report.DNSQuery{Name: "n" + itoa(i%(maxDNSEntries+2*maxDNSCounted)), Type: "A", Allowed: true})
	}
	got := l.queries()
	if len(got) != maxDNSEntries+maxDNSCounted {
		t.Fatalf("%d entries, want %d", len(got), maxDNSEntries+maxDNSCounted)
	}
	if got[maxDNSEntries].Count != 1 || got[0].Count != 0 {
		t.Errorf("counts %d and %d, want 0 on listed entries and the count on counted ones", got[0].Count, got[maxDNSEntries].Count)
	}
	notes := strings.Join(l.notes(), "\n")
	if !strings.Contains(notes, "counted per name") || !strings.Contains(notes, "further queries") {
		t.Errorf("notes %q do not say the log was cut", notes)
	}
}

// TestDNSLogKeepsRefused: a refused query stays in the log after a flood of distinct allowed ones
// filled its bounds, so that it is judged (expect.dns_refused); it was only counted, and the run passed.
func TestDNSLogKeepsRefused(t *testing.T) {
	var l dnsLog
	for i := range maxDNSEntries + 2*maxDNSCounted {
		l.add(report.DNSQuery{Name: "allowed.test", Type: "TYPE" + itoa(i), Allowed: true})
	}
	exfil := report.DNSQuery{Name: "c2VjcmV0.evil.test", Type: "A"}
	l.add(exfil)
	var kept bool
	for _, q := range l.queries() {
		kept = kept || q.Name == exfil.Name && !q.Allowed
	}
	if !kept {
		t.Errorf("the refused query is not in the log after %d allowed ones", maxDNSEntries+2*maxDNSCounted)
	}
	for i := range 3 * maxDNSCounted {
		l.add(report.DNSQuery{Name: "r" + itoa(i) + ".evil.test", Type: "A"})
	}
	if n := len(l.queries()); n > maxDNSEntries+2*maxDNSCounted {
		t.Errorf("%d entries, want at most %d", n, maxDNSEntries+2*maxDNSCounted)
	}
}

// TestWireNamesMatch: the names a query carries, read as the filter reads them (canonicalName), match
// policy's patterns by whole labels below the suffix, never the suffix itself, nor a name whose label
// holds an escaped dot.
func TestWireNamesMatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"*.allowed.test", "a.allowed.test.", true},
		{"*.allowed.test", "a.b.allowed.test.", true},
		{"*.allowed.test", "allowed.test.", false},
		{"*.allowed.test", "xallowed.test.", false},
		{"*.allowed.test", `exfil\.allowed.test.`, false},
		{"allowed.test", "ALLOWED.test.", true},
		{"allowed.test", "a.allowed.test.", false},
		// DNS folds ASCII case only. The library hands over other bytes escaped (\226\132\170), but the
		// filter does not rely on that: the Kelvin sign lower-cases to k in Unicode.
		{"*.allowed.test", "\u212a.allowed.test.", false},
		{"k.allowed.test", "\u212a.allowed.test.", false},
	}
	for _, tc := range tests {
		_, labels := canonicalName(tc.name)
		pattern, err := policy.ParseName(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := labels != nil && pattern.Matches(labels); got != tc.want {
			t.Errorf("%s matches %s = %v, want %v", tc.name, tc.pattern, got, tc.want)
		}
	}
}

// TestDNSFilterMetadataNames: a wildcard that covers a cloud metadata name does not make it resolve.
func TestDNSFilterMetadataNames(t *testing.T) {
	fake := newFake(t)
	nw := wildcardNet(fake)
	nw.Allow = append(nw.Allow, policy.NetRule{Host: "*.google.internal", Proto: "tcp", Port: 80})
	n := setup(t, Config{Net: nw})
	server := resolver(t, n.ResolvConf())
	in(t, n, func() {
		if r, err := dnsLookup(server, "metadata.google.internal"); err != nil || r.Rcode != dns.RcodeRefused {
			t.Errorf("metadata.google.internal under *.google.internal: %v %v, want REFUSED", r, err)
		}
	})
	if got := n.DNS(); len(got) != 1 || got[0].Allowed || !strings.Contains(got[0].Reason, "metadata") {
		t.Errorf("DNS() = %+v, want the metadata name refused with its reason", got)
	}
	if len(fake.Messages()) != 0 {
		t.Errorf("the upstream was asked: %v", fake.Messages())
	}
	// Nor does the wildcard let a CNAME chain end there: the chain is checked with the same matching.
	// Before policy owned name matching, the chain check forgot the metadata rule and learnt the address.
	in(t, n, func() {
		if r, err := dnsLookup(server, "alias.allowed.test"); err != nil || r.Rcode != dns.RcodeRefused {
			t.Errorf("a CNAME to metadata.google.internal under *.google.internal: %v %v, want REFUSED", r, err)
		}
	})
}

// TestDNSFilterBounded: a flood of refused queries at full speed costs the filter a fixed number of
// goroutines (the DNS library's server started one per datagram, and sbx's memory followed the timing),
// every query is either logged or counted as dropped by the kernel, and the drops are noted. A query
// still queued when the log is read is judged first.
func TestDNSFilterBounded(t *testing.T) {
	fake := newFake(t)
	n := setup(t, Config{Net: contractNet(fake)})
	server := resolver(t, n.ResolvConf())
	base := runtime.NumGoroutine()
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if g := int64(runtime.NumGoroutine()); g > peak.Load() {
				peak.Store(g)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	const sent = 50_000
	msg, err := new(dns.Msg).SetQuestion("flood.refused.test.", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	in(t, n, func() {
		c, err := net.Dial("udp", server)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		for i := range sent {
			binary.BigEndian.PutUint16(msg, uint16(i))
			c.Write(msg)
		}
	})
	queries := n.DNS() // judges what is still queued
	close(stop)
	<-sampled
	logged := 0
	for _, q := range queries {
		if q.Name == "flood.refused.test" && !q.Allowed {
			logged += max(q.Count, 1)
		}
	}
	drops := n.dns.udp.drops()
	if logged == 0 || logged+drops != sent {
		t.Errorf("logged %d refused, the kernel dropped %d: want a sum of %d, some logged", logged, drops, sent)
	}
	if drops > 0 && !slices.ContainsFunc(n.Notes(), func(s string) bool { return strings.Contains(s, "dropped by the kernel") }) {
		t.Errorf("no note of %d dropped queries: %q", drops, n.Notes())
	}
	if extra := peak.Load() - int64(base); extra > udpWorkers+16 {
		t.Errorf("the filter ran %d goroutines more than before the flood; want at most its %d workers and a few", extra, udpWorkers)
	}
	t.Logf("%d queries: %d logged, %d dropped by the kernel; goroutines %d before, %d at most", sent, logged, drops, base, peak.Load())
}
