package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/netcontract"
)

// roleProbe runs the probe inside a sandbox: the sbx binary re-executes itself there with this role.
const roleProbe = "__sbx_probe"

func init() { sandbox.RegisterRole(roleProbe, probeAgent) }

// probeTimeout bounds each target's attempt inside the sandbox.
const probeTimeout = 2 * time.Second

// ProbeOptions is one probe of a plan's network contract.
type ProbeOptions struct {
	Plan      *policy.Plan
	StateRoot string // as Options.StateRoot
	// Deny are further destinations that must be blocked (sbx probe --deny), probed as they are: they
	// are not added to the contract.
	Deny []policy.NetRule
	// Targets are the caller's own targets (sbx probe --targets FILE), probed after the others and as
	// they are.
	Targets []netcontract.Target
}

// Probe builds the sandbox Run would build for the plan and tries, from inside it, netcontract's probe
// targets for its network: the built-in deny targets and every allow entry (sbx probe). The binary
// runs itself in the sandbox as the probe's agent (sandbox.SelfCommand). A deny target counts as blocked
// only when the contract's own record (refused destinations, refused names) says it refused it, not
// when the destination stayed silent. Cancelling ctx tears the sandbox down.
func Probe(ctx context.Context, o ProbeOptions) ([]netcontract.Result, error) {
	targets, err := json.Marshal(append(netcontract.ProbeTargets(o.Plan.Network, o.Deny), o.Targets...))
	if err != nil {
		return nil, fmt.Errorf("encoding the probe targets: %w", err)
	}
	var out, errb bytes.Buffer
	rep, err := Run(ctx, Options{
		Plan: o.Plan, Args: sandbox.SelfCommand(roleProbe, string(targets)), Cwd: "/",
		Stdout: &out, Stderr: &errb, StateRoot: o.StateRoot,
	})
	if err != nil {
		return nil, err
	}
	var results []netcontract.Result
	if err := json.Unmarshal(out.Bytes(), &results); err != nil || rep.ExitCode != 0 {
		return nil, fmt.Errorf("the probe inside the sandbox failed (status %d): %s", rep.ExitCode, bytes.TrimSpace(errb.Bytes()))
	}
	return netcontract.Confirm(results, rep.Network.Denied, rep.Network.DNS), nil
}

// probeAgent runs inside the sandbox: it tries the targets given as JSON and prints the results as JSON.
func probeAgent(args []string) int {
	var targets []netcontract.Target
	if len(args) != 1 || json.Unmarshal([]byte(args[0]), &targets) != nil {
		fmt.Fprintln(os.Stderr, "sbx probe agent: expects the targets as one JSON argument")
		return ExitSetup
	}
	if err := json.NewEncoder(os.Stdout).Encode(netcontract.RunProbe(targets, probeTimeout)); err != nil {
		return ExitSetup
	}
	return 0
}
