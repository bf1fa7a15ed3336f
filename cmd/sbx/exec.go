package main

import (
	"context"
	"errors"
	"fmt"
	goio "io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/sbx-dev/sbx/internal/cgprime"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/report/text"
	"github.com/sbx-dev/sbx/runner"
)

type execFlags struct {
	profile       string
	jsonOut       string
	format        reportFormat
	timeout       time.Duration
	quiet         bool
	workdir       string
	violationExit int
	changes       string
	probe         bool
	overrides     policy.Overrides
}

func newExecCmd(io stdio) *cobra.Command {
	var f execFlags
	c := cancelOnSignal(&cobra.Command{
		Use:   "exec [flags] -- COMMAND [ARG...]",
		Short: "Run COMMAND in a sandbox and report what it did and left behind",
		Long: `exec runs COMMAND in a fresh sandbox built from a profile (default: "default": no network,
the host read-only through an overlay, writes only to /tmp, /var/tmp and the working directory,
nothing may be left running, no listeners). stdin, stdout and stderr pass through. When the
command exits, sbx reports what it left behind (on stderr; --json for data), then removes
everything.

` + execStatusHelp() + `
Examples:
  sbx exec -- sh -c 'echo hello'
  sbx exec --json report.json -- sh -c 'nohup sleep 300 & exit 0'
  sbx exec -p strict --timeout 10s -- python3 script.py`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return needCommand("exec")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			f.overrides.Timeout = f.timeout
			return runExec(c.Context(), io, f, args)
		},
	}, stopSignals...)
	c.Flags().SetInterspersed(false)
	fl := c.Flags()
	fl.StringVarP(&f.profile, "profile", "p", "default", "profile to apply: a built-in name or a YAML file")
	fl.StringVar(&f.jsonOut, "json", "", `also write the JSON report to `+"`FILE`"+` ("-" = stdout, and the command's stdout goes to stderr)`)
	fl.Var(&f.format, "format", `what --json writes: sbx (the sbx.report/v1 JSON) or ocsf (OCSF events as JSON lines)`)
	c.PreRunE = func(*cobra.Command, []string) error { return f.format.check(f.jsonOut) }
	fl.DurationVar(&f.timeout, "timeout", 0, "kill the whole sandbox after this `DURATION` (overrides the profile)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no human report on stderr")
	fl.StringVarP(&f.workdir, "workdir", "w", "", "working directory of the command (default: the current one)")
	fl.IntVar(&f.violationExit, "violation-exit", exitViolation, "exit `STATUS` when the verdict is violation")
	fl.StringArrayVar(&f.overrides.RW, "rw", nil, "share host `PATH` read-write (writes reach the host)")
	fl.StringArrayVar(&f.overrides.RO, "ro", nil, "share host `PATH` read-only")
	fl.StringArrayVarP(&f.overrides.Env, "env", "e", nil, "pass `NAME` from the caller, or set NAME=VALUE")
	fl.StringVar(&f.overrides.Memory, "memory", "", "memory limit for this run, e.g. `SIZE` 512MiB (overrides limits.memory)")
	fl.StringVar(&f.overrides.Disk, "disk", "", "size of the overlay's writable layer, e.g. `SIZE` 2GiB (overrides limits.disk)")
	fl.Int64Var(&f.overrides.Pids, "pids", 0, "process limit for this run (overrides limits.pids)")
	fl.Float64Var(&f.overrides.CPUs, "cpus", 0, "CPU limit in cores, e.g. 1.5 (overrides limits.cpu)")
	fl.StringVar(&f.overrides.ApplyMode, "apply", "", "apply the working directory's changes to the host's: `MODE` on-pass (the default of a bare --apply: only when the verdict is pass), always, or never (overrides filesystem.apply)")
	fl.Lookup("apply").NoOptDefVal = "on-pass"
	fl.StringVar(&f.overrides.Toolchains, "toolchains", "", "share the caller's toolchain caches read-only below a throwaway layer: `WHICH` auto (all), none, or a list of go, npm, pip, cargo, maven (overrides filesystem.toolchains)")
	fl.StringVar(&f.changes, "changes", "", "copy the files the command created or changed into `DIR` before teardown")
	fl.BoolVar(&f.probe, "probe", false, "run sbx probe first and refuse to run the command when the contract does not hold")
	addNetworkFlags(c, &f.overrides)
	return c
}

