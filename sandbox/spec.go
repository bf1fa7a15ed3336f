package sandbox

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/cgprime"
	"github.com/sbx-dev/sbx/internal/safefs"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox/cgroup"
	"github.com/sbx-dev/sbx/sandbox/netcontract"
	"github.com/sbx-dev/sbx/sandbox/seccomp"
)

// Where sbx's binaries are bind-mounted inside the sandbox: the supervisor (pid 1), and, for commands
// that are sbx itself in another role (the network probe), the sbx binary. /dev is a tmpfs of the
// container's own, so the mount points leave no trace in the overlay's writable layer.
const (
	initPath = "/dev/.sbx-init"
	selfPath = "/dev/.sbx"
)

// SpecInput is what Spec needs beyond the plan.
type SpecInput struct {
	Plan       *policy.Plan
	ID         string
	Rootfs     string // host path of the sandbox's root
	Init       string // host path of the supervisor binary, bind-mounted at initPath; "" = none
	Binary     string // host path of the sbx binary, bind-mounted at selfPath; "" = none
	NetNS      string // path of a network namespace to join; "" = a new one with loopback only
	ResolvConf string // host path bind-mounted at /etc/resolv.conf; "" = none
	Hosts      string // host path bind-mounted at /etc/hosts (see hostsFile); "" = none
	Passwd     string // host path bind-mounted at /etc/passwd (see passwdFile); "" = none
	Args       []string
	Cwd        string
	CwdOverlay string        // host path of the working directory's own overlay, mounted at Cwd; "" = none
	Caches     []specs.Mount // binds of the toolchain caches' overlays (caches.go), after CwdOverlay's
	Notify     bool          // the syscalls the plan records notify sbx's listener (package seccomp)
	// OwnSys: the sandbox's /sys is mounted in Rootfs already (a sysfs of NetNS's own, sysfs.go); the
	// spec mounts none there. Without it, a joined NetNS (the host user namespace's) gets the spec's
	// sysfs, which the sandbox's root may not mount there: the build fails rather than bind the host's
	// /sys, which would show the host's network devices.
	OwnSys bool
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
	s.Hostname = Hostname
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
	s.Mounts = slices.DeleteFunc(s.Mounts, func(m specs.Mount) bool { return m.Type == "cgroup" || (m.Type == "sysfs" && in.OwnSys) })
	for i, m := range s.Mounts {
		// Group tty (5) is not mapped in the sandbox's user namespace: its terminals belong to the
		// command's group, as in runc's rootless spec.
		s.Mounts[i].Options = slices.DeleteFunc(slices.Clone(m.Options), func(o string) bool { return o == "gid=5" })
		if m.Destination == "/dev/shm" {
			s.Mounts[i].Options = shmOptions(s.Mounts[i].Options, in.Plan.Limits.MemoryBytes)
		}
	}
	for _, b := range []struct{ src, dst string }{{in.Init, initPath}, {in.Binary, selfPath}} {
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
	s.Mounts = append(s.Mounts, in.Caches...)
	for _, sh := range in.Plan.Filesystem.Shares {
		// rro, rnosuid, rnodev: the mounts below a share too (ro alone holds only for the share's
		// own mount; below it, Landlock would still stop writes but not chmod, utimes or setxattr).
		opts := []string{"rbind", "nosuid", "nodev", "ro", "rro", "rnosuid", "rnodev"}
		if sh.Writable {
			opts = []string{"rbind", "nosuid", "nodev", "rw", "rnosuid", "rnodev"}
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: sh.Sandbox, Type: "bind", Source: sh.Host, Options: opts})
	}
	// sbx's own /etc/resolv.conf and /etc/hosts come after the shares, so that a share of /etc (--ro
	// /etc) does not cover them: the network contract's resolver and the sandbox's host name hold
	// whatever is shared (see ownFileMount for when they do not).
	for _, f := range in.ownFiles() {
		if f.src != "" && ownFileMount(in.Plan.Filesystem.Shares, f.dst, in.IDs) {
			s.Mounts = append(s.Mounts, specs.Mount{
				Destination: f.dst, Type: "bind", Source: f.src,
				Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"},
			})
		}
	}
	s.Linux.MaskedPaths = append(s.Linux.MaskedPaths, "/proc/sched_debug", "/proc/kallsyms", "/proc/sysrq-trigger",
		"/sys/kernel/debug", "/sys/kernel/security", "/sys/devices/virtual/powercap")
	s.Linux.Namespaces = []specs.LinuxNamespace{
		{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
		{Type: specs.MountNamespace}, {Type: specs.CgroupNamespace},
		{Type: specs.NetworkNamespace, Path: in.NetNS},
	}
	if in.NetNS == "" {
		// A namespace sbx made (in.NetNS) is not the sandbox user namespace's to change: netcontract
		// sets the same value when it creates one.
		s.Linux.Sysctl = sysctls()
	}
	if in.IDs != (IDMap{}) {
		s.Process.User = specs.User{UID: uint32(in.IDs.UID), GID: uint32(in.IDs.GID)}
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		s.Linux.UIDMappings, s.Linux.GIDMappings = in.IDs.mappings()
	}
	s.Linux.CgroupsPath = "/" + cgroup.Name(in.ID)
	s.Linux.Resources = resources(in.Plan.Limits, in.Init != "")
	s.Linux.Seccomp = seccomp.Filter(in.Plan.Seccomp, in.Plan.Record, in.Notify)
	return s
}

// ownFile is a file of sbx's own (src, on the host) mounted over the sandbox's dst.
type ownFile struct{ src, dst string }

// ownFiles are sbx's own /etc files for the sandbox; src is "" for one it does not need.
func (in *SpecInput) ownFiles() []ownFile {
	return []ownFile{{in.ResolvConf, "/etc/resolv.conf"}, {in.Hosts, "/etc/hosts"}, {in.Passwd, "/etc/passwd"}}
}

// shmOptions sizes the sandbox's /dev/shm to its memory limit (the kernel's default, half the RAM, as
// the host's, without one) instead of runc's 64 MiB: shared memory (multiprocessing, PyTorch's data
// loaders, browsers) is memory, and its pages are charged to the sandbox's memory cgroup like the rest.
func shmOptions(opts []string, memory int64) []string {
	opts = slices.DeleteFunc(slices.Clone(opts), func(o string) bool { return strings.HasPrefix(o, "size=") })
	if memory > 0 {
		opts = append(opts, fmt.Sprintf("size=%d", memory))
	}
	return opts
}

// Hostname is the sandbox's host name (its UTS namespace's), which its /etc/hosts resolves.
const Hostname = netcontract.Hostname

// hostsContent is the sandbox's /etc/hosts: loopback names and its own host name, as Docker writes
// one, so that gethostbyname(gethostname()), hostname -f and Java's InetAddress.getLocalHost work. The
// host's own names are not shown: they (the host's name, its LAN) say nothing of the sandbox's network,
// and in contract mode every other name resolves through the DNS filter, which records it. Only
// whether localhost is also ::1 follows the host (localhost6): a server that listens on "localhost"
// binds the first address, and a client that then dials 127.0.0.1 must find it as on the host.
func hostsContent(localhost6 bool) string {
	v6 := "::1\tip6-localhost ip6-loopback\n"
	if localhost6 {
		v6 = "::1\tlocalhost ip6-localhost ip6-loopback\n"
	}
	return "127.0.0.1\tlocalhost\n127.0.1.1\t" + Hostname + "\n" + v6 + "ff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n"
}

// hostHostsPath is the host's hosts file, read (root's, never the command's) to tell whether localhost
// is ::1 there too.
const hostHostsPath = "/etc/hosts"

// maxHostsFile bounds what sbx reads of the host's hosts file.
const maxHostsFile = 1 << 20

// localhost6 tells whether the hosts file data maps localhost to ::1. Without a readable file the
// answer is the usual distributions' (and Docker's): yes.
func localhost6(data []byte, err error) bool {
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		// Host names match case-insensitively, as in glibc's files backend: "::1 LOCALHOST" counts.
		isLocalhost := func(name string) bool { return strings.EqualFold(name, "localhost") }
		if ip, perr := netip.ParseAddr(f[0]); perr == nil && ip == netip.IPv6Loopback() && slices.ContainsFunc(f[1:], isLocalhost) {
			return true
		}
	}
	return false
}

