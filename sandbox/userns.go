package sandbox

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// Every sandbox has a user namespace of its own. Its root is sbx's supervisor (pid 1), which holds
// capabilities in that namespace only: on the host it is an unprivileged uid that owns nothing. The
// command runs as its own user inside (the caller's, or the profile's), mapped to the same uid on the
// host, so that what it writes into shared host paths belongs to that user; as root inside, it is the
// supervisor's unprivileged host uid, without any capability. Host ids that are not mapped (root's
// files, other users') look like the overflow id (nobody) inside, and the kernel checks them as
// belonging to nobody the sandbox knows.

// fallbackSupervisorID is the host uid and gid of every sandbox's root when /etc/subuid and /etc/subgid
// give root no range: high above the ranges useradd hands out (from 100000, 65536 each), so that it
// owns no file on the host.
const fallbackSupervisorID = 0x7ffe0000

// IDMap is a sandbox's user namespace.
type IDMap struct {
	RootUID, RootGID int // host ids of the namespace's root: sbx's supervisor while it builds the sandbox
	UID, GID         int // the command's ids inside
	HostUID, HostGID int // the command's ids on the host
	// SupUID and SupGID are the supervisor's own ids once the sandbox is built, the same inside as on
	// the host; 0 for none (without root, where the namespace can map only the caller's ids: the
	// supervisor stays its root). See supervisorID.
	SupUID, SupGID int
}

// newIDMap maps a sandbox whose command runs as uid:gid inside, for an sbx running as root: the root
// of the namespace is the first id of root's subordinate ranges, the command is uid:gid on the host too
// (the supervisor's ids when uid is 0).
func newIDMap(uid, gid int) IDMap {
	m := IDMap{RootUID: subordinateID("/etc/subuid", "root"), RootGID: subordinateID("/etc/subgid", "root"),
		UID: uid, GID: gid, HostUID: uid, HostGID: gid}
	if uid == 0 {
		m.HostUID = m.RootUID
	}
	if gid == 0 {
		m.HostGID = m.RootGID
	}
	m.SupUID, m.SupGID = supervisorID(m.RootUID, m.UID), supervisorID(m.RootGID, m.GID)
	return m
}

// supervisorID is the id the supervisor takes once it has built the sandbox, next to root's (the
// namespace's root's host id): the next one of root's subordinate range that is not the command's
// (inside, and so on the host, a command's id other than 0 being its host id too).
//
// The command may run as the namespace's root (a profile's uid: 0). Had the supervisor kept that uid,
// the kernel would let the command treat pid 1 as its own process: lower its rlimits or give it an
// RLIMIT_CPU that kills it (prlimit), lower its priority (setpriority, sched_setscheduler, ioprio_set),
// pin it to a CPU (sched_setaffinity), and, pid 1 being undumpable and so its /proc files the
// namespace root's, write its /proc/1/oom_score_adj (which the command's Landlock rule for /proc
// allows) so that the OOM killer ends it first. An id the command cannot have (it holds no capability
// to change its own) makes every one of those EPERM, as for any other user's process.
func supervisorID(root, command int) int {
	if root+1 != command {
		return root + 1
	}
	return root + 2
}

// mappings are the namespace's uid and gid maps in OCI form.
func (m IDMap) mappings() (uids, gids []specs.LinuxIDMapping) {
	return idMapping(m.RootUID, m.UID, m.HostUID, m.SupUID), idMapping(m.RootGID, m.GID, m.HostGID, m.SupGID)
}

func idMapping(root, inside, host, sup int) []specs.LinuxIDMapping {
	out := []specs.LinuxIDMapping{{ContainerID: 0, HostID: uint32(root), Size: 1}}
	if inside != 0 {
		out = append(out, specs.LinuxIDMapping{ContainerID: uint32(inside), HostID: uint32(host), Size: 1})
	}
	if sup != 0 {
		out = append(out, specs.LinuxIDMapping{ContainerID: uint32(sup), HostID: uint32(sup), Size: 1})
	}
	return out
}

// subordinateID is the first id of user's range in file (/etc/subuid, /etc/subgid), or
// fallbackSupervisorID when it has none.
func subordinateID(file, user string) int {
	f, err := os.Open(file)
	if err != nil {
		return fallbackSupervisorID
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(fields) != 3 || fields[0] != user {
			continue
		}
		if id, err := strconv.Atoi(fields[1]); err == nil && id > 0 {
			return id
		}
	}
	return fallbackSupervisorID
}
