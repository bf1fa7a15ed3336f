package export

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sbx-dev/sbx/policy"
)

// OCIOptions shape a bundle's config.
type OCIOptions struct {
	Command []string // the container's process
	// EnvPass names the variables the profile passes from the caller (env.pass): they may be secrets
	// and a bundle is a file that gets copied around, so none is written into it; a row says so.
	EnvPass []string
}

// OCI makes spec, the runtime config sbx itself builds for a run of plan (sandbox.Spec, with the
// command as the process and without sbx's supervisor), into a standalone OCI bundle config for runc or
// crun: runc picks the cgroup path, there is no terminal, the command is annotated, seccomp flags are
// left out (runc before 1.2 refuses any), and ociVersion is the lowest that carries what the config
// uses. It changes spec and returns it as config.json, with the rows of what a bundle cannot carry
// (each partial or not expressible) in the same Fidelity the Kubernetes export gives.
func OCI(plan *policy.Plan, spec *specs.Spec, o OCIOptions) ([]byte, Fidelity, error) {
	if spec == nil || spec.Process == nil || spec.Linux == nil {
		return nil, nil, errors.New("making an OCI bundle: the runtime config has no process or no linux section")
	}
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	spec.Linux.CgroupsPath = ""
	spec.Process.Terminal = false
	spec.Annotations["org.sbx.profile"] = plan.Profile
	spec.Annotations["org.sbx.profile.sha256"] = plan.Hash()
	spec.Annotations["org.sbx.command"] = strings.Join(o.Command, " ")
	if spec.Linux.Seccomp != nil && len(spec.Linux.Seccomp.Flags) > 0 {
		// runc before 1.2 (Debian 12's) refuses any seccomp flag; the ones sbx sets only log denials.
		sc := *spec.Linux.Seccomp
		sc.Flags = nil
		spec.Linux.Seccomp = &sc
	}
	spec.Version = ociVersion(spec)
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the bundle config: %w", err)
	}
	return append(data, '\n'), notCarried(plan, o), nil
}

// notCarried lists what the profile asks for that a bundle cannot carry.
func notCarried(plan *policy.Plan, o OCIOptions) Fidelity {
	var f Fidelity
	if plan.Network.Mode == policy.NetContract {
		f.add("network contract", Partial, "the bundle gets a network namespace with loopback only (stricter): "+
			"allow list, always-deny ranges and the DNS filter need sbx's veth and nftables")
	}
	if plan.Seccomp != nil && len(plan.Seccomp.Flags) > 0 {
		f.add("seccomp flags", Partial, "%v left out: runc before 1.2 refuses seccomp flags (the filter itself is carried)", plan.Seccomp.Flags)
	}
	fs := plan.Filesystem
	f.add("landlock", NotExpressible, "no OCI field: read %s, write %s are not enforced inside the container",
		strings.Join(fs.Read, ","), strings.Join(fs.Write, ","))
	if len(fs.Hidden) > 0 {
		f.add("hidden paths", NotExpressible, "they exist only in sbx's overlay of the host's /: %s", strings.Join(fs.Hidden, ", "))
	}
	f.add("overlay", NotExpressible, "root.path is used as it is; writes land in it (sbx throws its writable layer away)")
	if plan.Limits.DiskBytes > 0 {
		f.add("limits.disk", NotExpressible, "the size of sbx's writable layer has no OCI field")
	}
	if plan.Timeout > 0 {
		f.add("limits.timeout", NotExpressible, "%s must be enforced by whoever runs the bundle", plan.Timeout)
	}
	if len(o.EnvPass) > 0 {
		f.add("env.pass", Partial, "%s are not written into the file; pass them with -e NAME", strings.Join(o.EnvPass, ", "))
	}
	f.add("observation", NotExpressible, "no exec events, left-running processes, sockets, file changes, verdict or report")
	return f
}
