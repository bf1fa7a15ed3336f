package policy

import (
	"fmt"
	"slices"
	"sync"
	"syscall"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// BuiltinDeny is the deny list every profile gets on top of its base, unless its syscalls.allow names
// an entry. These syscalls reach kernel surfaces a command has no business with inside a sandbox:
// namespaces and mounts (escapes), keyrings, BPF, tracing other processes, modules, kexec, raw I/O.
// clone3 is absent on purpose: Docker's default answers it with ENOSYS so that libc falls back to
// clone, whose namespace flags the default filter checks.
var BuiltinDeny = []string{
	"unshare", "setns", "mount", "umount2", "pivot_root",
	"keyctl", "add_key", "request_key",
	"bpf", "userfaultfd", "perf_event_open",
	"ptrace", "process_vm_readv", "process_vm_writev",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"open_by_handle_at", "name_to_handle_at",
	"iopl", "ioperm", "swapon", "swapoff", "reboot", "acct", "syslog",
	"fsopen", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"quotactl", "lookup_dcookie",
}

// landlockSyscalls stay allowed whatever the profile says: Landlock can only take rights away, and
// tools that sandbox themselves with it (sbx's own supervisor applies it before the filter) fail, or
// run unrestricted, without them.
var landlockSyscalls = []string{"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"}

// runtimeSyscalls stay allowed whatever the profile says: sbx's supervisor loads the command's filter
// on its own thread and runs its Go runtime under it until the command starts, and a runtime cannot
// run without futex (a refused wake crashes it; a refused wait, made before sbx holds the filter's
// notification fd, is a notification nobody can answer: the run hung). No threaded program runs
// without it either.
var runtimeSyscalls = []string{"futex"}

// extraSyscalls are valid names absent from Docker's profile (obsolete or never allowed there).
var extraSyscalls = []string{
	"name_to_handle_at", "nfsservctl", "vhangup", "uselib", "_sysctl", "ustat", "sysfs", "create_module",
	"get_kernel_syms", "query_module", "afs_syscall", "tuxcall", "security", "vserver", "putpmsg",
	"getpmsg", "lookup_dcookie", "kexec_file_load", "quotactl_fd", "mount_setattr", "pivot_root",
}

var knownSyscalls = sync.OnceValue(func() map[string]bool {
	known := map[string]bool{}
	for _, rule := range seccomp.DefaultProfile().Syscalls {
		for _, n := range rule.Names {
			if n != "" {
				known[n] = true
			}
		}
	}
	for _, n := range slices.Concat(BuiltinDeny, landlockSyscalls, extraSyscalls) {
		known[n] = true
	}
	return known
})

var errnoByName = sync.OnceValue(func() map[string]uint {
	m := map[string]uint{}
	for e := syscall.Errno(1); e < 200; e++ {
		if name := unix.ErrnoName(e); name != "" {
			m[name] = uint(e)
		}
	}
	return m
})

// denyList is the effective deny list of sc: BuiltinDeny and sc.Deny, minus sc.Allow.
func denyList(sc SyscallsConfig) []string {
	var out []string
	for _, n := range slices.Concat(BuiltinDeny, sc.Deny) {
		if !slices.Contains(sc.Allow, n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// compileSeccomp builds the OCI seccomp section. Base docker-default is moby's default profile for a
// process without capabilities (capability-gated syscalls excluded); the deny and allow names are then
// taken out of every rule, the allow names added as one ALLOW rule and the deny names as one ERRNO
// rule, so that no syscall appears with two actions (libseccomp refuses that).
func compileSeccomp(sc SyscallsConfig) (*specs.LinuxSeccomp, error) {
	deny := denyList(sc)
	errnoName := sc.Errno
	if errnoName == "" {
		errnoName = "EPERM"
	}
	errno, ok := errnoByName()[errnoName]
	if !ok {
		return nil, fmt.Errorf("unknown errno %q", errnoName)
	}
	spec := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	base, err := seccomp.GetDefaultProfile(spec)
	if err != nil {
		return nil, fmt.Errorf("building docker's default seccomp profile: %w", err)
	}
	allow := slices.Clone(sc.Allow)
	if sc.Base == BaseNone {
		if len(deny) == 0 {
			return nil, nil
		}
		base = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Architectures: base.Architectures, Flags: base.Flags}
		allow = nil // everything not denied is allowed already
	} else {
		allow = append(allow, landlockSyscalls...)
	}
	setid := !sc.AllowSetID && !slices.ContainsFunc(SetIDSyscalls, func(c SetIDSyscall) bool { return slices.Contains(deny, c.Name) })
	if setid {
		allow = slices.DeleteFunc(allow, func(n string) bool { return isSetIDSyscall(n) })
	}
	out := removeNames(base, slices.Concat(deny, allow))
	// Only the native architecture: syscalls made through a compat ABI (int 0x80 on x86_64) then hit
	// the filter's bad-arch action and kill the process, and the filter is a third of the size.
	out.Architectures = nativeArch(out.Architectures)
	denyNetfilterSockets(out)
	if len(allow) > 0 {
		slices.Sort(allow)
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: slices.Compact(allow), Action: specs.ActAllow})
	}
	if len(deny) > 0 {
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: deny, Action: specs.ActErrno, ErrnoRet: &errno})
	}
	if setid {
		refuseSetID(out)
	}
	if !slices.Contains(deny, "copy_file_range") && !slices.Contains(sc.Allow, "copy_file_range") {
		out = removeNames(out, []string{"copy_file_range"})
		exdev := uint(unix.EXDEV)
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: []string{"copy_file_range"}, Action: specs.ActErrno, ErrnoRet: &exdev})
	}
	return out, checkSeccomp(out)
}

