package sandbox

import (
	"os"

	_ "github.com/opencontainers/cgroups/devices" // registers the device cgroup manager
	"github.com/opencontainers/runc/libcontainer"

	_ "github.com/opencontainers/runc/libcontainer/nsenter" // runs the namespace setup of "init" before the Go runtime
	"github.com/sbx-dev/sbx/internal/supervisor"
	"github.com/sbx-dev/sbx/sandbox/netcontract"
)

// Role arguments of the re-executed binary.
const (
	roleInit      = "init"          // libcontainer's; fixed by libcontainer
	roleSupervise = supervisor.Role // pid 1: starts the command, reaps orphans
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
	case roleSupervise, supervisor.ProbeRole:
		os.Exit(supervisor.Main())
	case netcontract.HelperRole:
		os.Exit(netcontract.HelperMain(os.Args[2:]))
	case netcontract.KeeperRole:
		os.Exit(netcontract.KeeperMain(os.Args[2:]))
	}
	if main, ok := roles[os.Args[1]]; ok {
		os.Exit(main(os.Args[2:]))
	}
	return false
}

// roles are extra roles registered by the program.
var roles = map[string]func(args []string) int{}

// RegisterRole makes Reexec run main when the binary is started with name as its first argument. Use
// it, in an init function, for programs that run inside a sandbox as the sbx binary itself (see
// [SelfCommand]), such as the network probe.
func RegisterRole(name string, main func(args []string) int) { roles[name] = main }

// SelfCommand is the argv that runs this binary in role name inside a sandbox (the sandbox then
// bind-mounts the binary in).
func SelfCommand(role string, args ...string) []string {
	return append([]string{selfPath, role}, args...)
}