// readHosts reads at most maxHostsFile bytes of the hosts file at path (the host's, hostHostsPath; also
// its passwd file, hostPasswdPath). It
// opens it without blocking and reads only a regular file: a FIFO there (or a device) would otherwise
// hang every run's setup, or feed it what it should not read.
func readHosts(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("reading %s: not a regular file (%v)", path, st.Mode().Type())
	}
	return io.ReadAll(io.LimitReader(f, maxHostsFile))
}

// hostsFile writes the sandbox's /etc/hosts into dir and returns its path.
func hostsFile(dir string) (string, error) {
	p := filepath.Join(dir, "hosts")
	if err := os.WriteFile(p, []byte(hostsContent(localhost6(readHosts(hostHostsPath)))), 0o644); err != nil {
		return "", fmt.Errorf("writing the sandbox's /etc/hosts: %w", err)
	}
	return p, nil
}

// hostPasswdPath is the host's user database, read (root's, never the command's) for the sandbox's.
const hostPasswdPath = "/etc/passwd"

// passwdContent is the host's passwd file data with the home directory of the first entry of uid set to
// home, and whether it changed anything. The command's HOME is /tmp (or the profile's), while its
// entry names a home that is hidden or missing in the sandbox (nobody's /nonexistent, root's /root, a
// user's /home/NAME): programs that take the home from the user database, not from HOME, failed
// there (ssh-keygen's and ssh's ~/.ssh, Java's user.home and with it Maven's ~/.m2 and Gradle's
// ~/.gradle). Every other line stays as it is.
func passwdContent(data []byte, uid int, home string) ([]byte, bool) {
	lines := strings.SplitAfter(string(data), "\n")
	for i, line := range lines {
		f := strings.Split(strings.TrimSuffix(line, "\n"), ":")
		if len(f) != 7 || f[2] != strconv.Itoa(uid) {
			continue
		}
		if f[5] == home {
			return data, false
		}
		f[5] = home
		lines[i] = strings.Join(f, ":") + line[len(strings.TrimSuffix(line, "\n")):]
		return []byte(strings.Join(lines, "")), true
	}
	return data, false
}

