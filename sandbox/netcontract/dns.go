package netcontract

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"golang.org/x/net/netutil"
)

// TTL bounds of addresses learnt from DNS answers: a short TTL must not expire before the command had a
// chance to connect, a long one must not keep an address open for the rest of a long run.
const (
	minLearnTTL = 10 * time.Second
	maxLearnTTL = time.Hour
)

// forwardTimeout bounds one exchange with the upstream resolver.
const forwardTimeout = 3 * time.Second

// maxInFlight bounds the queries forwarded upstream at once: a flood of allowed names gets SERVFAIL
// rather than thousands of goroutines and sockets in sbx.
const maxInFlight = 64

// maxTCPConns bounds the DNS-over-TCP connections the filter serves at once.
const maxTCPConns = 16

// upstreamUDPSize is the EDNS buffer size sbx announces upstream (the DNS flag day 2020 value); it is
// the only EDNS the upstream sees.
const upstreamUDPSize = 1232

// maxChain bounds the CNAME chain followed in an answer.
const maxChain = 8

// dnsFilterConfig is what the DNS filter needs.
type dnsFilterConfig struct {
	net      policy.Network
	listen   netip.Addr // uplink side of the veth
	client   netip.Addr // the sandbox's address: the only one whose queries are answered
	uplinkFd int        // sockets are created in this namespace
	learn    func(addrs []netip.Addr, rules []policy.Dest, ttl time.Duration)
	// pc and ln, when set, are the sockets to serve on (made inside a rootless sandbox); uplinkFd is
	// then -1 and the upstream is asked from sbx's own namespace.
	pc net.PacketConn
	ln net.Listener
}

// dnsFilter answers the sandbox's queries. It never forwards the client's message: for an allowed name
// it asks the upstream a question of its own (one question, class IN, opcode QUERY, its own ID, its own
// EDNS, the name lower-cased), learns the addresses of the validated CNAME chain into the allow set
// before the answer goes back, and refuses everything else with a reason in the log.
type dnsFilter struct {
	cfg      dnsFilterConfig
	names    []policy.Name // the names that resolve: network.dns.allow and the host rules
	hosts    []policy.Dest // the host rules, which also give the ports of the addresses learnt
	upstream string
	udp      *udpServer    // the UDP side (dnsudp.go)
	servers  []*dns.Server // the TCP side: the library's server, its connections capped
	inFlight chan struct{}
	log      dnsLog
	ended    atomic.Bool // the filter is closing: allowed names are logged, not forwarded
	behind   atomic.Bool // the queue was not drained when the log was read: it may lack the last queries
}

