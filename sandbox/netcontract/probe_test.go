package netcontract

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/internal/fakenet"
	"github.com/sbx-dev/sbx/policy"
)

// probeIn runs the probe for nw inside n, asking n's DNS filter for names.
func probeIn(t *testing.T, n *Net, nw policy.Network) []Result {
	t.Helper()
	targets := ProbeTargets(nw, nil)
	server := resolver(t, n.ResolvConf())
	for i := range targets {
		targets[i].Resolver = server
	}
	var res []Result
	in(t, n, func() { res = RunProbe(targets, 300*time.Millisecond) })
	denied, err := n.Denied()
	if err != nil {
		t.Fatal(err)
	}
	return Confirm(res, denied, n.DNS())
}

// TestProbe: the probe passes on a sound contract, catches a missing contract, and fails when an allow
// target is unreachable.
func TestProbe(t *testing.T) {
	fake := newFake(t)
	sound := contractNet(fake)
	unreachable := contractNet(fake)
	unreachable.Allow = append(unreachable.Allow, policy.NetRule{CIDR: fakenet.Public2, Proto: "tcp", Port: 444})
	// A profile that opens the private ranges, against gateways whose ports are closed: each deny target
	// looks blocked (a reset, a port unreachable) but the contract let the packets out.
	openPrivate := contractNet(fake)
	for _, cidr := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} {
		openPrivate.Except = append(openPrivate.Except, policy.NetRule{CIDR: cidr, Proto: "tcp"}, policy.NetRule{CIDR: cidr, Proto: "udp"})
	}
	closed := newFake(t)
	if err := closed.Refuse(fakenet.Gateway10, fakenet.Gateway172, fakenet.Gateway192); err != nil {
		t.Fatal(err)
	}
	closedPrivate := openPrivate
	closedPrivate.UplinkNetNS = closed.Name
	tests := []struct {
		name       string
		nw         policy.Network
		noContract bool
		wantPass   bool
		wantFail   string // a label that must fail
	}{
		{"sound contract", sound, false, true, ""},
		// Which deny target shows first depends on timing under load; that the probe fails is the point.
		{"no contract", sound, true, false, ""},
		{"allow target unreachable", unreachable, false, false, "allow entry 3"},
		{"private ranges open, ports closed", closedPrivate, false, false, "gateway ssh"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := setup(t, Config{Net: tc.nw, noContract: tc.noContract})
			res := probeIn(t, n, tc.nw)
			var lines []string
			failed := map[string]bool{}
			for _, r := range res {
				lines = append(lines, r.String())
				if !r.Pass {
					failed[r.Target.Label] = true
				}
			}
			report := strings.Join(lines, "\n")
			if got := Passed(res); got != tc.wantPass {
				t.Errorf("Passed = %v, want %v\n%s", got, tc.wantPass, report)
			}
			if tc.wantFail != "" && !failed[tc.wantFail] {
				t.Errorf("%q did not fail\n%s", tc.wantFail, report)
			}
			t.Logf("\n%s", report)
		})
	}
}

// TestProbeTargets: the built-in deny targets are there, and one allow target per probe-able entry.
func TestProbeTargets(t *testing.T) {
	nw := policy.Network{Allow: []policy.NetRule{
		{CIDR: "203.0.113.0/24", Port: 443},
		{Host: "api.example.com", Proto: "tcp", Port: 443},
		{Host: "*.example.com", Port: 443},
	}, DNS: policy.DNS{Allow: []string{"pypi.org", "*.pythonhosted.org"}}}
	var deny, allow []Target
	for _, tg := range ProbeTargets(nw, nil) {
		if tg.Kind == KindDeny {
			deny = append(deny, tg)
		} else {
			allow = append(allow, tg)
		}
	}
	want := map[string]bool{"169.254.169.254:80": false, "fd00:ec2::254:80": false, "metadata.google.internal:0": false,
		"100.100.100.200:80": false, "10.0.0.1:22": false, "172.16.0.1:6379": false, "192.168.1.1:5432": false, "192.168.1.1:161": false}
	for _, tg := range deny {
		want[tg.Addr+":"+itoa(tg.Port)] = true
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("no deny target %s", k)
		}
	}
	wantAllow := []string{"203.0.113.1:443", "api.example.com:443", "pypi.org:0"}
	if len(allow) != len(wantAllow) {
		t.Fatalf("allow targets %+v, want %v", allow, wantAllow)
	}
	for i, tg := range allow {
		if got := tg.Addr + ":" + itoa(tg.Port); got != wantAllow[i] {
			t.Errorf("allow target %d = %s, want %s", i, got, wantAllow[i])
		}
	}
}

