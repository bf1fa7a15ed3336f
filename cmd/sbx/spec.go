package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/export"
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
				return needCommand("spec")
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
		return setupError(err, "")
	}
	// Only fixed values (env.set, -e) go into the file: variables a profile passes from the caller may
	// be secrets, and a bundle is a file that gets copied around.
	cwd, _ := os.Getwd()
	plan, err := policy.Compile(p, policy.CompileContext{Cwd: cwd, CallerEnv: callerEnvFor(f.env),
		Overrides: policy.Overrides{Env: f.env, RO: f.ro, RW: f.rw}})
	if err != nil {
		return setupError(err, "")
	}
	// The command is the process, without sbx's supervisor init and the bind mount of sbx's binary
	// it needs (no Init or Binary).
	spec := sandbox.Spec(sandbox.SpecInput{Plan: plan, ID: "bundle", Rootfs: f.rootfs, Args: args, Cwd: f.workdir})
	data, fid, err := export.OCI(plan, spec, export.OCIOptions{Command: args, EnvPass: p.Env.Pass})
	if err != nil {
		return setupError(err, "")
	}
	if err := writeOutput(io.out, f.out, "the bundle config", data); err != nil {
		return setupError(err, "")
	}
	fmt.Fprintf(io.err, "sbx: profile %s (sha256 %.12s) in an OCI bundle; not carried:\n", plan.Profile, plan.Hash())
	for _, r := range fid {
		fmt.Fprintf(io.err, "  %-16s %s\n", r.Feature, r.Detail)
	}
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
