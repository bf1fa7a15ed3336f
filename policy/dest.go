package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

const destHint = `write a destination as host:port, ip:port, [v6]:port, cidr:port or udp:host:port; ports may be a range 8000-8100 or *`

// ParseDest parses a DEST as written in a profile and in --allow:
//
//	[tcp:|udp:]HOST:PORT      example.com:443, *.example.com:443, udp:dns.example:53
//	[tcp:|udp:]IP[:PORT]      203.0.113.7:443, [2001:db8::1]:443, 203.0.113.7 (every port)
//	[tcp:|udp:]CIDR[:PORT]    10.0.0.0/8:5432, [2001:db8::/32]:443, 192.0.2.0/24 (every port)
//
// PORT is a number, a range "8000-8100", or "*" for every port; a host name needs one. An IP becomes a
// /32 or /128 CIDR. The protocol defaults to tcp.
func ParseDest(s string) (NetRule, error) {
	r, err := parseDest(s)
	if err == nil && r.Proto == "" {
		r.Proto = "tcp"
	}
	return r, err
}

// parseDest is ParseDest that leaves Proto "" when the entry names none, so that deny entries without
// a protocol can cover both.
func parseDest(s string) (NetRule, error) {
	var r NetRule
	rest := strings.TrimSpace(s)
	if p, after, ok := strings.Cut(rest, ":"); ok && (strings.EqualFold(p, "tcp") || strings.EqualFold(p, "udp")) {
		r.Proto, rest = strings.ToLower(p), after
	}
	if rest == "" {
		return r, badValue(destHint, "empty destination %q", s)
	}
	target, port, hasPort, err := splitTarget(rest)
	if err != nil {
		return r, err
	}
	if err := r.setTarget(target); err != nil {
		return r, err
	}
	if !hasPort {
		if r.Host != "" {
			return r, badValue(fmt.Sprintf("write %s:443 for one port or %s:* for every port", r.Host, r.Host), "destination %q has no port", s)
		}
		return r, nil
	}
	return r, r.setPorts(port)
}

// splitTarget splits "target:port", honouring [v6] brackets and bare IPv6 addresses without a port.
func splitTarget(s string) (target, port string, hasPort bool, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", "", false, badValue(destHint, "missing ] in %q", s)
		}
		target, rest := s[1:end], s[end+1:]
		if rest == "" {
			return target, "", false, nil
		}
		if !strings.HasPrefix(rest, ":") {
			return "", "", false, badValue(destHint, "unexpected %q after ] in %q", rest, s)
		}
		return target, rest[1:], true, nil
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return s, "", false, nil
	}
	if _, err := netip.ParsePrefix(s); err == nil {
		return s, "", false, nil
	}
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return s, "", false, nil
	}
	target, port = s[:i], s[i+1:]
	if strings.Contains(target, ":") {
		return "", "", false, badValue("put IPv6 addresses in brackets: [2001:db8::1]:443", "ambiguous destination %q", s)
	}
	return target, port, true, nil
}

// setTarget sets Host or CIDR from what a person wrote; it is stricter than NetRule.Dest (a CIDR with
// bits outside its mask is refused, with the masked form as a hint) and writes the canonical form: an
// address as a /32 or /128, an IPv4-mapped address or range as IPv4, a name in lower case without the
// final dot.
func (r *NetRule) setTarget(t string) error {
	if a, err := netip.ParseAddr(t); err == nil {
		if a.Zone() != "" {
			return badValue("", "address %q has a zone, which a contract cannot match", t)
		}
		r.CIDR = unmapPrefix(netip.PrefixFrom(a, a.BitLen())).String()
		return nil
	}
	if strings.Contains(t, "/") {
		p, err := netip.ParsePrefix(t)
		if err != nil {
			return badValue("write a CIDR as 10.0.0.0/8 or [2001:db8::/32]", "%q is not a CIDR", t)
		}
		if p.Masked() != p {
			return badValue(fmt.Sprintf("did you mean %s?", p.Masked()), "CIDR %q has bits set outside its mask", t)
		}
		r.CIDR = unmapPrefix(p).String()
		return nil
	}
	n, err := ParseName(t)
	if err != nil {
		return err
	}
	r.Host = n.String()
	return nil
}

func (r *NetRule) setPorts(p string) error {
	p = strings.TrimSpace(p)
	if p == "*" {
		r.Port, r.PortEnd = 0, 0
		return nil
	}
	lo, hi, isRange := strings.Cut(p, "-")
	a, err := parsePort(lo)
	if err != nil {
		return err
	}
	r.Port = a
	if !isRange {
		return nil
	}
	b, err := parsePort(hi)
	if err != nil {
		return err
	}
	if b < a {
		return badValue(fmt.Sprintf("write the range low-high: %d-%d", b, a), "port range %q runs backwards", p)
	}
	if b > a {
		r.PortEnd = b
	}
	return nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return 0, badValue("ports are 1-65535, a range such as 8000-8100, or * for every port", "%q is not a port", s)
	}
	return n, nil
}

// String writes the rule in DEST syntax; ParseDest(r.String()) gives r back.
func (r NetRule) String() string {
	var b strings.Builder
	if r.Proto != "" {
		b.WriteString(r.Proto + ":")
	}
	addr := r.Host
	if r.CIDR != "" {
		addr = r.CIDR
		if p, err := netip.ParsePrefix(r.CIDR); err == nil && p.IsSingleIP() {
			addr = p.Addr().String()
		}
		if strings.Contains(addr, ":") && (r.Port != 0) {
			addr = "[" + addr + "]"
		}
	}
	b.WriteString(addr)
	switch {
	case r.Port == 0 && r.Host != "":
		b.WriteString(":*")
	case r.Port != 0 && r.PortEnd != 0:
		fmt.Fprintf(&b, ":%d-%d", r.Port, r.PortEnd)
	case r.Port != 0:
		fmt.Fprintf(&b, ":%d", r.Port)
	}
	return b.String()
}

