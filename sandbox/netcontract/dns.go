package netcontract

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
)

// TTL bounds of addresses learnt from DNS answers: a short TTL must not expire before the command had a
// chance to connect, a long one must not keep an address open for the rest of a long run.
const (
	minLearnTTL = 10 * time.Second
	maxLearnTTL = time.Hour
)

// forwardTimeout bounds one exchange with the upstream resolver.
const forwardTimeout = 3 * time.Second

// dnsFilterConfig is what the DNS filter needs.
type dnsFilterConfig struct {
	net      policy.Network
	listen   netip.Addr // uplink side of the veth
	uplinkFd int        // sockets are created in this namespace
	learn    func(addrs []netip.Addr, rules []policy.NetRule, ttl time.Duration)
}

// dnsFilter answers the sandbox's queries: allowed names are forwarded upstream and their addresses added to
// the allow set before the answer goes back; every other name gets REFUSED and is never forwarded.
type dnsFilter struct {
	cfg      dnsFilterConfig
	upstream string
	servers  []*dns.Server

	mu   sync.Mutex
	seen []report.DNSQuery
}

// startDNSFilter opens UDP and TCP port 53 on the listen address inside the uplink namespace and serves.
func startDNSFilter(cfg dnsFilterConfig) (*dnsFilter, error) {
	up, err := upstream(cfg.net.DNS.Upstream)
	if err != nil {
		return nil, err
	}
	d := &dnsFilter{cfg: cfg, upstream: up}
	var pc net.PacketConn
	var ln net.Listener
	addr := net.JoinHostPort(cfg.listen.String(), "53")
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
	d.serve(&dns.Server{PacketConn: pc, Handler: d}, &dns.Server{Listener: ln, Handler: d})
	return d, nil
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

// close stops the servers.
func (d *dnsFilter) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var errs []error
	for _, s := range d.servers {
		errs = append(errs, s.ShutdownContext(ctx))
	}
	return errors.Join(errs...)
}

// queries returns a copy of the queries seen so far.
func (d *dnsFilter) queries() []report.DNSQuery {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]report.DNSQuery{}, d.seen...)
}

// ServeDNS implements dns.Handler.
func (d *dnsFilter) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	if len(req.Question) != 1 {
		reply(w, new(dns.Msg).SetRcode(req, dns.RcodeRefused)) // nobody sends more than one question
		return
	}
	q := req.Question[0]
	name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
	rules, ok := d.match(name)
	d.mu.Lock()
	d.seen = append(d.seen, report.DNSQuery{Name: name, Type: dns.Type(q.Qtype).String(), Allowed: ok})
	d.mu.Unlock()
	if !ok {
		reply(w, new(dns.Msg).SetRcode(req, dns.RcodeRefused))
		return
	}
	resp, err := d.forward(req)
	if err != nil {
		reply(w, new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
		return
	}
	d.learnAnswers(resp, rules)
	reply(w, resp)
}

// reply writes m; a client gone away is not sbx's problem.
func reply(w dns.ResponseWriter, m *dns.Msg) { _ = w.WriteMsg(m) }

// match says whether name may resolve, and which allow rules give its addresses ports.
func (d *dnsFilter) match(name string) ([]policy.NetRule, bool) {
	ok := false
	for _, p := range d.cfg.net.DNS.Allow {
		ok = ok || nameMatches(p, name)
	}
	var rules []policy.NetRule
	for _, r := range d.cfg.net.Allow {
		if r.Host != "" && nameMatches(r.Host, name) {
			rules, ok = append(rules, r), true
		}
	}
	return rules, ok
}

// nameMatches matches a name against "example.com" (exactly that name) or "*.example.com" (any name
// below it, not the name itself).
func nameMatches(pattern, name string) bool {
	pattern = strings.ToLower(strings.TrimSuffix(pattern, "."))
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(name, "."+suffix)
	}
	return name == pattern
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
	err := inNetNS(d.cfg.uplinkFd, func() (err error) {
		conn, err = net.DialTimeout(network, d.upstream, forwardTimeout)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dialing DNS upstream %s: %w", d.upstream, err)
	}
	defer conn.Close()
	c := &dns.Client{Net: network, Timeout: forwardTimeout}
	resp, _, err := c.ExchangeWithConn(req, &dns.Conn{Conn: conn})
	return resp, err
}

// learnAnswers hands the A and AAAA records of an answer to the contract. CNAME chains are followed by the
// upstream: every address in the answer section belongs to the name asked.
func (d *dnsFilter) learnAnswers(resp *dns.Msg, rules []policy.NetRule) {
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
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		ttl := min(max(time.Duration(rr.Header().Ttl)*time.Second, minLearnTTL), maxLearnTTL)
		d.cfg.learn([]netip.Addr{a.Unmap()}, rules, ttl)
	}
}
