// Package export translates a compiled sbx profile (a policy.Plan) into the configuration of other
// systems that run untrusted code (Kubernetes objects, an OCI bundle's config.json for runc or crun)
// and says row by row, in a Fidelity, what carried over and what could not.
//
// # What it does not do
//
// It talks to no cluster and runs no runtime: the output is YAML for kubectl apply or a config.json. An
// OCI bundle starts from the runtime config sbx itself builds (sandbox.Spec), which the caller passes
// in, so that this package builds without cgo like report and policy. It
// cannot carry what only sbx's own runtime does: Landlock, the throwaway overlay of the host's /,
// hidden paths, the exec/fork/exit stream and the before/after report with its verdict. Those rows
// say "not expressible" in the Fidelity report, never silently vanish.
//
// # Types
//
// The Kubernetes objects are plain structs with yaml tags rather than k8s.io/api: that module and
// apimachinery would add tens of megabytes of dependencies for four objects, and two of them
// (CiliumNetworkPolicy, agent-sandbox's SandboxTemplate) are not in k8s.io/api anyway. The tests
// validate the output against JSON schemas extracted from the published ones (testdata/schemas); the
// module export/k8stest (make test-k8s) decodes every export strictly into the official types and runs
// Kubernetes' own validation on it.
//
// # Names
//
// Object names and the sbx.dev/profile label are DNS-1123 labels derived from the profile's name, which
// may come from any file name (names.go); an ipBlock's except holds only strict subsets of its own
// address family (ranges.go).
package export

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Statuses of a fidelity row.
const (
	Translated     = "translated"
	Partial        = "partial"
	NotExpressible = "not expressible"
)

// Row is one line of a fidelity report: a feature of the profile, what became of it, and how.
type Row struct {
	Feature string `json:"feature"`
	Status  string `json:"status"`
	Detail  string `json:"detail"`
}

// Fidelity is the account of one export, in profile order.
type Fidelity []Row

func (f *Fidelity) add(feature, status, format string, args ...any) {
	*f = append(*f, Row{Feature: feature, Status: status, Detail: fmt.Sprintf(format, args...)})
}

// Write prints the report as an aligned table.
func (f Fidelity) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "FEATURE\tSTATUS\tDETAIL\n")
	for _, r := range f {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Feature, r.Status, r.Detail)
	}
	return tw.Flush()
}

// Status returns the status of the first row for feature, "" if there is none.
func (f Fidelity) Status(feature string) string {
	for _, r := range f {
		if r.Feature == feature {
			return r.Status
		}
	}
	return ""
}