// copy_file_range fails with EXDEV in the sandbox (unless the profile allows it by name), and every
// program that uses it (cp, Go's io.Copy, rsync) copies with read and write instead: a copy made in the
// kernel sets no access time on its source, and the access time of a decoy secret is how sbx sees it
// read (see "Credentials" in docs/profiles.md).

// SetIDSyscall is a syscall that sets a file's mode, and the index of its mode argument.
type SetIDSyscall struct {
	Name string
	Mode uint
}

// SetIDSyscalls are the chmod family. A mode with a set-user-ID or set-group-ID bit is refused with
// EPERM (and recorded): such a file in a share, or applied to the host, runs with its owner's ids for
// whoever starts it there (syscalls.allow_setid lets it through). Inside the sandbox no_new_privs already
// keeps the bits from raising anything.
var SetIDSyscalls = []SetIDSyscall{{"chmod", 1}, {"fchmod", 1}, {"fchmodat", 2}, {"fchmodat2", 2}}

func isSetIDSyscall(n string) bool {
	return slices.ContainsFunc(SetIDSyscalls, func(c SetIDSyscall) bool { return c.Name == n })
}

// refuseSetID splits the chmod family's rules on the mode argument: allowed as before without a set-id
// bit, EPERM with one (one rule per bit: seccomp compares an argument under one mask at a time).
func refuseSetID(sc *specs.LinuxSeccomp) {
	eperm := uint(unix.EPERM)
	for _, c := range SetIDSyscalls {
		allowed := sc.DefaultAction == specs.ActAllow
		for i := range sc.Syscalls {
			r := &sc.Syscalls[i]
			if r.Action == specs.ActAllow && len(r.Args) == 0 && slices.Contains(r.Names, c.Name) {
				r.Names = slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool { return n == c.Name })
				allowed = true
			}
		}
		if !allowed {
			continue // the base refuses it whatever the mode
		}
		sc.Syscalls = append(sc.Syscalls, specs.LinuxSyscall{Names: []string{c.Name}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: c.Mode, Value: unix.S_ISUID | unix.S_ISGID, ValueTwo: 0, Op: specs.OpMaskedEqual}}})
		for _, bit := range []uint64{unix.S_ISUID, unix.S_ISGID} {
			sc.Syscalls = append(sc.Syscalls, specs.LinuxSyscall{Names: []string{c.Name}, Action: specs.ActErrno, ErrnoRet: &eperm,
				Args: []specs.LinuxSeccompArg{{Index: c.Mode, Value: bit, ValueTwo: bit, Op: specs.OpMaskedEqual}}})
		}
	}
	sc.Syscalls = slices.DeleteFunc(sc.Syscalls, func(r specs.LinuxSyscall) bool { return len(r.Names) == 0 })
}

// removeNames returns a copy of sc without names in any rule; rules left empty are dropped.
func removeNames(sc *specs.LinuxSeccomp, names []string) *specs.LinuxSeccomp {
	out := *sc
	out.Syscalls = nil
	for _, rule := range sc.Syscalls {
		kept := slices.DeleteFunc(slices.Clone(rule.Names), func(n string) bool { return slices.Contains(names, n) })
		if len(kept) == 0 {
			continue
		}
		rule.Names = kept
		out.Syscalls = append(out.Syscalls, rule)
	}
	return &out
}

// checkSeccomp refuses a filter naming one syscall under two different actions.
func checkSeccomp(sc *specs.LinuxSeccomp) error {
	type action struct {
		act   specs.LinuxSeccompAction
		errno uint
	}
	seen := map[string]action{}
	for _, rule := range sc.Syscalls {
		if len(rule.Args) > 0 {
			continue // rules on arguments split a syscall by its arguments (refuseSetID, moby's own)
		}
		a := action{act: rule.Action}
		if rule.ErrnoRet != nil {
			a.errno = *rule.ErrnoRet
		}
		for _, n := range rule.Names {
			if prev, ok := seen[n]; ok && prev != a {
				return fmt.Errorf("seccomp: syscall %q has two actions (%s and %s)", n, prev.act, a.act)
			}
			seen[n] = a
		}
	}
	return nil
}

// nativeArch keeps the first architecture of moby's list, which is the native one.
func nativeArch(arches []specs.Arch) []specs.Arch {
	if len(arches) == 0 {
		return nil
	}
	return arches[:1]
}

// denyNetfilterSockets narrows moby's rule that allows netlink sockets so that NETLINK_NETFILTER ones
// fall to the default action: the command has no CAP_NET_ADMIN to change the network contract with, and
// the filter backs that up. Other netlink families (route, used by getaddrinfo and ip) stay allowed.
func denyNetfilterSockets(sc *specs.LinuxSeccomp) {
	for i, r := range sc.Syscalls {
		if len(r.Names) == 1 && r.Names[0] == "socket" && len(r.Args) == 1 && r.Args[0].Index == 0 &&
			r.Args[0].Op == specs.OpEqualTo && r.Args[0].Value == unix.AF_NETLINK {
			sc.Syscalls[i].Args = append(slices.Clone(r.Args),
				specs.LinuxSeccompArg{Index: 2, Value: unix.NETLINK_NETFILTER, Op: specs.OpNotEqual})
		}
	}
}
