package main

import (
	"fmt"
	"strings"

	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/runner"
	"github.com/sbx-dev/sbx/sandbox"
)

// Exit statuses of sbx. exec passes the command's own status through when the verdict is pass; these are
// the others. 124 to 127 follow the shell's conventions (timeout(1), sh) and are the values the runner and
// the sandbox's supervisor give: they are named here, not defined again.
const (
	exitOK            = 0
	exitFailure       = 1 // a subcommand's check failed (profile validate, probe)
	exitViolation     = 100
	exitDisplaced     = 122 // the --json report was written elsewhere than FILE (stderr names where)
	exitTimeout       = runner.ExitTimeout
	exitSetup         = runner.ExitSetup
	exitNotExecutable = sandbox.ExitNotExecutable
	exitNotFound      = sandbox.ExitNotFound
)

// execStatuses is the one table of what sbx exec's own exit statuses mean: exec's
// help text is written from it, and TestExitStatusDocs checks docs/cli.md's "Exit status of sbx exec"
// against it.
var execStatuses = []struct {
	code int
	when string
}{
	{exitViolation, "the verdict is violation (set another with --violation-exit)"},
	{exitDisplaced, "the command ran, but its --json report could not be written to FILE safely (something took FILE's place): it was written to a file stderr names (wins over all below)"},
	{exitTimeout, "the timeout fired; the whole sandbox was killed (wins over a violation)"},
	{exitSetup, "sbx itself failed (usage, profile, setup)"},
	{exitNotExecutable, "COMMAND is not executable"},
	{exitNotFound, "COMMAND was not found"},
}

// execStatusHelp is the "Exit status" paragraph of exec's help.
func execStatusHelp() string {
	var b strings.Builder
	b.WriteString("Exit status: the command's own (128+N when signal N killed it) when the verdict is pass, else:\n")
	for _, s := range execStatuses {
		fmt.Fprintf(&b, "  %d  %s\n", s.code, s.when)
	}
	return b.String()
}

// execStatus is the exit status of sbx exec: timeout, then violation, then the command's own.
func execStatus(rep *report.Report, violationExit int) int {
	switch {
	case rep.TimedOut:
		return exitTimeout
	case rep.Verdict == report.VerdictViolation:
		return violationExit
	}
	return rep.ExitCode
}

// exitError ends the process with a given status after its message (if any) is printed.
type exitError struct {
	code int
	err  error  // nil: print nothing
	hint string // printed as "sbx: hint: ..."; "" means hintFor(err)
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// setupError is sbx's own failure (exit status 125) with a hint for what to do, or "" for hintFor's.
func setupError(err error, hint string) *exitError {
	return &exitError{code: exitSetup, err: err, hint: hint}
}
