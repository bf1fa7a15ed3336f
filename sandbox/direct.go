package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/selfexe"
	"github.com/sbx-dev/sbx/internal/supervisor"
	"github.com/sbx-dev/sbx/internal/vspawn"
	"github.com/sbx-dev/sbx/sandbox/cgroup"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
	"github.com/sbx-dev/sbx/sandbox/state"
)

// The direct start: sbx starts the supervisor itself, in fresh namespaces, and the supervisor builds
// the sandbox around itself from the same libcontainer config (supervisor.Setup), instead of
// libcontainer starting its init (a re-execution of the whole sbx binary, whose Go runtime, three
// nsexec stages and handshakes cost about 12 ms of every run), which then executes the supervisor.
//
// Everything that holds the sandbox is the same: the spec (spec.go) and libcontainer's conversion of
// it, the cgroups and their limits (set by the cgroups library before the supervisor joins them), the
// mounts, masked and read-only paths, the user namespace's mapping, the capabilities, no_new_privs,
// rlimits and the supervisor as pid 1. What changes is who makes the mounts: the supervisor, with the
// new mount API onto handles opened inside the root (setup.go there).
//
// Without root (rootless.go: startDirectRootless), the supervisor opens the binds' sources itself and
// the sandbox's cgroup is a child of the one systemd delegates to the caller, or there is none
// (package cgroup). With a config that asks for what the supervisor does not do (idmapped
// mounts, a read-only root) or on a kernel without mount_setattr, sbx uses libcontainer's init as
// before. So does SBX_LIBCONTAINER=1, for comparison.

// directEnv forces libcontainer's init when set to 1.
const directEnv = "SBX_LIBCONTAINER"

// runtimeContainer is what a sandbox needs of its container: libcontainer's, or a direct start's.
type runtimeContainer interface {
	Signal(os.Signal) error
	Processes() ([]int, error)
	Pause() error
	Destroy() error
}

// pidOne is the sandbox's pid 1 (the supervisor) as the host sees it.
type pidOne interface {
	Wait() (*os.ProcessState, error)
	Pid() (int, error)
}

// directSetup is the supervisor's Setup for config, or an error when the supervisor cannot build it
// (libcontainer's init then does).
func (s *Sandbox) directSetup(spec *specs.Spec, config *configs.Config) (*supervisor.Setup, error) {
	if err := directAvailable(s.cfg); err != nil {
		return nil, err
	}
	if config.Readonlyfs || len(config.NetDevices) > 0 || len(config.Hooks) > 0 {
		return nil, errors.New("a config the supervisor does not build")
	}
	setup := &supervisor.Setup{Rootfs: config.Rootfs, Masked: config.MaskPaths, ReadOnly: config.ReadonlyPaths,
		Hostname: config.Hostname, Sysctl: config.Sysctl, Umask: 0o022, Cwd: s.cfg.Command.Cwd,
		Console: s.cfg.Command.Terminal, OpenSources: Rootless(), Guard: state.Guard(s.cfg.StateRoot)}
	if !config.NoNewKeyring {
		setup.SessionKeyring = "_ses." + s.ID // libcontainer's name
	}
	// Every mount, the supervisor's binary at initPath included, though it runs already: the report
	// leaves out the execs of that path as the supervisor's own, and a free name in the sandbox's /dev
	// would let a command that may write there (as root) run its own program under it, unseen.
	for _, m := range config.Mounts {
		if m.IsIDMapped() || m.Extensions != 0 {
			return nil, fmt.Errorf("mount %s: not built by the supervisor", m.Destination)
		}
		dm := supervisor.Mount{Source: m.Source, Destination: m.Destination, Type: m.Device, Flags: m.Flags,
			Data: m.Data, Propagation: m.PropagationFlags, Own: host.Within(m.Source, s.run.Dir()),
			NoLinks: m.Device == "bind" && isShare(s.cfg.Plan.Filesystem.Shares, m.Source, m.Destination)}
		if m.RecAttr != nil {
			dm.RecSet, dm.RecClr = m.RecAttr.Attr_set, m.RecAttr.Attr_clr
		}
		setup.Mounts = append(setup.Mounts, dm)
	}
	if Rootless() {
		s.rootfs.OptionalTops(setup.Mounts)
	}
	for _, n := range config.Networks {
		if n.Type == "loopback" {
			setup.Loopback = true
		} else {
			return nil, fmt.Errorf("network %s: not built by the supervisor", n.Type)
		}
	}
	for _, d := range config.Devices {
		if d.Path != "" {
			setup.Devices = append(setup.Devices, d.Path)
		}
	}
	for _, r := range processRlimits(spec.Process.Rlimits) {
		setup.Rlimits = append(setup.Rlimits, supervisor.Rlimit{Type: r.Type, Soft: r.Soft, Hard: r.Hard})
	}
	if u := spec.Process.User.Umask; u != nil {
		setup.Umask = int(*u)
	}
	if s.ids.UID != 0 || s.ids.SupUID != 0 {
		// As with libcontainer's init: root with only what it takes to hand the command its user, from
		// ids of its own (Prepare.Creds) when it has them.
		setup.Caps = []int{unix.CAP_SETUID, unix.CAP_SETGID}
	}
	return setup, nil
}

