// Package vspawn starts a process in new namespaces, a user namespace among them, without copying the
// caller's memory.
//
// Go's os/exec starts such a child with a plain fork: its child must wait for the parent to write the id
// maps of the new user namespace, which a vfork's suspended parent could not. The fork copies every
// page table of the caller (sbx's heap, a few MB), and the caller then takes a copy-on-write fault on
// each page it writes: about 1 ms of CPU per sandbox when many start at once. Start instead clones with
// CLONE_VM|CLONE_VFORK: the calling thread waits until the child has executed, as in a vfork, while
// another goroutine of the caller writes the maps the child waits for.
package vspawn

import (
	"errors"
	"os/exec"
	"syscall"
)

// ErrUnsupported is returned by Start for a command it does not start; cmd.Start then does.
var ErrUnsupported = errors.New("vspawn: not supported")

// supported says whether Start knows every setting of cmd: its files, and of SysProcAttr the clone
// flags, Setsid, Pdeathsig, the id maps and Credential.
func supported(cmd *exec.Cmd) bool {
	sys := cmd.SysProcAttr
	if sys == nil || cmd.Process != nil || cmd.Stdin != nil || cmd.Stdout != nil || cmd.Stderr != nil ||
		cmd.Cancel != nil || cmd.WaitDelay != 0 {
		return false
	}
	rest := *sys
	rest.Cloneflags, rest.Setsid, rest.Pdeathsig = 0, false, 0
	rest.UidMappings, rest.GidMappings, rest.GidMappingsEnableSetgroups = nil, nil, false
	if c := rest.Credential; c != nil && (len(c.Groups) > 0 || c.NoSetGroups) {
		return false
	}
	rest.Credential = nil
	var zero syscall.SysProcAttr
	return rest.Chroot == zero.Chroot && !rest.Ptrace && !rest.Setpgid && !rest.Setctty && !rest.Noctty &&
		!rest.Foreground && rest.Unshareflags == 0 && len(rest.AmbientCaps) == 0 && !rest.UseCgroupFD &&
		rest.PidFD == nil
}
