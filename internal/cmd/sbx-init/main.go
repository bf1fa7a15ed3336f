// Command sbx-init is sbx's supervisor (pid 1 of every sandbox) as a small static binary: built with
// CGO_ENABLED=0 it starts several times faster than the whole sbx binary, which matters on every run.
// make build puts it next to bin/sbx, where sbx looks for it; sbx runs itself in this role without it.
package main

import (
	"os"
	"runtime"

	"github.com/sbx-dev/sbx/internal/supervisor"
)

// The supervisor runs on the main thread, whose credentials /proc/1/status shows (see supervisor.build).
// One P: the supervisor mostly waits, and every thread its runtime makes is one more that its all-thread
// change of ids (supervisor.takeCreds) must wait for to be scheduled, which on a machine busy starting
// many sandboxes is most of that change's cost (8 threads with two Ps, 6 with one; 20 runs at once about
// 3% shorter, one run alone no slower).
func init() {
	runtime.LockOSThread()
	runtime.GOMAXPROCS(1)
}

func main() { os.Exit(supervisor.Main()) }
