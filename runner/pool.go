package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/netnsdir"
	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/sandbox"
)

// A Pool keeps sandboxes built ahead for one plan and working directory (its key), so that a run of a
// long-running sbx (the MCP server) skips the build: namespaces, cgroup, overlay, seccomp, the network
// contract and the waiting supervisor are in place when the command arrives.
//
// Every run still gets a fresh sandbox: a pooled one serves exactly one run and is then destroyed, as a
// cold one is. The run's result is returned once the command's processes are gone and its output passed
// on; the teardown (the supervisor, unmounts, cgroups, network) goes on in the background, a bounded
// number at a time, and Close waits for it. The pool refills after a run, not during it, a few
// sandboxes at a time. Idle sandboxes hold no CPU (their supervisor waits on a read); those of a dead
// server are removed by `sbx gc` like any dead run's.
//
// The pool warms the key of the last run it was asked for: a run with another plan or working directory
// (or one that needs a terminal, or sbx itself as the command) starts cold, and the pool then warms for
// it instead.
type Pool struct {
	size      int
	stateRoot string
	onError   func(error)
	wg        sync.WaitGroup
	served    atomic.Int64 // runs a pooled sandbox served

	mu       sync.Mutex
	key      string
	plan     *policy.Plan
	cwd      string
	top      string // Options.Top of the runs it keeps sandboxes for
	home     string // Options.CallerHome of those runs
	idle     []ready
	dead     []*sandbox.Sandbox // served their run, waiting for a background teardown
	tearing  int                // background teardowns in progress (at most maxTeardowns)
	building int
	failed   bool // the last build failed: no refill until a run asks again
	closed   bool
}

// ready is a sandbox built for the pool, with the snapshot of its writable layers that a run's file
// changes are counted from: taken once it is built (nothing writes there until its command starts), so
// that a run need not.
type ready struct {
	sb     *sandbox.Sandbox
	before []*observe.FileChanges // nil: the run takes it
	// events is the run's exec stream, started once the sandbox is built when the kernel filters it
	// (see preStartEvents); nil: the run starts it.
	events *observe.Events
	// seen are the identities of the host's files the sandbox shows at fixed places (HostPaths) as
	// they were when it was built: one replaced since (a tree removed and cloned again) would still
	// show the old one, so the sandbox gives way to a cold run.
	seen []FileID
}

// FileID is a file's identity: a path replaced by another file gets another.
type FileID struct{ Dev, Ino uint64 }

// HostPaths are the host paths a sandbox for plan in cwd shows at fixed places, bound when it is
// built: the root, the working directory, the shares, the toolchain caches and the uplink network
// namespace. One replaced on the host since (another file at the path) would still show the old file.
func HostPaths(plan *policy.Plan, cwd string) []string {
	paths := []string{"/", cwd}
	for _, s := range plan.Filesystem.Shares {
		paths = append(paths, s.Host)
	}
	for _, c := range plan.Filesystem.Caches {
		paths = append(paths, c.Host)
	}
	if ns := plan.Network.UplinkNetNS; ns != "" {
		if !strings.Contains(ns, "/") {
			ns = filepath.Join(netnsdir.Dir, ns)
		}
		paths = append(paths, ns)
	}
	return paths
}

// Identities are the identities of the files at paths, following links; a path that cannot be read
// counts as the zero identity.
func Identities(paths []string) []FileID {
	ids := make([]FileID, len(paths))
	for i, p := range paths {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			ids[i] = FileID{st.Dev, st.Ino}
		}
	}
	return ids
}

// drop destroys a ready sandbox that served no run, in the background.
func (p *Pool) drop(r ready) {
	stopEvents(r.events)
	p.background(r.sb)
}

// preStartEvents starts a pooled sandbox's exec stream as soon as it is built, so that a warm run does
// not wait for the kernel filter to load (0.3 ms). The stream follows the sandbox's init, which forks
// nothing until its command: with the filter in the kernel, an idle sandbox's reader is never woken.
// Without it (no eBPF here, as without root), the stream would wake for every process event on the host
// while the sandbox waits, so the run starts it instead. nil when it does not run.
func preStartEvents(pids int64, init int) *observe.Events {
	ev, err := startEvents(pids, []int{init})
	if err != nil {
		return nil
	}
	if ev.FilterDegraded() != nil {
		ev.Stop(nil)
		return nil
	}
	return ev
}

// stopEvents ends the exec stream of a sandbox that served no run.
func stopEvents(ev *observe.Events) {
	if ev != nil {
		ev.Stop(nil)
	}
}

