package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"github.com/sbx-dev/sbx/sandbox/cgroup"
	"github.com/sbx-dev/sbx/sandbox/rootfs"
	"golang.org/x/sys/unix"
)

// Feature is one thing sbx needs from the kernel and host, and whether this host gives it to this
// caller (root or not). `sbx version` prints them; its --json writes them with these names.
type Feature struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Detail    string `json:"detail"`   // "ABI 7", "v1 hybrid (v2 at /sys/fs/cgroup/unified)", "/usr/bin/pasta", or why not
	UsedFor   string `json:"used_for"` // what sbx needs it for
}

// features is the one table of what sbx needs from the host, in the order `sbx version` prints it, the
// way go-landlock keeps its ABI matrix in one place. kernel says whether the kernel and host have a
// feature; caller, where set, whether this caller can use what the kernel has. Every probe only looks:
// none changes host state or takes longer than a few syscalls (the idmap check builds a mount that is
// never attached). A probe says whether the host has a feature, not whether a given profile may use it:
// the code that applies a feature still checks it, and fails closed, where it applies it.
var features = []struct {
	name, usedFor string
	kernel        func() (bool, string)
	caller        func() (bool, string)
}{
	{"userns", "user namespaces: rootless runs, the sandbox's own root", probeUserns, callerUserns},
	{"landlock", "filesystem rules (ABI 1), rename across dirs (ABI 2 needs refer), TCP rules (ABI 4), scoping (ABI 6)", probeLandlock, nil},
	{"seccomp", "the syscall filter of every profile", probeSeccomp, nil},
	{"cgroup", "limits: memory, pids, cpu", probeCgroup, callerCgroup},
	{"mounts", "the supervisor's own build of the sandbox (else libcontainer's init builds it)", probeMountsFeature, nil},
	{"idmapped mounts", "sharing host paths with the sandbox's user without chown", probeIDMap, callerIDMap},
	{"pasta", "the network uplink of rootless runs", probePasta, nil},
}

// Features checks every row of the table. A feature the kernel has but this caller cannot use is not
// available, with what happens instead as its detail.
func Features() []Feature {
	out := make([]Feature, 0, len(features))
	for _, f := range features {
		ok, detail := f.kernel()
		if ok && f.caller != nil {
			cok, cdetail := f.caller()
			if cok {
				detail += "; " + cdetail
			} else {
				ok, detail = false, cdetail
			}
		}
		out = append(out, Feature{Name: f.name, Available: ok, Detail: detail, UsedFor: f.usedFor})
	}
	return out
}

// KernelRelease returns the kernel release (uname -r).
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// sysctl reads an integer under /proc/sys; ok is false when the file does not exist.
func sysctl(name string) (int, bool) {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

func probeUserns() (bool, string) {
	max, ok := sysctl("user/max_user_namespaces")
	switch {
	case !ok:
		return false, "no /proc/sys/user/max_user_namespaces (kernel without CONFIG_USER_NS)"
	case max == 0:
		return false, "user.max_user_namespaces is 0"
	}
	if v, ok := sysctl("kernel/unprivileged_userns_clone"); ok && v == 0 {
		return true, "root only: kernel.unprivileged_userns_clone is 0"
	}
	if v, ok := sysctl("kernel/apparmor_restrict_unprivileged_userns"); ok && v == 1 {
		// Whether it holds for sbx depends on its AppArmor label: callerUserns.
		return true, "root, or programs whose AppArmor profile grants userns: kernel.apparmor_restrict_unprivileged_userns is 1"
	}
	return true, fmt.Sprintf("unprivileged too (user.max_user_namespaces %d)", max)
}

// callerUserns: every run has a user namespace of its own, root's runs too. Without root, AppArmor's
// restriction (apparmor.go) leaves an unconfined sbx a namespace without capabilities, where no
// sandbox can be built: no.
func callerUserns() (bool, string) {
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		return false, "missing (CONFIG_USER_NS): sbx refuses to run"
	}
	restricted, why := hostAppArmor.restriction()
	if restricted {
		return false, why
	}
	if why != "" {
		return true, "every run has its own; " + why
	}
	return true, "every run has its own"
}

func probeLandlock() (bool, string) {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return false, fmt.Sprintf("not enabled (%v): boot with lsm=...,landlock", err)
	}
	return true, fmt.Sprintf("ABI %d", abi)
}

func probeSeccomp() (bool, string) {
	b, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	if err != nil {
		return false, "no /proc/sys/kernel/seccomp/actions_avail (kernel without CONFIG_SECCOMP_FILTER)"
	}
	return true, "actions " + strings.Join(strings.Fields(string(b)), ",")
}

func probeCgroup() (bool, string) {
	fsType := func(path string) int64 {
		var st unix.Statfs_t
		if unix.Statfs(path, &st) != nil {
			return 0
		}
		return st.Type
	}
	switch {
	case fsType("/sys/fs/cgroup") == unix.CGROUP2_SUPER_MAGIC:
		return true, "v2 (unified)"
	case fsType("/sys/fs/cgroup/unified") == unix.CGROUP2_SUPER_MAGIC:
		return true, "v1 hybrid (v2 at /sys/fs/cgroup/unified)"
	case fsType("/sys/fs/cgroup") == unix.TMPFS_MAGIC:
		return true, "v1"
	}
	return false, "no cgroup file system at /sys/fs/cgroup"
}

// callerCgroup: without root, a run's cgroup is a child of the one systemd delegates to the caller,
// where it does (package cgroup); else rlimits stand in.
func callerCgroup() (bool, string) {
	if Rootless() {
		return cgroup.DelegationRow()
	}
	return true, "memory, pids and cpu limits"
}

// probeIDMap looks for mount_setattr (Linux 5.12), which sets MOUNT_ATTR_IDMAP; whether a given file
// system supports idmapped mounts is only known when one is made (callerIDMap).
func probeIDMap() (bool, string) {
	err := unix.MountSetattr(-1, "", unix.AT_EMPTY_PATH, &unix.MountAttr{})
	if errors.Is(err, unix.ENOSYS) {
		return false, "no mount_setattr (kernel before 5.12)"
	}
	return true, "mount_setattr present (Linux 5.12+); support depends on the file system"
}

// callerIDMap clones / and idmaps the clone, which is never attached: nothing is mounted.
func callerIDMap() (bool, string) {
	if Rootless() {
		return true, "not needed without root (the working tree is the caller's)"
	}
	ns, err := rootfs.IDMapUserns(rootfs.IDMapping{ToUID: 65534, ToGID: 65534})
	if err != nil {
		return false, fmt.Sprintf("unavailable (%v): the working tree is handed over by changing owners in the overlay", err)
	}
	defer ns.Close()
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err == nil {
		defer unix.Close(fd)
		err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.Fd())})
	}
	if err != nil {
		return false, fmt.Sprintf("unavailable (%v): the working tree is handed over by changing owners in the overlay", err)
	}
	return true, "the working tree is the command's in O(1)"
}

func probePasta() (bool, string) {
	path, err := exec.LookPath("pasta")
	if err != nil {
		return false, "not on PATH (Debian package passt)"
	}
	if os.Geteuid() != 0 {
		// pasta needs a tap; opening the device makes none.
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, fmt.Sprintf("%s, but /dev/net/tun cannot be opened (%v): make it mode 0666, as stock distributions do", path, err)
		}
		unix.Close(fd)
	}
	return true, path
}
