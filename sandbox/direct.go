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
	"github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/supervisor"
)

// The direct start: sbx starts the supervisor itself, in fresh namespaces, and the supervisor builds
// the sandbox around itself from the same libcontainer config (supervisor.Setup), instead of
// libcontainer starting its init (a re-execution of the whole sbx binary, whose Go runtime, three
// nsexec stages and handshakes cost about 8 ms of every run), which then executes the supervisor.
//
// Everything that holds the sandbox is the same: the spec (spec.go) and libcontainer's conversion of
// it, the cgroups and their limits (set by the cgroups library before the supervisor joins them), the
// mounts, masked and read-only paths, the user namespace's mapping, the capabilities, no_new_privs,
// rlimits and the supervisor as pid 1. What changes is who makes the mounts: the supervisor, with the
// new mount API onto handles opened inside the root (setup.go there).
//
// Without root (rootless.go), or with a config that asks for what the supervisor does not do (idmapped
// mounts, a read-only root), sbx uses libcontainer's init as before. So does SBX_LIBCONTAINER=1, for
// comparison.

// directEnv forces libcontainer's init when set to 1.
const directEnv = "SBX_LIBCONTAINER"

// runtimeContainer is what a sandbox needs of its container: libcontainer's, or a direct start's.
type runtimeContainer interface {
	Signal(os.Signal) error
	Processes() ([]int, error)
	Pause() error
	Destroy() error
}

// initProcess is the sandbox's pid 1 as the host sees it.
type initProcess interface {
	Wait() (*os.ProcessState, error)
	Pid() (int, error)
}

// directSetup is the supervisor's Setup for config, or an error when the supervisor cannot build it
// (libcontainer's init then does).
func (s *Sandbox) directSetup(spec *specs.Spec, config *configs.Config) (*supervisor.Setup, error) {
	if Rootless() || os.Getenv(directEnv) == "1" {
		return nil, errors.New("not asked for")
	}
	if config.Readonlyfs || len(config.NetDevices) > 0 || len(config.Hooks) > 0 {
		return nil, errors.New("a config the supervisor does not build")
	}
	setup := &supervisor.Setup{Rootfs: config.Rootfs, Masked: config.MaskPaths, ReadOnly: config.ReadonlyPaths,
		Hostname: config.Hostname, Sysctl: config.Sysctl, Umask: 0o022, Cwd: s.cfg.Command.Cwd,
		Console: s.cfg.Command.Terminal}
	if !config.NoNewKeyring {
		setup.SessionKeyring = "_ses." + s.ID // libcontainer's name
	}
	for _, m := range config.Mounts {
		if m.Destination == initPath {
			continue // the supervisor runs already
		}
		if m.IsIDMapped() || m.Extensions != 0 {
			return nil, fmt.Errorf("mount %s: not built by the supervisor", m.Destination)
		}
		dm := supervisor.Mount{Source: m.Source, Destination: m.Destination, Type: m.Device, Flags: m.Flags,
			Data: m.Data, Propagation: m.PropagationFlags}
		if m.RecAttr != nil {
			dm.RecSet, dm.RecClr = m.RecAttr.Attr_set, m.RecAttr.Attr_clr
		}
		setup.Mounts = append(setup.Mounts, dm)
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
	if s.ids.UID != 0 {
		// As with libcontainer's init: root with only what it takes to hand the command its user.
		setup.Caps = []int{unix.CAP_SETUID, unix.CAP_SETGID}
	}
	return setup, nil
}

// supervisorBinary is the supervisor binary: the one the config names, or sbx-init next to sbx, or sbx.
func (s *Sandbox) supervisorBinary(self string) string {
	if s.cfg.InitBinary != "" {
		return s.cfg.InitBinary
	}
	return initBinary(self)
}

// startDirect starts the supervisor in fresh namespaces, in the sandbox's cgroups with their limits set,
// and sends it setup. The network namespace is the contract's (netns, a path) or a new one.
func (s *Sandbox) startDirect(bin string, setup *supervisor.Setup, config *configs.Config, netns string, files []*os.File) error {
	m, err := manager.New(config.Cgroups)
	if err != nil {
		return fmt.Errorf("the sandbox's cgroups: %w", err)
	}
	// The directories are there (cgroupprep.go) unless making them failed; then this makes them.
	if err := m.Apply(-1); err != nil {
		return fmt.Errorf("making the sandbox's cgroups: %w", err)
	}
	c := &directContainer{m: m}
	s.container = c
	// Limits and device rules hold before anything runs in the cgroups.
	if err := m.Set(config.Cgroups.Resources); err != nil {
		return fmt.Errorf("setting the sandbox's limits: %w", err)
	}
	// The supervisor's binary and every bind's source are opened here, with the host root's rights: the
	// supervisor, root only in its user namespace, may not search the directories on their way (a
	// test binary's 0700 build directory, a share below /root), as libcontainer's init may not (its
	// host-side helper opens them the same way).
	exe, err := os.Open(bin)
	if err != nil {
		return fmt.Errorf("opening the supervisor's binary: %w", err)
	}
	defer exe.Close()
	files = append(files, exe)
	exeFD := 2 + len(files) // ExtraFiles start at fd 3
	// The root's copy first, then the binds': the order the sandbox lists its mounts in (bindRoot).
	root, err := openTree(supervisor.Mount{Source: setup.Rootfs, Flags: unix.MS_REC})
	if err != nil {
		return fmt.Errorf("opening the sandbox's root: %w", err)
	}
	defer root.Close()
	files = append(files, root)
	setup.RootFD = 2 + len(files)
	for i, m := range setup.Mounts {
		if m.Type != "bind" {
			continue
		}
		tree, err := openTree(m)
		if err != nil {
			return fmt.Errorf("opening %s for %s: %w", m.Source, m.Destination, err)
		}
		defer tree.Close()
		files = append(files, tree)
		setup.Mounts[i].FD = 2 + len(files)
	}
	uids, gids := s.ids.mappings()
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if netns == "" {
		flags |= unix.CLONE_NEWNET
	}
	cmd := &exec.Cmd{
		// Executed through its descriptor; argv[0] and the supervisor's name stay /dev/.sbx-init.
		Path: "/proc/self/fd/" + strconv.Itoa(exeFD),
		Args: []string{initPath, roleSupervise},
		Env:  []string{"PATH=/usr/bin:/bin", supervisor.SetupEnv + "=" + strconv.Itoa(exeFD) + " " + strconv.Itoa(2+len(files))},
		Dir:  "/",
		// The supervisor's own stdio are /dev/null; the command's come as extra files.
		ExtraFiles: files,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  flags,
			UidMappings: sysIDMap(uids), GidMappings: sysIDMap(gids), GidMappingsEnableSetgroups: true,
			// Root of its user namespace, with no supplementary group (the host's root has some).
			Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
			Setsid:     true,
			// The sandbox dies with sbx (with the thread that started it, which lives as long: start).
			Pdeathsig: unix.SIGKILL,
		},
	}
	if err := startSupervisor(cmd, netns); err != nil {
		return fmt.Errorf("starting the sandbox's supervisor: %w", err)
	}
	init := &directInit{cmd: cmd}
	s.init, s.initPid = init, cmd.Process.Pid
	c.init = init
	if c.pidfd, err = unix.PidfdOpen(s.initPid, 0); err != nil {
		return fmt.Errorf("opening the supervisor's pidfd: %w", err)
	}
	if err := s.ctl.SendSetup(*setup); err != nil {
		return fmt.Errorf("sending the supervisor its setup: %w", err)
	}
	// While the supervisor builds the sandbox: it starts nothing before the preparation, which comes
	// after this.
	if err := m.Apply(s.initPid); err != nil {
		return fmt.Errorf("moving the supervisor into the sandbox's cgroups: %w", err)
	}
	return nil
}

