package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	goio "io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/sbx-dev/sbx/internal/cgprime"
	"github.com/sbx-dev/sbx/internal/selfexe"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/report/text"
	"github.com/sbx-dev/sbx/runner"
	"github.com/sbx-dev/sbx/sandbox"
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
	verbose       bool
	coldWhy       string // the run is cold, for this reason (coldStart)
	stateRoot     string // $SBX_STATE_ROOT of sbx's caller
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
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "say on stderr whether the run went through the sbx service (sbx serve) or started cold, and why")
	addNetworkFlags(c, &f.overrides)
	return c
}

func runExec(ctx context.Context, io stdio, f execFlags, args []string) error {
	// In the service, for a fast client (serve_raw.go), the caller's environment and working directory
	// are cl's, not the process's.
	cl := callerOf(ctx)
	env, getenv, base, closed := os.Environ(), os.Getenv, "", cgprime.ClosedStdio()
	if cl != nil {
		if err := cl.check(f); err != nil {
			return err
		}
		env, getenv, base, closed = cl.env, cl.getenv, cl.cwd, cl.closed
		f.changes = cl.abs(f.changes)
	} else {
		f.coldWhy = coldStart()
	}
	if f.probe && f.coldWhy == "" {
		coldAgain("--probe runs cold")
		f.coldWhy = "--probe runs cold"
	}
	f.stateRoot = getenv(stateRootEnv)
	cwd, err := workdir(base, f.workdir)
	if err != nil {
		return setupError(err, "give an existing directory; the sandbox sees the host's files through its overlay")
	}
	compile := compilePlan
	if cl != nil {
		compile = cl.s.plans.compile
	}
	plan, err := compile(base, f.profile, cwd, env, f.overrides)
	if err != nil {
		return setupError(err, "")
	}
	if err := checkBuild(plan); err != nil {
		return err
	}
	if f.probe {
		if err := probeFirst(ctx, io, f); err != nil {
			return err
		}
	}
	// From here on the run's own handling: signals are forwarded to the command, which gets a grace
	// period; a second one tears down at once (runner.Options.Signals). ctx's cancellation by a signal
	// does not end the run (WithoutCancel); one that came before the run started stops sbx here.
	sigs := make(chan os.Signal, 4)
	if cl != nil {
		cl.sigs = sigs // the client's, once it said go
	} else {
		signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
		defer signal.Stop(sigs)
	}
	if err := interrupted(ctx, "the command was not run"); err != nil {
		return err
	}
	out, err := openReportTarget(base, f.jsonOut)
	if err != nil {
		return setupError(err, "give --json a file (not a link to one) in an existing directory, or - for stdout")
	}
	defer out.close()
	if cl != nil && out.dir == nil && f.jsonOut != "" && f.jsonOut != "-" {
		return cl.back("--json names a stream (a pipe, a device), which the CLI opens itself")
	}
	opts := runner.Options{
		Plan: plan, Args: args, Cwd: cwd, Stdin: io.in, Stdout: commandStdout(io, f.jsonOut), Stderr: io.err, Signals: sigs,
		Closed: closedStdio(closed, f.jsonOut), StateRoot: f.stateRoot, Changes: f.changes, CallerHome: sandbox.CallerHomeFrom(getenv),
	}
	rep, rend, err := runCommand(ctx, io, f, opts)
	if err != nil {
		if rep != nil {
			// The command ran and was observed; what failed afterwards (the teardown) does not hide it.
			_, _ = emitReport(io, f, out, rend)
		}
		return setupError(err, "")
	}
	displaced, err := emitReport(io, f, out, rend)
	if err != nil {
		return setupError(err, "")
	}
	if displaced {
		return &exitError{code: exitDisplaced}
	}
	return &exitError{code: execStatus(rep, f.violationExit)}
}

