package sandbox

import (
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestMain: the test binary is also the sandboxes' init and supervisor (Reexec).
func TestMain(m *testing.M) { testutil.Main(m, testutil.Binary{Reexec: Reexec}) }
