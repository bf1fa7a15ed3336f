package runner

import (
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/sandbox"
)

// TestMain: the test binary is also the sandboxes' init and supervisor (sandbox.Reexec).
func TestMain(m *testing.M) { testutil.Main(m, testutil.Binary{Reexec: sandbox.Reexec}) }
