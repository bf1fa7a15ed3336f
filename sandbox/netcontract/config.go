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
	if err := c.Net.CheckRules(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}