// directAvailable says why the direct start cannot build cfg's sandbox, whatever its spec (nil when it
// can): not asked for, a kernel without mount_setattr, or a mount the probe saw refused. A run without
// root asks before it builds anything, since its cgroup depends on it (rootlessCgroupFor).
func directAvailable(cfg Config) error {
	if os.Getenv(directEnv) == "1" {
		return errors.New("not asked for")
	}
	if !newMountAPI() {
		return errors.New("the kernel has no mount_setattr (Linux 5.12)")
	}
	if self, err := selfexe.Path(); err == nil {
		bin := cfg.InitBinary
		if bin == "" {
			bin = initBinary(self)
		}
		if why := directProbe(cfg.StateRoot, bin); why != "" {
			return fmt.Errorf("%w: %s", errProbe, why)
		}
	}
	return nil
}

// newMountAPI says whether the kernel has the calls the supervisor builds with: mount_setattr (Linux
// 5.12), the newest of them (open_tree, move_mount, fsopen and fsmount came in 5.2, openat2 in 5.6).
// Without them libcontainer's init builds the sandbox.
var newMountAPI = sync.OnceValue(func() bool {
	return !errors.Is(unix.MountSetattr(-1, "", 0, &unix.MountAttr{}), unix.ENOSYS)
})

// supervisorBinary is the supervisor binary: the one the config names, or sbx-init next to sbx, or sbx.
func (s *Sandbox) supervisorBinary(self string) string {
	if s.cfg.InitBinary != "" {
		return s.cfg.InitBinary
	}
	return initBinary(self)
}

