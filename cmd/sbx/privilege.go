package main

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox"
)

// errNoPrivilege is returned when sbx lacks the capability to build a sandbox.
var errNoPrivilege = errors.New("cannot build sandboxes without CAP_SYS_ADMIN")

// checkPrivileges refuses early when this process cannot build a sandbox, so that commands that would
// only find out call by call (sbx mcp) refuse at startup instead. As root it looks at the effective
// capability set, not the uid (root without CAP_SYS_ADMIN fails too, and a uid is not what the kernel
// checks). Without root sbx builds sandboxes in a user namespace of the caller's (sandbox's rootless
// mode): what it needs then is user namespaces, not the capability.
func checkPrivileges(what string) error {
	if hasCapability(unix.CAP_SYS_ADMIN) {
		return nil
	}
	if sandbox.Rootless() {
		for _, f := range sandbox.Features() {
			if f.Name == "userns" && !f.Available {
				return setupError(fmt.Errorf("%s: without root sbx needs user namespaces: %s", what, f.Detail),
					"'sbx version' shows what this host gives sbx without root; or run it as root, e.g. claude mcp add sbx -- sudo sbx mcp")
			}
		}
		return nil
	}
	return setupError(fmt.Errorf("%s: %w (namespaces, mounts, cgroups and nftables need it)", what, errNoPrivilege),
		"run it as root, e.g. claude mcp add sbx -- sudo sbx mcp")
}

// hasCapability reports whether capability c is in this process's effective set.
func hasCapability(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0
}

// checkBuild refuses a run this binary cannot apply: without -tags seccomp libcontainer cannot load a
// seccomp filter (it would fail mid-setup as "seccomp not supported"). plan nil: any run (sbx mcp, sbx
// probe); otherwise only a plan with a filter (all but "syscalls: base: none" with nothing listed).
func checkBuild(plan *policy.Plan) error {
	if seccompBuilt || (plan != nil && plan.Seccomp == nil) {
		return nil
	}
	return setupError(errors.New("this sbx was built without seccomp support and cannot apply a profile's syscall filter"),
		"rebuild it with the seccomp build tag: make build, or go build -tags seccomp ./cmd/sbx (needs libseccomp-dev)")
}
