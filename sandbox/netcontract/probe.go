package netcontract

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"golang.org/x/sys/unix"
)

// Probe target kinds: a deny target passes when it is blocked, an allow target when it is reachable.
const (
	KindDeny  = "deny"
	KindAllow = "allow"
)

// Probe outcomes.
const (
	OutcomeBlocked   = "blocked"   // refused at once, no route, no answer, or the name did not resolve
	OutcomeReachable = "reachable" // connected, echoed, or the name resolved
	OutcomeError     = "error"     // the probe itself failed
	// OutcomeNotRefused is a deny target that looked blocked from inside, but not by the contract: the
	// destination itself reset, answered unreachable or stayed silent, or the upstream had no such name.
	// The packets left the sandbox; the probe fails.
	OutcomeNotRefused = "not refused by the contract"
)

// Target is one destination the probe tries from inside the sandbox. Its JSON form is the target's part
// of a result in `sbx probe --json` (sbx.probe/v1).
type Target struct {
	Kind  string `json:"kind"`           // KindDeny or KindAllow
	Label string `json:"label"`          // what it stands for: "cloud metadata", "gateway ssh", "allow entry 2"
	Proto string `json:"proto"`          // "tcp", "udp" or "dns" (Addr is then a name to resolve)
	Addr  string `json:"addr"`           // IP address, or a host name (resolved first for tcp and udp)
	Port  int    `json:"port,omitempty"` // 0 for dns
	// Resolver is the DNS server ("ip:port") for names; "" means the first nameserver of /etc/resolv.conf,
	// which inside a sandbox is sbx's DNS filter.
	Resolver string `json:"resolver,omitempty"`
}

// Result is what one target gave: one entry of results in `sbx probe --json` (sbx.probe/v1), the
// target's fields inline.
type Result struct {
	Target
	Outcome string `json:"outcome"` // OutcomeBlocked, OutcomeReachable or OutcomeError
	Pass    bool   `json:"pass"`
	Detail  string `json:"detail,omitempty"`
}

// String is the probe's line for the target: "DENY cloud metadata 169.254.169.254:80 -> blocked".
func (r Result) String() string {
	dest := r.Target.Addr
	if r.Target.Port != 0 {
		dest = net.JoinHostPort(dest, strconv.Itoa(r.Target.Port))
	}
	if r.Target.Proto != "tcp" {
		dest = r.Target.Proto + ":" + dest
	}
	s := fmt.Sprintf("%s %s %s -> %s", strings.ToUpper(r.Target.Kind), r.Target.Label, dest, r.Outcome)
	if !r.Pass {
		s += " (FAIL"
		if r.Detail != "" {
			s += ": " + r.Detail
		}
		s += ")"
	}
	return s
}

// Passed says whether every result passed.
func Passed(results []Result) bool {
	for _, r := range results {
		if !r.Pass {
			return false
		}
	}
	return len(results) > 0
}

// gatewayPorts are services typically found on a LAN gateway or in a private network.
var gatewayPorts = []struct {
	port  int
	label string
}{{22, "ssh"}, {6379, "redis"}, {5432, "postgres"}}

// ProbeTargets lists the built-in deny targets (cloud metadata by address and by name, typical gateways
// on ports 22, 6379 and 5432, a UDP target, a random name outside the allow list) and one allow target per
// allow entry that names a single destination. Wildcard names and address ranges cannot be probed as a
// whole: a range is probed at its first host address, a wildcard name not at all.
//
// The profile's own non-default deny entries and the caller's deny (sbx probe --deny) are deny targets
// too, one address per range at its first port, as allow entries are allow targets. So are the profile's
// except entries: each opens an always-denied address, which the probe shows reachable (or fails on).
func ProbeTargets(nw policy.Network, deny []policy.NetRule) []Target {
	t := []Target{
		{Kind: KindDeny, Label: "cloud metadata", Proto: "tcp", Addr: "169.254.169.254", Port: 80},
		{Kind: KindDeny, Label: "cloud metadata v6", Proto: "tcp", Addr: "fd00:ec2::254", Port: 80},
		{Kind: KindDeny, Label: "cloud metadata by name", Proto: "dns", Addr: "metadata.google.internal"},
		{Kind: KindDeny, Label: "cloud metadata alibaba", Proto: "tcp", Addr: "100.100.100.200", Port: 80},
	}
	for _, gw := range []string{"10.0.0.1", "172.16.0.1", "192.168.1.1"} {
		for _, p := range gatewayPorts {
			t = append(t, Target{Kind: KindDeny, Label: "gateway " + p.label, Proto: "tcp", Addr: gw, Port: p.port})
		}
	}
	t = append(t,
		Target{Kind: KindDeny, Label: "gateway snmp", Proto: "udp", Addr: "192.168.1.1", Port: 161},
		Target{Kind: KindDeny, Label: "random name", Proto: "dns", Addr: randomName()},
	)
	t = append(t, ruleTargets(nw.Deny, KindDeny, "deny entry ")...)
	t = append(t, ruleTargets(deny, KindDeny, "--deny ")...)
	exc := ruleTargets(nw.Except, KindAllow, "except entry ")
	for i := range exc {
		exc[i].Label += " (always denied, opened by the profile)"
	}
	t = append(t, exc...)
	return append(t, allowTargets(nw)...)
}

