package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/state"
)

// stateRootEnv overrides where sbx keeps the state of its runs (tests give each script its own).
const stateRootEnv = "SBX_STATE_ROOT"

func stateRoot() string { return os.Getenv(stateRootEnv) }

// version is set at build time with -ldflags "-X main.version=..."; buildVersion falls back to what the
// Go toolchain recorded.
var version = ""

// stdio is what a subcommand reads and writes; tests pass buffers.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// run executes sbx with args and returns the exit status.
func run(args []string, in io.Reader, out, errw io.Writer) int {
	return runContext(context.Background(), args, in, out, errw)
}

// runContext is run with ctx as the commands' context (a fast client's caller, serve_raw.go).
func runContext(ctx context.Context, args []string, in io.Reader, out, errw io.Writer) int {
	// libcontainer logs warnings through logrus onto stderr (an OOM count it cannot read once a start
	// failed without root, ...), where they would come before sbx's one-line error; what matters reaches
	// sbx as that error. Its errors still show.
	logrus.SetLevel(logrus.ErrorLevel)
	if sandbox.TraceLibcontainer() {
		logrus.SetLevel(logrus.DebugLevel)
		logrus.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "05.000000"})
	}
	root := newRootCmd(stdio{in, out, errw})
	root.SetArgs(args)
	// Commands that build sandboxes make the context one that SIGINT and SIGTERM cancel
	// (cancelOnSignal); the others keep the default: a signal ends sbx.
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errHandBack) {
		return exitSetup // not printed: the CLI goes on with the run
	}
	var ee *exitError
	switch {
	case errors.As(err, &ee):
	case errors.Is(err, errInvalidProfile):
		ee = &exitError{code: exitFailure, err: err} // what validate checks failed; sbx itself did not
	default:
		ee = setupError(err, "")
	}
	if ee.err != nil {
		hint := ee.hint
		if hint == "" {
			hint = hintFor(ee.err)
		}
		printError(errw, ee.err, hint)
	}
	return ee.code
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
		return setupError(err, fmt.Sprintf("see '%s --help'", c.CommandPath()))
	})
	root.AddCommand(newExecCmd(io), newProbeCmd(io), newGCCmd(io), newVersionCmd(io), newProfileCmd(), newMCPCmd(io), newServeCmd(io), newSpecCmd(io),
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
		return setupError(err, "did you mean "+strings.Join(s, " or ")+"?")
	}
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	return setupError(err, fmt.Sprintf("see '%s --help' for the commands: %s", c.CommandPath(), strings.Join(names, ", ")))
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
			res, err := state.GC(stateRoot())
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