// startDNSFilter opens UDP and TCP port 53 on the listen address inside the uplink namespace and serves.
func startDNSFilter(cfg dnsFilterConfig) (*dnsFilter, error) {
	up, err := upstream(cfg.net.DNS.Upstream)
	if err != nil {
		return nil, err
	}
	d := &dnsFilter{cfg: cfg, upstream: up, inFlight: make(chan struct{}, maxInFlight)}
	if err := d.parseNames(); err != nil {
		return nil, err
	}
	pc, ln := cfg.pc, cfg.ln
	addr := net.JoinHostPort(cfg.listen.String(), "53")
	if pc != nil {
		if err := d.serveUDP(pc); err != nil {
			return nil, err
		}
		d.serve(d.server(&dns.Server{Listener: netutil.LimitListener(ln, maxTCPConns)}))
		return d, nil
	}
	err = inNetNS(cfg.uplinkFd, func() (err error) {
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return err
		}
		if ln, err = net.Listen("tcp", addr); err != nil {
			pc.Close()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("DNS filter listening on %s: %w", addr, err)
	}
	if err := d.serveUDP(pc); err != nil {
		pc.Close()
		ln.Close()
		return nil, err
	}
	// TCP connections each hold a goroutine and buffers in sbx: past maxTCPConns, further ones wait in
	// the kernel's backlog.
	d.serve(d.server(&dns.Server{Listener: netutil.LimitListener(ln, maxTCPConns)}))
	return d, nil
}

// parseNames reads the names the profile lets resolve (checked by Config.validate).
func (d *dnsFilter) parseNames() error {
	for _, s := range d.cfg.net.DNS.Allow {
		n, err := policy.ParseName(s)
		if err != nil {
			return fmt.Errorf("DNS filter: network.dns.allow %q: %w", s, err)
		}
		d.names = append(d.names, n)
	}
	for _, r := range d.cfg.net.Allow {
		if r.Host == "" {
			continue
		}
		dest, err := r.Dest()
		if err != nil {
			return fmt.Errorf("DNS filter: network.allow %s: %w", r, err)
		}
		d.names, d.hosts = append(d.names, dest.Name), append(d.hosts, dest)
	}
	return nil
}

// server fills in the hooks every server of the filter has: messages from other addresses are dropped
// before parsing, every message the library would reject or cannot parse is logged.
func (d *dnsFilter) server(s *dns.Server) *dns.Server {
	s.Handler = d
	s.DecorateReader = func(r dns.Reader) dns.Reader { return clientOnly{Reader: r, d: d} }
	s.MsgAcceptFunc = d.accept
	s.MsgInvalidFunc = d.invalid
	return s
}

// serve starts the servers and waits until they run, so that close never races their start.
func (d *dnsFilter) serve(servers ...*dns.Server) {
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		s.NotifyStartedFunc = wg.Done
		go s.ActivateAndServe()
	}
	wg.Wait()
	d.servers = servers
}

// upstream is the resolver to forward to: the configured one, or the host's first nameserver.
func upstream(configured string) (string, error) {
	if configured != "" {
		if _, _, err := net.SplitHostPort(configured); err != nil {
			return "", fmt.Errorf("%w: dns upstream %q: want ip:port", ErrConfig, configured)
		}
		return configured, nil
	}
	cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
	if err != nil || len(cc.Servers) == 0 {
		return "", fmt.Errorf("no DNS upstream: set one in the profile or list a nameserver in /etc/resolv.conf")
	}
	return net.JoinHostPort(cc.Servers[0], cc.Port), nil
}