// ruleTargets is one target of kind per rule that names a single destination or a range (probed at its
// first host address and first port, 443 for every port); wildcard names are left out.
func ruleTargets(rules []policy.NetRule, kind, label string) []Target {
	var t []Target
	for i, r := range rules {
		d, err := r.Dest()
		if err != nil || d.Name.IsWildcard() {
			continue
		}
		addr := d.Name.String()
		if !d.IsHost() {
			addr = probeAddr(d.Prefix).String()
		}
		port := int(d.PortLo) // the first port of a range
		if port == 0 {
			port = 443
		}
		t = append(t, Target{Kind: kind, Label: label + strconv.Itoa(i+1), Proto: d.Protos[0], Addr: addr, Port: port})
	}
	return t
}

// randomName is a name nobody allows.
func randomName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "sbx-probe-" + hex.EncodeToString(b) + ".invalid"
}

// allowTargets is one target per allow entry and per allowed DNS name.
func allowTargets(nw policy.Network) []Target {
	t := ruleTargets(nw.Allow, KindAllow, "allow entry ")
	for _, s := range nw.DNS.Allow {
		if name, err := policy.ParseName(s); err == nil && !name.IsWildcard() {
			t = append(t, Target{Kind: KindAllow, Label: "allowed name", Proto: "dns", Addr: name.String()})
		}
	}
	return t
}

// probeAddr is the address that stands for a prefix: itself for a single host, else the first host.
func probeAddr(p netip.Prefix) netip.Addr {
	if p.IsSingleIP() {
		return p.Addr()
	}
	return p.Masked().Addr().Next()
}

// RunProbe tries every target in turn and judges it. It must run inside the sandbox: in a process that
// lives in the sandbox's network namespace, or on a goroutine locked to a thread inside it (it opens every
// socket on the calling goroutine for that reason). timeout bounds each attempt; UDP silence lasts that
// long.
func RunProbe(targets []Target, timeout time.Duration) []Result {
	out := make([]Result, 0, len(targets))
	for _, t := range targets {
		r := probe(t, timeout)
		r.Target = t
		r.Pass = r.Outcome != OutcomeError && (r.Outcome == OutcomeBlocked) == (t.Kind == KindDeny)
		out = append(out, r)
	}
	return out
}

// Confirm checks every deny target that RunProbe saw blocked against what the contract itself recorded
// (Net.Denied and Net.DNS, or the report's network section): a blocked tcp or udp target counts only when
// the denied record holds its address, protocol and port (or an always-deny range holding the address),
// a blocked name only when the DNS filter refused it. Anything else becomes OutcomeNotRefused and fails.
// Silence or a reset from the destination proves nothing about the contract.
func Confirm(results []Result, denied []report.Denied, queries []report.DNSQuery) []Result {
	out := make([]Result, len(results))
	for i, r := range results {
		out[i] = r
		if r.Target.Kind != KindDeny || r.Outcome != OutcomeBlocked || refusedByContract(r.Target, denied, queries) {
			continue
		}
		out[i].Outcome, out[i].Pass = OutcomeNotRefused, false
		out[i].Detail = "the contract let it out (" + r.Detail + ")"
	}
	return out
}