// startDirect starts the supervisor in fresh namespaces and sends it setup, and moves it into the
// sandbox's cgroups, with their limits set, in the background: the channel says when that is done (nil:
// no cgroups, without root and delegation). The network namespace is the contract's (netns, a path) or a new one.
func (s *Sandbox) startDirect(bin string, setup *supervisor.Setup, config *configs.Config, netns string, files []*os.File) (<-chan error, error) {
	if Rootless() {
		return s.startDirectRootless(bin, setup, config, netns, files)
	}
	m, err := cgroup.NewManager(config.Cgroups)
	if err != nil {
		return nil, fmt.Errorf("the sandbox's cgroups: %w", err)
	}
	// The directories are there (package cgroup) unless making them failed; then this makes them.
	if err := m.Apply(-1); err != nil {
		return nil, fmt.Errorf("making the sandbox's cgroups: %w", err)
	}
	c := &directContainer{m: m}
	s.container = c
	// Limits and device rules hold before anything runs in the cgroups.
	if err := setLimits(m, config.Cgroups.Resources); err != nil {
		return nil, fmt.Errorf("setting the sandbox's limits: %w", err)
	}
	// The supervisor's binary and every bind's source are opened here, with the host root's rights: the
	// supervisor, root only in its user namespace, may not search the directories on their way (a
	// test binary's 0700 build directory, a share below /root), as libcontainer's init may not (its
	// host-side helper opens them the same way).
	exe, err := os.Open(bin)
	if err != nil {
		return nil, fmt.Errorf("opening the supervisor's binary: %w", err)
	}
	defer exe.Close()
	// The root's copy first, then the binds': the order the sandbox lists its mounts in (bindRoot).
	root, err := openTree(supervisor.Mount{Source: setup.Rootfs, Flags: unix.MS_REC}, nil)
	if err != nil {
		return nil, fmt.Errorf("opening the sandbox's root: %w", err)
	}
	defer root.Close()
	files = append(files, root)
	setup.RootFD = 2 + len(files) // ExtraFiles start at fd 3
	for i, m := range setup.Mounts {
		if m.Type != "bind" {
			continue
		}
		tree, err := openTree(m, setup.Guard)
		if m.NoLinks && errors.Is(err, unix.ELOOP) {
			// A link planted on the share's way since resolveShares looked.
			err = fmt.Errorf("%w: %w", ErrShareLink, err)
		}
		if err != nil {
			return nil, fmt.Errorf("opening %s for %s: %w", m.Source, m.Destination, err)
		}
		defer tree.Close()
		files = append(files, tree)
		setup.Mounts[i].FD = 2 + len(files) // ExtraFiles start at fd 3
	}
	cmd := supervisorCmd(exe, files, netns)
	uids, gids := s.ids.mappings()
	cmd.SysProcAttr.UidMappings, cmd.SysProcAttr.GidMappings = sysIDMap(uids), sysIDMap(gids)
	cmd.SysProcAttr.GidMappingsEnableSetgroups = true
	// Root of its user namespace, with no supplementary group (the host's root has some), and with the
	// group it takes for good once the sandbox is built, when it takes ids of its own (Prepare.Creds):
	// every thread it makes then has that group already (supervisor.buildAsRootGroup).
	gid := 0
	if s.ids.SupUID != 0 {
		gid = s.ids.SupGID
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 0, Gid: uint32(gid), Groups: []uint32{}}
	if err := s.launchSupervisor(c, cmd, netns, setup); err != nil {
		return nil, err
	}
	// While the supervisor builds the sandbox: it starts nothing before the preparation, which comes
	// after this.
	moved := make(chan error, 1)
	go func() {
		if err := m.Apply(s.initPid); err != nil {
			s.Kill()
			moved <- fmt.Errorf("moving the supervisor into the sandbox's cgroups: %w", err)
			return
		}
		moved <- nil
	}()
	return moved, nil
}

// supervisorCmd is the supervisor, executed through exe, its binary's descriptor (passed last, after
// files), in fresh namespaces: a user namespace (the caller sets its maps), mount, pid, ipc and uts, and
// network unless it joins netns.
func supervisorCmd(exe *os.File, files []*os.File, netns string) *exec.Cmd {
	files = append(files, exe)
	exeFD := 2 + len(files) // ExtraFiles start at fd 3
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if netns == "" {
		flags |= unix.CLONE_NEWNET
	}
	return &exec.Cmd{
		// Executed through its descriptor; argv[0] and the supervisor's name stay /dev/.sbx-init.
		Path: "/proc/self/fd/" + strconv.Itoa(exeFD),
		// Not on its command line, which the command sees as libcontainer's init leaves it: the
		// descriptor of its binary, passed last.
		Args: []string{initPath, roleSupervise},
		// GOMAXPROCS=1: the supervisor is a Go program whose work is one step after another (its
		// goroutines mostly wait on descriptors); with a P per core its runtime starts and wakes
		// threads to spin for work, and its all-thread credential change has more threads to signal.
		// One P made cold runs 6.6% and bursts of 20 5% shorter here (interleaved A/Bs, CPU per run
		// -5.6%). It also keeps the runtime from reading the cgroup's CPU limit at start and after.
		Env: []string{"PATH=/usr/bin:/bin", "GOMAXPROCS=1", supervisor.SetupEnv + "=" + strconv.Itoa(exeFD) + " " + strconv.Itoa(exeFD)},
		Dir: "/",
		// The supervisor's own stdio are /dev/null; the command's come as extra files.
		ExtraFiles: files,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: flags,
			Setsid:     true,
			// The sandbox dies with sbx (with the thread that started it, which lives as long: start).
			Pdeathsig: unix.SIGKILL,
		},
	}
}

