package netcontract

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestMain: with stackHelperEnv set the test binary runs stackScenario; after the suite nothing named
// sbx that this process made is left: namespaces, host nft tables.
func TestMain(m *testing.M) {
	testutil.Main(m, testutil.Binary{
		HelperEnv: stackHelperEnv,
		Helper:    stackScenario,
		Checks:    []testutil.Check{func() func() error { return leftovers }},
	})
}

// leftovers reports namespaces and host nft tables named sbx that this process made.
func leftovers() error {
	var b strings.Builder
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		// Only this process's: other test binaries (cmd/sbx) may be running at the same time.
		if strings.HasPrefix(l, "sbx"+testIDPrefix()) || strings.HasPrefix(l, fmt.Sprintf("sbx-test-up-%d-", os.Getpid())) {
			b.WriteString("netns " + l + "\n")
		}
	}
	out, _ = exec.Command("nft", "list", "tables").Output()
	if strings.Contains(string(out), "sbx") && natUsersEmpty() {
		b.WriteString("nft: " + string(out))
	}
	if b.Len() > 0 {
		return errors.New("leftovers after the suite:\n" + b.String())
	}
	return nil
}

// natUsersEmpty says whether no sandbox holds the host NAT (another sbx may legitimately be running).
func natUsersEmpty() bool {
	e, _ := os.ReadDir(realHostDir + "/users")
	return len(e) == 0
}
