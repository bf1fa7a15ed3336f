package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sbx-dev/sbx/internal/cgprime"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runc/libcontainer/utils"
	"github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/idmapns"
	"github.com/sbx-dev/sbx/internal/selfexe"
	"github.com/sbx-dev/sbx/internal/supervisor"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox/cgroup"
	"github.com/sbx-dev/sbx/sandbox/netcontract"
	"github.com/sbx-dev/sbx/sandbox/rootfs"
	"github.com/sbx-dev/sbx/sandbox/seccomp"
	"github.com/sbx-dev/sbx/sandbox/state"
)

// DefaultStateRoot is where sbx keeps the state of its runs as root (package state).
const DefaultStateRoot = state.DefaultRoot

// ErrSetup is matched by every error of sandbox creation: the sandbox could not be built.
var ErrSetup = errors.New("sandbox setup failed")

// Config is one sandbox to create, with the one command it runs.
type Config struct {
	Plan      *policy.Plan
	Command   Command
	StateRoot string // "" = DefaultStateRoot
	// InitBinary is the supervisor binary; "" = sbx-init next to sbx's binary, else sbx's binary itself.
	InitBinary string
	// Deferred builds the sandbox ahead of its command (a warm pool): Command holds only the working
	// directory, and Use gives the rest before Start (deferred.go).
	Deferred bool
	// CallerHome is the home of the caller the run is for, where decoys go beside the sandbox's HOME
	// and root's ("" = this process's caller's, CallerHome): a service's run is its client's.
	CallerHome string
	late       *lateStdio
}

// Command is the process the sandbox runs.
type Command struct {
	Args     []string
	Cwd      string // as seen in the sandbox (the caller's)
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	Terminal bool // give the command a terminal of its own; Sandbox.Console is its master side
	// Closed are the command's stdio (0, 1, 2) to close, as the caller's were (cmd <&-): writes to
	// them fail with EBADF, and the command's first open takes the number, as on the host. Not with a
	// terminal nor in a warm sandbox.
	Closed [3]bool
	// CwdNoLinks: the caller checked that Cwd is reached without a link (an MCP caller's cwd, inside a
	// workspace, not below a hidden path): Create refuses it if it resolves elsewhere now (ErrCwdMoved),
	// so that a link swapped in after the check cannot lead the sandbox somewhere the check refused.
	CwdNoLinks bool
	// Top is the highest directory the report may name above Cwd (the hidden-repository note looks no
	// higher): an MCP caller's workspace, whose parents are none of the caller's business; "" for no
	// bound.
	Top string
}

// ErrCwdMoved is returned by Create when a working directory checked to hold no link resolves elsewhere.
var ErrCwdMoved = errors.New("the working directory resolves elsewhere than the path that was checked (a link on the way)")

// Sandbox is a running sandbox: namespaces, cgroup, overlay root, network contract and the supervisor
// init, which holds the command until Start.
type Sandbox struct {
	ID     string
	Notes  []string // what the sandbox could only partly do, for the report
	cfg    Config
	run    *state.Run
	rootfs *rootfs.FS
	// shareLinks are the paths of shares that led through a link, moved to where it leads
	// (resolveShares); hiding keeps the way down to them.
	shareLinks []string
	caches     []rootfs.Cache // the toolchain caches shown (caches.go)
	passwd     string         // sbx's /etc/passwd for the sandbox (passwdFile), mounted there; "" for the host's
	net        *netcontract.Net
	container  runtimeContainer // libcontainer's, or a direct start's (direct.go)
	prepared   chan error       // the supervisor's preparation was sent (nil) or could not be
	init       pidOne
	initPid    int
	ctl        *supervisor.Conn // sbx's end of the supervisor's control socket
	console    *os.File
	pidfd      int                 // the command's, once started; 0 = none
	tasks      [2]string           // cgroup dir and file name of the task list, once found (freeze.go)
	seccomp    *supervisor.Seccomp // the command's filter, compiled (package seccomp); nil for none
	notify     *seccomp.Listener   // seccomp notifications (package seccomp); nil when nothing is recorded
	notifyOff  string              // why the plan's recording could not be set up, for the report
	ids        IDMap
	cgroups    *cgroup.Prep       // the run's cgroups, made ahead; libcontainer's once it has the container
	deleg      *cgroup.Delegation // without root: the cgroup systemd delegates, the parent of the run's; nil: none
	relays     relays
	diagFD     int  // the supervisor's sock_diag socket, in its process; -1 = none
	netSent    bool // the supervisor got the network record's channel (mode none, a direct start)
	answered   bool // the supervisor answered go: it holds no stdio of the command from then on
}

