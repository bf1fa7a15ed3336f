// Package idmapns makes the user namespace of an idmapped mount: a namespace whose maps show one owner's
// files as another's.
//
// A user namespace needs a process to create it: a child that calls PTRACE_TRACEME and so stops at its
// execve before it runs anything (runc's own trick), long enough to write its maps and open its
// namespace; then it is killed. Go forks the whole calling process for a child in a new user namespace
// (no vfork), which costs 1.5-2.5 ms in a grown sbx on the critical path of every run as root: the
// child is cloned with internal/vspawn instead, sharing sbx's memory until its exec. And for
// the subcommands that build a sandbox at once, the package's init starts that child while sbx is still
// small, beside its start-up, with the maps left unwritten: the first New writes them and takes it.
package idmapns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/cgprime"
	"github.com/sbx-dev/sbx/internal/vspawn"
)

// ErrStart is wrapped by the errors of a child that could not be started in a new user namespace (a
// kernel without user namespaces, or one that forbids them).
var ErrStart = errors.New("creating the idmapping's user namespace")

// Mapping shows the files of on-disk uid and gid FromUID and FromGID as host ids ToUID and ToGID.
type Mapping struct {
	FromUID, FromGID int
	ToUID, ToGID     int
}

// childArg0 is the argv of the child that holds a namespace: it stops at its exec and is killed there.
const childArg0 = "sbx-idmap"

func init() {
	if len(os.Args) == 1 && os.Args[0] == childArg0 {
		// The child ran after all: its tracer ended and let it go on, without killing it. It has
		// nothing to do: end before anything else of the program runs.
		os.Exit(0)
	}
	if cgprime.StartsNow(os.Args, os.Geteuid()) && !cgprime.ServiceSeen() {
		early = make(chan request)
		go serveEarly(early)
	}
}

// early takes the one request the child started at init serves; nil when none was started, or once it
// was taken.
var (
	early   chan request
	earlyMu sync.Mutex
)

type request struct {
	m    Mapping
	drop bool // end the child only
	resp chan result
}

type result struct {
	ns  *os.File
	err error
}

// New returns a user namespace (its nsfs file) whose maps say m.
func New(m Mapping) (*os.File, error) {
	if ch := takeEarly(); ch != nil {
		resp := make(chan result)
		ch <- request{m: m, resp: resp}
		if r := <-resp; r.err == nil {
			return r.ns, nil
		}
		// The early child failed (it could not be started, say): make one now, as without it.
	}
	return fresh(m)
}

// Drop ends the child started at init, if no New took it: for a sandbox that needs no idmapping.
func Drop() {
	if ch := takeEarly(); ch != nil {
		resp := make(chan result)
		ch <- request{drop: true, resp: resp}
		<-resp
	}
}

// takeEarly returns the channel of the child started at init, once; nil when there is none (left).
func takeEarly() chan request {
	earlyMu.Lock()
	defer earlyMu.Unlock()
	ch := early
	early = nil
	return ch
}

// serveEarly starts a child in a new user namespace at once and, on the first request, maps it and
// hands over its namespace. The child is traced by this goroutine's thread, locked to it until the
// child is gone; the kernel kills it when that thread ends (exitKill) if sbx ends first.
func serveEarly(reqs chan request) {
	runtime.LockOSThread()
	p, err := start(nil)
	req := <-reqs
	if err != nil {
		req.resp <- result{err: err}
		return
	}
	var ns *os.File
	if !req.drop {
		ns, err = open(p, &req.m)
	}
	p.Kill()
	p.Wait()
	req.resp <- result{ns, err}
	// The thread stays locked: it ends with the goroutine, as a thread that traced a child should.
}

// fresh makes the namespace in a child started now, with its maps written by Go before it runs.
func fresh(m Mapping) (*os.File, error) {
	runtime.LockOSThread() // the tracer is this thread
	defer runtime.UnlockOSThread()
	p, err := start(&m)
	if err != nil {
		return nil, err
	}
	defer func() {
		p.Kill()
		p.Wait()
	}()
	return open(p, nil)
}

// start starts the child that stops at its execve in a new user namespace; its maps are written at
// once when m is set, else left for open to write.
func start(m *Mapping) (*os.Process, error) {
	attr := &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER, Ptrace: true, Pdeathsig: unix.SIGKILL}
	if m != nil {
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: m.FromUID, HostID: m.ToUID, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: m.FromGID, HostID: m.ToGID, Size: 1}}
	}
	// Cloned sharing sbx's memory (vspawn) rather than forked with a copy of it, as os/exec does for a
	// child in a new user namespace; os/exec when vspawn cannot (a build without cgo).
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{childArg0}, Env: []string{}, SysProcAttr: attr}
	err := vspawn.Start(cmd)
	if errors.Is(err, vspawn.ErrUnsupported) {
		cmd.Process, err = os.StartProcess(cmd.Path, cmd.Args, &os.ProcAttr{Env: cmd.Env, Sys: attr})
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	if err := exitKill(cmd.Process); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	return cmd.Process, nil
}

// exitKill waits for the child to stop at its exec and has the kernel kill it when its tracer, the
// calling thread, ends (PTRACE_O_EXITKILL): a second guard beside its parent-death signal, which the
// kernel would clear should a change of credentials come with the exec. (The strays test runs once left,
// stopped at their exec and traced by init, came from a parent that died before the child set that
// signal: vspawn's child now checks for it.) On an error the child is gone.
func exitKill(p *os.Process) error {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(p.Pid, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			p.Kill()
			return fmt.Errorf("waiting for the child's stop at its exec: %w", err)
		}
		break
	}
	if !ws.Stopped() {
		return fmt.Errorf("the child did not stop at its exec: %v", ws) // and it was reaped
	}
	if err := unix.PtraceSetOptions(p.Pid, unix.PTRACE_O_EXITKILL); err != nil {
		p.Kill()
		p.Wait()
		return fmt.Errorf("PTRACE_O_EXITKILL: %w", err)
	}
	return nil
}

// open writes the child's maps when m is set and opens its user namespace.
func open(p *os.Process, m *Mapping) (*os.File, error) {
	if m != nil {
		dir := "/proc/" + strconv.Itoa(p.Pid) + "/"
		for file, line := range map[string]string{
			"uid_map": fmt.Sprintf("%d %d 1\n", m.FromUID, m.ToUID),
			"gid_map": fmt.Sprintf("%d %d 1\n", m.FromGID, m.ToGID),
		} {
			if err := os.WriteFile(dir+file, []byte(line), 0); err != nil {
				return nil, fmt.Errorf("writing the idmapping's %s: %w", file, err)
			}
		}
	}
	f, err := os.Open("/proc/" + strconv.Itoa(p.Pid) + "/ns/user")
	if err != nil {
		return nil, fmt.Errorf("opening the idmapping's user namespace: %w", err)
	}
	return f, nil
}
