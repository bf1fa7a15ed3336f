// Package cgprime starts, as early as a process of sbx can, the wait that the kernel makes the first
// write to a cgroup.procs file in a while do: an RCU grace period, 5-15 ms on this kind of machine.
//
// Every write to a cgroup.procs file takes the kernel's cgroup_threadgroup_rwsem for writing. When no
// writer held it lately, that first waits for an RCU grace period (rcu_sync_enter); a writer that comes
// while another one waits shares that grace period, and one that comes within a grace period after the
// last one left waits for none. libcontainer's Apply, which moves a sandbox's init into its cgroup, is
// such a write, and it comes 10-13 ms after sbx exec starts. A write of sbx's own pid to the cgroup it is
// in (no process moves) made when the process starts lets most of that grace period pass while sbx reads
// its profile and builds the overlays. For the subcommands that build a sandbox at once, as root, a
// constructor in C (early.c) makes that write on a thread of its own before Go's runtime starts, 0.3 ms
// into the process; without cgo the package's init makes it on a goroutine, 2.5 ms in.
//
// The same constructor, while the process still has a single thread, gives those subcommands and the
// servers (sbx mcp and sbx serve, whose pools hold sandboxes for long) a mount namespace of their own, a slave of the
// host's (unshare(CLONE_NEWNS) cannot be had later, once Go's runtime runs threads): a run's overlays,
// disk layer and binds never enter the host's mount table. Each sandbox's mount namespace is a copy of
// its sbx's, so runs started at once no longer copy (and detach again) every other run's mounts, nor a
// server's pool, and a killed sbx's mounts go with it. [PrivateMounts] says whether it happened.
//
// It also gives every thread of sbx exec and sbx probe a timer slack of 2 ms, for Go's sysmon thread,
// whose 20 us sleeps otherwise cost a fifth of the time of 20 runs started at once (early.c says more);
// [CallerTimerSlack] is the caller's, which the command gets back.
package cgprime

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// startNow are the subcommands (os.Args[1]) that build a sandbox as soon as they have read their flags.
var startNow = map[string]bool{"exec": true, "probe": true}

func init() {
	if StartsNow(os.Args, os.Geteuid()) && !startedEarly() && !ServiceSeen() {
		go Prime()
	}
}

// StartsNow says whether a process started with args by euid builds a sandbox as root at once: root's
// exec and probe; not the roles sbx re-executes itself in (libcontainer's init, the helpers), nor a run
// without root, which makes no cgroup. The work sbx starts before main (here, early.c, idmapns) is
// for these runs only.
func StartsNow(args []string, euid int) bool {
	return len(args) > 1 && startNow[args[1]] && euid == 0
}

// Prime writes sbx's pid to the cgroup.procs file of the cgroup it is in; best effort: a failed write
// only leaves the grace period to the next writer. A no-op when that file is not found (see Procs).
func Prime() {
	if p := Procs(); p != "" {
		_ = os.WriteFile(p, []byte(strconv.Itoa(os.Getpid())), 0)
	}
}

// Procs is the cgroup.procs file of the cgroup sbx runs in, in the unified hierarchy when it is mounted
// (pure cgroup v2, or /sys/fs/cgroup/unified beside v1) or else in v1's pids hierarchy; "" when neither
// is found, or the file found does not list sbx. Found once per process.
var Procs = sync.OnceValue(ownProcs)

func ownProcs() string {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	return procsIn(own, os.Getpid())
}

// procsIn is ownProcs for the /proc/self/cgroup content own of the process pid.
func procsIn(own []byte, pid int) string {
	var unified, pids string // the unified hierarchy is tried first, as early.c does
	for line := range strings.Lines(string(own)) {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 || climbs(parts[2]) {
			continue
		}
		switch {
		case parts[1] == "":
			base := "/sys/fs/cgroup/unified"
			if unifiedOnly() {
				base = "/sys/fs/cgroup"
			}
			unified = filepath.Join(base, parts[2])
		case hasController(parts[1], "pids"):
			pids = filepath.Join("/sys/fs/cgroup/pids", parts[2])
		}
	}
	candidates := slices.DeleteFunc([]string{unified, pids}, func(s string) bool { return s == "" })
	self := []byte(strconv.Itoa(pid))
	for _, dir := range candidates {
		// Only a file that lists sbx already: a write to any other would move sbx to another cgroup
		// (a cgroup file system mounted elsewhere than /proc/self/cgroup's paths suggest).
		file := filepath.Join(dir, "cgroup.procs")
		if b, err := readProcs(file); err == nil && listed(b, self) {
			return file
		}
	}
	return ""
}

// climbs says whether a path of /proc/self/cgroup leads up out of its hierarchy's mount: in a cgroup
// namespace, a cgroup outside the namespace's root shows as /../name, and joined to the mount point
// that names a file outside any cgroup file system (early.c skips these paths too).
func climbs(path string) bool {
	return slices.Contains(strings.Split(path, "/"), "..")
}

// readProcs reads file when it is a cgroup.procs of a cgroup file system (v1 or v2), never through a
// symbolic link, never blocking.
func readProcs(file string) ([]byte, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st syscall.Statfs_t
	if err := syscall.Fstatfs(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Type != cgroup2Magic && st.Type != cgroupMagic {
		return nil, fmt.Errorf("%s: not on a cgroup file system", file)
	}
	return io.ReadAll(f)
}

const (
	cgroupMagic  = 0x27e0eb
	cgroup2Magic = 0x63677270
)

// unifiedOnly says whether /sys/fs/cgroup is a cgroup v2 file system (no v1 hierarchies).
func unifiedOnly() bool {
	var st syscall.Statfs_t
	return syscall.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == cgroup2Magic
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

func listed(procs, pid []byte) bool {
	for f := range bytes.FieldsSeq(procs) {
		if bytes.Equal(f, pid) {
			return true
		}
	}
	return false
}
