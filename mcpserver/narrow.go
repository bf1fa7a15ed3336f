package mcpserver

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sbx-dev/sbx/policy"
)

// ErrWiden is the refusal of a call that asks for more network than its profile allows.
var ErrWiden = errors.New("a call may narrow the profile's network, never widen it")

// Network is how a call narrows its profile's network. The zero value keeps the profile's.
type Network struct {
	Mode  string   `json:"mode,omitempty" jsonschema:"none: no network at all; contract: the profile's contract (only when the profile has one)"`
	Allow []string `json:"allow,omitempty" jsonschema:"destinations to allow (host:port, ip:port, cidr:port, udp:host:port), each already allowed by the profile; replaces the profile's allow list"`
}

// narrow returns a copy of p with its network narrowed by n. It refuses, wrapping ErrWiden, a mode of
// contract on a profile without one and any allow entry the profile's allow list does not cover, as
// policy.AllowCovers decides: the same reading of names, addresses and ports the contract enforces.
func narrow(p *policy.Profile, n *Network) (*policy.Profile, error) {
	if n == nil || (n.Mode == "" && n.Allow == nil) {
		return p, nil
	}
	q := *p
	q.Network.Allow = append([]policy.NetRule(nil), p.Network.Allow...)
	switch n.Mode {
	case "":
	case policy.NetNone:
		if len(n.Allow) > 0 {
			return nil, fmt.Errorf("network mode none with allow entries: give one or the other")
		}
		q.Network = policy.NetworkConfig{Mode: policy.NetNone}
		return &q, nil
	case policy.NetContract:
		if p.Network.Mode != policy.NetContract {
			return nil, fmt.Errorf("%w: profile %s has no network (mode none)", ErrWiden, p.Name)
		}
	default:
		return nil, fmt.Errorf("network mode %q: want none or contract", n.Mode)
	}
	if n.Allow == nil {
		return &q, nil
	}
	if p.Network.Mode != policy.NetContract {
		return nil, fmt.Errorf("%w: profile %s has no network (mode none), so it allows nothing", ErrWiden, p.Name)
	}
	q.Network.Allow = nil
	for _, s := range n.Allow {
		r, err := policy.ParseDest(s)
		if err != nil {
			return nil, fmt.Errorf("network.allow %q: %w", s, err)
		}
		if !policy.AllowCovers(p.Network.Allow, r) {
			return nil, fmt.Errorf("%w: %s is not in the allow list of profile %s (%s)", ErrWiden, s, p.Name, listRules(p.Network.Allow))
		}
		q.Network.Allow = append(q.Network.Allow, r)
	}
	return &q, nil
}

func listRules(rs []policy.NetRule) string {
	if len(rs) == 0 {
		return "empty"
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return strings.Join(out, ", ")
}