// runCommand carries out the run: through the caller's sbx service when it takes it (see service.go),
// else here, cold. The report comes back rendered as f asks.
func runCommand(ctx context.Context, io stdio, f execFlags, opts runner.Options) (*report.Report, rendered, error) {
	why := f.coldWhy
	if why == "" && stdioTerminal(opts) {
		why = "the command gets a terminal"
	}
	if cl := callerOf(ctx); cl != nil {
		if why != "" {
			return nil, rendered{}, cl.back(why)
		}
		rep, rend, err := cl.run(f, opts)
		if f.verbose && cl.started {
			sayServed(io.err, cl.socket, cl.warm)
		}
		return rep, rend, err
	}
	if why == "" {
		req := serviceRequest{Quiet: f.quiet, Color: reportColor(io.err), JSON: f.jsonOut != "", Format: string(f.format)}
		run, w, ok := viaService(opts, req, func() { warnCallerFDs(io.err, opts.Args) })
		if ok {
			if f.verbose {
				sayServed(io.err, serviceSocket(), run.warm)
			}
			return run.rep, run.rend, run.err
		}
		why = w
	}
	coldAgain(why)
	if f.verbose {
		fmt.Fprintf(io.err, "sbx: cold start: %s\n", why)
	}
	warnCallerFDs(io.err, opts.Args)
	restore := wireTerminal(&opts)
	rep, err := runner.Run(context.WithoutCancel(ctx), opts)
	restore()
	var rend rendered
	if rep != nil {
		rend = renderReport(f, rep, reportColor(io.err))
	}
	return rep, rend, err
}

// coldEnv carries into an sbx exec that coldAgain started why it runs cold; coldServiceEnv the
// SBX_SERVICE its caller gave (unset: none).
const (
	coldEnv        = "_SBX_COLD"
	coldServiceEnv = "_SBX_COLD_SERVICE"
)

// coldAgain starts sbx exec again to run cold, for why, when it started for a service (the
// constructor saw its socket, cgprime.ServiceSeen) and so without a cold run's early work: the run is
// then a cold run's in every way. It returns only when it did not (no service seen, or the exec
// failed: the run goes on here without that work).
func coldAgain(why string) {
	if !cgprime.ServiceSeen() {
		return
	}
	self, err := selfexe.Path()
	if err != nil {
		return
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, serviceEnv+"=") })
	if v, ok := os.LookupEnv(serviceEnv); ok {
		env = append(env, coldServiceEnv+"="+v)
	}
	env = append(env, serviceEnv+"=off", coldEnv+"="+why)
	// What the new sbx's constructor reads as its caller's must be the caller's, not what this one made
	// of it: the timer slack (of the thread that executes), the soft limit of open files (Go's runtime
	// raised it), stdio that were closed (the constructor opened /dev/null on them).
	runtime.LockOSThread()
	if slack := cgprime.CallerTimerSlack(); slack != 0 {
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0)
	}
	var nofile unix.Rlimit
	if soft, ok := cgprime.CallerNoFile(); ok && unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile) == nil {
		nofile.Cur = soft
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &nofile)
	}
	for fd, closed := range cgprime.ClosedStdio() {
		if closed {
			unix.Close(fd)
		}
	}
	_ = unix.Exec(self, os.Args, env)
	// Not executed: /dev/null back on the closed stdio, before anything else can take their numbers.
	for fd, closed := range cgprime.ClosedStdio() {
		if closed {
			if nfd, err := unix.Open("/dev/null", unix.O_RDWR, 0); err == nil && nfd != fd {
				unix.Dup2(nfd, fd)
				unix.Close(nfd)
			}
		}
	}
	runtime.UnlockOSThread()
}