// launchSupervisor starts cmd, the supervisor of container c, in network namespace netns ("" for a new
// one) and sends it setup.
func (s *Sandbox) launchSupervisor(c *directContainer, cmd *exec.Cmd, netns string, setup *supervisor.Setup) error {
	if err := startSupervisor(cmd, netns); err != nil {
		return fmt.Errorf("starting the sandbox's supervisor: %w", err)
	}
	init := &directInit{cmd: cmd}
	s.init, s.initPid = init, cmd.Process.Pid
	c.init = init
	var err error
	if c.pidfd, err = pidfdOpen(s.initPid, 0); err != nil {
		return fmt.Errorf("opening the supervisor's pidfd: %w", err)
	}
	if err := s.ctl.SendSetup(*setup); err != nil {
		return fmt.Errorf("sending the supervisor its setup: %w", err)
	}
	return nil
}

// openTree is a detached copy of bind m's source (recursive with MS_REC), as the host's root sees it,
// made a slave of the source's mounts. A copy of a shared mount (systemd makes / shared) is otherwise
// in its peer group: whatever the supervisor mounts onto it (a nested share, sbx's /etc/hosts over a
// shared /etc) would appear on the host and stay there. As a slave it still sees the host's later
// mounts, as libcontainer's bind in a namespace made rslave does. A writable bind's source is checked
// against g (sbx's state root) on the descriptor the copy is made from.
func openTree(m supervisor.Mount, g *supervisor.Guard) (*os.File, error) {
	fd, err := supervisor.OpenSource(m, g)
	if err != nil {
		return nil, err
	}
	err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Propagation: unix.MS_SLAVE})
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("making the copy a slave: %w", err)
	}
	return os.NewFile(uintptr(fd), m.Source), nil
}

// pidfdOpen is unix.PidfdOpen; a test makes it fail.
var pidfdOpen = unix.PidfdOpen

// starters are the threads that start supervisors, each locked to its goroutine for good. A
// supervisor's parent-death signal fires when the thread that forked it ends, not its process: the
// runtime ends a thread whose goroutine exits while locked to it (sbx's network code does), and the
// thread that happened to run an ordinary goroutine's fork could be that thread later.
var starters struct {
	mu   sync.Mutex
	n    int // threads made
	idle int // threads waiting for a request
	req  chan startRequest
}

// numStarters bounds how many supervisors start at once. The threads are made as starts need them:
// sbx exec starts one supervisor and makes one thread.
const numStarters = 4

type startRequest struct {
	cmd   *exec.Cmd
	netns string
	done  chan<- error
}

// startSupervisor is start; a test that starts supervisors from its own thread replaces it.
var startSupervisor = start

// start starts cmd on a starter thread, in network namespace netns ("" for the thread's own).
func start(cmd *exec.Cmd, netns string) error {
	starters.mu.Lock()
	if starters.req == nil {
		starters.req = make(chan startRequest)
	}
	if starters.idle == 0 && starters.n < numStarters {
		starters.n++
		starters.idle++
		go starter(starters.req)
	}
	starters.mu.Unlock()
	done := make(chan error, 1)
	starters.req <- startRequest{cmd, netns, done}
	return <-done
}

// starter serves start requests on a thread of its own, for good. The thread sets no_new_privs first,
// which every supervisor it forks is then born with, on every thread its runtime makes: the supervisor
// need not set it on each of them (an all-thread call, whose wait for every thread to be scheduled cost
// about 0.7 ms of CPU per run when many sandboxes start at once). The thread only ever forks
// supervisors, which gain nothing at their exec either way.
func starter(reqs <-chan startRequest) {
	runtime.LockOSThread() // never unlocked: see starters
	// Should this fail, the supervisor sets it on each of its threads itself.
	unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	for r := range reqs {
		starters.mu.Lock()
		starters.idle--
		starters.mu.Unlock()
		r.done <- startIn(r.cmd, r.netns)
		starters.mu.Lock()
		starters.idle++
		starters.mu.Unlock()
	}
}