// passwdFile writes the sandbox's /etc/passwd into dir for the command's uid and HOME, and returns its
// path; "" when the host's serves as it is (the entry's home is HOME already, there is no entry, HOME
// is no absolute path, or the host's file cannot be read whole).
func passwdFile(dir string, uid int, home string) (string, error) {
	data, changed := passwdData(uid, home)
	if !changed {
		return "", nil
	}
	p := filepath.Join(dir, "passwd")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return "", fmt.Errorf("writing the sandbox's /etc/passwd: %w", err)
	}
	return p, nil
}

// passwdData is the host's passwd file with uid's home set to home, and whether that changed it.
func passwdData(uid int, home string) ([]byte, bool) {
	if !filepath.IsAbs(home) || strings.ContainsAny(home, ":\n") {
		return nil, false
	}
	data, err := readHosts(hostPasswdPath)
	if err != nil || len(data) >= maxHostsFile {
		return nil, false
	}
	return passwdContent(data, uid, home)
}

// rewritePasswd gives the sandbox's /etc/passwd at path (passwdFile's, mounted already) the home of
// another HOME: a warm sandbox's command may set its own (sbx_run's env), after the sandbox was built.
// The file is written in place, so that the mount shows it; nothing runs in the sandbox yet.
func rewritePasswd(path string, uid int, home string) error {
	data, changed := passwdData(uid, home)
	if !changed {
		// HOME is the entry's home on the host (or unusable): the host's entry as it is.
		var err error
		if data, err = readHosts(hostPasswdPath); err != nil {
			return fmt.Errorf("reading the host's /etc/passwd: %w", err)
		}
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing the sandbox's /etc/passwd: %w", err)
	}
	return nil
}

// sysctls are set in the sandbox's own network namespace. Binding ports below 1024 needs no privilege
// there, as in Docker: the namespace's ports are its own, and the host's 1024 floor protects the host's.
func sysctls() map[string]string {
	return map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}
}