// maxTeardowns bounds the teardowns that run at once in the background; maxDead bounds the used
// sandboxes waiting for one (each still holds its mounts, loop device and cgroup): a run that would
// exceed it tears down its sandbox before it returns.
const (
	maxTeardowns = 4
	maxDead      = 64
)

// NewPool returns a pool of size sandboxes (0: none, every run is cold) whose state lives in stateRoot
// ("" = sandbox's default). onError, when set, hears of failures that no run's report can carry: a
// background build or teardown that failed.
func NewPool(size int, stateRoot string, onError func(error)) *Pool {
	if onError == nil {
		onError = func(error) {}
	}
	return &Pool{size: max(size, 0), stateRoot: stateRoot, onError: onError}
}

// Warm makes the pool keep sandboxes for plan and cwd, dropping those it keeps for anything else; top
// is Options.Top of the runs they serve.
func (p *Pool) Warm(plan *policy.Plan, cwd, top string) {
	key := poolKey(plan, cwd, "")
	p.mu.Lock()
	defer p.mu.Unlock()
	if key != "" && !p.closed {
		p.retarget(key, plan, cwd, top, "")
	}
}

// Run carries out one run like Run, in a pooled sandbox when the pool holds one for the run's plan and
// working directory, else cold.
func (p *Pool) Run(ctx context.Context, o Options) (*report.Report, error) {
	rep, _, err := p.RunWarm(ctx, o)
	return rep, err
}

// RunWarm is Run that also says whether a pooled sandbox served the run.
func (p *Pool) RunWarm(ctx context.Context, o Options) (*report.Report, bool, error) {
	r, ok := p.claim(o)
	if !ok {
		rep, err := Run(ctx, o)
		return rep, false, err
	}
	rep, err := p.runIn(ctx, o, r)
	return rep, true, err
}

// runIn carries out o in the pooled sandbox r.
func (p *Pool) runIn(ctx context.Context, o Options, r ready) (*report.Report, error) {
	sb := r.sb
	if err := sb.Use(sandbox.Command{Args: o.Args, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr}, o.Plan); err != nil {
		stopEvents(r.events)
		// Never used: ended like a used one. A stale one (the host changed below a hidden path since
		// it was built) gives way to a cold run, which hides what is there now.
		if ferr := p.finish(sb); ferr != nil {
			p.onError(fmt.Errorf("warm pool: tearing down sandbox %s: %w", sb.ID, ferr))
		}
		if errors.Is(err, sandbox.ErrStale) {
			return Run(ctx, o)
		}
		return nil, err
	}
	use := func() (*sandbox.Sandbox, error) { return sb, nil }
	return runWith(ctx, o, use, []int{sb.InitPid()}, r.events, r.before, p.finish)
}

// claim takes a sandbox built for o's plan and working directory, false when there is none. Either way
// the pool then warms for o.
func (p *Pool) claim(o Options) (ready, bool) {
	if p.size == 0 || o.Terminal || o.OnConsole != nil || (len(o.Args) > 0 && o.Args[0] == sandbox.SelfCommand("")[0]) {
		return ready{}, false
	}
	key := poolKey(o.Plan, o.Cwd, o.CallerHome)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || key == "" {
		return ready{}, false
	}
	p.retarget(key, o.Plan, o.Cwd, o.Top, o.CallerHome)
	p.failed = false
	if len(p.idle) == 0 {
		p.fill()
		return ready{}, false
	}
	r := p.idle[0]
	p.idle = p.idle[1:]
	if !slices.Equal(r.seen, Identities(HostPaths(o.Plan, o.Cwd))) {
		// What it shows was replaced on the host: the others were built before it, so they go too.
		p.drop(r)
		for _, r := range p.idle {
			p.drop(r)
		}
		p.idle = nil
		p.fill()
		return ready{}, false
	}
	p.served.Add(1)
	return r, true // the pool refills once the run is over (finish), not while it runs
}

// retarget switches the pool to key, destroying what it keeps for another. Called with mu held.
func (p *Pool) retarget(key string, plan *policy.Plan, cwd, top, home string) {
	if key == p.key {
		return
	}
	for _, r := range p.idle {
		p.drop(r)
	}
	p.key, p.plan, p.cwd, p.top, p.home, p.idle, p.failed = key, plan, cwd, top, home, nil, false
	p.fill()
}

// maxBuilds bounds the sandboxes built at once: builds are CPU-bound, and runs in progress should not
// wait behind a refill of the whole pool.
var maxBuilds = max(runtime.NumCPU()/2, 1)