// Create builds a sandbox and starts its supervisor init, which waits for Start before it runs the
// command. On error, everything it built is gone again.
func Create(cfg Config) (sb *Sandbox, err error) {
	if cfg.StateRoot == "" {
		cfg.StateRoot = state.DefaultRootFor()
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.deferStdio()
	childrenNoFile()
	// The disk layer's device is attached beside the steps up to the overlays, which mount it.
	var prep *rootfs.LayerPrep
	if !Rootless() {
		prep = rootfs.StartLayer(rootfs.LayerSize(cfg.Plan.Limits.DiskBytes))
	}
	defer func() {
		if sb == nil {
			prep.Release()
			prep.Unclaim()
		}
	}()
	// Each run first removes what dead runs left behind; with no dead run this is a directory read.
	tr := newTracer()
	defer tr.done()
	state.GC(cfg.StateRoot)
	primer := cgroup.StartPrimer(cfg.StateRoot) // until the container runs (package cgroup)
	defer primer.Stop()
	tr.mark("gc")
	id, err := newID()
	if err != nil {
		return nil, err
	}
	ids := newIDMap(cfg.Plan.UID, cfg.Plan.GID)
	var deleg *cgroup.Delegation
	if Rootless() {
		d, noCgroup := rootlessCgroupFor(cfg)
		if err := cfg.checkRootless(d, noCgroup); err != nil {
			return nil, err
		}
		ids, deleg = rootlessIDMap(), d
	}
	run, err := state.Claim(cfg.StateRoot, id, ids.RootUID, ids.RootGID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	sb = &Sandbox{ID: id, cfg: cfg, run: run, rootfs: rootfs.New(run.Dir()), ids: ids, diagFD: -1, deleg: deleg}
	sb.rootfs.UseLayer(prep)
	sb.cgroups = cgroup.Start(id, deleg, run.Dir()) // beside the overlays (package cgroup)
	defer func() {
		if err != nil {
			sb.Destroy()
			err = fmt.Errorf("%w: %w", ErrSetup, err)
		}
	}()
	err = sb.buildFiles()
	idmapns.Drop() // the user namespace made ahead for an idmapping, if this sandbox needed none
	if err != nil {
		return sb, err
	}
	if !Rootless() {
		sb.rootfs.StartDecoys() // beside the network and the container's start; waited for below
	}
	tr.mark("files")
	if cfg.Plan.Network.Mode == policy.NetContract {
		// The contract loads while the container starts; Start waits for it before the command runs.
		setup := netcontract.SetupAsync
		if Rootless() {
			// Without root the container makes the namespace; the contract attaches once it exists.
			setup = netcontract.SetupRootless
		}
		sb.net, err = setup(netcontract.Config{ID: "sbx" + id, Net: cfg.Plan.Network, StateDir: run.Dir()})
		if err != nil {
			return sb, fmt.Errorf("setting up the network contract: %w", err)
		}
	} else if sb.net, err = netcontract.SetupNone(netcontract.Config{ID: "sbx" + id, Net: cfg.Plan.Network, StateDir: run.Dir()}); err != nil {
		// Mode none still records what the command tries: built once the init exists (AttachNone).
		return sb, fmt.Errorf("setting up the network record: %w", err)
	}
	tr.mark("network")
	if err = sb.startContainer(tr); err == nil && sb.net != nil {
		sb.net.Attach(sb.initPid) // a rootless contract
		sb.net.AttachNone(sb.initPid, sb.netSent)
	}
	if derr := sb.rootfs.AwaitDecoys(); err == nil && derr != nil {
		err = fmt.Errorf("planting decoys: %w", derr)
	}
	tr.mark("decoys")
	return sb, err
}

// check refuses a config that cannot be built, before anything is.
func (cfg Config) check() error {
	if cfg.Plan == nil || (len(cfg.Command.Args) == 0) != cfg.Deferred {
		return fmt.Errorf("%w: no plan or no command", ErrSetup)
	}
	for _, sh := range cfg.Plan.Filesystem.Shares {
		if _, err := os.Stat(sh.Host); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrShare, sh.Host, err)
		}
	}
	if err := state.CheckShares(cfg.StateRoot, cfg.Plan.Filesystem.Shares); err != nil {
		return err
	}
	return checkNoFile(cfg.Plan.Limits.NoFile)
}

