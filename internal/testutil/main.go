package testutil

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// Every test binary that imports testutil keeps its main goroutine on the main thread, as sbx's own main
// does, and only an init function can promise that. A goroutine that locked its thread and entered a
// namespace (fakenet.RunIn, netcontract) has that thread discarded when it ends; had it run on the main
// thread, which cannot be discarded, the thread would stay in the namespace and pin it until exit. The
// re-exec roles (libcontainer's init, a victim renaming itself with PR_SET_NAME) need the main thread too.
func init() { runtime.LockOSThread() }

// Binary says what a package's test binary is besides a test runner: the processes its tests start are
// the test binary itself, re-executed in a role. Main reads it.
type Binary struct {
	// Reexec is the program's re-exec dispatch (sandbox.Reexec: libcontainer's init, sbx's supervisor,
	// the network helper, the roles registered with sandbox.RegisterRole). It runs the role named by the
	// arguments and does not return then; it returns false for a normal start.
	Reexec func() bool

	// HelperEnv names an environment variable that starts the binary as this package's own helper
	// (an observe victim, a netcontract scenario in a private mount namespace): Helper runs with the
	// variable's value instead of the tests, and the process exits 1 with its error, 0 without.
	HelperEnv string
	Helper    func(value string) error

	// Commands are programs the binary also is for testscript scripts (testscript.Main): a script's
	// "exec NAME" runs Commands[NAME], whose result is the exit status.
	Commands map[string]func() int

	// Checks take a reading before the tests and compare after them: what the suite left behind (fds,
	// child processes, namespaces) fails it.
	Checks []Check
}

// A Check takes a reading before the tests and returns the comparison to make after them, which
// describes what the tests left behind as an error, or returns nil.
type Check func() (after func() error)

// Main is the TestMain of a package whose tests start the test binary again in a role (see Binary). It
// runs the role when the binary was started as one; otherwise it runs the tests and the checks, and
// exits with the suite's status.
func Main(m *testing.M, b Binary) {
	if b.Reexec != nil && b.Reexec() {
		os.Exit(0)
	}
	if v := os.Getenv(b.HelperEnv); b.HelperEnv != "" && v != "" {
		if err := b.Helper(v); err != nil {
			fmt.Fprintf(os.Stderr, "%s=%s: %v\n", b.HelperEnv, v, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	s := suite{m, b.Checks}
	if b.Commands != nil {
		testscript.Main(s, commands(b.Commands)) // does not return
	}
	os.Exit(s.Run())
}

// commands adapts Binary.Commands to testscript.Main, which exits 0 after a command that returns.
func commands(cmds map[string]func() int) map[string]func() {
	out := make(map[string]func(), len(cmds))
	for name, f := range cmds {
		out[name] = func() { os.Exit(f()) }
	}
	return out
}

// suite runs the tests between the checks' two readings.
type suite struct {
	m      *testing.M
	checks []Check
}

// Run runs the tests and the checks; a check that finds something left fails the suite.
func (s suite) Run() int {
	afters := make([]func() error, 0, len(s.checks))
	for _, c := range s.checks {
		afters = append(afters, c())
	}
	code := s.m.Run()
	for _, after := range afters {
		if err := after(); err != nil {
			fmt.Fprintf(os.Stderr, "after the tests: %v\n", err)
			code = 1
		}
	}
	return code
}