func runExec(ctx context.Context, io stdio, f execFlags, args []string) error {
	cwd, err := workdir(f.workdir)
	if err != nil {
		return setupError(err, "give an existing directory; the sandbox sees the host's files through its overlay")
	}
	plan, err := compilePlan(f.profile, cwd, os.Environ(), f.overrides)
	if err != nil {
		return setupError(err, "")
	}
	if err := checkBuild(plan); err != nil {
		return err
	}
	warnCallerFDs(io.err, args)
	if f.probe {
		if err := probeFirst(ctx, io, f); err != nil {
			return err
		}
	}
	// From here on the run's own handling: signals are forwarded to the command, which gets a grace
	// period; a second one tears down at once (runner.Options.Signals). ctx's cancellation by a signal
	// does not end the run (WithoutCancel); one that came before the run started stops sbx here.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	defer signal.Stop(sigs)
	if err := interrupted(ctx, "the command was not run"); err != nil {
		return err
	}
	out, err := openReportTarget(f.jsonOut)
	if err != nil {
		return setupError(err, "give --json a file (not a link to one) in an existing directory, or - for stdout")
	}
	defer out.close()
	opts := runner.Options{
		Plan: plan, Args: args, Cwd: cwd, Stdin: io.in, Stdout: commandStdout(io, f.jsonOut), Stderr: io.err, Signals: sigs,
		Closed: closedStdio(f.jsonOut), StateRoot: stateRoot(), Changes: f.changes,
	}
	restore := wireTerminal(&opts)
	rep, err := runner.Run(context.WithoutCancel(ctx), opts)
	restore()
	if err != nil {
		if rep != nil {
			// The command ran and was observed; what failed afterwards (the teardown) does not hide it.
			_, _ = writeReport(io, f, out, rep)
		}
		return setupError(err, "")
	}
	displaced, err := writeReport(io, f, out, rep)
	if err != nil {
		return setupError(err, "")
	}
	if displaced {
		return &exitError{code: exitDisplaced}
	}
	return &exitError{code: execStatus(rep, f.violationExit)}
}

// commandStdout is where the command's stdout goes: sbx's stdout, except with --json - (the report
// owns stdout then, so that "sbx exec --json - -- CMD | jq" reads one JSON document): the command's
// stdout then goes to sbx's stderr, beside its own stderr.
func commandStdout(io stdio, jsonOut string) goio.Writer {
	if jsonOut == "-" {
		return io.err
	}
	return io.out
}

// closedStdio are the command's stdio to close, as sbx's caller closed them (cgprime.ClosedStdio); with
// --json - the command's stdout is sbx's stderr.
func closedStdio(jsonOut string) [3]bool {
	c := cgprime.ClosedStdio()
	if jsonOut == "-" {
		c[1] = c[2]
	}
	return c
}

func workdir(dir string) (string, error) {
	if dir == "" {
		cwd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("reading the working directory: %w", err)
		}
		return cwd, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	// The sandbox sees the host's files through its overlay: a directory missing here is missing there.
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return "", fmt.Errorf("--workdir %s is not a directory", dir)
	}
	return abs, nil
}

// compilePlan loads a profile, applies the flags and compiles it. callerEnv is what the profile's
// env.pass and -e NAME may take values from.
func compilePlan(profile, cwd string, callerEnv []string, ov policy.Overrides) (*policy.Plan, error) {
	p, err := policy.Load(profile)
	if err != nil {
		return nil, err
	}
	return policy.Compile(p, policy.CompileContext{Cwd: cwd, CallerEnv: callerEnv, Overrides: ov})
}

// writeReport writes the human report (unless quiet) and the --json one. displaced says the JSON report
// was written elsewhere than FILE (see reportTarget.writeOrDisplace), and stderr names where.
func writeReport(io stdio, f execFlags, out *reportTarget, rep *report.Report) (displaced bool, err error) {
	if !f.quiet {
		text.Write(io.err, rep, text.Options{Color: isTerminal(io.err)})
	}
	if f.jsonOut == "" {
		return false, nil
	}
	what, data, err := "the report", []byte(nil), error(nil)
	if f.format == formatOCSF {
		what = "the OCSF events"
		data, err = ocsfLines(rep)
	} else {
		data, err = indentJSON(what, rep)
	}
	if err != nil {
		return false, err
	}
	to, why, err := out.writeOrDisplace(io.out, stateRoot(), what, data)
	if err != nil {
		return false, err
	}
	if to != "" {
		fmt.Fprintf(io.err, "sbx: warning: %v\n", why)
		fmt.Fprintf(io.err, "sbx: report displaced: %s is written to %s instead (exit status %d; the verdict and the command's status are in it)\n", what, to, exitDisplaced)
		return true, nil
	}
	return false, nil
}

// probeFirst runs the network probe with the run's profile and flags; a breach stops the run.
func probeFirst(ctx context.Context, io stdio, f execFlags) error {
	rep, err := runProbe(ctx, probeFlags{profile: f.profile, overrides: f.overrides})
	if ierr := interrupted(ctx, "probing the network contract; the command was not run"); ierr != nil {
		return ierr
	}
	if err != nil {
		return setupError(fmt.Errorf("probing the network contract: %w", err), "")
	}
	if rep.Passed {
		return nil
	}
	for _, r := range rep.Results {
		if !r.Pass {
			fmt.Fprintf(io.err, "sbx: probe: %s %s %s:%d -> %s\n", r.Kind, r.Label, r.Addr, r.Port, r.Outcome)
		}
	}
	return setupError(errors.New("the network contract does not hold; the command was not run"),
		"run sbx probe with the same profile and flags to see every target")
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
