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
)

// ErrUnsupported is returned by Start for a command it does not start; cmd.Start then does.
var ErrUnsupported = errors.New("vspawn: not supported")

// supported says whether Start knows every setting of cmd: its files (only ExtraFiles; stdio is
// /dev/null), and of SysProcAttr the clone flags, Setsid, Pdeathsig, Ptrace (the child stops at its
// exec, traced by the caller's thread, which should be locked), the id maps and a Credential without
// groups.
func supported(cmd *exec.Cmd) bool {
	sys := cmd.SysProcAttr
	if sys == nil || cmd.Process != nil || cmd.Stdin != nil || cmd.Stdout != nil || cmd.Stderr != nil ||
		cmd.Cancel != nil || cmd.WaitDelay != 0 {
		return false
	}
	if c := sys.Credential; c != nil && (len(c.Groups) > 0 || c.NoSetGroups) {
		return false
	}
	return sys.Chroot == "" && !sys.Setpgid && !sys.Setctty && !sys.Noctty && !sys.Foreground &&
		sys.Unshareflags == 0 && len(sys.AmbientCaps) == 0 && !sys.UseCgroupFD && sys.PidFD == nil
}
