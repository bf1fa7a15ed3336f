package mcpserver

import (
	"errors"
	"slices"
	"testing"

	"github.com/sbx-dev/sbx/policy"
)

func rules(t *testing.T, dests ...string) []policy.NetRule {
	t.Helper()
	var out []policy.NetRule
	for _, d := range dests {
		r, err := policy.ParseDest(d)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestNarrow: a call may drop the network or keep a subset of the allow list; anything wider is
// refused with ErrWiden.
func TestNarrow(t *testing.T) {
	contract := &policy.Profile{Name: "c", Network: policy.NetworkConfig{Mode: policy.NetContract}}
	contract.Network.Allow = rules(t, "pypi.org:443", "*.example.com:443", "203.0.113.0/24:8000-8100", "udp:198.51.100.1:53")
	none := &policy.Profile{Name: "n", Network: policy.NetworkConfig{Mode: policy.NetNone}}
	tests := []struct {
		name      string
		profile   *policy.Profile
		net       *Network
		wantErr   error
		wantMode  policy.NetworkMode
		wantAllow []string
	}{
		{"nil keeps", contract, nil, nil, policy.NetContract, []string{"tcp:pypi.org:443", "tcp:*.example.com:443", "tcp:203.0.113.0/24:8000-8100", "udp:198.51.100.1:53"}},
		{"none", contract, &Network{Mode: "none"}, nil, policy.NetNone, nil},
		{"same host", contract, &Network{Allow: []string{"pypi.org:443"}}, nil, policy.NetContract, []string{"tcp:pypi.org:443"}},
		{"empty allow list", contract, &Network{Allow: []string{}}, nil, policy.NetContract, nil},
		{"wildcard covers sub", contract, &Network{Allow: []string{"api.example.com:443"}}, nil, policy.NetContract, []string{"tcp:api.example.com:443"}},
		{"cidr covers ip and port in range", contract, &Network{Allow: []string{"203.0.113.9:8080"}}, nil, policy.NetContract, []string{"tcp:203.0.113.9:8080"}},
		{"other host", contract, &Network{Allow: []string{"evil.com:443"}}, ErrWiden, "", nil},
		{"wildcard not apex", contract, &Network{Allow: []string{"example.com:443"}}, ErrWiden, "", nil},
		{"other port", contract, &Network{Allow: []string{"pypi.org:80"}}, ErrWiden, "", nil},
		{"any port", contract, &Network{Allow: []string{"pypi.org:*"}}, ErrWiden, "", nil},
		{"other proto", contract, &Network{Allow: []string{"udp:pypi.org:443"}}, ErrWiden, "", nil},
		{"wider cidr", contract, &Network{Allow: []string{"203.0.0.0/16:8000"}}, ErrWiden, "", nil},
		{"port range beyond", contract, &Network{Allow: []string{"203.0.113.9:8000-9000"}}, ErrWiden, "", nil},
		{"ip for a host rule", contract, &Network{Allow: []string{"151.101.0.223:443"}}, ErrWiden, "", nil},
		{"contract on none", none, &Network{Mode: "contract"}, ErrWiden, "", nil},
		{"allow on none", none, &Network{Allow: []string{"pypi.org:443"}}, ErrWiden, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := narrow(tt.profile, tt.net)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Network.Mode != tt.wantMode {
				t.Errorf("mode %q, want %q", got.Network.Mode, tt.wantMode)
			}
			var allow []string
			for _, r := range got.Network.Allow {
				if r.Proto == "" {
					r.Proto = "tcp"
				}
				allow = append(allow, r.String())
			}
			if !slices.Equal(allow, tt.wantAllow) {
				t.Errorf("allow %q, want %q", allow, tt.wantAllow)
			}
		})
	}
	if len(contract.Network.Allow) != 4 {
		t.Errorf("narrow changed the profile it was given")
	}
}

// TestNarrowReadsRulesAsTheContract: the cases where the MCP server's own copy of "does A cover B"
// (case-sensitive names, no cloud metadata rule, IPv6 ranges of IPv4-mapped space) disagreed with what
// the contract enforces. The check is now policy.AllowCovers, the code the contract's DNS filter and
// sets are built from.
func TestNarrowReadsRulesAsTheContract(t *testing.T) {
	metadata := &policy.Profile{Name: "m", Network: policy.NetworkConfig{Mode: policy.NetContract}}
	metadata.Network.Allow = rules(t, "*.google.internal:80", "[::/0]:443")
	metadata.Network.Except = rules(t, "169.254.169.254:80")
	// A profile made in code rather than parsed keeps names as written: the contract matches them
	// without regard to case and the final dot.
	written := &policy.Profile{Name: "w", Network: policy.NetworkConfig{Mode: policy.NetContract,
		Allow: []policy.NetRule{{Host: "*.Example.COM", Port: 443}, {Host: "pypi.org.", Port: 443}}}}
	tests := []struct {
		name    string
		profile *policy.Profile
		allow   string
		wantErr error
	}{
		// The old copy let this through: the narrowed profile names the metadata name exactly, which
		// makes the DNS filter resolve it, where the profile's wildcard never does.
		{"wildcard does not give a metadata name", metadata, "metadata.google.internal:80", ErrWiden},
		{"wildcard still gives other names", metadata, "www.google.internal:80", nil},
		// The old copy let this through as an IPv6 range inside ::/0; the contract reaches IPv4 with it.
		{"ipv4-mapped space is ipv4, not inside ::/0", metadata, "[::ffff:0:0/96]:443", ErrWiden},
		{"ipv6 inside ::/0", metadata, "[2001:db8::/32]:443", nil},
		// The old copy refused these (a narrowing, not a widening) by comparing bytes.
		{"wildcard in another case", written, "api.example.com:443", nil},
		{"name with a final dot", written, "pypi.org:443", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := narrow(tt.profile, &Network{Allow: []string{tt.allow}})
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("narrow to %s: %v, want %v", tt.allow, err, tt.wantErr)
			}
		})
	}
}
