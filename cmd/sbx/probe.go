package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/runner"
	"github.com/sbx-dev/sbx/sandbox/netcontract"
)

// probeReport is the JSON form of sbx probe's results.
type probeReport struct {
	Schema  string               `json:"schema"`
	Profile string               `json:"profile"`
	Passed  bool                 `json:"passed"`
	Results []netcontract.Result `json:"results"`
}

type probeFlags struct {
	profile   string
	jsonOut   string
	overrides policy.Overrides
	deny      []string // --deny: further targets that must be blocked
	targets   string   // --targets: a file of the caller's own targets
}

func newProbeCmd(io stdio) *cobra.Command {
	var f probeFlags
	c := cancelOnSignal(&cobra.Command{
		Use:   "probe [-p PROFILE] [--allow DEST]... [--deny DEST]... [--targets FILE] [--json FILE]",
		Short: "Check the network contract from inside a sandbox built from a profile",
		Long: `probe builds the same sandbox sbx exec would and tries, from inside it, the built-in deny
targets (cloud metadata by address and by name, typical LAN gateways on ssh, redis and postgres
ports, a UDP target, a random name outside the allow list), the profile's deny entries and every
--deny DEST, every allow target and the profile's except entries (addresses it opens on purpose,
which must then be reachable), and the targets of a --targets FILE (YAML: deny and allow lists of
{label, tcp|udp|dns}; see docs/cli.md). Deny targets
must be blocked by the contract itself (its record of refused attempts or of refused names says
so: a reset or silence from the destination does not count), allow targets reachable. It prints
one line per target and exits 1 on any breach.

Examples:
  sbx probe -p contract --allow pypi.org:443
  sbx probe --deny 192.168.0.1:6379 --deny udp:10.0.0.53:53
  sbx probe --targets egress.yaml
  sbx probe --uplink-netns egress --allow 203.0.113.10:443 --json probe.json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkBuild(nil); err != nil {
				return err
			}
			rep, err := runProbe(c.Context(), f)
			if ierr := interrupted(c.Context(), "the probe was torn down"); ierr != nil {
				return ierr
			}
			if errors.Is(err, netcontract.ErrTargets) {
				return setupError(err, "a targets file has deny: and allow: lists of {label, tcp|udp|dns} entries (see sbx probe --help)")
			}
			if err != nil {
				return setupError(err, "")
			}
			return finishProbe(io, f.jsonOut, rep)
		},
	}, stopSignals...)
	fl := c.Flags()
	fl.StringVarP(&f.profile, "profile", "p", "contract", "profile to build the sandbox from")
	fl.StringArrayVar(&f.deny, "deny", nil, "also probe `DEST` ([udp:]host:port, ip:port, cidr:port), which must be blocked; repeatable; the contract is not changed")
	fl.StringVar(&f.targets, "targets", "", "also probe the deny and allow targets listed in YAML `FILE`; the contract is not changed")
	fl.StringVar(&f.jsonOut, "json", "", `also write the results as JSON to `+"`FILE`"+` ("-" = stdout)`)
	addNetworkFlags(c, &f.overrides)
	return c
}

// addNetworkFlags adds the flags that shape the network contract.
func addNetworkFlags(c *cobra.Command, ov *policy.Overrides) {
	fl := c.Flags()
	fl.StringArrayVar(&ov.Allow, "allow", nil, "allow egress to `DEST` ([udp:]host:port, ip:port, cidr:port); implies network contract")
	fl.StringVar(&ov.UplinkNetNS, "uplink-netns", "", "put the sandbox's uplink into network namespace `NAME` (default: the host's, with NAT)")
	fl.StringVar(&ov.DNSUpstream, "dns-upstream", "", "resolver `IP:PORT` the DNS filter forwards allowed names to (default: the host's)")
}

// runProbe probes the contract of a sandbox built from the profile and the flags.
func runProbe(ctx context.Context, f probeFlags) (*probeReport, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	var deny []policy.NetRule
	for _, d := range f.deny {
		r, err := policy.ParseDest(d)
		if err != nil {
			return nil, fmt.Errorf("--deny %q: %w", d, err)
		}
		deny = append(deny, r)
	}
	var targets []netcontract.Target
	if f.targets != "" {
		if targets, err = readTargets(f.targets); err != nil {
			return nil, err
		}
	}
	plan, err := compilePlan("", f.profile, cwd, os.Environ(), f.overrides)
	if err != nil {
		return nil, err
	}
	results, err := runner.Probe(ctx, runner.ProbeOptions{Plan: plan, StateRoot: stateRoot(), Deny: deny, Targets: targets})
	if err != nil {
		return nil, err
	}
	return &probeReport{Schema: "sbx.probe/v1", Profile: plan.Profile, Passed: netcontract.Passed(results), Results: results}, nil
}

// readTargets reads a --targets file: opened without blocking (a FIFO there would hang sbx), a regular
// file only.
func readTargets(path string) ([]netcontract.Target, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("--targets: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	file := os.NewFile(uintptr(fd), path)
	defer file.Close()
	if st, err := file.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("--targets %s: not a regular file", path)
	}
	t, err := netcontract.ParseTargets(file)
	if err != nil {
		return nil, fmt.Errorf("--targets %s: %w", path, err)
	}
	return t, nil
}

func finishProbe(io stdio, jsonOut string, rep *probeReport) error {
	lines := io.out
	if jsonOut == "-" {
		lines = io.err
	}
	for _, r := range rep.Results {
		fmt.Fprintln(lines, r)
	}
	if err := writeJSON(io.out, jsonOut, "the probe results", rep); err != nil {
		return setupError(err, "")
	}
	if !rep.Passed {
		return &exitError{code: exitFailure, err: errors.New("the network contract does not hold"),
			hint: "the lines marked FAIL name each breach"}
	}
	return nil
}
