package mcpserver

import (
	"context"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/runner"
	"github.com/sbx-dev/sbx/sandbox"
)

// TestRunSupervisorHint: a run whose sandbox could not hold the command (Landlock or the filter
// refused, no degrade) fails the call with the supervisor's reason and its hint, as the CLI says both.
func TestRunSupervisorHint(t *testing.T) {
	dir := t.TempDir()
	fail := func(context.Context, runner.Options) (*report.Report, error) {
		return nil, &sandbox.SupervisorError{Reason: "landlock: landlock needs ABI 1", Hint: "set filesystem.landlock: degrade"}
	}
	s, err := New(Config{Workspaces: []string{dir}, Cwd: dir, Env: []string{"PATH=/usr/bin:/bin"}, Run: fail})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, _, err = s.handleRun(context.Background(), nil, RunInput{Command: "true"})
	if err == nil || !strings.Contains(err.Error(), "landlock needs ABI 1") || !strings.Contains(err.Error(), "hint: set filesystem.landlock: degrade") {
		t.Errorf("sbx_run: %v, want the reason and the hint", err)
	}
}
