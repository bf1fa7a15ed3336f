package sandbox

import (
	"os"

	_ "github.com/opencontainers/cgroups/devices" // registers the device cgroup manager
	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter" // runs the namespace setup of "init" before the Go runtime
)

// Role arguments of the re-executed binary.
const (
	roleInit  = "init" // libcontainer's; fixed by libcontainer
	rolePause = "__sbx_pause"
	roleShim  = "__sbx_shim"
)

// Reexec runs the role the binary was re-executed in and does not return in that case. It returns false
// when the binary was started normally. Call it first in main and in TestMain.
func Reexec() bool {
	if len(os.Args) < 2 {
		return false
	}
	switch os.Args[1] {
	case roleInit:
		libcontainer.Init() // never returns
	case rolePause:
		os.Exit(pauseMain())
	case roleShim:
		os.Exit(shimMain(os.Args[2:]))
	}
	return false
}