// openTree is a detached copy of bind m's source (recursive with MS_REC), as the host's root sees it.
func openTree(m supervisor.Mount) (*os.File, error) {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	if m.Flags&unix.MS_REC != 0 {
		flags |= unix.AT_RECURSIVE
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, m.Source, flags)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), m.Source), nil
}

// starters are the threads that start supervisors, each locked to its goroutine for good. A
// supervisor's parent-death signal fires when the thread that forked it ends, not its process: the
// runtime ends a thread whose goroutine exits while locked to it (sbx's network code does), and the
// thread that happened to run an ordinary goroutine's fork could be that thread later.
var starters struct {
	once sync.Once
	req  chan startRequest
}

// numStarters bounds how many supervisors start at once.
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
	starters.once.Do(func() {
		starters.req = make(chan startRequest)
		for range numStarters {
			go func() {
				runtime.LockOSThread() // never unlocked: see starters
				for r := range starters.req {
					r.done <- startIn(r.cmd, r.netns)
				}
			}()
		}
	})
	done := make(chan error, 1)
	starters.req <- startRequest{cmd, netns, done}
	return <-done
}

// startIn starts cmd in network namespace netns ("" for the thread's own): the child is forked from
// this thread, joined to the namespace, which then comes back to sbx's own. The caller holds the thread.
func startIn(cmd *exec.Cmd, netns string) error {
	if netns == "" {
		return cmd.Start()
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
	err = cmd.Start()
	// Back, so as not to hold the contract's namespace. Should that fail, the thread's own namespace
	// matters to no later start: each joins its contract's, or makes a new one.
	unix.Setns(own, unix.CLONE_NEWNET)
	return err
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

// directContainer is a directly started sandbox's container: its supervisor and its cgroups.
type directContainer struct {
	m     cgroups.Manager
	init  *directInit
	pidfd int
}

// Signal signals the supervisor (SIGKILL ends the whole pid namespace); one that is gone is no error.
func (c *directContainer) Signal(sig os.Signal) error {
	if c.init == nil || c.pidfd <= 0 {
		return nil
	}
	err := unix.PidfdSendSignal(c.pidfd, sig.(syscall.Signal), nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err == nil && sig == unix.SIGKILL {
		// A frozen (v1) cgroup holds the kill until it thaws, as libcontainer's Signal knows too.
		if st, ferr := c.m.GetFreezerState(); ferr == nil && st != cgroups.Thawed {
			return c.m.Freeze(cgroups.Thawed)
		}
	}
	return err
}

func (c *directContainer) Processes() ([]int, error) { return c.m.GetAllPids() }

func (c *directContainer) Pause() error { return c.m.Freeze(cgroups.Frozen) }

// Destroy removes the cgroups once the supervisor is gone (Destroy of the sandbox kills and waits first).
func (c *directContainer) Destroy() error {
	if c.pidfd > 0 {
		unix.Close(c.pidfd)
		c.pidfd = -1
	}
	return c.m.Destroy()
}