// checkNoFile refuses, before anything is built, an open-files limit the sandbox's init could not set:
// above the kernel's fs.nr_open, or above sbx's own hard limit, which the init, root only in its own
// user namespace, may not raise (libcontainer's init would fail on it with "error setting rlimit type 7:
// operation not permitted").
//
// Nor one below minSoftNoFile: the supervisor holds the command's limits from the build on and could
// not prepare it (landlock_create_ruleset: too many open files, with a hint to run without Landlock).
func checkNoFile(n uint64) error {
	if n == 0 {
		return nil
	}
	if n < minSoftNoFile {
		return fmt.Errorf("%w: limits.nofile %d is below %d, what sbx's supervisor, which holds the command's limits, needs to start it", ErrLimitLow, n, minSoftNoFile)
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if max, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > max {
			return fmt.Errorf("%w: limits.nofile %d is above the kernel's fs.nr_open, %d", ErrLimit, n, max)
		}
	}
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && n > rl.Max {
		return fmt.Errorf("%w: limits.nofile %d is above sbx's own hard limit of open files, %d, which the sandbox (root only in its user namespace) cannot raise", ErrLimit, n, rl.Max)
	}
	return nil
}

func (s *Sandbox) startContainer(tr *tracer) error {
	if err := s.startNotify(); err != nil {
		return err
	}
	spec, err := s.spec()
	if err != nil {
		return err
	}
	if spec.Linux.Seccomp != nil {
		// The supervisor loads the filter, compiled here once per profile (package seccomp), not
		// libcontainer's init, which would compile it again on every run.
		if s.seccomp, err = seccomp.Program(s.cfg.StateRoot, spec.Linux.Seccomp); err != nil {
			return specError(err)
		}
		spec.Linux.Seccomp = nil
	}
	config, err := libcontainerConfig(&specconv.CreateOpts{CgroupName: s.ID, Spec: spec,
		RootlessEUID: Rootless(), RootlessCgroups: Rootless()})
	if err != nil {
		return specError(err)
	}
	tr.mark("spec")
	s.cgroups.Wait()
	ctl, ctlChild, err := utils.NewSockPair("ctl")
	if err != nil {
		return err
	}
	defer ctlChild.Close()
	s.ctl = supervisor.NewConn(ctl)
	var consoleParent, consoleChild *os.File
	if s.cfg.Command.Terminal {
		if consoleParent, consoleChild, err = utils.NewSockPair("console"); err != nil {
			return err
		}
		defer consoleParent.Close()
		defer consoleChild.Close()
	}
	// The preparation is sent while the init starts: it waits in the socket, and the supervisor reads
	// it as soon as it runs. (A preparation larger than the socket's buffer completes once the
	// supervisor reads; Destroy's close of the socket ends the write if it never does.)
	// Start waits for it (awaitReady). It is made here, in Create: the send may come after Use has given
	// a pooled sandbox its run's plan.
	s.prepared = make(chan error, 1)
	prep := s.supervisorPrepare()
	sendPrepare := func() { s.prepared <- s.ctl.SendPrepare(prep) }
	if err := s.startInit(spec, config, ctlChild, consoleChild, sendPrepare, tr); err != nil {
		return err
	}
	if consoleParent != nil {
		if s.console, err = recvFile(consoleParent); err != nil {
			return fmt.Errorf("receiving the command's terminal: %w", err)
		}
	}
	return nil
}

