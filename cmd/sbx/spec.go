package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox"
)

type specFlags struct {
	profile string
	rootfs  string
	out     string
	workdir string
	env     []string
	ro, rw  []string
}

func newSpecCmd(io stdio) *cobra.Command {
	var f specFlags
	c := &cobra.Command{
		Use:   "spec [flags] -- COMMAND [ARG...]",
		Short: "Write an OCI runtime bundle config.json for COMMAND under a profile",
		Long: `spec writes the OCI runtime config (config.json) that sbx itself would build for COMMAND under a
profile: seccomp filter, mounts, namespaces, cgroup limits, rlimits, user, no_new_privs, an empty
capability set and the profile's environment. runc or crun run it directly. The annotations
org.sbx.profile and org.sbx.profile.sha256 name the profile and its hash.

What a bundle cannot carry (the network contract, Landlock, hidden paths, the throwaway overlay,
the timeout, observation and the report) is listed on stderr.

Examples:
  sbx spec -p strict --rootfs rootfs -o bundle/config.json -- sh -c 'echo hi'
  sudo runc run --bundle bundle demo`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &exitError{code: exitSetup, err: errors.New("no command given"),
					hint: "put the command after --, e.g. sbx spec -- sh -c 'echo hi'"}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			return runSpec(io, f, args)
		},
	}
	c.Flags().SetInterspersed(false)
	fl := c.Flags()
	fl.StringVarP(&f.profile, "profile", "p", "default", "profile to apply: a built-in name or a YAML file")
	fl.StringVar(&f.rootfs, "rootfs", "rootfs", "root.path of the bundle (relative to the bundle directory, or absolute)")
	fl.StringVarP(&f.out, "output", "o", "-", "write config.json to `FILE` (\"-\" = stdout)")
	fl.StringVarP(&f.workdir, "workdir", "w", "/", "working directory of the command inside the container")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "pass `NAME` from the caller, or set NAME=VALUE (values are written into the file)")
	fl.StringArrayVar(&f.rw, "rw", nil, "bind-mount host `PATH` read-write")
	fl.StringArrayVar(&f.ro, "ro", nil, "bind-mount host `PATH` read-only")
	return c
}

func runSpec(io stdio, f specFlags, args []string) error {
	p, err := policy.Load(f.profile)
	if err != nil {
		return &exitError{code: exitSetup, err: err}
	}
	// Only fixed values (env.set, -e) go into the file: variables a profile passes from the caller may
	// be secrets, and a bundle is a file that gets copied around.
	cwd, _ := os.Getwd()
	plan, err := policy.Compile(p, policy.CompileContext{Cwd: cwd, CallerEnv: callerEnvFor(f.env),
		Overrides: policy.Overrides{Env: f.env, RO: f.ro, RW: f.rw}})
	if err != nil {
		return &exitError{code: exitSetup, err: err}
	}
	spec := bundleSpec(plan, f.rootfs, f.workdir, args)
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return &exitError{code: exitSetup, err: err}
	}
	data = append(data, '\n')
	if f.out == "-" {
		_, err = io.out.Write(data)
	} else {
		err = os.WriteFile(f.out, data, 0o644)
	}
	if err != nil {
		return &exitError{code: exitSetup, err: fmt.Errorf("writing the bundle config: %w", err)}
	}
	writeNotCarried(io.err, p, plan)
	return nil
}

// callerEnvFor is the part of the caller's environment a spec may read: the variables named by -e.
func callerEnvFor(flags []string) []string {
	var env []string
	for _, f := range flags {
		if !strings.Contains(f, "=") {
			if v, ok := os.LookupEnv(f); ok {
				env = append(env, f+"="+v)
			}
		}
	}
	return env
}

// bundleSpec is sandbox.Spec (the code sbx runs) made standalone: the command is the process, without
// sbx's supervisor init and the bind mount of sbx's binary it needs, and runc picks the cgroup path.
func bundleSpec(plan *policy.Plan, rootfs, cwd string, args []string) *specs.Spec {
	s := sandbox.Spec(sandbox.SpecInput{Plan: plan, ID: "bundle", Rootfs: rootfs, Args: args, Cwd: cwd})
	// No Init or Binary: a bundle runs the command itself, without sbx's supervisor.
	s.Linux.CgroupsPath = ""
	s.Process.Terminal = false
	s.Annotations["org.sbx.command"] = strings.Join(args, " ")
	if s.Linux.Seccomp != nil && len(s.Linux.Seccomp.Flags) > 0 {
		// runc before 1.2 (Debian 12's) refuses any seccomp flag; the ones sbx sets only log denials.
		sc := *s.Linux.Seccomp
		sc.Flags = nil
		s.Linux.Seccomp = &sc
	}
	s.Version = ociVersion(s)
	return s
}

// writeNotCarried lists, one row each, what the profile asks for that a bundle cannot carry.
func writeNotCarried(w io.Writer, p *policy.Profile, plan *policy.Plan) {
	rows := [][2]string{}
	add := func(what, why string) { rows = append(rows, [2]string{what, why}) }
	if plan.Network.Mode == policy.NetContract {
		add("network contract", "the bundle gets a network namespace with loopback only (stricter): "+
			"allow list, always-deny ranges and the DNS filter need sbx's veth and nftables")
	}
	if plan.Seccomp != nil && len(plan.Seccomp.Flags) > 0 {
		add("seccomp flags", fmt.Sprintf("%v left out: runc before 1.2 refuses seccomp flags (the filter itself is carried)", plan.Seccomp.Flags))
	}
	fs := plan.Filesystem
	add("landlock", fmt.Sprintf("no OCI field: read %s, write %s are not enforced inside the container",
		strings.Join(fs.Read, ","), strings.Join(fs.Write, ",")))
	if len(fs.Hidden) > 0 {
		add("hidden paths", "they exist only in sbx's overlay of the host's /: "+strings.Join(fs.Hidden, ", "))
	}
	add("overlay", "root.path is used as it is; writes land in it (sbx throws its writable layer away)")
	if plan.Limits.DiskBytes > 0 {
		add("limits.disk", "the size of sbx's writable layer has no OCI field")
	}
	if plan.Timeout > 0 {
		add("limits.timeout", plan.Timeout.String()+" must be enforced by whoever runs the bundle")
	}
	if len(p.Env.Pass) > 0 {
		add("env.pass", strings.Join(p.Env.Pass, ", ")+" are not written into the file; pass them with -e NAME")
	}
	add("observation", "no exec events, left-running processes, sockets, file changes, verdict or report")
	fmt.Fprintf(w, "sbx: profile %s (sha256 %.12s) in an OCI bundle; not carried:\n", plan.Profile, plan.Hash)
	for _, r := range rows {
		fmt.Fprintf(w, "  %-16s %s\n", r[0], r[1])
	}
}