// startIn starts cmd in network namespace netns ("" for the thread's own): the child is forked from
// this thread, joined to the namespace, which then comes back to sbx's own. The caller holds the thread.
func startIn(cmd *exec.Cmd, netns string) error {
	if netns == "" {
		return startCmd(cmd)
	}
	ns, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the network namespace: %w", err)
	}
	defer unix.Close(ns)
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(own)
	if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("joining the network namespace: %w", err)
	}
	err = startCmd(cmd)
	// Back, so as not to hold the contract's namespace. Should that fail, the thread's own namespace
	// matters to no later start: each joins its contract's, or makes a new one.
	unix.Setns(own, unix.CLONE_NEWNET)
	return err
}

// startCmd starts a supervisor without copying sbx's memory (internal/vspawn: about 1 ms of CPU per
// sandbox when many start at once), or with os/exec's fork without cgo.
func startCmd(cmd *exec.Cmd) error {
	if err := vspawn.Start(cmd); !errors.Is(err, vspawn.ErrUnsupported) {
		return err
	}
	return cmd.Start()
}

// netNSPath is the network namespace spec joins, "" for a new one.
func netNSPath(spec *specs.Spec) string {
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			return ns.Path
		}
	}
	return ""
}

func sysIDMap(ms []specs.LinuxIDMapping) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(ms))
	for i, m := range ms {
		out[i] = syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)}
	}
	return out
}

// directInit is a directly started supervisor; Wait may be called more than once (Stop, Destroy).
type directInit struct {
	cmd   *exec.Cmd
	once  sync.Once
	state *os.ProcessState
	err   error
}

func (p *directInit) Wait() (*os.ProcessState, error) {
	p.once.Do(func() { p.state, p.err = p.cmd.Process.Wait() })
	return p.state, p.err
}

func (p *directInit) Pid() (int, error) { return p.cmd.Process.Pid, nil }

// directContainer is a directly started sandbox's container: its supervisor and its cgroups (none
// without root where no cgroup is delegated: m is nil, and the sandbox's processes are its pid
// namespace's, see rootless.go).
type directContainer struct {
	m     cgroups.Manager
	init  *directInit
	pidfd int
}

// Signal signals the supervisor (SIGKILL ends the whole pid namespace); one that is gone is no error.
func (c *directContainer) Signal(sig os.Signal) error {
	if c.init == nil {
		return nil
	}
	err := c.send(sig.(syscall.Signal))
	if errors.Is(err, unix.ESRCH) || errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	if err == nil && sig == unix.SIGKILL && c.m != nil {
		// A frozen (v1) cgroup holds the kill until it thaws, as libcontainer's Signal knows too.
		if st, ferr := c.m.GetFreezerState(); ferr == nil && st != cgroups.Thawed {
			return c.m.Freeze(cgroups.Thawed)
		}
	}
	return err
}

// send sends sig through the supervisor's pidfd, or, without one (opening it failed, or Destroy closed
// it), by its pid: sbx's own child, whose pid stays its own until sbx waits for it (Wait marks it
// done). Skipping the kill would leave Destroy waiting for good on a supervisor that waits for its
// setup.
func (c *directContainer) send(sig syscall.Signal) error {
	if c.pidfd > 0 {
		return unix.PidfdSendSignal(c.pidfd, sig, nil, 0)
	}
	return c.init.cmd.Process.Signal(sig)
}

func (c *directContainer) Processes() ([]int, error) {
	if c.m == nil && c.init == nil {
		return nil, nil
	}
	if c.m == nil {
		return nsPids(c.init.cmd.Process.Pid)
	}
	return c.m.GetAllPids()
}

func (c *directContainer) Pause() error {
	if c.m == nil {
		return ErrNoFreezer
	}
	return c.m.Freeze(cgroups.Frozen)
}

// Destroy removes the cgroups once the supervisor is gone (Destroy of the sandbox kills and waits first).
func (c *directContainer) Destroy() error {
	if c.pidfd > 0 {
		unix.Close(c.pidfd)
		c.pidfd = -1
	}
	if c.m == nil {
		return nil
	}
	return c.m.Destroy()
}
