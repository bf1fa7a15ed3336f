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
func init() { runtime.LockOSThread() }

func main() { os.Exit(supervisor.Main()) }
