package supervisor

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// stepError is a failure of one step of building the sandbox (build), with what it was about: a share
// the caller chose, or a step of sbx's own (masking, the read-only paths, /dev, the pivot, ...). The
// hint that goes back to sbx fits the step and the kernel's answer (buildHintFor), so that a kernel that
// refuses a mount call is not blamed on the caller's --rw.
type stepError struct {
	step  string // "masking /proc/acpi", "mounting /work"
	share bool   // the step mounts a share (--ro, --rw, filesystem.share)
	err   error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// stepFailed wraps err as the failure of step; share says whether the step mounted a caller's share.
func stepFailed(step string, share bool, err error) error {
	return &stepError{step: step, share: share, err: err}
}

// kernelHint goes with a step of sbx's own that the kernel refused as not supported or invalid: the
// kernel lacks something sbx assumed, which 'sbx version' should have said.
const kernelHint = "this kernel refused a mount call sbx makes for every run (%s); 'sbx version' lists what it found, and SBX_LIBCONTAINER=1 builds the sandbox the older way: please report this with the output of 'sbx version --json'"

// lsmHint goes with a step the kernel refused with EPERM or EACCES although the supervisor is root of
// its user namespace: a security module (AppArmor, SELinux) or a locked mount said no.
const lsmHint = "the kernel refused %s although the sandbox's root may do it: a security module (AppArmor, SELinux) or a mount locked by the host's namespace is the usual cause; 'sbx version' shows what it found"

// buildHintFor is the hint for a failure to build the sandbox, by what failed and how.
func buildHintFor(err error) string {
	if errors.Is(err, unix.EROFS) {
		return roHint
	}
	var se *stepError
	if !errors.As(err, &se) || se.share {
		return buildHint
	}
	switch {
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Sprintf(kernelHint, se.step)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Sprintf(lsmHint, se.step)
	}
	return "building the sandbox failed at a step of sbx's own (" + se.step + "), not at a share; run 'sbx gc' and try again, and report it with 'sbx version --json' if it stays"
}
