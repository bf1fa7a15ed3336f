package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runc/libcontainer/utils"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
)

// DefaultStateRoot is where sbx keeps the state of its runs. It lives on /run so that a reboot clears it.
const DefaultStateRoot = "/run/sbx"

// ErrSetup is matched by every error of sandbox creation: the sandbox could not be built.
var ErrSetup = errors.New("sandbox setup failed")

// Config is one sandbox to create.
type Config struct {
	Plan       *policy.Plan
	Cwd        string // working directory of the command, as seen in the sandbox (the caller's)
	NetNS      string // network namespace to join; "" = a new one with loopback only
	ResolvConf string // host file bind-mounted at /etc/resolv.conf; "" = the host's, through the overlay
	StateRoot  string // "" = DefaultStateRoot
}

// Sandbox is a running sandbox: namespaces, cgroup, overlay root and the pause init.
type Sandbox struct {
	ID        string
	cfg       Config
	run       *runDir
	rootfs    *rootfs
	container *libcontainer.Container
	init      *libcontainer.Process
	initPid   int
}

// Create builds a sandbox and starts its pause init. On error, everything it built is gone again.
func Create(cfg Config) (sb *Sandbox, err error) {
	if cfg.StateRoot == "" {
		cfg.StateRoot = DefaultStateRoot
	}
	if cfg.Plan == nil {
		return nil, fmt.Errorf("%w: no plan", ErrSetup)
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	run, err := claimRunDir(cfg.StateRoot, id)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	sb = &Sandbox{ID: id, cfg: cfg, run: run, rootfs: newRootfs(run.dir)}
	defer func() {
		if err != nil {
			sb.Destroy()
			err = fmt.Errorf("%w: %w", ErrSetup, err)
		}
	}()
	if err := sb.rootfs.mount(cfg.Plan.Limits.DiskBytes, cfg.Plan.Filesystem.Hidden, cfg.Cwd); err != nil {
		return sb, err
	}
	return sb, sb.startContainer()
}

func (s *Sandbox) startContainer() error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the sbx binary: %w", err)
	}
	spec := Spec(SpecInput{
		Plan: s.cfg.Plan, ID: s.ID, Rootfs: s.rootfs.merged, Binary: self,
		NetNS: s.cfg.NetNS, ResolvConf: s.cfg.ResolvConf,
		Args: []string{shimPath, rolePause}, Cwd: "/",
	})
	config, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{CgroupName: s.ID, Spec: spec})
	if err != nil {
		return specError(err)
	}
	s.container, err = libcontainer.Create(filepath.Join(s.cfg.StateRoot, "lc"), s.ID, config)
	if err != nil {
		return fmt.Errorf("creating the container: %w", err)
	}
	s.init = &libcontainer.Process{
		Args: spec.Process.Args, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/", Init: true,
		UID: s.cfg.Plan.UID, GID: s.cfg.Plan.GID,
	}
	if err := s.container.Run(s.init); err != nil {
		return fmt.Errorf("starting the sandbox init: %w", err)
	}
	s.initPid, err = s.init.Pid()
	return err
}

// InitPid is the host pid of the sandbox's pause init (pid 1 inside).
func (s *Sandbox) InitPid() int { return s.initPid }

// NetNSPath is the sandbox's network namespace as a path on the host.
func (s *Sandbox) NetNSPath() string { return "/proc/" + strconv.Itoa(s.initPid) + "/ns/net" }

// UpperDir is the overlay's writable layer: every file the command wrote into the root is below it.
func (s *Sandbox) UpperDir() string { return s.rootfs.upper }

// Pids lists the host pids of every process in the sandbox, the init included.
func (s *Sandbox) Pids() ([]int, error) { return s.container.Processes() }

// Command is a process to run in the sandbox.
type Command struct {
	Args     []string
	Cwd      string
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	Terminal bool // give the command a terminal of its own; Running.Console is its master side
}

// Running is a command started in the sandbox.
type Running struct {
	Pid     int      // host pid
	Console *os.File // the terminal's master side when Command.Terminal was set
	proc    *libcontainer.Process
}

// Start runs cmd in the sandbox through the shim, which applies Landlock before it execs the command.
func (s *Sandbox) Start(cmd Command) (*Running, error) {
	fs := s.cfg.Plan.Filesystem
	sc := shimConfig{Read: fs.Read, Write: fs.Write, Degrade: fs.LandlockDegrade}
	if fs.WriteCwd {
		sc.Write = append(slices.Clone(sc.Write), cmd.Cwd)
	}
	scJSON, err := json.Marshal(sc)
	if err != nil {
		return nil, err
	}
	p := &libcontainer.Process{
		Args:   shimCommand(cmd.Args),
		Env:    append(slices.Clone(s.cfg.Plan.Env), shimEnv+"="+string(scJSON)),
		Cwd:    cmd.Cwd,
		UID:    s.cfg.Plan.UID,
		GID:    s.cfg.Plan.GID,
		Stdin:  cmd.Stdin,
		Stdout: cmd.Stdout,
		Stderr: cmd.Stderr,
	}
	var consoleParent *os.File
	if cmd.Terminal {
		var child *os.File
		consoleParent, child, err = utils.NewSockPair("console")
		if err != nil {
			return nil, err
		}
		defer consoleParent.Close()
		defer child.Close()
		p.ConsoleSocket = child
	}
	if err := s.container.Run(p); err != nil {
		return nil, fmt.Errorf("starting the command: %w", err)
	}
	r := &Running{proc: p}
	r.Pid, _ = p.Pid()
	if consoleParent != nil {
		if r.Console, err = utils.RecvFile(consoleParent); err != nil {
			p.Signal(unix.SIGKILL)
			p.Wait()
			return nil, fmt.Errorf("receiving the command's terminal: %w", err)
		}
	}
	return r, nil
}

// Wait waits for the command and returns its status as a shell shows it: the exit code, or 128+N when
// a signal N killed it.
func (r *Running) Wait() (int, error) {
	state, err := r.proc.Wait()
	if state == nil {
		return -1, err
	}
	ws, ok := state.Sys().(syscall.WaitStatus)
	if !ok {
		return state.ExitCode(), nil
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
}

// Signal sends sig to the command.
func (r *Running) Signal(sig os.Signal) error { return r.proc.Signal(sig) }

// Destroy kills everything in the sandbox and removes the container, its cgroups, the overlay and the
// run's state. It is safe on a partly built sandbox and reports every step that failed.
func (s *Sandbox) Destroy() error {
	var errs []error
	if s.container != nil {
		if s.init != nil && s.initPid > 0 {
			// Killing pid 1 of a pid namespace kills every process in it.
			if err := s.container.Signal(unix.SIGKILL); err != nil && !errors.Is(err, libcontainer.ErrNotRunning) {
				errs = append(errs, fmt.Errorf("killing the sandbox: %w", err))
			}
			s.init.Wait()
		}
		if err := s.container.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("destroying the container: %w", err))
		}
	}
	if err := s.rootfs.unmount(); err != nil {
		errs = append(errs, err)
	}
	removeCgroupParents()
	if err := s.run.release(); err != nil {
		errs = append(errs, err)
	}
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
		// The state is the first field after the parenthesised comm, which may itself hold parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			continue
		}
		if st := stat[i+2]; st == 'R' || st == 'D' {
			busy = true
		}
		exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		fmt.Fprintf(&b, "%d:%s;", pid, exe)
	}
	return b.String(), busy
}

// Kill sends SIGKILL to a host pid of the sandbox.
func Kill(pid int) { unix.Kill(pid, unix.SIGKILL) }
