// Command sbx runs a command it does not trust in a throwaway sandbox, records what the command did and
// left behind, compares that with a profile and tears everything down.
package main

import (
	"os"
	"runtime"

	_ "github.com/sbx-dev/sbx/internal/cgprime" // starts the cgroup grace period at once (see the package)
	"github.com/sbx-dev/sbx/sandbox"
)

// Lock the main thread: libcontainer switches namespaces on the thread it runs on, and a switched main
// thread would keep the host's sbx inside the container's mount namespace (seen in 4 of 5 runs: the host
// process then pins the overlay).
func init() { runtime.LockOSThread() }

func main() {
	if sandbox.Reexec() {
		return
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
