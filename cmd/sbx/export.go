package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/export"
	"github.com/sbx-dev/sbx/policy"
)

func newExportCmd(io stdio) *cobra.Command {
	c := &cobra.Command{
		Use:   "export",
		Short: "Translate a profile for another sandbox system (kubernetes)",
		Long: `export writes a profile as another system's configuration and says on stderr, row by row, what
was translated and what could not be.

Example:
  sbx export kubernetes -p python-build > sandbox.yaml`,
	}
	c.AddCommand(newExportKubeCmd(io))
	return c
}

type exportKubeFlags struct {
	profile string
	out     string
	jsonOut string
	allow   []string
	opts    export.KubeOptions
}

func newExportKubeCmd(io stdio) *cobra.Command {
	var f exportKubeFlags
	c := &cobra.Command{
		Use:   "kubernetes [flags] [-- COMMAND [ARG...]]",
		Short: "Write a Pod (or agent-sandbox SandboxTemplate), NetworkPolicy and CiliumNetworkPolicy for a profile",
		Long: `kubernetes writes YAML for kubectl apply: a ConfigMap holding the profile's seccomp filter (for
a Localhost seccomp profile), a Pod (--agent-sandbox: a SandboxTemplate for kubernetes-sigs/agent-sandbox)
that runs as non-root without privilege escalation, capabilities or a service-account token, with
the profile's limits; a NetworkPolicy whose egress allows the profile's allow list, with the
always-denied ranges in except; and, when the profile allows host names, a CiliumNetworkPolicy
(toFQDNs, a DNS rule, egressDeny for metadata). The fidelity report goes to stderr.

Examples:
  sbx export kubernetes -p python-build > sandbox.yaml
  sbx export kubernetes -p strict --agent-sandbox --runtime-class gvisor -- python3 /app/main.py`,
		RunE: func(c *cobra.Command, args []string) error {
			f.opts.Command = args
			return runExportKube(io, f)
		},
	}
	fl := c.Flags()
	fl.StringVarP(&f.profile, "profile", "p", "default", "profile to translate: a built-in name or a YAML file")
	fl.StringVarP(&f.out, "output", "o", "-", "write the YAML to `FILE` (\"-\" = stdout)")
	fl.StringVar(&f.jsonOut, "json", "", "also write the fidelity report as JSON to `FILE` (\"-\" = stdout, with -o FILE)")
	fl.BoolVar(&f.opts.AgentSandbox, "agent-sandbox", false, "write a SandboxTemplate (extensions.agents.x-k8s.io/v1beta1) instead of a Pod")
	fl.StringVar(&f.opts.Image, "image", export.DefaultImage, "container `IMAGE`")
	fl.StringVar(&f.opts.Name, "name", "", "object `NAME` (default sbx-PROFILE)")
	fl.StringVarP(&f.opts.Namespace, "namespace", "n", "", "metadata.namespace of every object")
	fl.StringVar(&f.opts.RuntimeClass, "runtime-class", "", "runtimeClassName, e.g. gvisor or kata")
	fl.StringArrayVar(&f.allow, "allow", nil, "also allow egress to `DEST`, as sbx exec --allow")
	return c
}

// exportFidelity is what export kubernetes --json writes: the profile and the fidelity rows.
type exportFidelity struct {
	Profile string          `json:"profile"`
	SHA256  string          `json:"sha256"`
	Target  string          `json:"target"`
	Rows    export.Fidelity `json:"rows"`
}

func runExportKube(io stdio, f exportKubeFlags) error {
	if f.jsonOut == "-" && f.out == "-" {
		return setupError(errors.New("--json - and the manifests would share stdout"),
			"write the manifests to a file: -o sandbox.yaml --json -")
	}
	// No caller environment: only the profile's fixed env.set values are written into the manifests.
	cwd, _ := os.Getwd()
	plan, err := compilePlan("", f.profile, cwd, nil, policy.Overrides{Allow: f.allow})
	if err != nil {
		return setupError(err, "")
	}
	data, fid, err := export.Kubernetes(plan, f.opts)
	if errors.Is(err, export.ErrName) {
		return setupError(err, "leave --name out (sbx derives one from the profile) or give a DNS-1123 label, e.g. sbx-my-profile")
	}
	if err != nil {
		return setupError(err, "")
	}
	if err := writeOutput(io.out, f.out, "the manifests", data); err != nil {
		return setupError(err, "")
	}
	fmt.Fprintf(io.err, "sbx: profile %s (sha256 %.12s) for Kubernetes:\n", plan.Profile, plan.Hash())
	if err := fid.Write(io.err); err != nil {
		return err
	}
	if f.jsonOut == "" {
		return nil
	}
	if fid == nil {
		fid = export.Fidelity{}
	}
	return writeJSON(io.out, f.jsonOut, "the fidelity report", exportFidelity{Profile: plan.Profile, SHA256: plan.Hash(), Target: "kubernetes", Rows: fid})
}

// Report formats of exec --format: what --json writes.
const (
	formatSBX  = "sbx"
	formatOCSF = "ocsf"
)

// reportFormats are the values of --format, for its check and its completion.
var reportFormats = []string{formatSBX, formatOCSF}

// reportFormat is the value of exec --format; Set refuses unknown formats at flag parsing.
type reportFormat string

func (f *reportFormat) String() string {
	if *f == "" {
		return formatSBX
	}
	return string(*f)
}

func (f *reportFormat) Set(s string) error {
	switch s {
	case formatSBX, formatOCSF:
		*f = reportFormat(s)
		return nil
	}
	return fmt.Errorf("unknown format %q: want %s", s, strings.Join(reportFormats, " or "))
}

func (f *reportFormat) Type() string { return "FORMAT" }

// check refuses --format ocsf without --json, before anything runs.
func (f reportFormat) check(jsonOut string) error {
	if f == formatOCSF && jsonOut == "" {
		return setupError(errors.New("--format ocsf without --json writes nothing"),
			"add --json FILE (or --json - for stdout)")
	}
	return nil
}