// spec is the sandbox's OCI spec: the plan, the overlays, the network and sbx's binaries.
func (s *Sandbox) spec() (*specs.Spec, error) {
	self, err := selfexe.Path()
	if err != nil {
		return nil, fmt.Errorf("finding the sbx binary: %w", err)
	}
	cmd := s.cfg.Command
	in := SpecInput{Plan: s.cfg.Plan, ID: s.ID, Rootfs: s.rootfs.RootDir(), Init: s.cfg.InitBinary,
		Args: []string{initPath, roleSupervise}, Cwd: cmd.Cwd, IDs: s.ids}
	if in.Init == "" {
		in.Init = initBinary(self)
	}
	if o := s.rootfs.CwdOverlay(); o != nil {
		in.CwdOverlay = o.Merged()
	}
	if !Rootless() {
		in.Caches = s.rootfs.CacheMounts()
	}
	if len(cmd.Args) > 0 && cmd.Args[0] == selfPath {
		in.Binary = self // the command is sbx itself in another role (SelfCommand)
	}
	if s.net != nil {
		in.NetNS, in.ResolvConf = s.net.NetNSPath(), s.net.ResolvConf()
	}
	if in.NetNS != "" && !Rootless() {
		if err := mountNetSysfs(in.NetNS, in.Rootfs); err != nil {
			return nil, err
		}
		in.OwnSys = true
	}
	in.Notify = s.notify != nil
	if in.Hosts, err = hostsFile(s.run.Dir()); err != nil {
		return nil, err
	}
	if in.Passwd, err = passwdFile(s.run.Dir(), s.ids.UID, envValue(s.cfg.Plan.Env, "HOME")); err != nil {
		return nil, err
	}
	s.passwd = in.Passwd
	if !Rootless() {
		for _, f := range in.ownFiles() {
			if f.src != "" && !shareCovers(s.cfg.Plan.Filesystem.Shares, f.dst) {
				if err := plainFile(s.rootfs.RootDir(), f.dst); err != nil {
					return nil, err
				}
			}
		}
	}
	spec := Spec(in)
	// The command creates files with the caller's umask, as on the host (runc's default is 022): a
	// caller's 077 keeps what lands in a --rw share private.
	spec.Process.User.Umask = callerUmask()
	if Rootless() {
		rootlessSpec(spec, s.rootfs.RootlessMounts(), s.deleg, s.ID)
		spec.Process.Rlimits = append(spec.Process.Rlimits, s.rootlessRlimits()...)
	}
	return spec, nil
}

// callerUmask is sbx's own umask, read from /proc/self/status (umask(2) can only read it by changing
// it, for every thread at once); nil, runc's default, when the kernel does not say.
func callerUmask() *uint32 {
	v, ok := procField("/proc/self/status", "Umask")
	if !ok {
		return nil
	}
	m, err := strconv.ParseUint(v, 8, 32)
	if err != nil {
		return nil
	}
	u := uint32(m)
	return &u
}

