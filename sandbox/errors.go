package sandbox

import (
	"errors"

	"github.com/sbx-dev/sbx/internal/supervisor"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
	"github.com/sbx-dev/sbx/sandbox/rootfs"
	"github.com/sbx-dev/sbx/sandbox/state"
)

// Exit statuses for failures before the command runs, as a shell gives them.
const (
	ExitSetup         = supervisor.ExitSetup // sbx could not set up the sandbox (Landlock could not be applied, ...)
	ExitNotExecutable = supervisor.ExitNotExecutable
	ExitNotFound      = supervisor.ExitNotFound
)

// ErrNotSupported is matched (errors.Is) by errors about a kernel or filter that cannot give what the
// profile asks.
var ErrNotSupported = supervisor.ErrNotSupported

// ErrRootless is matched by errors about what sbx cannot do without root.
var ErrRootless = host.ErrRootless

// ErrStateRootShown is matched by the error of a rootless run whose state root lies below a top-level
// directory the sandbox shows as the host has it (package rootfs).
var ErrStateRootShown = rootfs.ErrStateRootShown

// ErrNoIDMap is matched by errors about a kernel or file system that cannot give an idmapped mount
// (package rootfs).
var ErrNoIDMap = rootfs.ErrNoIDMap

// ErrStateRoot is matched by the error about a state root that the sandbox's root cannot reach
// (package state).
var ErrStateRoot = state.ErrRoot

// ErrStateShare is matched by the error about a writable share that reaches sbx's state root (package
// state).
var ErrStateShare = state.ErrShare

// ErrShare is matched by errors about a host path to share that cannot be shared (it does not exist).
var ErrShare = errors.New("cannot share host path")

// ErrShareTarget is matched by errors about where a share goes in the sandbox: its mount point cannot
// be made there (a link on the way, which sbx does not make mount points through, or a file where a
// directory must be).
var ErrShareTarget = errors.New("cannot mount a share there")

// ErrShareLink is matched by errors about a share whose host path leads through a link that is not
// root's: a command of an earlier run could have planted it in a directory shared with it, so sbx does
// not follow it.
var ErrShareLink = errors.New("a shared path leads through a link sbx does not follow")

// ErrLimit is matched by errors about a limit of the profile that this host or user cannot set.
var ErrLimit = errors.New("a limit of the profile cannot be set here")

// ErrLimitLow is matched by errors about a limit of the profile too low for sbx to start the command
// under it.
var ErrLimitLow = errors.New("a limit of the profile is too low to start the command")

// SupervisorError is Start's error when the sandbox's supervisor could not prepare the command: Landlock
// or the seccomp filter could not be applied (and the profile does not allow degrading), or it got a
// bad configuration. The command did not run. It matches ErrSetup.
type SupervisorError struct {
	Reason string // the supervisor's own words
	Hint   string // what to do, when it knows
}

func (e *SupervisorError) Error() string {
	if e.Reason == "" {
		return "the sandbox's supervisor could not start the command"
	}
	return e.Reason
}

// Is makes a SupervisorError match ErrSetup.
func (e *SupervisorError) Is(target error) bool { return target == ErrSetup }
