package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Feature is one thing sbx needs from the host, and whether this host gives it to this caller.
type Feature struct {
	Name   string
	OK     bool
	Detail string // what it is used for, or what is missing and what happens then
}

// Features checks what sbx relies on here, for `sbx version`: the user namespace of every run, the
// idmapped working tree (root), and cgroups for limits.
func Features() []Feature {
	fs := []Feature{userNamespaces(), idmappedMounts()}
	if Rootless() {
		fs = append(fs, Feature{Name: "cgroups", Detail: "none without root here: rlimits stand in (the report's limits.enforced)"})
	} else {
		fs = append(fs, Feature{Name: "cgroups", OK: true, Detail: "memory, pids and cpu limits"})
	}
	return fs
}

func userNamespaces() Feature {
	f := Feature{Name: "user namespaces"}
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		f.Detail = "missing (CONFIG_USER_NS): sbx refuses to run"
		return f
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil {
		if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); n == 0 {
			f.Detail = "disabled (user.max_user_namespaces = 0): sbx refuses to run"
			return f
		}
	}
	f.OK, f.Detail = true, "every run has its own"
	return f
}

// idmappedMounts clones / and idmaps the clone, which is never attached: nothing is mounted.
func idmappedMounts() Feature {
	f := Feature{Name: "idmapped mounts"}
	if Rootless() {
		f.OK, f.Detail = true, "not needed without root (the working tree is the caller's)"
		return f
	}
	ns, err := idmapUserns(idmapping{ToUID: 65534, ToGID: 65534})
	if err != nil {
		f.Detail = fmt.Sprintf("unavailable (%v): the working tree is handed over by changing owners in the overlay", err)
		return f
	}
	defer ns.Close()
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err == nil {
		defer unix.Close(fd)
		err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.Fd())})
	}
	if err != nil {
		f.Detail = fmt.Sprintf("unavailable (%v): the working tree is handed over by changing owners in the overlay", err)
		return f
	}
	f.OK, f.Detail = true, "the working tree is the command's in O(1)"
	return f
}
