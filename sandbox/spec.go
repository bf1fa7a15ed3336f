package sandbox

import (
	"fmt"
	"slices"

	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sbx-dev/sbx/policy"
)

// Where sbx's binaries are bind-mounted inside the sandbox: the supervisor (pid 1), and, for commands
// that are sbx itself in another role (the network probe), the sbx binary. /dev is a tmpfs of the
// container's own, so the mount points leave no trace in the overlay's writable layer.
const (
	initPath = "/dev/.sbx-init"
	shimPath = "/dev/.sbx"
)

// SpecInput is what Spec needs beyond the plan.
type SpecInput struct {
	Plan       *policy.Plan
	ID         string
	Rootfs     string // host path of the sandbox's root
	Init       string // host path of the supervisor binary, bind-mounted at initPath; "" = none
	Binary     string // host path of the sbx binary, bind-mounted at shimPath; "" = none
	NetNS      string // path of a network namespace to join; "" = a new one with loopback only
	ResolvConf string // host path bind-mounted at /etc/resolv.conf; "" = none
	Args       []string
	Cwd        string
	CwdOverlay string // host path of the working directory's own overlay, mounted at Cwd; "" = none
	NotifyPath string // socket of sbx's seccomp notification listener (seccompnotify.go); "" = none
	// IDs maps the sandbox's user namespace: which host uid and gid its root (sbx's supervisor) and the
	// command's user are. Zero: no user namespace (an exported bundle, whose runtime decides).
	IDs IDMap
}

// Spec builds the OCI runtime spec of a sandbox from runc's example spec: namespaces, mounts, masked
// paths, cgroup limits, rlimits, seccomp, an empty capability set and no_new_privs. Its process is
// Args; sbx runs its supervisor init with it, which starts the command.
func Spec(in SpecInput) *specs.Spec {
	s := specconv.Example()
	s.Root = &specs.Root{Path: in.Rootfs}
	s.Hostname = "sbx"
	s.Annotations = map[string]string{"org.sbx.profile": in.Plan.Profile, "org.sbx.profile.sha256": in.Plan.Hash}
	s.Process = &specs.Process{
		Args:            in.Args,
		Env:             in.Plan.Env,
		Cwd:             in.Cwd,
		User:            specs.User{UID: uint32(in.Plan.UID), GID: uint32(in.Plan.GID)},
		NoNewPrivileges: true,
		Capabilities:    &specs.LinuxCapabilities{},
		Rlimits:         rlimits(in.Plan.Limits),
	}
	// Example mounts the cgroup hierarchies; the command has no use for them, and on a v1 host that is
	// a dozen mounts per run.
	s.Mounts = slices.DeleteFunc(s.Mounts, func(m specs.Mount) bool { return m.Type == "cgroup" })
	for i, m := range s.Mounts {
		// Group tty (5) is not mapped in the sandbox's user namespace: its terminals belong to the
		// command's group, as in runc's rootless spec.
		s.Mounts[i].Options = slices.DeleteFunc(slices.Clone(m.Options), func(o string) bool { return o == "gid=5" })
		if m.Type == "sysfs" && in.NetNS != "" && in.IDs != (IDMap{}) {
			// sysfs mounts only in a network namespace of the sandbox's user namespace; a joined one
			// (the contract's) belongs to the host's: bind the host's /sys read-only instead, as runc's
			// rootless spec does.
			s.Mounts[i] = specs.Mount{Destination: "/sys", Type: "none", Source: "/sys",
				Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}}
		}
	}
	for _, b := range []struct{ src, dst string }{{in.Init, initPath}, {in.Binary, shimPath}} {
		if b.src != "" {
			s.Mounts = append(s.Mounts, specs.Mount{
				Destination: b.dst, Type: "bind", Source: b.src,
				Options: []string{"bind", "ro", "nosuid", "nodev"},
			})
		}
	}
	if in.CwdOverlay != "" {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: in.Cwd, Type: "bind", Source: in.CwdOverlay,
			Options: []string{"bind", "nosuid", "nodev"}})
	}
	if in.ResolvConf != "" {
		s.Mounts = append(s.Mounts, specs.Mount{
			Destination: "/etc/resolv.conf", Type: "bind", Source: in.ResolvConf,
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"},
		})
	}
	for _, sh := range in.Plan.Filesystem.Shares {
		opts := []string{"rbind", "nosuid", "nodev", "ro"}
		if sh.Writable {
			opts[3] = "rw"
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: sh.Sandbox, Type: "bind", Source: sh.Host, Options: opts})
	}
	s.Linux.MaskedPaths = append(s.Linux.MaskedPaths, "/proc/sched_debug", "/proc/kallsyms", "/proc/sysrq-trigger",
		"/sys/kernel/debug", "/sys/kernel/security", "/sys/devices/virtual/powercap")
	s.Linux.Namespaces = []specs.LinuxNamespace{
		{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
		{Type: specs.MountNamespace}, {Type: specs.CgroupNamespace},
		{Type: specs.NetworkNamespace, Path: in.NetNS},
	}
	if in.IDs != (IDMap{}) {
		s.Process.User = specs.User{UID: uint32(in.IDs.UID), GID: uint32(in.IDs.GID)}
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		s.Linux.UIDMappings, s.Linux.GIDMappings = in.IDs.mappings()
	}
	s.Linux.CgroupsPath = "/" + CgroupName(in.ID)
	s.Linux.Resources = resources(in.Plan.Limits)
	s.Linux.Seccomp = in.Plan.Seccomp
	if sc := in.Plan.Seccomp; sc != nil && !slices.Contains(sc.Flags, specs.LinuxSeccompFlagLog) {
		// The filter asks the kernel to log what it refuses (to audit, when audit is on) for the report's
		// denials; without audit this costs nothing.
		logged := *sc
		logged.Flags = append(slices.Clone(sc.Flags), specs.LinuxSeccompFlagLog)
		s.Linux.Seccomp = &logged
	}
	if in.NotifyPath != "" && s.Linux.Seccomp != nil {
		s.Linux.Seccomp = notifySeccomp(s.Linux.Seccomp, in.Plan.Record, in.NotifyPath)
	}
	return s
}

func rlimits(l policy.Limits) []specs.POSIXRlimit {
	nofile := l.NoFile
	if nofile == 0 {
		nofile = 1024
	}
	return []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile}}
}

func resources(l policy.Limits) *specs.LinuxResources {
	r := &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &m}
	}
	if l.Pids > 0 {
		p := l.Pids
		r.Pids = &specs.LinuxPids{Limit: &p}
	}
	if l.CPUs > 0 {
		period := uint64(100000)
		quota := int64(l.CPUs * float64(period))
		r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	return r
}

func specError(err error) error { return fmt.Errorf("building the container config: %w", err) }
