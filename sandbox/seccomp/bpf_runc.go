//go:build seccomp

package seccomp

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/opencontainers/runc/libcontainer/configs"
	_ "github.com/opencontainers/runc/libcontainer/seccomp/patchbpf" // linked by name below
	"github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/supervisor"
	"github.com/sbx-dev/sbx/policy"
)

// runc's steps of seccomp.InitSeccomp and patchbpf.PatchAndLoad, without the load. They are
// unexported; go.mod pins runc, and a change of their signatures fails the link.

//go:linkname lcGetAction github.com/opencontainers/runc/libcontainer/seccomp.getAction
func lcGetAction(act configs.Action, errnoRet *uint) (libseccomp.ScmpAction, error)

//go:linkname lcSetFlag github.com/opencontainers/runc/libcontainer/seccomp.setFlag
func lcSetFlag(filter *libseccomp.ScmpFilter, flag specs.LinuxSeccompFlag) error

//go:linkname lcMatchCall github.com/opencontainers/runc/libcontainer/seccomp.matchCall
func lcMatchCall(filter *libseccomp.ScmpFilter, call *configs.Syscall, defAct libseccomp.ScmpAction) error

//go:linkname lcPatchFilter github.com/opencontainers/runc/libcontainer/seccomp/patchbpf.enosysPatchFilter
func lcPatchFilter(config *configs.Seccomp, filter *libseccomp.ScmpFilter) ([]unix.SockFilter, error)

//go:linkname lcFilterFlags github.com/opencontainers/runc/libcontainer/seccomp/patchbpf.filterFlags
func lcFilterFlags(config *configs.Seccomp, filter *libseccomp.ScmpFilter) (uint, bool, error)

// compileConfig is InitSeccomp's body up to the load, with its checks.
func compileConfig(config *configs.Seccomp) (*supervisor.Seccomp, error) {
	defaultAction, err := lcGetAction(config.DefaultAction, config.DefaultErrnoRet)
	if err != nil {
		return nil, errors.New("seccomp: invalid default action")
	}
	apiLevel, _ := libseccomp.GetAPI()
	for _, call := range config.Syscalls {
		if call.Action == configs.Notify {
			if apiLevel < 6 {
				return nil, fmt.Errorf("seccomp notify needs libseccomp API level 6 (libseccomp 2.5, Linux 5.7), this one has %d", apiLevel)
			}
			if slices.Contains(policy.NeverNotify, call.Name) {
				return nil, fmt.Errorf("seccomp: the %s syscall cannot notify", call.Name)
			}
		}
	}
	if defaultAction == libseccomp.ActNotify {
		return nil, errors.New("seccomp: notify cannot be the default action")
	}
	filter, err := libseccomp.NewFilter(defaultAction)
	if err != nil {
		return nil, fmt.Errorf("seccomp: creating the filter: %w", err)
	}
	defer filter.Release()
	for _, arch := range config.Architectures {
		a, err := libseccomp.GetArchFromString(arch)
		if err != nil {
			return nil, fmt.Errorf("seccomp: architecture %s: %w", arch, err)
		}
		if err := filter.AddArch(a); err != nil {
			return nil, fmt.Errorf("seccomp: adding architecture %s: %w", arch, err)
		}
	}
	for _, flag := range config.Flags {
		if err := lcSetFlag(filter, flag); err != nil {
			return nil, err
		}
	}
	if len(config.Syscalls) > 32 {
		_ = filter.SetOptimize(2) // as runc: an older libseccomp has no binary tree, which is no error
	}
	if err := filter.SetNoNewPrivsBit(false); err != nil {
		return nil, fmt.Errorf("seccomp: clearing the no_new_privs bit: %w", err)
	}
	for _, call := range config.Syscalls {
		if call == nil {
			return nil, errors.New("seccomp: a nil syscall rule")
		}
		if err := lcMatchCall(filter, call, defaultAction); err != nil {
			return nil, err
		}
	}
	prog, err := lcPatchFilter(config, filter)
	if err != nil {
		return nil, fmt.Errorf("seccomp: patching the filter: %w", err)
	}
	flags, _, err := lcFilterFlags(config, filter)
	if err != nil {
		return nil, fmt.Errorf("seccomp: the filter's flags: %w", err)
	}
	if len(prog) == 0 || len(prog) > 4096 {
		return nil, fmt.Errorf("seccomp: the filter has %d instructions, the kernel takes 1 to 4096", len(prog))
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), len(prog)*int(unsafe.Sizeof(prog[0])))
	return &supervisor.Seccomp{Filter: bytes.Clone(b), Flags: flags}, nil
}