// procField is the value of the "key:" line of a /proc file of such lines (status, fdinfo), trimmed.
func procField(path, key string) (string, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// startInit starts the supervisor, directly (direct.go) or as libcontainer's init process, with the
// control socket ctl, the console socket (nil without a terminal) and the command's stdio; sendPrepare
// runs (on a goroutine of its own) once the supervisor may read the preparation.
func (s *Sandbox) startInit(spec *specs.Spec, config *configs.Config, ctl, console *os.File, sendPrepare func(), tr *tracer) error {
	self, err := selfexe.Path()
	if err != nil {
		return fmt.Errorf("finding the sbx binary: %w", err)
	}
	setup, direct := s.directSetup(spec, config)
	if direct == nil {
		files := []*os.File{ctl}
		if console != nil {
			files = append(files, console)
		} else {
			stdio, err := s.stdio()
			if err != nil {
				return err
			}
			files = append(files, stdio...)
		}
		if ch := s.net.SupervisorChannel(); ch != nil {
			files = append(files, ch) // the supervisor sends the network record's sockets on it
			setup.NetRecord, s.netSent = 2+len(files), true
		}
		moved, err := s.startDirect(s.supervisorBinary(self), setup, config, netNSPath(spec), files)
		s.relays.started()
		if err != nil {
			return err
		}
		// The preparation once the supervisor is in its cgroups (the move waits for the cgroup lock,
		// while the supervisor builds the sandbox): it starts nothing before that.
		go func() {
			if moved != nil {
				if err := <-moved; err != nil {
					s.prepared <- err
					return
				}
			}
			sendPrepare()
		}()
		tr.mark("direct")
		return nil
	}
	if s.deleg != nil {
		// Predicted otherwise in Create (rootlessCgroupFor): libcontainer's cgroup code, given the run's
		// cgroup, would also try to enable controllers in every cgroup above it.
		return fmt.Errorf("%w: the supervisor cannot build this sandbox (%v), and libcontainer's init is not used with the cgroup systemd delegates", ErrRootless, direct)
	}
	sources, err := s.shareSources()
	if err != nil {
		return err
	}
	c, err := libcontainer.Create(filepath.Join(s.cfg.StateRoot, "lc"), s.ID, config)
	if err != nil {
		return fmt.Errorf("creating the container: %w", err)
	}
	s.container = c
	tr.mark("lc.create")
	p, err := s.initProcess(spec, ctl)
	if err != nil {
		return err
	}
	p.ConsoleSocket = console
	go sendPrepare()
	err = c.Run(p)
	s.init = p
	s.relays.started()
	if err != nil {
		return usernsRefusal(fmt.Errorf("starting the sandbox init: %w", err))
	}
	tr.mark("lc.run")
	if s.initPid, err = p.Pid(); err != nil {
		return err
	}
	// libcontainer's init bound the shares by their paths: before the command runs, the sandbox must
	// have what sbx identified (sharecheck.go).
	return s.checkShares(s.initPid, sources)
}

// initProcess is the supervisor as libcontainer's init process, with the command's stdio and the
// control socket.
func (s *Sandbox) initProcess(spec *specs.Spec, ctl *os.File) (*libcontainer.Process, error) {
	cmd := s.cfg.Command
	p := &libcontainer.Process{
		// The command's argv and env travel in the supervisor's configuration, byte for byte.
		Args: spec.Process.Args, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: cmd.Cwd, Init: true,
		UID: s.ids.UID, GID: s.ids.GID,
		// specconv leaves the spec's rlimits to its caller (runc's main package): set them here.
		Rlimits:    processRlimits(spec.Process.Rlimits),
		ExtraFiles: []*os.File{ctl},
	}
	if TraceLibcontainer() {
		p.LogLevel = strconv.Itoa(int(logrus.DebugLevel))
	}
	if cmd.Terminal {
		p.Stdin, p.Stdout, p.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	} else {
		stdio, err := s.stdio()
		if err != nil {
			return nil, err
		}
		p.ExtraFiles = append(p.ExtraFiles, stdio...)
	}
	if s.ids.UID != 0 || s.ids.SupUID != 0 {
		// The supervisor stays root with only the capabilities to hand the command its user: the command
		// then cannot signal it, read its memory or its /proc files. The command starts with none. With
		// ids of its own to take (Prepare.Creds), it empties the bounding set of the thread it starts the
		// command from (CAP_SETPCAP), so that even a command running as root gains nothing at its exec,
		// and then takes them (supervisor.fallbackThread).
		p.UID, p.GID = 0, 0
		caps := []string{"CAP_SETUID", "CAP_SETGID"}
		if s.ids.SupUID != 0 {
			caps = append(caps, "CAP_SETPCAP")
		}
		p.Capabilities = &configs.Capabilities{Bounding: caps, Effective: caps, Permitted: caps}
	}
	return p, nil
}

// rlimitTypes are the rlimits sbx's specs set.
var rlimitTypes = map[string]int{"RLIMIT_NOFILE": unix.RLIMIT_NOFILE, "RLIMIT_AS": unix.RLIMIT_AS,
	"RLIMIT_FSIZE": unix.RLIMIT_FSIZE, "RLIMIT_NPROC": unix.RLIMIT_NPROC, "RLIMIT_MEMLOCK": unix.RLIMIT_MEMLOCK}

// processRlimits converts the spec's rlimits for libcontainer's process.
func processRlimits(rs []specs.POSIXRlimit) []configs.Rlimit {
	out := make([]configs.Rlimit, 0, len(rs))
	for _, r := range rs {
		if t, ok := rlimitTypes[r.Type]; ok {
			out = append(out, configs.Rlimit{Type: t, Hard: r.Hard, Soft: r.Soft})
		}
	}
	return out
}

// supervisorConfig is what the supervisor needs to start the command, sent over the control socket (no
// size limit, unlike an environment variable or an argument).
func (s *Sandbox) supervisorConfig() supervisor.Config {
	env := sessionEnv(s.cfg.Plan.Env, s.cfg.Command.Cwd, s.ids.UID)
	if s.rootfs != nil && s.rootfs.CwdOverlay() != nil {
		env = crossMountEnv(env)
	}
	return supervisor.Config{Terminal: s.cfg.Command.Terminal, StdioFDs: !s.cfg.Command.Terminal,
		NoInput: s.cfg.late.noInput(), Closed: s.cfg.Command.Closed,
		Argv: toBytes(s.cfg.Command.Args), Env: toBytes(env), UID: s.ids.UID, GID: s.ids.GID}
}

// sessionEnv adds to env what a shell and a login give a command on the host, and the scrub of the
// caller's environment took away: PWD, the working directory (make's $(PWD), as in the M=$(PWD) of
// out-of-tree builds, was empty), and USER and LOGNAME, the name the sandbox's /etc/passwd (the host's)
// gives the command's uid, as sudo -u sets them (Bazel refuses to start without USER). A value the
// profile or the caller gives is kept; a uid without a name gets none.
func sessionEnv(env []string, cwd string, uid int) []string {
	has := func(name string) bool {
		return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
	}
	out := slices.Clip(env)
	if cwd != "" && !has("PWD") {
		out = append(out, "PWD="+cwd)
	}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		for _, name := range []string{"USER", "LOGNAME"} {
			if !has(name) {
				out = append(out, name+"="+u.Username)
			}
		}
	}
	return out
}