// defaultSoftNoFile is the soft open-files limit when sbx could not read its caller's (built without
// cgo: see cgprime.CallerNoFile): what most distributions start a login with, and what select()-based
// programs need. `ulimit -n` raises it to the hard limit.
const defaultSoftNoFile = 1024

// ownFileMount says whether sbx mounts its own file at dst (/etc/hosts, /etc/resolv.conf) over what the
// shares put there. A share of the file itself is the caller's explicit choice and stays. Below a
// shared directory, sbx's file goes only onto a regular file the share holds, looked at without
// following any link: libcontainer follows a symlink at a mount point (inside the sandbox's root) and
// makes what is missing on the way, so a link that a command planted in an earlier run of a writable
// share would move sbx's mount anywhere in the sandbox (/dev/null, a file of another share) and have
// libcontainer make directories and files on the host through a writable share; and a share without
// the file, or whose file is a link to a path the sandbox lacks, would fail the run; so would a shared
// directory that the sandbox's root (ids), which makes the mounts, may not search. The file is looked
// at before libcontainer mounts, so the directory must be one only the host's root may change:
// another sandbox with a writable share of it (or another user) could otherwise swap the file for a
// link in between. Otherwise the sandbox sees the share's own file, as it would without sbx's.
func ownFileMount(shares []policy.Share, dst string, ids IDMap) bool {
	host, rel := "", ""
	for _, sh := range shares {
		target := filepath.Clean(sh.Sandbox)
		if target == dst {
			return false
		}
		if r, ok := strings.CutPrefix(dst, strings.TrimSuffix(target, "/")+"/"); ok {
			host, rel = sh.Host, r // the last share mounted over dst's directory is the one seen
		}
	}
	if host == "" {
		return true
	}
	root, err := safefs.OpenRoot(host)
	if err != nil {
		return false
	}
	defer root.Close()
	if dir, err := root.Stat(); err != nil || !onlyRootChanges(dir) || ids != (IDMap{}) && !rootSearches(dir, ids) {
		return false
	}
	f, err := safefs.Open(root, rel, unix.O_PATH, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	return err == nil && st.Mode().IsRegular()
}

// shareCovers says whether a share is mounted at dst or over a directory above it: then the sandbox
// sees the share's file there, not the overlay's.
func shareCovers(shares []policy.Share, dst string) bool {
	for _, sh := range shares {
		target := strings.TrimSuffix(filepath.Clean(sh.Sandbox), "/")
		if target == dst || strings.HasPrefix(dst, target+"/") {
			return true
		}
	}
	return false
}

// plainFile makes path (sbx's /etc/resolv.conf or /etc/hosts) in the root overlay a regular file that
// sbx's own can be mounted onto: a link there, as systemd-resolved makes /etc/resolv.conf
// (../run/systemd/resolve/stub-resolv.conf), would lead the mount into the sandbox's hidden /run, where
// nothing may be made, and fail every run. The change lands in the overlay's writable layer, the
// host's file stays as it is; nothing on the way is followed (safefs).
func plainFile(merged, path string) error {
	root, err := safefs.OpenRoot(merged)
	if err != nil {
		return err
	}
	defer root.Close()
	dirName, name := safefs.Split(path)
	dir, err := safefs.OpenDir(root, dirName)
	if err != nil {
		return fmt.Errorf("preparing %s: %w", path, err)
	}
	defer dir.Close()
	var st unix.Stat_t
	switch err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG:
		return nil
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
		if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil {
			return fmt.Errorf("preparing %s: %w", path, err)
		}
	case err == nil:
		return fmt.Errorf("preparing %s: neither a file nor a link", path)
	case !errors.Is(err, unix.ENOENT):
		return fmt.Errorf("preparing %s: %w", path, err)
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("preparing %s: %w", path, err)
	}
	return unix.Close(fd)
}

// onlyRootChanges says whether directory dir is the host root's and writable by no one else (ACLs
// are not read).
func onlyRootChanges(dir os.FileInfo) bool {
	st, ok := dir.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0 && st.Mode&0o022 == 0
}