// fill starts building sandboxes until the pool holds size of them, maxBuilds at a time. Called with mu
// held.
func (p *Pool) fill() {
	for !p.closed && !p.failed && p.plan != nil && len(p.idle)+p.building < p.size && p.building < maxBuilds {
		p.building++
		p.wg.Add(1)
		go p.build(p.key, p.plan, p.cwd, p.top, p.home)
	}
}

// build builds one sandbox for key and adds it to the pool, unless the pool has moved on meanwhile.
func (p *Pool) build(key string, plan *policy.Plan, cwd, top, home string) {
	defer p.wg.Done()
	seen := Identities(HostPaths(plan, cwd)) // before the build: a path replaced during it is seen as replaced
	sb, err := sandbox.Create(sandbox.Config{Plan: plan, StateRoot: p.stateRoot, Deferred: true, CallerHome: home,
		Command: sandbox.Command{Cwd: cwd, CwdNoLinks: true, Top: top}}) // a cwd a link leads to fails here; its run starts cold
	var before []*observe.FileChanges
	var events *observe.Events
	if err == nil {
		before, _ = layersBefore(sb) // on an error the run takes the snapshot, and reports why it failed
		events = preStartEvents(plan.Limits.Pids, sb.InitPid())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.building--
	switch {
	case err != nil:
		p.failed = true // a run starts cold, says why in its own error, and asks again
		p.onError(fmt.Errorf("warm pool: building a sandbox: %w", err))
	case p.closed || key != p.key:
		p.drop(ready{sb: sb, events: events})
	default:
		p.idle = append(p.idle, ready{sb, before, events, seen})
		p.fill()
	}
}

// finish ends a pooled run's sandbox: its output passed on before the result is returned, the teardown
// in the background.
func (p *Pool) finish(sb *sandbox.Sandbox) error {
	sb.Stop()
	p.mu.Lock()
	p.fill()
	p.mu.Unlock()
	if !p.teardownLater(sb) {
		return sb.Destroy() // the pool is closing, or too many sandboxes wait for a teardown already
	}
	return nil
}

// teardownLater queues sb for a teardown in the background, maxTeardowns at a time, if the pool is open
// and fewer than maxDead wait, and says so. The WaitGroup is added to under mu, so that Close, which sets
// closed under mu first, waits for it.
func (p *Pool) teardownLater(sb *sandbox.Sandbox) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.dead) >= maxDead {
		return false
	}
	p.dead = append(p.dead, sb)
	p.wg.Add(1)
	if p.tearing < maxTeardowns {
		p.tearing++
		go p.tearDown()
	}
	return true
}

// tearDown destroys the queued sandboxes until none is left.
func (p *Pool) tearDown() {
	for {
		p.mu.Lock()
		if len(p.dead) == 0 {
			p.tearing--
			p.mu.Unlock()
			return
		}
		sb := p.dead[0]
		p.dead = p.dead[1:]
		p.mu.Unlock()
		if err := sb.Destroy(); err != nil {
			p.onError(fmt.Errorf("warm pool: tearing down sandbox %s: %w", sb.ID, err))
		}
		p.wg.Done()
	}
}

// background destroys sb without waiting (Close does).
func (p *Pool) background(sb *sandbox.Sandbox) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := sb.Destroy(); err != nil {
			p.onError(fmt.Errorf("warm pool: tearing down idle sandbox %s: %w", sb.ID, err))
		}
	}()
}

// Close destroys the idle sandboxes and waits for every build and teardown in progress. Runs after Close
// start cold.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	var errs []error
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, r := range idle {
		stopEvents(r.events)
		if err := r.sb.Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	p.wg.Wait()
	return errors.Join(errs...)
}

// Idle is how many sandboxes the pool holds ready.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// poolKey identifies what a sandbox is built from: the plan but for the command's environment and
// timeout, which take effect at Start (but for its HOME, where decoys go), the working directory, and
// the caller's home (decoys too).
func poolKey(plan *policy.Plan, cwd, home string) string {
	c := *plan
	c.Env, c.Timeout = nil, 0
	sandboxHome := ""
	for _, kv := range plan.Env {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			sandboxHome = v
		}
	}
	b, err := json.Marshal(struct {
		Plan                   policy.Plan
		Cwd, Home, SandboxHome string
	}{c, cwd, home, sandboxHome})
	if err != nil {
		return "" // not pooled: the run starts cold
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