// envValue is the value of name in env (KEY=VALUE, the last one wins as in a process's getenv of a
// list built by appending); "" when absent.
func envValue(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}

// gitAcrossMounts lets git look for a repository above the working directory across a mount point.
const gitAcrossMounts = "GIT_DISCOVERY_ACROSS_FILESYSTEM"

// crossMountEnv is env for a working directory that is a mount of its own (its overlay): git stops
// looking for the repository at a mount point, so in a repository's subdirectory "git status" said
// "not a git repository" where on the host it finds the repository above. A value the profile or the
// caller gives is kept.
func crossMountEnv(env []string) []string {
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, gitAcrossMounts+"=") }) {
		return env
	}
	return append(slices.Clip(env), gitAcrossMounts+"=1")
}

// libcontainerMu guards what libcontainer's packages keep in globals and change unguarded, for
// sandboxes built at once (a pool's refill beside a run, the MCP server's concurrent runs): specconv
// gives every config the same default device nodes (AllowedDevices) and sets their owner to the
// config's root; the cgroup v1 blkio controller, shared by every manager, detects its file names on
// its first Set.
var libcontainerMu sync.Mutex

// libcontainerConfig is specconv.CreateLibcontainerConfig with device nodes of the config's own.
func libcontainerConfig(opts *specconv.CreateOpts) (*configs.Config, error) {
	libcontainerMu.Lock()
	defer libcontainerMu.Unlock()
	config, err := specconv.CreateLibcontainerConfig(opts)
	if err != nil {
		return nil, err
	}
	for i, d := range config.Devices {
		own := *d
		config.Devices[i] = &own
	}
	return config, nil
}

// setLimits writes r into m's cgroups, one sandbox at a time (libcontainerMu).
func setLimits(m cgroups.Manager, r *cgroups.Resources) error {
	libcontainerMu.Lock()
	defer libcontainerMu.Unlock()
	return m.Set(r)
}

// supervisorPrepare is what the supervisor prepares as soon as it runs: the command's Landlock ruleset.
// It depends only on what a deferred sandbox is built for (the plan but for env and timeout, and the
// working directory).
func (s *Sandbox) supervisorPrepare() supervisor.Prepare {
	fs := s.cfg.Plan.Filesystem
	p := supervisor.Prepare{Read: fs.Read, Write: s.writePaths(), Degrade: fs.LandlockDegrade, Seccomp: s.seccomp,
		TimerSlack: cgprime.CallerTimerSlack()}
	if s.ids.SupUID != 0 {
		p.Creds = &supervisor.Creds{UID: s.ids.SupUID, GID: s.ids.SupGID}
	}
	return p
}