// rootSearches says whether the root of the sandbox's user namespace may look names up in directory
// dir: as the owner of a directory of its mapped ids (its capabilities hold there), else by the mode
// bits that apply to it (no supplementary groups in the sandbox; ACLs are not read: a directory they
// alone open counts as closed, and the share's own file is seen).
func rootSearches(dir os.FileInfo, ids IDMap) bool {
	st, ok := dir.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	uid, gid := int(st.Uid), int(st.Gid)
	switch {
	case (uid == ids.RootUID || uid == ids.HostUID) && (gid == ids.RootGID || gid == ids.HostGID):
		return true
	case uid == ids.RootUID:
		return st.Mode&0o100 != 0
	case gid == ids.RootGID:
		return st.Mode&0o010 != 0
	}
	return st.Mode&0o001 != 0
}

// rlimits gives RLIMIT_NOFILE a hard limit of what the profile says, or of sbx's own hard limit (the
// host's) when it says nothing, and the soft limit sbx's caller has (within the hard one), as the
// command would have it on the host: not sbx's own, which Go's runtime raised to the hard limit. A build
// that needs more raises its soft limit (ulimit -n 4096) as it would outside.
func rlimits(l policy.Limits) []specs.POSIXRlimit {
	hard := l.NoFile
	if hard == 0 {
		var host unix.Rlimit
		hard = defaultSoftNoFile
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &host); err == nil && host.Max > hard {
			hard = host.Max
		}
	}
	soft := uint64(defaultSoftNoFile)
	if caller, ok := cgprime.CallerNoFile(); ok {
		soft = max(caller, minSoftNoFile)
	}
	out := []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: hard, Soft: min(hard, soft)}}
	if callerMemlockOK {
		out = append(out, specs.POSIXRlimit{Type: "RLIMIT_MEMLOCK", Hard: callerMemlock.Max, Soft: callerMemlock.Cur})
	}
	return out
}

// callerMemlock is the limit of locked memory sbx started with, read as the package initializes, before
// anything in sbx changed it: the cgroups library raises sbx's own to unlimited whenever it loads a
// cgroup v2 device filter (a BPF program; kernels before 5.11 charged them to RLIMIT_MEMLOCK), and what
// sbx starts after that inherits it: the supervisor of a direct start (whose cgroup is set up before it
// starts), libcontainer's init of a later run in the same process. The command gets its caller's, as on
// the host, whatever the cgroup version.
var callerMemlock, callerMemlockOK = func() (unix.Rlimit, bool) {
	var l unix.Rlimit
	return l, unix.Getrlimit(unix.RLIMIT_MEMLOCK, &l) == nil
}()

// childrenNoFile makes the processes sbx starts (libcontainer's init, the supervisor, the layer's
// helpers) start with sbx's own soft limit of open files, which Go's runtime raised to the hard limit,
// not with its caller's: Go gives every child the limit its parent started with, and under a caller's
// 'ulimit -Sn 8' libcontainer's init could not make its sync pipe ("Too many open files"). Setting the
// limit again is what tells Go to leave it alone. The command's comes from rlimits, the caller's.
var childrenNoFile = sync.OnceFunc(func() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil {
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
})

// minSoftNoFile is the least soft limit of open files the command gets, whatever its caller's: the
// supervisor, whose limits the command inherits, runs under it from the sandbox's build on and opens a
// descriptor per Landlock rule, the seccomp filter's, the stdio's, a pidfd, a pipe for the exec. Under a
// caller's 'ulimit -Sn 8' it failed with "landlock_create_ruleset: too many open files" and a hint to
// run without Landlock.
const minSoftNoFile = 64

// supervisorTasks is what the pids cgroup allows on top of the profile's limits.pids: sbx's supervisor,
// pid 1 of the sandbox, is in the same cgroup, and its Go runtime runs 6 threads here, up to 9 on a busy
// machine (seen in CI with 8: the command could not start). Without the room, a small limit (pids: 4)
// failed every run with "connection reset by peer" before the command started; with it, the limit is
// the command's, give or take the supervisor's spare threads.
const supervisorTasks = 16

// resources are the cgroup limits of the profile; supervised: sbx's supervisor runs in the cgroup too
// (not in an exported bundle, where the command is the container's process).
func resources(l policy.Limits, supervised bool) *specs.LinuxResources {
	r := &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &m}
	}
	if l.Pids > 0 {
		p := l.Pids
		if supervised {
			p += supervisorTasks
		}
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
