package seccomp

import (
	"os"
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestMain: the test binary is also the process that loads a filter as runc does (roleLoadSeccomp).
func TestMain(m *testing.M) { testutil.Main(m, testutil.Binary{Reexec: reexec}) }

// reexec runs the role the test binary was started in; false for a normal start.
func reexec() bool {
	if len(os.Args) > 1 && os.Args[1] == roleLoadSeccomp {
		os.Exit(loadSeccomp(os.Args[2:]))
	}
	return false
}