// close stops the servers. A TCP connection still open after a second is left to its read timeout: the
// run is over, and a slow shutdown of the filter is no failure of it.
func (d *dnsFilter) close() error {
	d.ended.Store(true)
	if d.udp != nil {
		d.udp.close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, s := range d.servers {
		_ = s.ShutdownContext(ctx)
	}
	return nil
}

// drain lets the workers judge and log what the command queued before the log is read (see
// udpServer.drain).
func (d *dnsFilter) drain() {
	if d.udp != nil && !d.udp.drain() {
		d.behind.Store(true)
	}
}

// queries returns the log: the first queries one by one, later ones counted per name. What the command
// queued is read first.
func (d *dnsFilter) queries() []report.DNSQuery {
	d.drain()
	return d.log.queries()
}

// notes says what the filter's log lacks: the log's own bounds, datagrams the kernel dropped before the
// filter read them, queries still queued at the end.
func (d *dnsFilter) notes() []string {
	d.drain()
	out := d.log.notes()
	if d.udp != nil {
		if n := d.udp.drops(); n > 0 {
			out = append(out, fmt.Sprintf("DNS filter: %d queries were dropped by the kernel before sbx read them (the filter's socket queue was full): their names are not in the log", n))
		}
	}
	if d.behind.Load() {
		out = append(out, fmt.Sprintf("DNS filter: queries were still queued %v after the command ended: the log may lack the last of them", drainTimeout))
	}
	return out
}

// clientOnly reads only messages from the sandbox's address. Anyone else who reaches the filter (another
// process on the uplink side; in host mode any local user) is dropped unanswered and counted apart:
// their queries are not the command's, and their answers must not be learnt.
type clientOnly struct {
	dns.Reader
	d *dnsFilter
}

// ReadUDP skips datagrams from other addresses.
func (c clientOnly) ReadUDP(conn *net.UDPConn, timeout time.Duration) ([]byte, *dns.SessionUDP, error) {
	for {
		m, s, err := c.Reader.ReadUDP(conn, timeout)
		if err != nil || c.d.fromClient(s.RemoteAddr()) {
			c.d.logResponse(m)
			return m, s, err
		}
		c.d.log.addForeign()
	}
}

// logResponse logs a message with the response bit set (dropped, see accept) with the name and type of
// its question as far as they can be read: the name the command sent is what the log is for.
func (d *dnsFilter) logResponse(m []byte) {
	if len(m) < 12 || m[2]&0x80 == 0 {
		return
	}
	q := report.DNSQuery{Name: rawName(m), Reason: "a DNS response, not a query"}
	if i := questionEnd(m); i > 0 && i+2 <= len(m) {
		q.Type = typeName(binary.BigEndian.Uint16(m[i:]))
	}
	d.log.add(q)
}

// ReadTCP ends a connection from another address before reading anything.
func (c clientOnly) ReadTCP(conn net.Conn, timeout time.Duration) ([]byte, error) {
	if !c.d.fromClient(conn.RemoteAddr()) {
		c.d.log.addForeign()
		return nil, errForeign
	}
	m, err := c.Reader.ReadTCP(conn, timeout)
	if err == nil {
		c.d.logResponse(m)
	}
	return m, err
}

// errForeign ends a TCP connection from an address other than the sandbox's.
var errForeign = errors.New("DNS client is not the sandbox")

// fromClient says whether a is the sandbox's address.
func (d *dnsFilter) fromClient(a net.Addr) bool {
	var ip net.IP
	switch v := a.(type) {
	case *net.UDPAddr:
		ip = v.IP
	case *net.TCPAddr:
		ip = v.IP
	}
	got, ok := netip.AddrFromSlice(ip)
	return ok && got.Unmap() == d.cfg.client
}

// accept lets every query through to the handler, which judges and logs it; the library's own checks
// would answer some messages (UPDATE, NOTIFY, several questions) without the log seeing them.
func (d *dnsFilter) accept(h dns.Header) dns.MsgAcceptAction {
	if h.Bits&(1<<15) != 0 { // QR: a response sent to a resolver, logged with its name by the reader
		return dns.MsgIgnore
	}
	return dns.MsgAccept
}

// invalid logs a message that could not be parsed (a name over 255 bytes, a truncated record, ...),
// with the name as far as it could be read. The library answers FORMERR.
func (d *dnsFilter) invalid(m []byte, err error) {
	d.log.add(report.DNSQuery{Name: rawName(m), Reason: "malformed message: " + err.Error()})
}

// ServeDNS implements dns.Handler.
func (d *dnsFilter) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	q, why := checkQuery(req)
	entry := report.DNSQuery{Name: logName(q.Name), Type: typeName(q.Qtype), Reason: why}
	if why != "" {
		d.refuse(w, req, entry)
		return
	}
	ask, labels := canonicalName(q.Name)
	if m, ok := localAnswer(req, labels); ok {
		entry.Allowed, entry.Reason = true, "a name of the sandbox itself, answered by sbx"
		d.log.add(entry)
		reply(w, m)
		return
	}
	rules, ok := d.match(labels)
	if !ok && policy.IsMetadataName(labels) {
		entry.Reason = "a cloud metadata name, allowed only when named exactly"
	}
	if !ok {
		d.refuse(w, req, entry)
		return
	}
	if d.ended.Load() {
		entry.Allowed, entry.Reason = true, "asked as the command ended, not forwarded"
		d.log.add(entry)
		reply(w, new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
		return
	}
	select {
	case d.inFlight <- struct{}{}:
		defer func() { <-d.inFlight }()
	default:
		entry.Allowed, entry.Reason = true, "too many queries in flight, answered SERVFAIL"
		d.log.add(entry)
		reply(w, new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
		return
	}
	d.resolve(w, req, entry, ask, rules)
}

// resolve asks the upstream sbx's own question for an allowed name, checks the answer's CNAME chain,
// learns its addresses and answers the client.
func (d *dnsFilter) resolve(w dns.ResponseWriter, req *dns.Msg, entry report.DNSQuery, ask string, rules []policy.Dest) {
	resp, err := d.forward(upstreamQuery(ask, req.Question[0].Qtype))
	if err != nil {
		entry.Allowed, entry.Reason = true, "no answer from the upstream" // stable: one log key, not one per socket
		d.log.add(entry)
		reply(w, new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
		return
	}
	chain, bad := d.chain(ask, resp)
	if bad != "" {
		entry.Reason = "CNAME to " + logName(bad) + ", which is not allowed"
		d.refuse(w, req, entry)
		return
	}
	entry.Allowed = true
	d.log.add(entry)
	d.learnAnswers(resp, chain, rules)
	reply(w, clientReply(req, resp, w))
}

// Hostname is the sandbox's host name, which its /etc/hosts gives 127.0.1.1.
const Hostname = "sbx"

// localAnswer answers the names that are the sandbox's own without the upstream, as a host's resolver
// does: localhost and the names below it (RFC 6761) and the sandbox's host name. A and the rest come
// from the sandbox's /etc/hosts first; what reaches the filter is mostly the AAAA question that comes
// first from getent and glibc when /etc/hosts has no ::1 line (the host's may have none, and the
// sandbox's follows it): that gets an empty answer (the name exists, with no such address), so that
// the lookup goes on to A instead of counting as a refused query. ok is false for any other name.
func localAnswer(req *dns.Msg, labels []string) (*dns.Msg, bool) {
	if !ownName(labels) {
		return nil, false
	}
	addr := net.IPv4(127, 0, 0, 1)
	if labels[len(labels)-1] != "localhost" {
		addr = net.IPv4(127, 0, 1, 1)
	}
	m := new(dns.Msg).SetReply(req)
	m.Authoritative, m.RecursionAvailable = true, true
	if q := req.Question[0]; q.Qtype == dns.TypeA && q.Qclass == dns.ClassINET {
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0}, A: addr}}
	}
	return m, true
}

