package export

import (
	"path"
	"slices"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// ociBaseVersion is what a bundle says when it uses nothing newer: runtime-spec 1.0.2, which every
// runtime in use reads (Debian 12's crun 1.8.1 refuses 1.2.0 and later as "unknown version").
const ociBaseVersion = "1.0.2"

// ociFeatures lists, newest first, the runtime-spec versions that added a field or value sbx's bundles
// can carry (runtime-spec's ChangeLog), each with a test for its use. A bundle says the first version
// whose feature it uses, so an older runtime reads every bundle that needs nothing it lacks.
var ociFeatures = []struct {
	version string
	what    string
	uses    func(*specs.Spec) bool
}{
	{"1.3.0", "netDevices, memoryPolicy", func(s *specs.Spec) bool {
		return s.Linux != nil && (len(s.Linux.NetDevices) > 0 || s.Linux.MemoryPolicy != nil)
	}},
	{"1.2.0", "idmap/ridmap mount options, relative mount destinations", func(s *specs.Spec) bool {
		return slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool {
			return !path.IsAbs(m.Destination) || slices.Contains(m.Options, "idmap") || slices.Contains(m.Options, "ridmap")
		})
	}},
	{"1.1.0", "seccomp errnoRet and kill actions, time namespace, domainname, scheduler, ioPriority, mount idmappings, cgroup v2 unified", uses110},
}

// ociVersion returns the lowest runtime-spec version that carries everything s uses.
func ociVersion(s *specs.Spec) string {
	for _, f := range ociFeatures {
		if f.uses(s) {
			return f.version
		}
	}
	return ociBaseVersion
}

func uses110(s *specs.Spec) bool {
	if s.Domainname != "" || slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return len(m.UIDMappings)+len(m.GIDMappings) > 0 }) {
		return true
	}
	if p := s.Process; p != nil && (p.Scheduler != nil || p.IOPriority != nil) {
		return true
	}
	l := s.Linux
	if l == nil {
		return false
	}
	if slices.ContainsFunc(l.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.TimeNamespace }) || len(l.TimeOffsets) > 0 {
		return true
	}
	if r := l.Resources; r != nil && (len(r.Unified) > 0 || (r.Memory != nil && r.Memory.CheckBeforeUpdate != nil) ||
		(r.CPU != nil && (r.CPU.Idle != nil || r.CPU.Burst != nil))) {
		return true
	}
	return usesSeccomp110(l.Seccomp)
}

// usesSeccomp110 reports errnoRet, defaultErrnoRet, the kill-process/kill-thread actions and notify.
func usesSeccomp110(sc *specs.LinuxSeccomp) bool {
	if sc == nil {
		return false
	}
	newAction := func(a specs.LinuxSeccompAction) bool {
		return a == specs.ActKillProcess || a == specs.ActKillThread || a == specs.ActNotify
	}
	if sc.DefaultErrnoRet != nil || sc.ListenerPath != "" || newAction(sc.DefaultAction) {
		return true
	}
	return slices.ContainsFunc(sc.Syscalls, func(r specs.LinuxSyscall) bool { return r.ErrnoRet != nil || newAction(r.Action) })
}