// writePaths are the Landlock write paths of the command: the profile's and the working directory.
func (s *Sandbox) writePaths() []string {
	fs := s.cfg.Plan.Filesystem
	out := append(slices.Clone(fs.Write), s.cachePaths()...)
	if fs.WriteCwd {
		return append(out, s.cfg.Command.Cwd)
	}
	return out
}

// toBytes keeps strings as bytes: JSON would replace invalid UTF-8 in strings, and argv and env are
// bytes, not text.
func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// InitPid is the host pid of the sandbox's supervisor init (pid 1 inside).
func (s *Sandbox) InitPid() int { return s.initPid }

// NetNSPath is the sandbox's network namespace as a path on the host.
func (s *Sandbox) NetNSPath() string { return "/proc/" + strconv.Itoa(s.initPid) + "/ns/net" }

// Network is the sandbox's network contract, nil in mode none.
func (s *Sandbox) Network() *netcontract.Net { return s.net }

// Console is the master side of the command's terminal, nil unless Command.Terminal was set.
func (s *Sandbox) Console() *os.File { return s.console }

// ApplyJournal returns the journal function of this run's apply, its working directory being cwd.
func (s *Sandbox) ApplyJournal(cwd string) func(rel string) error {
	return state.ApplyJournal(s.run.Dir(), cwd)
}

// Layer is one overlay of the sandbox, for observing what the command wrote: files written below At in
// the sandbox are in Upper; Lower is what was there before (the host's file system without the mounts on
// it).
type Layer struct {
	At, Upper, Lower string
	// Merged is the overlay's merged tree, as sbx sees it: what the sandbox sees at At. "" without root
	// (the overlay is mounted in the sandbox's own namespace).
	Merged string
}

// DiskBytes is the size of the writable layer: what the command can have written at most.
func (s *Sandbox) DiskBytes() int64 {
	if b := s.cfg.Plan.Limits.DiskBytes; b > 0 {
		return b
	}
	return rootfs.DefaultDiskBytes
}

// Layers lists the sandbox's overlays: the root, and the working directory's when it lies on another
// file system than the root.
func (s *Sandbox) Layers() []Layer {
	var ls []Layer
	for _, o := range s.rootfs.Overlays() {
		if Rootless() {
			// Without root, sbx reads only what its uid may: open what the command closed to its owner.
			state.OpenUnreadable(o.Upper)
		}
		l := Layer{At: o.At, Upper: o.Upper, Lower: o.Lower}
		if !Rootless() {
			l.Merged = o.Merged()
		}
		ls = append(ls, l)
	}
	return ls
}

// InitName is the file name of the small static supervisor binary that sbx uses when it lies next to
// sbx's own binary (make build puts it there). It starts in a fraction of the time of the whole sbx.
const InitName = "sbx-init"

// initBinary is the supervisor binary to run: sbx-init next to self when it is there, else self.
func initBinary(self string) string {
	if p, ok := selfexe.Beside(self, InitName); ok {
		return p
	}
	return self
}

// Pids lists the host pids of every process in the sandbox, the init included.
func (s *Sandbox) Pids() ([]int, error) {
	if s.cgroups == nil {
		return nsPids(s.initPid) // no cgroup (rootless): the processes of its pid namespace
	}
	return s.container.Processes()
}