// coldStart is why this sbx exec runs cold when coldAgain started it ("" otherwise); its caller's
// environment is given back.
func coldStart() string {
	why, ok := os.LookupEnv(coldEnv)
	if !ok {
		return ""
	}
	os.Unsetenv(coldEnv)
	os.Unsetenv(serviceEnv)
	if v, ok := os.LookupEnv(coldServiceEnv); ok {
		os.Setenv(serviceEnv, v)
		os.Unsetenv(coldServiceEnv)
	}
	return why
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

// closedStdio are the command's stdio to close, as sbx's caller closed them (c: cgprime.ClosedStdio,
// or a fast client's); with --json - the command's stdout is sbx's stderr.
func closedStdio(c [3]bool, jsonOut string) [3]bool {
	if jsonOut == "-" {
		c[1] = c[2]
	}
	return c
}

// workdir is the command's working directory: dir (default: the current one), made absolute in base
// (default: the current directory).
func workdir(base, dir string) (string, error) {
	if base == "" && !filepath.IsAbs(dir) {
		cwd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("reading the working directory: %w", err)
		}
		base = cwd
	}
	if dir == "" {
		return base, nil
	}
	abs := filepath.Clean(dir)
	if !filepath.IsAbs(dir) {
		abs = filepath.Join(base, dir)
	}
	// The sandbox sees the host's files through its overlay: a directory missing here is missing there.
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return "", fmt.Errorf("--workdir %s is not a directory", dir)
	}
	return abs, nil
}

// compilePlan loads a profile (a relative file taken in base, "": the current directory), applies the
// flags and compiles it. callerEnv is what the profile's env.pass and -e NAME may take values from.
func compilePlan(base, profile, cwd string, callerEnv []string, ov policy.Overrides) (*policy.Plan, error) {
	p, err := policy.LoadIn(base, profile)
	if err != nil {
		return nil, err
	}
	return policy.Compile(p, policy.CompileContext{Cwd: cwd, CallerEnv: callerEnv, Overrides: ov})
}

// reportColor says whether the human report on w is painted: w is a terminal (and NO_COLOR is unset,
// which text.Write checks too).
func reportColor(w goio.Writer) bool { return isTerminal(w) && os.Getenv("NO_COLOR") == "" }

// rendered is a report as sbx exec writes it: the human text and what --json writes.
type rendered struct {
	Text    []byte `json:"text,omitempty"`
	What    string `json:"what,omitempty"` // what JSON is, for messages: "the report", "the OCSF events"
	JSON    []byte `json:"json,omitempty"`
	JSONErr string `json:"json_error,omitempty"` // why JSON could not be made
}

// renderReport renders rep as f asks: the human text unless quiet, the --json data when asked.
func renderReport(f execFlags, rep *report.Report, color bool) rendered {
	var r rendered
	if !f.quiet {
		var b bytes.Buffer
		text.Write(&b, rep, text.Options{Color: color})
		r.Text = b.Bytes()
	}
	if f.jsonOut == "" {
		return r
	}
	var err error
	r.What = "the report"
	if f.format == formatOCSF {
		r.What = "the OCSF events"
		r.JSON, err = ocsfLines(rep)
	} else {
		r.JSON, err = indentJSON(r.What, rep)
	}
	if err != nil {
		r.JSON, r.JSONErr = nil, err.Error()
	}
	return r
}

// emitReport writes a rendered report: the text on stderr, the JSON to --json's target.
func emitReport(io stdio, f execFlags, out *reportTarget, r rendered) (displaced bool, err error) {
	if len(r.Text) > 0 {
		_, _ = io.err.Write(r.Text) // stderr gone: the exit status still tells
	}
	if f.jsonOut == "" {
		return false, nil
	}
	if r.JSONErr != "" {
		return false, errors.New(r.JSONErr)
	}
	to, why, err := out.writeOrDisplace(io.out, f.stateRoot, r.What, r.JSON)
	if err != nil {
		return false, err
	}
	if to != "" {
		fmt.Fprintf(io.err, "sbx: warning: %v\n", why)
		fmt.Fprintf(io.err, "sbx: report displaced: %s is written to %s instead (exit status %d; the verdict and the command's status are in it)\n", r.What, to, exitDisplaced)
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
