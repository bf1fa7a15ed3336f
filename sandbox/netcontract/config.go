package netcontract

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sbx-dev/sbx/internal/netnsdir"
	"github.com/sbx-dev/sbx/policy"
)

// Config is what Setup needs to build the network of one run.
type Config struct {
	// ID names the run. It becomes the name of the network namespace under /run/netns and of the veth peer
	// in the uplink namespace, both prefixed with "sbx" when it does not start with it: at most 12
	// characters of [a-z0-9-] after that prefix, so that the link name fits the kernel's 15.
	ID string
	// Net is the network part of the compiled plan.
	Net policy.Network
	// StateDir is a per-run directory where Setup may write files (resolv.conf). Needed in mode contract.
	StateDir string

	// noContract builds the plumbing without loading the contract: tests use it to show that every target
	// is reachable without it, so that "blocked" means something.
	noContract bool
	// hostState makes the uplink namespace act as the host (NAT, forwarding and the host's filters), with
	// the state shared by its runs in this directory instead of sbx's own: tests use a namespace of their
	// own as the host, so that nothing they check depends on the real host.
	hostState string
}

// ErrConfig is matched by every error about an invalid Config.
var ErrConfig = errors.New("invalid network configuration")

// netnsDir is where named network namespaces live, the directory `ip netns` reads.
const netnsDir = netnsdir.Dir

// name is the name of the run's network namespace and of its veth peer.
func (c Config) name() string {
	return "sbx" + strings.TrimPrefix(c.ID, "sbx")
}

// nsPath is the bind-mounted namespace file of the run.
func (c Config) nsPath() string { return filepath.Join(netnsDir, c.name()) }

// validate checks the config before anything touches the kernel.
func (c Config) validate() error {
	short := strings.TrimPrefix(c.ID, "sbx")
	if short == "" || len(short) > 12 {
		return fmt.Errorf("%w: ID %q: want 1 to 12 characters after the sbx prefix", ErrConfig, c.ID)
	}
	for _, r := range short {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return fmt.Errorf("%w: ID %q: only a-z, 0-9 and - are allowed", ErrConfig, c.ID)
		}
	}
	switch c.Net.Mode {
	case policy.NetNone, "":
		return nil
	case policy.NetContract:
	default:
		return fmt.Errorf("%w: network mode %q: want %q or %q", ErrConfig, c.Net.Mode, policy.NetNone, policy.NetContract)
	}
	if c.StateDir == "" {
		return fmt.Errorf("%w: mode contract needs StateDir for resolv.conf", ErrConfig)
	}
	return validateRules(c.Net)
}

// validateRules checks every rule of the contract.
func validateRules(n policy.Network) error {
	lists := []struct {
		field string
		rules []policy.NetRule
	}{{"allow", n.Allow}, {"deny", n.Deny}, {"except", n.Except}}
	for _, l := range lists {
		for i, r := range l.rules {
			if err := validateRule(r, l.field != "allow"); err != nil {
				return fmt.Errorf("%w: network.%s[%d]: %v", ErrConfig, l.field, i, err)
			}
		}
	}
	return nil
}

// validateRule checks one rule; noHost says that the list cannot name hosts (deny and except are matched
// by address only, a name would give a false sense of protection).
func validateRule(r policy.NetRule, noHost bool) error {
	if (r.Host == "") == (r.CIDR == "") {
		return errors.New("set exactly one of host and cidr")
	}
	if r.Host != "" && noHost {
		return errors.New("host names are not supported here; use cidr")
	}
	switch r.Proto {
	case "", "tcp", "udp":
	default:
		return fmt.Errorf("proto %q: want tcp or udp", r.Proto)
	}
	if r.Port < 0 || r.Port > 65535 || r.PortEnd < 0 || r.PortEnd > 65535 || (r.PortEnd != 0 && r.PortEnd < r.Port) {
		return fmt.Errorf("port %d-%d: want 0-65535 with port <= port_end", r.Port, r.PortEnd)
	}
	if r.CIDR != "" {
		if _, err := parsePrefix(r.CIDR); err != nil {
			return err
		}
	}
	return nil
}
