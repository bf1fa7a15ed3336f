package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/runner"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/netcontract"
)

// Exit statuses of sbx itself (the command's own status passes through otherwise).
const (
	exitOK            = 0
	exitFailure       = 1   // a subcommand's check failed (profile validate, probe)
	exitTimeout       = 124 // the run's timeout fired
	exitSetup         = 125 // sbx failed: usage, profile, setup
	exitNotExecutable = 126
	exitNotFound      = 127
	exitViolation     = 100 // default status of a violation verdict (exec --violation-exit)
)

// stateRootEnv overrides where sbx keeps the state of its runs (tests give each script its own).
const stateRootEnv = "SBX_STATE_ROOT"

func stateRoot() string { return os.Getenv(stateRootEnv) }

// version is set at build time with -ldflags "-X main.version=..."; buildVersion falls back to what the
// Go toolchain recorded.
var version = ""

// exitError ends the process with a given status after its message (if any) is printed.
type exitError struct {
	code int
	err  error  // nil: print nothing
	hint string // printed as "sbx: hint: ..."
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// stdio is what a subcommand reads and writes; tests pass buffers.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// run executes sbx with args and returns the exit status.
func run(args []string, in io.Reader, out, errw io.Writer) int {
	root := newRootCmd(stdio{in, out, errw})
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	switch {
	case errors.As(err, &ee):
	case errors.Is(err, errInvalidProfile):
		ee = &exitError{code: exitFailure, err: err} // what validate checks failed; sbx itself did not
	default:
		ee = &exitError{code: exitSetup, err: err}
	}
	if ee.err != nil {
		printError(errw, ee.err, ee.hint)
	}
	return ee.code
}

// printError prints one "sbx: error:" line and the hints that go with it, age style: lowercase, no
// trailing period.
func printError(w io.Writer, err error, hint string) {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	fmt.Fprintf(w, "sbx: error: %s\n", msg)
	if hint == "" {
		hint = hintFor(err)
	}
	if hint != "" {
		fmt.Fprintf(w, "sbx: hint: %s\n", hint)
	}
}

// hintFor finds a hint for an error from one of sbx's packages.
func hintFor(err error) string {
	if h := policy.Hint(err); h != "" {
		return h
	}
	switch {
	case errors.Is(err, sandbox.ErrShare):
		return "a path shared with --ro, --rw or filesystem.share must exist on the host"
	case errors.Is(err, runner.ErrChangesDir):
		return "give --changes a directory outside every --rw share, e.g. a fresh one under /tmp"
	case errors.Is(err, sandbox.ErrNoCgroup):
		return "run sbx as root, or drop limits.require from the profile to run with rlimits instead (the report's notes say which limit holds)"
	case errors.Is(err, sandbox.ErrRootless):
		return "without root, pasta is the sandbox's uplink: drop --uplink-netns (network.uplink_netns), or run sbx as root"
	case errors.Is(err, netcontract.ErrNoPasta):
		return "without root the network contract needs pasta (apt-get install passt) and /dev/net/tun open to the caller (mode 0666); 'sbx version' shows both"
	case errors.Is(err, sandbox.ErrStateRoot):
		return "put the state root (" + stateRootEnv + ") where every directory on the way down is searchable (mode 0711 or 0755), as /run/sbx is"
	case errors.Is(err, sandbox.ErrNoIDMap):
		return "the working tree is shown to the command through an idmapped mount (kernel 5.12+, overlayfs on idmapped layers 5.19+); without it only root can hand it over"
	case errors.Is(err, sandbox.ErrNotSupported):
		return "this kernel lacks a feature the profile requires; see 'Requirements' in README.md"
	case os.Geteuid() != 0 && (errors.Is(err, os.ErrPermission) || errors.Is(err, sandbox.ErrSetup)):
		return "'sbx version' shows what this host gives sbx without root; run 'sbx gc' to remove what earlier runs left behind"
	case errors.Is(err, os.ErrPermission):
		return "sbx creates namespaces, cgroups and mounts: run it as root (sudo sbx ...)"
	case errors.Is(err, sandbox.ErrSetup):
		return "run 'sbx gc' to remove what earlier runs left behind, then try again"
	}
	return ""
}

func newRootCmd(io stdio) *cobra.Command {
	root := &cobra.Command{
		Use:   "sbx",
		Short: "Run an untrusted command in a throwaway sandbox and report what it did and left behind",
		Long: `sbx runs one untrusted command (typically written by an AI model) in a fresh sandbox,
enforces a profile while it runs, records what it left behind, compares that with the
profile and tears everything down.

Example:
  sbx exec -- sh -c 'python3 -m http.server 8000 & exit 0'`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
	}
	root.SetIn(io.in)
	root.SetOut(io.out)
	root.SetErr(io.err)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitSetup, err: err, hint: fmt.Sprintf("see '%s --help'", c.CommandPath())}
	})
	root.AddCommand(newExecCmd(io), newProbeCmd(io), newGCCmd(io), newVersionCmd(io), newProfileCmd(), newMCPCmd(io), newSpecCmd(io),
		newExportCmd(io), newManCmd(io), newReportCmd())
	groups(root)
	completions(root)
	return root
}

// groups makes every command that only holds subcommands (sbx, sbx profile, sbx export) refuse an
// unknown subcommand with exit status 125 and a "did you mean" hint; without arguments it prints its
// help. (cobra alone prints the help and exits 0 under a group, and folds its suggestion into a
// multi-line error.)
func groups(c *cobra.Command) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			return unknownCommand(c, args[0])
		}
	}
	for _, sub := range c.Commands() {
		groups(sub)
	}
}

// unknownCommand is the error for a subcommand name that c does not have.
func unknownCommand(c *cobra.Command, name string) error {
	err := fmt.Errorf("unknown command %q for %q", name, c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2
	}
	if s := c.SuggestionsFor(name); len(s) > 0 {
		for i := range s {
			s[i] = "'" + c.CommandPath() + " " + s[i] + "'"
		}
		return &exitError{code: exitSetup, err: err, hint: "did you mean " + strings.Join(s, " or ") + "?"}
	}
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	return &exitError{code: exitSetup, err: err,
		hint: fmt.Sprintf("see '%s --help' for the commands: %s", c.CommandPath(), strings.Join(names, ", "))}
}

func newGCCmd(io stdio) *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Remove what crashed or killed runs left behind",
		Long: `gc removes the processes, mounts, cgroups, network namespaces and state of runs whose sbx
died. Runs in progress are left alone. Every sbx exec also does this first.

Example:
  sudo sbx gc`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			res, err := sandbox.GC(stateRoot())
			for _, id := range res.Runs {
				fmt.Fprintf(io.out, "removed run %s\n", id)
			}
			if err != nil {
				return err
			}
			if len(res.Runs) == 0 {
				fmt.Fprintf(io.out, "nothing to remove (%d runs in progress)\n", len(res.Skipped))
			}
			return nil
		},
	}
}
