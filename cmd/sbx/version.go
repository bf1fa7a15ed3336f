package main

import (
	"fmt"
	goio "io"
	"os"
	"runtime"
	"runtime/debug"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/state"
)

// libcontainerModule is the module whose version `sbx version` reports as libcontainer's.
const libcontainerModule = "github.com/opencontainers/runc"

// buildVersion is sbx's version: the one make writes with -ldflags, else what the Go toolchain recorded
// (the module version of a go install, the VCS revision of a go build in a checkout), else "(devel)".
func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "(devel)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// versionInfo is what `sbx version --json` writes.
type versionInfo struct {
	Version      string            `json:"version"`
	Go           string            `json:"go"`
	Libcontainer string            `json:"libcontainer"`
	Libseccomp   string            `json:"libseccomp"`
	Kernel       string            `json:"kernel"`
	Mode         string            `json:"mode"`                        // "root", or "without root (uid N)"
	StateRoot    string            `json:"state_root"`                  // where runs keep their state
	StateWhy     string            `json:"state_root_reason,omitempty"` // why there (without root)
	Features     []sandbox.Feature `json:"features"`
}

func currentVersion() versionInfo {
	v := versionInfo{Version: buildVersion(), Go: runtime.Version(), Libcontainer: "unknown", Libseccomp: libseccompVersion(),
		Kernel: sandbox.KernelRelease(), Mode: "root", StateRoot: stateRoot(), Features: sandbox.Features()}
	if sandbox.Rootless() {
		v.Mode = fmt.Sprintf("without root (uid %d)", os.Geteuid())
	}
	if v.StateRoot == "" {
		v.StateRoot, v.StateWhy = state.DefaultRootFor(), state.RootReason()
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == libcontainerModule {
				v.Libcontainer = d.Version
			}
		}
	}
	return v
}

func newVersionCmd(io stdio) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Print sbx's version, what it was built with and what this kernel gives it",
		Long: `version prints sbx's version, the Go, libcontainer and libseccomp versions it was built with, and
the kernel features sbx uses: user namespaces, Landlock's ABI, seccomp, the cgroup layout, idmapped
mounts and pasta. It says whether sbx runs as root or not (mode), where it keeps its state, and marks
a feature the kernel has but this caller cannot use (cgroups without root) as "no", with what stands in.

Examples:
  sbx version
  sbx version --json | jq -r .features[].name`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := currentVersion()
			if asJSON {
				return writeJSON(io.out, "-", "the version", v)
			}
			return v.write(io.out)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "write JSON instead of text")
	return c
}

func (v versionInfo) write(w goio.Writer) error {
	fmt.Fprintf(w, "sbx %s\n", v.Version)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "go\t%s\nlibcontainer\t%s\nlibseccomp\t%s\nkernel\t%s\n", v.Go, v.Libcontainer, v.Libseccomp, v.Kernel)
	fmt.Fprintf(tw, "mode\t%s\n", v.Mode)
	if v.StateWhy != "" {
		fmt.Fprintf(tw, "state root\t%s\t%s\n", v.StateRoot, v.StateWhy)
	} else {
		fmt.Fprintf(tw, "state root\t%s\n", v.StateRoot)
	}
	for _, f := range v.Features {
		state := "yes"
		if !f.Available {
			state = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, state, f.Detail)
	}
	return tw.Flush()
}