// ownName tells whether labels (canonicalName's) name the sandbox itself: localhost and the names below
// it (RFC 6761), and the sandbox's host name.
func ownName(labels []string) bool {
	if len(labels) == 0 {
		return false
	}
	return labels[len(labels)-1] == "localhost" || len(labels) == 1 && labels[0] == Hostname
}

// refuse logs a refused query and answers REFUSED.
func (d *dnsFilter) refuse(w dns.ResponseWriter, req *dns.Msg, entry report.DNSQuery) {
	entry.Allowed = false
	d.log.add(entry)
	m := new(dns.Msg).SetRcode(req, dns.RcodeRefused)
	m.Ns, m.Answer, m.Extra = nil, nil, nil
	reply(w, m)
}

// reply writes m; a client gone away is not sbx's problem.
func reply(w dns.ResponseWriter, m *dns.Msg) { _ = w.WriteMsg(m) }

// refusedTypes are query types that are not a plain lookup of one name.
var refusedTypes = map[uint16]bool{
	dns.TypeAXFR: true, dns.TypeIXFR: true, dns.TypeANY: true, dns.TypeMAILA: true, dns.TypeMAILB: true,
	dns.TypeOPT: true, dns.TypeTSIG: true, dns.TypeTKEY: true,
}

// checkQuery says why req is not a plain query of one name ("" when it is): the filter refuses anything
// that could carry more than the question.
func checkQuery(req *dns.Msg) (dns.Question, string) {
	var q dns.Question
	if len(req.Question) > 0 {
		q = req.Question[0]
	}
	switch {
	case req.Opcode != dns.OpcodeQuery:
		return q, "opcode " + opcodeName(req.Opcode)
	case len(req.Question) != 1:
		return q, fmt.Sprintf("%d questions", len(req.Question))
	case q.Qclass != dns.ClassINET:
		return q, "class " + dns.Class(q.Qclass).String()
	case refusedTypes[q.Qtype]:
		return q, "type " + typeName(q.Qtype)
	case len(req.Answer) > 0 || len(req.Ns) > 0:
		return q, "records in the answer or authority section"
	case len(req.Extra) > 1 || len(req.Extra) == 1 && req.IsEdns0() == nil:
		return q, "records in the additional section"
	}
	if _, labels := canonicalName(q.Name); labels == nil {
		return q, "a label with characters other than letters, digits, - and _"
	}
	return q, ""
}

