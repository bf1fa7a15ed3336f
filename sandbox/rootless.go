package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/selfexe"
	"github.com/sbx-dev/sbx/internal/supervisor"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox/cgroup"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
	"github.com/sbx-dev/sbx/sandbox/rootfs"
	"github.com/sbx-dev/sbx/sandbox/state"
)

// Without root, sbx builds the same sandbox from what the kernel gives an ordinary user: a user
// namespace whose root is the caller (one id mapped: the command runs as root inside, the caller on the
// host, with no capability), mounts made inside that namespace, no cgroup (limits by rlimits), and the
// state below $XDG_RUNTIME_DIR/sbx.
//
// The root file system cannot be one overlay of the host's / there: the mounts below / are locked in
// a user namespace, and the kernel refuses an overlay (or a non-recursive bind) whose lower layer has
// locked mounts below it. So the sandbox's / is a directory of the run, holding the top level of the
// host's / (its symlinks, and empty directories as mount points), and each top-level directory is an
// overlay of its own (lower: the host's directory; upper and work dirs: in the run dir, with overlay's
// user.* xattrs), or a read-only recursive bind when mounts lie below it. Hidden paths are whiteouts and
// opaque directories in the uppers, written by sbx before the mounts, as with root.

// Rootless says whether sbx runs without root, and builds sandboxes the rootless way.
func Rootless() bool { return host.Rootless() }

// rootlessIDMap maps the caller as the namespace's root, which is also the command's user.
func rootlessIDMap() IDMap {
	uid, gid := os.Geteuid(), os.Getegid()
	return IDMap{RootUID: uid, RootGID: gid, HostUID: uid, HostGID: gid}
}

// rootlessIndex is why a rootless sandbox's overlays keep no inodes index here ("" when they can): the
// mount probe's step that mounts one with index=on, in a user namespace, its upper in the state root
// (probed once per boot, never assumed from the kernel's version). Asked for where it failed, each
// overlay would turn it off again, with a line in the kernel's log per mount.
func rootlessIndex(cfg Config) string {
	self, err := selfexe.Path()
	if err != nil {
		return err.Error()
	}
	bin := cfg.InitBinary
	if bin == "" {
		bin = initBinary(self)
	}
	return probeSteps(cfg.StateRoot, bin).stepErr(supervisor.ProbeIndexStep)
}

// rootlessSpec turns a sandbox's spec into a rootless one: the top-level mounts first, and the cgroup
// limits that the delegated cgroup d's controllers hold, in the run's cgroup below it (package cgroup);
// none without delegation (limits.enforced says what holds instead). No device rules: see
// delegatedManager.
func rootlessSpec(s *specs.Spec, top []specs.Mount, d *cgroup.Delegation, id string) {
	s.Mounts = append(top, s.Mounts...)
	r := s.Linux.Resources
	s.Linux.Resources = nil
	s.Linux.CgroupsPath = ""
	if d == nil {
		return
	}
	held := &specs.LinuxResources{}
	if r != nil {
		if d.Has("memory") {
			held.Memory = r.Memory
		}
		if d.Has("pids") {
			held.Pids = r.Pids
		}
		if d.Has("cpu") {
			held.CPU = r.CPU
		}
	}
	s.Linux.Resources = held
	s.Linux.CgroupsPath = strings.TrimPrefix(d.RunDir(id), cgroup.Root)
}

// Enforcement is one limit of the plan and what holds it in this sandbox.
type Enforcement struct{ Limit, By string }

// Enforced says how each limit the plan sets is held: by the cgroup and the layer's tmpfs as root; by
// rlimits (or nothing) without root, but for those that the cgroup systemd delegates holds.
func (s *Sandbox) Enforced() []Enforcement {
	l := s.cfg.Plan.Limits
	by := map[string]string{"memory": "cgroup", "pids": "cgroup", "cpu": "cgroup", "disk": "tmpfs size"}
	if Rootless() {
		by = map[string]string{"memory": "none", "pids": "RLIMIT_NPROC per uid", "cpu": "none", "disk": "RLIMIT_FSIZE per file"}
		for _, c := range cgroup.LimitControllers {
			if s.deleg.Has(c) {
				by[c] = "cgroup"
			}
		}
	}
	out := []Enforcement{{"disk", by["disk"]}, {"nofile", "RLIMIT_NOFILE"}}
	for _, x := range []struct {
		limit string
		set   bool
	}{{"memory", l.MemoryBytes > 0}, {"pids", l.Pids > 0}, {"cpu", l.CPUs > 0}} {
		if x.set {
			out = append(out, Enforcement{x.limit, by[x.limit]})
		}
	}
	return out
}