// refusedByContract says whether the contract's own record shows t refused.
func refusedByContract(t Target, denied []report.Denied, queries []report.DNSQuery) bool {
	if t.Proto == "dns" {
		return slices.ContainsFunc(queries, func(q report.DNSQuery) bool {
			return !q.Allowed && strings.EqualFold(strings.TrimSuffix(q.Name, "."), strings.TrimSuffix(t.Addr, "."))
		})
	}
	a, err := netip.ParseAddr(t.Addr)
	if err != nil {
		return false // a deny target by name that resolved: the DNS filter did not refuse it
	}
	return slices.ContainsFunc(denied, func(d report.Denied) bool {
		if d.Direction != "" {
			return false
		}
		if p, err := netip.ParsePrefix(d.Address); err == nil && d.Proto == "any" {
			return p.Contains(a)
		}
		got, err := netip.ParseAddr(d.Address)
		return err == nil && got == a.Unmap() && d.Proto == t.Proto && d.Port == t.Port
	})
}

// probe tries one target.
func probe(t Target, timeout time.Duration) Result {
	if t.Proto == "dns" {
		addrs, err := resolve(t.Addr, t.Resolver, timeout)
		if err != nil {
			return Result{Outcome: OutcomeBlocked, Detail: err.Error()}
		}
		return Result{Outcome: OutcomeReachable, Detail: "resolved to " + addrs[0].String()}
	}
	addr, err := probeDest(t, timeout)
	if err != nil {
		return Result{Outcome: OutcomeError, Detail: err.Error()}
	}
	if t.Proto == "udp" {
		return probeUDP(addr, timeout)
	}
	return probeTCP(addr, timeout)
}

// probeDest is ip:port of a target, resolving a name first.
func probeDest(t Target, timeout time.Duration) (string, error) {
	a, err := netip.ParseAddr(t.Addr)
	if err != nil {
		addrs, rerr := resolve(t.Addr, t.Resolver, timeout)
		if rerr != nil {
			return "", rerr
		}
		a = addrs[0]
	}
	return net.JoinHostPort(a.String(), strconv.Itoa(t.Port)), nil
}

// probeTCP connects: a connection is reachable, a reset or an unreachable is blocked, so is silence.
func probeTCP(addr string, timeout time.Duration) Result {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err == nil {
		c.Close()
		return Result{Outcome: OutcomeReachable, Detail: "connected"}
	}
	return classify(err)
}

// probeUDP sends a datagram: an answer is reachable; an ICMP error or silence is blocked.
func probeUDP(addr string, timeout time.Duration) Result {
	c, err := net.DialTimeout("udp", addr, timeout)
	if err != nil {
		return classify(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("sbx probe\n")); err != nil {
		return classify(err)
	}
	if _, err := c.Read(make([]byte, 512)); err != nil {
		return classify(err)
	}
	return Result{Outcome: OutcomeReachable, Detail: "answered"}
}

// classify maps a socket error to an outcome.
func classify(err error) Result {
	switch {
	case errors.Is(err, unix.ECONNREFUSED), errors.Is(err, unix.EHOSTUNREACH), errors.Is(err, unix.ENETUNREACH),
		errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return Result{Outcome: OutcomeBlocked, Detail: err.Error()}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return Result{Outcome: OutcomeBlocked, Detail: "no answer within the timeout"}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return Result{Outcome: OutcomeBlocked, Detail: "no answer within the timeout"}
	}
	return Result{Outcome: OutcomeError, Detail: err.Error()}
}

// resolve asks for A then AAAA records of name; an error means the name did not resolve.
func resolve(name, server string, timeout time.Duration) ([]netip.Addr, error) {
	if server == "" {
		cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil || len(cc.Servers) == 0 {
			return nil, fmt.Errorf("no nameserver in /etc/resolv.conf")
		}
		server = net.JoinHostPort(cc.Servers[0], cc.Port)
	}
	c := &dns.Client{Timeout: timeout}
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		r, _, err := c.Exchange(new(dns.Msg).SetQuestion(dns.Fqdn(name), qt), server)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", name, err)
		}
		if r.Rcode != dns.RcodeSuccess {
			return nil, fmt.Errorf("resolving %s: %s", name, dns.RcodeToString[r.Rcode])
		}
		if addrs := answerAddrs(r); len(addrs) > 0 {
			return addrs, nil
		}
	}
	return nil, fmt.Errorf("resolving %s: no address", name)
}

// answerAddrs are the A and AAAA records of an answer.
func answerAddrs(r *dns.Msg) []netip.Addr {
	var out []netip.Addr
	for _, rr := range r.Answer {
		switch v := rr.(type) {
		case *dns.A:
			a, _ := netip.AddrFromSlice(v.A)
			out = append(out, a.Unmap())
		case *dns.AAAA:
			a, _ := netip.AddrFromSlice(v.AAAA)
			out = append(out, a)
		}
	}
	return out
}