// opcodeName names an opcode, or gives its number.
func opcodeName(op int) string {
	if s, ok := dns.OpcodeToString[op]; ok {
		return s
	}
	return fmt.Sprint(op)
}

// typeName names a query type, or gives TYPEnnn.
func typeName(t uint16) string { return dns.Type(t).String() }

// logName is a name as the client sent it, in presentation format (escaped), without the final dot.
func logName(name string) string {
	if name == "." {
		return name
	}
	return strings.TrimSuffix(name, ".")
}

// canonicalName is the lower-cased fully qualified name and its labels. Labels are read from the wire
// form (a dot inside a label is escaped in presentation format); a name with any label holding
// something other than letters, digits, - and _ has no labels (nil): it is never forwarded, so no
// escaped dot or odd byte can make it look like a name below an allowed one.
func canonicalName(name string) (string, []string) {
	labels := dns.SplitDomainName(name)
	for i, l := range labels {
		if !plainLabel(l) {
			return "", nil
		}
		labels[i] = strings.ToLower(l) // only ASCII by now: no Unicode folding (the Kelvin sign to k)
	}
	if len(labels) == 0 {
		return "", nil
	}
	return strings.Join(labels, ".") + ".", labels
}

// plainLabel: 1-63 of a-z, A-Z, 0-9, - and _.
func plainLabel(l string) bool {
	if l == "" || len(l) > 63 {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// match says whether the name with these labels may resolve, and which host rules give its addresses
// ports. What a pattern matches is policy.Name's to say: labels without regard to case, a wildcard only
// below its suffix and never over a cloud metadata name.
func (d *dnsFilter) match(labels []string) ([]policy.Dest, bool) {
	if labels == nil {
		return nil, false
	}
	ok := false
	for _, n := range d.names {
		ok = ok || n.Matches(labels)
	}
	var rules []policy.Dest
	for _, h := range d.hosts {
		if h.Name.Matches(labels) {
			rules = append(rules, h)
		}
	}
	return rules, ok
}

// upstreamQuery is the only message the upstream sees for a query: built by sbx, nothing of the
// client's message in it but the question's type and the (canonical) name.
func upstreamQuery(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.Id = dns.Id()
	m.RecursionDesired = true
	m.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: dns.ClassINET}}
	m.SetEdns0(upstreamUDPSize, false)
	return m
}

// clientReply is the upstream's answer re-addressed to the client: its ID and question, the upstream's
// records without the upstream's EDNS, EDNS of sbx's own when the client used EDNS, cut to what the
// client can take over UDP.
func clientReply(req, resp *dns.Msg, w dns.ResponseWriter) *dns.Msg {
	m := new(dns.Msg).SetReply(req)
	m.Rcode, m.RecursionAvailable = resp.Rcode, resp.RecursionAvailable
	m.Answer, m.Ns = resp.Answer, resp.Ns
	for _, rr := range resp.Extra {
		if rr.Header().Rrtype != dns.TypeOPT {
			m.Extra = append(m.Extra, rr)
		}
	}
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		size = max(int(min(opt.UDPSize(), upstreamUDPSize)), dns.MinMsgSize)
		m.SetEdns0(uint16(size), false)
	}
	if _, tcp := w.RemoteAddr().(*net.TCPAddr); !tcp {
		m.Truncate(size)
	}
	return m
}