// rlimitsWithoutCgroup are the rlimits that stand in for cgroup limits in a rootless sandbox: file size
// for disk. Memory has none: RLIMIT_AS counts address space, which Go and other runtimes reserve far
// beyond what they use (libcontainer's own init fails under 1 GiB).
func rlimitsWithoutCgroup(disk int64) []specs.POSIXRlimit {
	d := uint64(disk)
	return []specs.POSIXRlimit{{Type: "RLIMIT_FSIZE", Hard: d, Soft: d}}
}

// nsPids lists the host pids of the processes in pid 1's pid namespace, for a sandbox without a cgroup:
// every process whose pid namespace is init's.
func nsPids(initPid int) ([]int, error) {
	pids, _, err := nsScan(initPid)
	return pids, err
}

// nsScan is nsPids, and says whether a process it met vanished before its children could be read: a
// process that forks a successor and exits while the scan runs may hide the successor from this scan.
//
// It walks the tree of init's descendants (/proc/PID/task/TID/children of every thread), not the host's
// whole /proc: every process of a pid namespace descends from its init, since an orphan is given to
// init (or to a subreaper, itself a descendant). The walk costs what the sandbox holds, where a scan of
// /proc cost what the host holds (1.3 ms a run on a quiet host of 80 processes, most of it readlinks
// an ordinary user is refused), and only the sandbox's own processes can make it restart. A
// descendant is listed only when its pid namespace is init's, as before.
func nsScan(initPid int) (pids []int, vanished bool, err error) {
	want, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", initPid))
	if err != nil {
		return nil, false, err
	}
	seen := map[int]bool{initPid: true}
	queue := []int{initPid}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		kids, gone, err := children(pid)
		if err != nil && pid == initPid {
			return nil, false, err
		}
		if err != nil || gone {
			vanished = true
		}
		if pid == initPid || inPidNS(pid, want) {
			pids = append(pids, pid) // else gone since, or in a pid namespace of its own
		}
		for _, k := range kids {
			if !seen[k] {
				seen[k] = true
				queue = append(queue, k)
			}
		}
	}
	return pids, vanished, nil
}

// children lists the children of every thread of pid; gone says that a thread (or the process) exited
// while they were read.
func children(pid int) (kids []int, gone bool, err error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, true, err
	}
	for _, t := range tasks {
		data, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if err != nil {
			gone = true
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if k, err := strconv.Atoi(f); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids, gone, nil
}

// inPidNS says whether pid's pid namespace is ns (a /proc/PID/ns/pid link's text).
func inPidNS(pid int, ns string) bool {
	got, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	return err == nil && got == ns
}

// ErrNoCgroup is matched by the refusal of a profile that requires cgroup limits where sbx has none.
var ErrNoCgroup = errors.New("the profile requires cgroup limits (limits.require: cgroup), which this run without root cannot have")

// checkRootless refuses what a rootless sandbox cannot give, before anything is built; d is the cgroup
// systemd delegates (nil: none, for the reason noCgroup).
func (cfg Config) checkRootless(d *cgroup.Delegation, noCgroup string) error {
	if l := cfg.Plan.Limits; l.RequireCgroup {
		if d == nil {
			return fmt.Errorf("%w: %w: no cgroup of its own (%s)", ErrSetup, ErrNoCgroup, noCgroup)
		}
		for _, x := range []struct {
			controller string
			set        bool
		}{{"memory", l.MemoryBytes > 0}, {"pids", l.Pids > 0}, {"cpu", l.CPUs > 0}} {
			if x.set && !d.Has(x.controller) {
				return fmt.Errorf("%w: %w: the cgroup systemd delegates (%s) has no %s controller", ErrSetup, ErrNoCgroup, d.Dir(), x.controller)
			}
		}
	}
	if cfg.Plan.Network.Mode == policy.NetContract && cfg.Plan.Network.UplinkNetNS != "" {
		return fmt.Errorf("%w: %w: an uplink namespace (network.uplink_netns %s); pasta is the uplink without root", ErrSetup, ErrRootless, cfg.Plan.Network.UplinkNetNS)
	}
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		return fmt.Errorf("%w: %w: user namespaces: %w", ErrSetup, ErrRootless, err)
	}
	return nil
}

// rootlessCgroupFor is the delegated cgroup a run of cfg without root uses, prepared, or nil with why
// not. Only the direct start uses it (see startInit): where libcontainer's init would build the
// sandbox, there is none, as before.
func rootlessCgroupFor(cfg Config) (*cgroup.Delegation, string) {
	d, why := cgroup.Detect()
	if d == nil {
		return nil, why
	}
	if err := directAvailable(cfg); err != nil {
		return nil, fmt.Sprintf("the cgroup systemd delegates (%s) is used only when sbx's supervisor builds the sandbox, and here libcontainer's init does: %v", d.Dir(), err)
	}
	if err := cgroup.Prepare(d); err != nil {
		return nil, fmt.Sprintf("the cgroup systemd delegates (%s) could not be used: %v", d.Dir(), err)
	}
	return d, ""
}

