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
