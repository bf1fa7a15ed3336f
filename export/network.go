package export

import (
	"strconv"
	"strings"

	"github.com/sbx-dev/sbx/policy"
)

// kubeDNS selects the cluster's DNS pods for the NetworkPolicy rule that lets names resolve.
var kubeDNS = NPPeer{
	NamespaceSelector: &LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
	PodSelector:       &LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
}

// networkPolicy denies all ingress but the plan's ingress ports and allows egress only to the plan's CIDR entries, with the
// always-denied ranges cut out of each. Host names cannot be written in a NetworkPolicy: they go to
// the CiliumNetworkPolicy, and this policy only lets DNS through for them.
func networkPolicy(plan *policy.Plan, f *Fidelity) NetworkPolicySpec {
	spec := NetworkPolicySpec{
		PodSelector: LabelSelector{MatchLabels: map[string]string{profileLabel: labelValue(plan)}},
		PolicyTypes: []string{"Ingress", "Egress"},
		Egress:      []NPRule{},
	}
	n := plan.Network
	if n.Mode != policy.NetContract {
		f.add("network.mode", Translated, "none: NetworkPolicy with no ingress and no egress rule (loopback stays)")
		return spec
	}
	f.add("network.mode", Translated, "contract: NetworkPolicy denies everything not allowed below")
	exc := exceptions(plan)
	hosts := false
	for _, r := range n.Allow {
		if r.Host != "" {
			hosts = true
			continue
		}
		d, err := r.Dest()
		if err != nil {
			continue
		}
		p := d.Prefix
		if insideAlwaysDeny(p, exc) {
			f.add("network.allow "+r.String(), NotExpressible, "inside an always-denied range; sbx refuses it too, so it is left out")
			continue
		}
		except := exceptWithin(p, exc)
		spec.Egress = append(spec.Egress, NPRule{To: []NPPeer{{IPBlock: &IPBlock{CIDR: p.String(), Except: except}}}, Ports: npPorts(d)})
		f.add("network.allow "+r.String(), Translated, "NetworkPolicy egress ipBlock %s with %d always-denied ranges in except", p, len(except))
	}
	if hosts {
		spec.Egress = append(spec.Egress, NPRule{To: []NPPeer{kubeDNS},
			Ports: []NPPort{{Protocol: "UDP", Port: 53}, {Protocol: "TCP", Port: 53}}})
	}
	if len(n.Deny) > 0 {
		f.add("network.deny", Partial, "a NetworkPolicy only allows: extra denies hold because nothing else is allowed; "+
			"a deny inside an allowed CIDR is not cut out (the CiliumNetworkPolicy's egressDeny is exact)")
	}
	f.add("network.always_deny", Translated, "metadata, RFC 1918, link-local, CGNAT and ULA ranges are in each ipBlock's except")
	for _, l := range n.Ingress {
		spec.Ingress = append(spec.Ingress, NPRule{Ports: []NPPort{{Protocol: strings.ToUpper(l.Proto), Port: l.Port}}})
		f.add("network.ingress "+l.String(), Translated, "NetworkPolicy ingress rule for that port, from anywhere")
	}
	return spec
}

// npPorts is one NetworkPolicy port per protocol of d: no port for every port, else the port or range.
func npPorts(d policy.Dest) []NPPort {
	var out []NPPort
	for _, proto := range d.Protos {
		p := NPPort{Protocol: strings.ToUpper(proto)}
		if d.PortLo != 0 {
			p.Port = int(d.PortLo)
		}
		if d.PortHi != d.PortLo && d.PortLo != 0 {
			p.EndPort = int(d.PortHi)
		}
		out = append(out, p)
	}
	return out
}

// ciliumPorts is what a host rule lets through, as Cilium ports: the rule's protocol, or TCP and UDP
// when it names none (policy.Dest), on its ports; port 0 is every port, in Cilium as in sbx. Without
// toPorts Cilium would allow every protocol (SCTP, ICMP) to the host.
func ciliumPorts(r policy.NetRule) []PortRule {
	protos := []string{"TCP", "UDP"}
	if r.Proto != "" {
		protos = []string{strings.ToUpper(r.Proto)}
	}
	var ports []PortProtocol
	for _, p := range protos {
		ports = append(ports, PortProtocol{Port: strconv.Itoa(r.Port), EndPort: r.PortEnd, Protocol: p})
	}
	return []PortRule{{Ports: ports}}
}