// rootlessNotes say how a rootless sandbox differs from root's, for the report.
func (s *Sandbox) rootlessNotes() []string {
	l := s.cfg.Plan.Limits
	cgroupNote := "rootless: no cgroup here; the sandbox's processes are those of its pid namespace, stopped with SIGSTOP for the observation (no freezer: a left-running process shows state T)"
	if s.deleg != nil {
		cgroupNote = fmt.Sprintf("rootless: limits through the cgroup systemd delegates to the caller (%s)", s.deleg.Dir())
	}
	notes := []string{fmt.Sprintf("rootless: the command runs as root inside its user namespace, uid %d on the host, without capabilities", s.ids.HostUID),
		cgroupNote,
		// What root's sandbox gives and this one cannot (docs/limits.md, "Differences from running on
		// the host"): said on every run, since the command's failure alone does not say it is sbx's.
		"rootless: only the caller's id is mapped: chown to another owner fails with EINVAL, so tar x, cpio -i and cp -a of others' files fail (tar --no-same-owner, cpio --no-preserve-owner, cp -a --no-preserve=ownership)",
		"rootless: what existed before the run is overlayfs's lower layer, which in a user namespace keeps no redirects: such a directory cannot be renamed (EXDEV: mv copies it, git mv and a bare rename(2) fail)"}
	if why := s.rootfs.IndexWhy(); why != "" {
		notes = append(notes, "rootless: hard links of files that existed before the run are split: overlayfs keeps no inodes index in a user namespace here ("+why+"), so each name is copied up on its own when the command writes to it or links it: a write through one name does not show through the others, and a new link shows another inode number than its source (git clone of a local repository fails, \"hardlink different from source\": git clone --no-hardlinks)")
	}
	held := []string{"disk as the size of each file (RLIMIT_FSIZE; df shows the host's filesystem)"}
	var byCgroup, none []string
	for _, c := range cgroup.LimitControllers {
		if s.deleg.Has(c) {
			byCgroup = append(byCgroup, c)
		} else if c != "pids" {
			none = append(none, c)
		}
	}
	if len(byCgroup) > 0 {
		held = append(held, strings.Join(byCgroup, ", ")+" by the cgroup")
	}
	if l.Pids > 0 && !s.deleg.Has("pids") {
		held = append(held, "pids by RLIMIT_NPROC of the caller's uid")
	}
	held = append(held, "timeout by sbx")
	line := "rootless limits: " + strings.Join(held, ", ")
	switch {
	case len(none) == 0:
	case s.deleg != nil && len(none) == 1:
		line += "; " + none[0] + " is not limited (no such controller in the delegated cgroup)"
	case s.deleg != nil:
		line += "; " + strings.Join(none, " and ") + " are not limited (no such controllers in the delegated cgroup)"
	default:
		line += "; " + strings.Join(none, " and ") + " are not limited"
	}
	return append(notes, line)
}

// rootlessRlimits stand in for the cgroup limits: file size for disk, and, unless the delegated cgroup
// holds pids, processes of the caller's uid (counted from the caller's processes now, since the limit
// is per uid, host-wide).
func (s *Sandbox) rootlessRlimits() []specs.POSIXRlimit {
	l := s.cfg.Plan.Limits
	disk := l.DiskBytes
	if disk <= 0 {
		disk = rootfs.DefaultDiskBytes
	}
	out := rlimitsWithoutCgroup(disk)
	if l.Pids > 0 && !s.deleg.Has("pids") {
		n := uint64(l.Pids) + uint64(processesOf(os.Getuid()))
		out = append(out, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: n, Soft: n})
	}
	// Never above the caller's own hard limits: the sandbox's init may not raise them, and its start
	// would fail; a lower limit holds already.
	for i, r := range out {
		var cur unix.Rlimit
		if t, ok := rlimitTypes[r.Type]; ok && unix.Getrlimit(t, &cur) == nil && r.Hard > cur.Max {
			out[i].Hard, out[i].Soft = cur.Max, min(r.Soft, cur.Max)
		}
	}
	return out
}

// processesOf counts the processes of uid.
func processesOf(uid int) int {
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range dir {
		var st unix.Stat_t
		if _, err := strconv.Atoi(e.Name()); err == nil && unix.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == uid {
			n++
		}
	}
	return n
}

