// Package features probes what this kernel and host give sbx: user namespaces, Landlock's ABI, the
// cgroup layout, idmapped mounts, seccomp and pasta. Every probe is a row of one table (checks), the
// way go-landlock keeps its ABI matrix in one place; `sbx version` prints the table.
//
// It only looks: no probe changes host state, needs root, or takes longer than a few syscalls. A probe
// says whether the kernel or host has a feature, not whether a given profile may use it: the code that
// applies a feature still checks it (and fails closed) where it applies it.
package features

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Result is one probed feature.
type Result struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Detail    string `json:"detail"`   // "ABI 7", "v1 hybrid (v2 at /sys/fs/cgroup/unified)", "/usr/bin/pasta", or why not
	UsedFor   string `json:"used_for"` // what sbx needs it for
}

// checks is the table of probes, in the order `sbx version` prints them.
var checks = []struct {
	name, usedFor string
	probe         func() (bool, string)
}{
	{"userns", "user namespaces: rootless runs, the sandbox's own root", userns},
	{"landlock", "filesystem rules (ABI 1), rename across dirs (ABI 2 needs refer), TCP rules (ABI 4), scoping (ABI 6)", landlock},
	{"seccomp", "the syscall filter of every profile", seccompFilter},
	{"cgroup", "limits: memory, pids, cpu", cgroupLayout},
	{"idmapped mounts", "sharing host paths with the sandbox's user without chown", idmap},
	{"pasta", "the network uplink of rootless runs", pasta},
}

// Probe runs every check of the table.
func Probe() []Result {
	out := make([]Result, 0, len(checks))
	for _, c := range checks {
		ok, detail := c.probe()
		out = append(out, Result{Name: c.name, Available: ok, Detail: detail, UsedFor: c.usedFor})
	}
	return out
}

// Kernel returns the kernel release (uname -r).
func Kernel() string {
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

func userns() (bool, string) {
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
		return true, "root only for unconfined programs: kernel.apparmor_restrict_unprivileged_userns is 1"
	}
	return true, fmt.Sprintf("unprivileged too (user.max_user_namespaces %d)", max)
}

func landlock() (bool, string) {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return false, fmt.Sprintf("not enabled (%v): boot with lsm=...,landlock", err)
	}
	return true, fmt.Sprintf("ABI %d", abi)
}

func seccompFilter() (bool, string) {
	b, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	if err != nil {
		return false, "no /proc/sys/kernel/seccomp/actions_avail (kernel without CONFIG_SECCOMP_FILTER)"
	}
	return true, "actions " + strings.Join(strings.Fields(string(b)), ",")
}

func cgroupLayout() (bool, string) {
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

// idmap looks for mount_setattr (Linux 5.12), which sets MOUNT_ATTR_IDMAP; whether a given file
// system supports idmapped mounts is only known when one is made.
func idmap() (bool, string) {
	err := unix.MountSetattr(-1, "", unix.AT_EMPTY_PATH, &unix.MountAttr{})
	if errors.Is(err, unix.ENOSYS) {
		return false, "no mount_setattr (kernel before 5.12)"
	}
	return true, "mount_setattr present (Linux 5.12+); support depends on the file system"
}

func pasta() (bool, string) {
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
