package netcontract

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// The main thread stays with the main goroutine, as in sbx's own main: a namespace-switched locked
// goroutine that ended on the main thread would wedge it there and pin that namespace until exit.
func init() { runtime.LockOSThread() }

// TestMain needs root (namespaces, veth, nftables) and checks after the suite that nothing named sbx is
// left: namespaces, host nft tables, address slots.
func TestMain(m *testing.M) {
	if id := os.Getenv(stackHelperEnv); id != "" {
		if msg := stackScenario(id); msg != "" {
			println(msg)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		println("netcontract tests need root: namespaces, veth and nftables; skipping")
		os.Exit(0)
	}
	code := m.Run()
	if leaks := leftovers(); leaks != "" {
		println("leftovers after the suite:\n" + leaks)
		code = 1
	}
	os.Exit(code)
}

// leftovers reports namespaces and host nft tables named sbx that this process made.
func leftovers() string {
	var b strings.Builder
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		// Only this process's: other test binaries (cmd/sbx) may be running at the same time.
		if strings.HasPrefix(l, "sbx"+testPrefix) || strings.HasPrefix(l, fmt.Sprintf("sbx-test-up-%d-", os.Getpid())) {
			b.WriteString("netns " + l + "\n")
		}
	}
	out, _ = exec.Command("nft", "list", "tables").Output()
	if strings.Contains(string(out), "sbx") && natUsersEmpty() {
		b.WriteString("nft: " + string(out))
	}
	return b.String()
}

// natUsersEmpty says whether no sandbox holds the host NAT (another sbx may legitimately be running).
func natUsersEmpty() bool {
	e, _ := os.ReadDir(realHostDir + "/users")
	return len(e) == 0
}