// ciliumPolicy is written when the plan allows host names: toFQDNs with their ports, a DNS rule that
// lets only the allowed names resolve (through Cilium's DNS proxy), and egressDeny for the
// always-denied ranges, which wins over any allow. nil when the plan allows no host name.
func ciliumPolicy(plan *policy.Plan, f *Fidelity) *CNPSpec {
	n := plan.Network
	var hostRules []policy.NetRule
	for _, r := range n.Allow {
		if r.Host != "" {
			hostRules = append(hostRules, r)
		}
	}
	if n.Mode != policy.NetContract || len(hostRules) == 0 {
		f.add("network.dns", Translated, "no host names allowed: no DNS rule and no CiliumNetworkPolicy")
		return nil
	}
	spec := &CNPSpec{EndpointSelector: LabelSelector{MatchLabels: map[string]string{profileLabel: labelValue(plan)}}}
	var dns []FQDN
	for _, name := range n.DNS.Allow {
		dns = append(dns, fqdn(name))
	}
	spec.Egress = append(spec.Egress, CNPEgress{
		ToEndpoints: []LabelSelector{{MatchLabels: map[string]string{"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns"}}},
		ToPorts:     []PortRule{{Ports: []PortProtocol{{Port: "53", Protocol: "ANY"}}, Rules: &L7Rules{DNS: dns}}},
	})
	for _, r := range hostRules {
		spec.Egress = append(spec.Egress, CNPEgress{ToFQDNs: []FQDN{fqdn(r.Host)}, ToPorts: ciliumPorts(r)})
		if strings.HasPrefix(r.Host, "*.") {
			// Cilium's matchPattern turns * into [-a-zA-Z0-9]*: one label, where sbx's wildcard matches
			// names at any depth below the suffix (policy.Name).
			f.add("network.allow "+r.String(), Partial, "CiliumNetworkPolicy toFQDNs matchPattern: Cilium's * matches one label below %s; "+
				"sbx also resolves names deeper below it", strings.TrimPrefix(r.Host, "*."))
			continue
		}
		f.add("network.allow "+r.String(), Translated, "CiliumNetworkPolicy toFQDNs with toPorts (needs Cilium; a plain NetworkPolicy cannot name hosts)")
	}
	var deny []CIDRRule
	exc := exceptions(plan)
	for _, p := range alwaysDeny {
		if !contains(exc, p) {
			deny = append(deny, CIDRRule{CIDR: p.String()})
		}
	}
	spec.EgressDeny = []CNPEgress{{ToCIDRSet: deny}}
	f.add("network.dns", Partial, "Cilium's DNS proxy resolves only %s; sbx's per-query log (allowed/refused) is not kept: "+
		"use Hubble for DNS visibility", strings.Join(n.DNS.Allow, ", "))
	f.add("network.metadata", Translated, "egressDeny toCIDRSet for metadata and the always-denied ranges; "+
		"sbx resolves %s only when named exactly, never through a wildcard", strings.Join(policy.MetadataNames(), ", "))
	return spec
}

func fqdn(name string) FQDN {
	if strings.HasPrefix(name, "*.") {
		return FQDN{MatchPattern: name}
	}
	return FQDN{MatchName: name}
}

// notExpressible adds the rows of what only sbx's runtime does.
func notExpressible(plan *policy.Plan, f *Fidelity) {
	fs := plan.Filesystem
	f.add("filesystem.landlock", NotExpressible, "Landlock (read %s, write %s) has no Kubernetes field; the runtime class may sandbox instead (gVisor, Kata)",
		strings.Join(fs.Read, ","), strings.Join(fs.Write, ","))
	if len(fs.Hidden) > 0 {
		f.add("filesystem.hidden", NotExpressible, "the image decides what exists; sbx hides %d host paths of its overlay", len(fs.Hidden))
	}
	if len(fs.Shares) > 0 {
		f.add("filesystem.share", NotExpressible, "host paths are not shared into a pod (hostPath would defeat the sandbox)")
	}
	if plan.Network.Mode == policy.NetContract {
		f.add("network.denied log", NotExpressible, "refused connection attempts are not recorded per run (Hubble or CNI flow logs may)")
	}
	f.add("expect", NotExpressible, "the before/after report (left running, listeners, execs, file changes) and its verdict exist only under sbx exec")
}