// NetDiag returns a sock_diag socket of the sandbox's network namespace, for an sbx that may not enter
// it (without root): a copy of the one the supervisor made. The caller closes it.
func (s *Sandbox) NetDiag() (int, error) {
	if s.diagFD < 0 {
		return -1, fmt.Errorf("the sandbox's init has no sock_diag socket")
	}
	pidfd, err := unix.PidfdOpen(s.initPid, 0)
	if err != nil {
		return -1, fmt.Errorf("opening the sandbox's init: %w", err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, s.diagFD, 0)
	if err != nil {
		return -1, fmt.Errorf("copying the sandbox's sock_diag socket: %w", err)
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

// startDirectRootless is startDirect without root: the supervisor starts in fresh namespaces as the
// caller, root of its user namespace, where the caller's uid and gid (one id each, rootlessIDMap) are
// mapped as 0. The kernel lets an ordinary user write such maps itself (the gid map once setgroups is
// denied), so the runtime writes them between clone and exec, as for root, and no newuidmap is needed.
// The sandbox's cgroup, where systemd delegates one (package cgroup), gets its limits before the
// supervisor starts, and the supervisor is moved into it in the background, as startDirect does as
// root: the channel says when (nil: no cgroup, limits come as rlimits, in setup). The supervisor opens
// the binds' sources (setup.OpenSources: sbx may not clone mounts); the network namespace is a new one,
// which pasta joins once the supervisor runs (Create: net.Attach).
func (s *Sandbox) startDirectRootless(bin string, setup *supervisor.Setup, config *configs.Config, netns string, files []*os.File) (<-chan error, error) {
	if netns != "" {
		// Joining another namespace would take CAP_SYS_ADMIN over it, which sbx has not.
		return nil, fmt.Errorf("%w: joining the network namespace %s", ErrRootless, netns)
	}
	m, err := s.delegatedManager(config)
	if err != nil {
		return nil, err
	}
	c := &directContainer{m: m}
	s.container = c
	exe, err := os.Open(bin)
	if err != nil {
		return nil, fmt.Errorf("opening the supervisor's binary: %w", err)
	}
	defer exe.Close()
	cmd := supervisorCmd(exe, files, netns)
	uids, gids := s.ids.mappings()
	if len(uids) != 1 || len(gids) != 1 || uids[0].HostID != uint32(os.Geteuid()) || gids[0].HostID != uint32(os.Getegid()) {
		return nil, fmt.Errorf("%w: a user namespace that maps other ids than the caller's own (%v %v)", ErrRootless, uids, gids)
	}
	cmd.SysProcAttr.UidMappings, cmd.SysProcAttr.GidMappings = sysIDMap(uids), sysIDMap(gids)
	// Already root of its user namespace once mapped, with the caller's supplementary groups (unmapped:
	// nogroup inside), which setgroups, denied so that the gid map may be written, cannot drop; as with
	// libcontainer's rootless init.
	cmd.SysProcAttr.GidMappingsEnableSetgroups = false
	if err := s.launchSupervisor(c, cmd, netns, setup); err != nil {
		// Its maps refused: AppArmor's restriction of user namespaces, the usual cause (apparmor.go).
		return nil, usernsRefusal(err)
	}
	if err := state.RecordInit(s.run.Dir(), s.initPid); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, nil
	}
	// While the supervisor builds the sandbox: it starts nothing before the preparation, which comes
	// after this.
	moved := make(chan error, 1)
	go func() {
		if err := m.AddPid("", s.initPid); err != nil {
			s.Kill()
			moved <- fmt.Errorf("moving the supervisor into the sandbox's cgroup: %w", err)
			return
		}
		moved <- nil
	}()
	return moved, nil
}

// delegatedManager is the cgroup manager of a rootless sandbox's cgroup below the delegated one, with
// the plan's limits set (nil without delegation). cgroup v2's device rules are a BPF program, which an
// ordinary user may not attach; the sandbox's /dev holds only what sbx put there (rootlessSpec keeps no
// device rule).
func (s *Sandbox) delegatedManager(config *configs.Config) (cgroups.Manager, error) {
	if s.cgroups == nil {
		return nil, nil
	}
	made, err := s.cgroups.Manager()
	if err != nil {
		return nil, err
	}
	if config.Cgroups.Resources == nil {
		config.Cgroups.Resources = &cgroups.Resources{}
	}
	config.Cgroups.Resources.SkipDevices = true
	m, err := manager.NewWithPaths(config.Cgroups, made.GetPaths())
	if err != nil {
		return nil, fmt.Errorf("the sandbox's cgroup: %w", err)
	}
	if err := setLimits(m, config.Cgroups.Resources); err != nil {
		return nil, fmt.Errorf("setting the sandbox's limits in %s: %w", m.Path(""), err)
	}
	return m, nil
}