// MarshalYAML writes the rule as a DEST string.
func (r NetRule) MarshalYAML() (any, error) { return r.String(), nil }

// netRuleMap is the mapping form of a network entry.
type netRuleMap struct {
	Host  string `yaml:"host,omitempty" doc:"DNS name or *.suffix"`
	IP    string `yaml:"ip,omitempty" doc:"IPv4 or IPv6 address"`
	CIDR  string `yaml:"cidr,omitempty" doc:"address range, 10.0.0.0/8"`
	Port  string `yaml:"port,omitempty" doc:"port number or * (default: every port)"`
	Ports string `yaml:"ports,omitempty" doc:"port range low-high"`
	Proto string `yaml:"proto,omitempty" doc:"tcp (default) or udp"`
}

// decodeNetRule accepts a DEST string or a mapping {host|ip|cidr, port|ports, proto}.
func (d *decoder) decodeNetRule(n *yaml.Node, r *NetRule, path string) error {
	if n.Kind == yaml.ScalarNode {
		s, _ := scalarString(n)
		rule, err := parseDest(s)
		if err != nil {
			return d.wrap(n, path, err)
		}
		*r = rule
		return nil
	}
	var m netRuleMap
	if err := d.decodeValue(n, structValue(&m), path); err != nil {
		return err
	}
	rule, err := m.rule()
	if err != nil {
		return d.wrap(n, path, err)
	}
	*r = rule
	return nil
}

func (m netRuleMap) rule() (NetRule, error) {
	var r NetRule
	set := 0
	for _, t := range []string{m.Host, m.IP, m.CIDR} {
		if t != "" {
			set++
			if err := r.setTarget(t); err != nil {
				return r, err
			}
		}
	}
	if set != 1 {
		return r, badValue("write {host: example.com, port: 443}, {ip: 192.0.2.1, port: 53, proto: udp} or {cidr: 10.0.0.0/8}", "a network entry needs exactly one of host, ip, cidr")
	}
	if m.IP != "" && strings.Contains(m.IP, "/") {
		return r, badValue("use cidr: for ranges", "ip %q is a range", m.IP)
	}
	if m.Port != "" && m.Ports != "" {
		return r, badValue("use port: for one port, ports: for a range", "both port and ports given")
	}
	if p := m.Port + m.Ports; p != "" {
		if err := r.setPorts(p); err != nil {
			return r, err
		}
	} else if r.Host != "" {
		return r, badValue(`add port: 443, or port: "*" for every port`, "host %q has no port", r.Host)
	}
	switch p := strings.ToLower(m.Proto); p {
	case "", "tcp", "udp":
		r.Proto = p
	default:
		return r, badValue(suggestOr(p, []string{"tcp", "udp"}, "use tcp or udp"), "unknown proto %q", m.Proto)
	}
	return r, nil
}

func suggestOr(got string, known []string, fallback string) string {
	if h := suggest(got, known); h != "" {
		return h
	}
	return fallback
}

const listenerHint = `write listeners as tcp:8080, udp:5353, tcp:* (any port) or unix:*`

// ParseListener parses an allowed listener: "tcp:8080", "udp:5353", "tcp:*", "unix:*".
// tcp also matches tcp6 sockets and udp matches udp6.
func ParseListener(s string) (Listener, error) {
	proto, port, ok := strings.Cut(strings.TrimSpace(s), ":")
	proto = strings.ToLower(proto)
	if !ok {
		if _, err := strconv.Atoi(s); err == nil {
			return Listener{}, badValue(fmt.Sprintf("write tcp:%s or udp:%s", s, s), "listener %q has no protocol", s)
		}
		return Listener{}, badValue(listenerHint, "%q is not a listener", s)
	}
	switch proto {
	case "tcp", "udp":
	case "tcp6", "udp6":
		return Listener{}, badValue(fmt.Sprintf("write %s:%s; it matches %s too", proto[:3], port, proto), "listener %q names an IPv6 protocol", s)
	case "unix":
		if port != "*" {
			return Listener{}, badValue("unix listeners are allowed all at once: unix:*", "listener %q: unix takes *", s)
		}
		return Listener{Proto: "unix"}, nil
	default:
		return Listener{}, badValue(suggestOr(proto, []string{"tcp", "udp", "unix"}, listenerHint), "listener %q: unknown protocol %q", s, proto)
	}
	if port == "*" {
		return Listener{Proto: proto}, nil
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return Listener{}, badValue("ports are 1-65535, or * for any port", "listener %q: %q is not a port", s, port)
	}
	return Listener{Proto: proto, Port: n}, nil
}

// String writes the listener as ParseListener reads it.
func (l Listener) String() string {
	if l.Port == 0 {
		return l.Proto + ":*"
	}
	return fmt.Sprintf("%s:%d", l.Proto, l.Port)
}

// MarshalYAML writes the listener as "proto:port".
func (l Listener) MarshalYAML() (any, error) { return l.String(), nil }

func (l *Listener) unmarshalNode(n *yaml.Node) error {
	s, err := scalarString(n)
	if err != nil {
		return err
	}
	x, err := ParseListener(s)
	if err != nil {
		return err
	}
	*l = x
	return nil
}
