package observe

import (
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestMain: with victimEnv set the test binary is a victim (runVictim); the suite leaves nothing
// behind: every fd closed, every process started by a test gone.
func TestMain(m *testing.M) {
	testutil.Main(m, testutil.Binary{
		HelperEnv: victimEnv,
		Helper:    runVictim,
		Checks:    []testutil.Check{testutil.CheckFDs, testutil.CheckChildren},
	})
}