// Destroy kills everything in the sandbox and removes the container, its cgroups, the overlay and the
// run's state. It is safe on a partly built sandbox and reports every step that failed.
func (s *Sandbox) Destroy() error {
	tr := newTracer()
	defer tr.done()
	var errs []error
	s.cfg.late.bind(nil, nil, nil) // an unused sandbox's stdio ends: nothing waits on it
	if s.net != nil {
		s.net.StartClose() // deleting the veth waits on the kernel: let it overlap the steps below
	}
	// The overlays come down while the sandbox is killed and libcontainer removes the cgroups (and waits
	// for the last processes to exit): neither depends on the other, and the unmounts are detached, so
	// the host's mount table lets go of them while the sandbox's own mount namespace still holds its
	// copies until its last process is gone.
	unmounted := make(chan error, 1)
	go func() {
		s.rootfs.AwaitDecoys() // nothing writes through the overlay once it is unmounted
		unmounted <- s.rootfs.Unmount()
	}()
	if s.container != nil {
		if s.init != nil && s.initPid > 0 {
			// Killing pid 1 of a pid namespace kills every process in it.
			if err := s.container.Signal(unix.SIGKILL); err != nil && !errors.Is(err, libcontainer.ErrNotRunning) {
				errs = append(errs, fmt.Errorf("killing the sandbox: %w", err))
			}
			s.init.Wait()
		}
		tr.mark("kill")
	}
	keepRun := false
	if s.container != nil {
		if err := s.container.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("destroying the container: %w", err))
			keepRun = true // the run dir is gc's record of what is left (its cgroups)
		}
		tr.mark("lc.destroy")
	} else {
		s.cgroups.Remove() // made ahead for a container that never was
	}
	if s.notify != nil {
		s.notify.Stop() // every process of the sandbox is dead: none waits for an answer
	}
	// Every writer inside is dead: the relays pass on what is left and end, before the report is shown.
	s.relays.close()
	if s.ctl != nil {
		s.ctl.Close()
	}
	if s.console != nil {
		s.console.Close()
	}
	if s.pidfd > 0 {
		unix.Close(s.pidfd)
	}
	tr.mark("stdio")
	if s.net != nil {
		// After the container: a process still inside would keep the namespace and its veth alive.
		if err := s.net.Close(); err != nil {
			errs = append(errs, fmt.Errorf("removing the network contract: %w", err))
		}
	}
	tr.mark("net")
	if err := <-unmounted; err != nil {
		errs = append(errs, err)
	}
	tr.mark("unmount")
	if keepRun {
		// Left for gc (the next run's, or sbx gc), which removes a dead run's cgroups by its dir.
		s.run.Abandon()
	} else if err := s.run.Release(); err != nil {
		errs = append(errs, err)
	}
	tr.mark("release")
	return errors.Join(errs...)
}

// newID returns a short random id, usable in link and cgroup names.
func newID() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Settle waits until the sandbox is quiet, up to max: right after the command exits, a background child
// may still be starting (a shell not yet exec'd, an interpreter still importing before it listens). Quiet
// means the same processes in two polls in a row, none of them running or in disk wait. A sandbox with
// only its init left is quiet at once; a process that never sleeps costs the whole max.
func (s *Sandbox) Settle(max time.Duration) {
	deadline := time.Now().Add(max)
	prev := ""
	for {
		pids, err := s.Pids()
		if err != nil || len(pids) <= 1 {
			return
		}
		cur, busy := processStates(pids)
		if !busy && cur == prev {
			return
		}
		if time.Now().After(deadline) {
			return
		}
		prev = cur
		time.Sleep(10 * time.Millisecond)
	}
}

// processStates fingerprints the processes (pid and executable) and tells whether any is running (R) or
// in uninterruptible sleep (D).
func processStates(pids []int) (string, bool) {
	var b strings.Builder
	busy := false
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		st := statState(stat)
		if st == 0 {
			continue
		}
		if st == 'R' || st == 'D' {
			busy = true
		}
		exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		fmt.Fprintf(&b, "%d:%s;", pid, exe)
	}
	return b.String(), busy
}

// Kill kills every process in the sandbox: SIGKILL to its pid 1 takes the whole pid namespace along.
// The sandbox stays until Destroy; the command's Wait then returns an error (its init is gone).
func (s *Sandbox) Kill() {
	if s.container != nil {
		s.container.Signal(unix.SIGKILL)
	}
}

// recvFile receives one file descriptor sent over a unix socket (libcontainer sends the terminal's master
// side this way).
func recvFile(sock *os.File) (*os.File, error) {
	oob := make([]byte, unix.CmsgSpace(4))
	name := make([]byte, 4096)
	n, oobn, _, _, err := unix.Recvmsg(int(sock.Fd()), name, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("expected one control message, got %d (%v)", len(msgs), err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("expected one file descriptor, got %d (%v)", len(fds), err)
	}
	return os.NewFile(uintptr(fds[0]), string(name[:n])), nil
}