// forward asks the upstream over UDP, and again over TCP when the answer is truncated.
func (d *dnsFilter) forward(req *dns.Msg) (*dns.Msg, error) {
	resp, err := d.exchange(req, "udp")
	if err == nil && resp.Truncated {
		resp, err = d.exchange(req, "tcp")
	}
	return resp, err
}

// exchange sends req to the upstream over a socket created in the uplink namespace: a socket made on an
// ordinary goroutine would belong to sbx's namespace, not the uplink's.
func (d *dnsFilter) exchange(req *dns.Msg, network string) (*dns.Msg, error) {
	var conn net.Conn
	dial := func() (err error) {
		conn, err = net.DialTimeout(network, d.upstream, forwardTimeout)
		return err
	}
	var err error
	if d.cfg.uplinkFd < 0 {
		err = dial() // rootless: sbx never leaves its own namespace, which is the uplink's
	} else {
		err = inNetNS(d.cfg.uplinkFd, dial)
	}
	if err != nil {
		return nil, fmt.Errorf("dialing DNS upstream %s: %w", d.upstream, err)
	}
	defer conn.Close()
	c := &dns.Client{Net: network, Timeout: forwardTimeout, UDPSize: upstreamUDPSize}
	resp, _, err := c.ExchangeWithConn(req, &dns.Conn{Conn: conn})
	return resp, err
}

// chain follows the CNAME records of the answer from the asked name and returns every name on it. A
// CNAME to a name the profile does not allow ends the walk: its target is returned as bad, and nothing
// of the answer is learnt.
func (d *dnsFilter) chain(ask string, resp *dns.Msg) (map[string]bool, string) {
	on := map[string]bool{ask: true}
	cur := ask
	for range maxChain {
		next := ""
		for _, rr := range resp.Answer {
			if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, cur) {
				next = c.Target
				break
			}
		}
		if next == "" {
			break
		}
		canon, labels := canonicalName(next)
		if _, ok := d.match(labels); !ok || on[canon] {
			return nil, next
		}
		on[canon], cur = true, canon
	}
	return on, ""
}

// learnAnswers hands the contract the A and AAAA records whose owner is on the validated chain; any
// other address in the answer (an unrelated owner name) is passed to the client but never made
// reachable.
func (d *dnsFilter) learnAnswers(resp *dns.Msg, chain map[string]bool, rules []policy.Dest) {
	if len(rules) == 0 {
		return
	}
	for _, rr := range resp.Answer {
		var ip net.IP
		switch r := rr.(type) {
		case *dns.A:
			ip = r.A
		case *dns.AAAA:
			ip = r.AAAA
		default:
			continue
		}
		owner, _ := canonicalName(rr.Header().Name)
		a, ok := netip.AddrFromSlice(ip)
		if !ok || !chain[owner] {
			continue
		}
		ttl := min(max(time.Duration(rr.Header().Ttl)*time.Second, minLearnTTL), maxLearnTTL)
		d.cfg.learn([]netip.Addr{a.Unmap()}, rules, ttl)
	}
}

// rawName reads the first question's name from a message the library could not parse, escaped, as far
// as it goes (at most maxRawName characters): a name over 255 bytes still shows in the log.
func rawName(m []byte) string {
	const maxRawName = 300
	var b strings.Builder
	for off := 12; off < len(m) && b.Len() < maxRawName; {
		n := int(m[off])
		if n == 0 || n&0xc0 != 0 {
			break
		}
		end := min(off+1+n, len(m))
		for _, c := range m[off+1 : end] {
			writeEscaped(&b, c)
		}
		b.WriteByte('.')
		off = end
	}
	return strings.TrimSuffix(b.String(), ".")
}

// writeEscaped writes one label byte in presentation format.
func writeEscaped(b *strings.Builder, c byte) {
	switch {
	case c == '.' || c == '\\' || c == '"' || c == ';' || c == '(' || c == ')' || c == '@' || c == '$':
		b.WriteByte('\\')
		b.WriteByte(c)
	case c < ' ' || c > '~':
		fmt.Fprintf(b, "\\%03d", c)
	default:
		b.WriteByte(c)
	}
}