// TestProbeTargetsDeny: the profile's deny entries and the caller's --deny destinations are deny
// targets, labelled by where they come from, a range at its first host and a rule without a port at 443.
func TestProbeTargetsDeny(t *testing.T) {
	nw := policy.Network{Deny: []policy.NetRule{{CIDR: "198.51.100.0/24"}, {CIDR: "203.0.113.7/32", Proto: "udp", Port: 53}}}
	user := []policy.NetRule{{CIDR: "192.168.0.1/32", Port: 6379}}
	var got []string
	for _, tg := range ProbeTargets(nw, user) {
		if tg.Kind == KindDeny && (strings.HasPrefix(tg.Label, "deny entry") || strings.HasPrefix(tg.Label, "--deny")) {
			got = append(got, tg.Label+" "+tg.Proto+" "+tg.Addr+":"+itoa(tg.Port))
		}
	}
	want := []string{"deny entry 1 tcp 198.51.100.1:443", "deny entry 2 udp 203.0.113.7:53", "--deny 1 tcp 192.168.0.1:6379"}
	if !slices.Equal(got, want) {
		t.Errorf("deny targets:\n got %q\nwant %q", got, want)
	}
}

// TestParseTargets: a targets file gives deny and allow targets with their labels (a default one when
// missing), tcp, udp and dns; a range is probed at its first host; what cannot be probed is refused
// naming the entry.
func TestParseTargets(t *testing.T) {
	got, err := ParseTargets(strings.NewReader(`deny:
  - {label: "LAN redis", tcp: "192.168.0.1:6379"}
  - {udp: "10.0.0.0/8:53"}
  - {label: exfil, dns: Attacker.Example}
allow:
  - {label: pypi, tcp: "pypi.org:443"}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{
		{Kind: KindDeny, Label: "LAN redis", Proto: "tcp", Addr: "192.168.0.1", Port: 6379},
		{Kind: KindDeny, Label: "deny target 2", Proto: "udp", Addr: "10.0.0.1", Port: 53},
		{Kind: KindDeny, Label: "exfil", Proto: "dns", Addr: "attacker.example"},
		{Kind: KindAllow, Label: "pypi", Proto: "tcp", Addr: "pypi.org", Port: 443},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ParseTargets:\n got %+v\nwant %+v", got, want)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"deny:\n  - {host: a}\n", `line 2: unknown key "host"`},
		{"deny:\n  - {tcp: \"a.example:1\", udp: \"a.example:1\"}\n", "deny[0]: give exactly one of tcp, udp or dns"},
		{"allow:\n  - {dns: \"*.example\"}\n", "a wildcard cannot be probed"},
		{"allow:\n  - {tcp: \"*.example:443\"}\n", "a wildcard name cannot be probed"},
		{"deny:\n  - {tcp: \"10.0.0.1\"}\n", "deny[0]: tcp"},
		{"deny:\n  - {label: \"a\\x1b[31m\", tcp: \"10.0.0.1:1\"}\n", "not printable"},
		{"", "no deny or allow entries"},
		{"deny: [" + strings.Repeat(`{dns: a.example},`, MaxFileTargets+1) + "]\n", "at most 256"},
	} {
		_, err := ParseTargets(strings.NewReader(bad.yaml))
		if err == nil || !errors.Is(err, ErrTargets) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseTargets(%.40q): %v; want an ErrTargets naming %q", bad.yaml, err, bad.want)
		}
	}
}

// TestProbeTargetsExcept: each except entry of the profile is an allow target, labelled as an address
// the profile opens.
func TestProbeTargetsExcept(t *testing.T) {
	nw := policy.Network{Mode: policy.NetContract, Except: []policy.NetRule{{CIDR: "10.0.0.5/32", Proto: "tcp", Port: 6379}}}
	want := Target{Kind: KindAllow, Label: "except entry 1 (always denied, opened by the profile)", Proto: "tcp", Addr: "10.0.0.5", Port: 6379}
	if got := ProbeTargets(nw, nil); !slices.Contains(got, want) {
		t.Errorf("ProbeTargets lacks %+v: %+v", want, got)
	}
}
