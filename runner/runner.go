// Package runner carries out one sbx run from a compiled plan to a report: it creates the sandbox, takes
// the before snapshot, runs the command, waits for it (with timeout, signals and cancellation), takes the
// after snapshot, compares what it saw with the plan's expectations and tears everything down.
//
// It is the library form of `sbx exec`; the CLI and the MCP server only add flags and rendering. Probe
// (probe.go) is the library form of `sbx probe`: a run whose command is the network probe.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/sandbox"
)

// Exit statuses of a run besides the command's own.
const (
	ExitTimeout = 124
	ExitSetup   = sandbox.ExitSetup
)

// DefaultGrace is how long a command gets between a forwarded signal and teardown.
const DefaultGrace = 2 * time.Second

// settleMax bounds the wait for background children that are still starting when the command exits.
// Only runs that leave something running wait at all.
const settleMax = time.Second

// Options is one run.
type Options struct {
	Plan *policy.Plan
	Args []string
	Cwd  string
	// CwdNoLinks: Cwd was checked to be reached without a link; a sandbox refuses it if it resolves
	// elsewhere by the time it is built (sandbox.Command.CwdNoLinks). Pooled sandboxes always check.
	CwdNoLinks bool
	Stdin      io.Reader
	Stdout     io.Writer
	Stderr     io.Writer
	Closed     [3]bool       // stdio to close in the command, as the caller's were (sandbox.Command.Closed)
	Timeout    time.Duration // 0: the plan's; both 0: none
	// Top is the highest directory the report may name above Cwd (sandbox.Command.Top): an MCP
	// caller's workspace; "" for no bound.
	Top string
	// Signals are forwarded to the command; the run is torn down DefaultGrace after the first one, or at
	// once on the second.
	Signals <-chan os.Signal
	// Terminal gives the command a terminal of its own; OnConsole gets its master side to wire to the
	// caller's terminal.
	Terminal  bool
	OnConsole func(*os.File)
	StateRoot string
	// OnStart, when set, is called once the command has started, with its host pid (0 when it could not
	// be started).
	OnStart func(pid int)
	// Changes, when set, is a directory that the files the command created or modified are copied into
	// before teardown (deletions are listed in its DELETED.txt).
	Changes string
	// CallerHome is the home of the caller the run is for (sandbox.Config.CallerHome; "" = this
	// process's caller's).
	CallerHome string
}

// Run carries out one run. The error is non-nil only when sbx itself failed (it then matches
// sandbox.ErrSetup or wraps what failed); the command's own failure is in the report's exit code.
//
// Observation never fails the run: a part that cannot be observed is a note and an entry in the
// report's Incomplete, which policy.Compare makes a violation. When the command ran but the teardown
// failed, Run returns the report together with the error.
func Run(ctx context.Context, o Options) (*report.Report, error) {
	create := func() (*sandbox.Sandbox, error) {
		return sandbox.Create(sandbox.Config{Plan: o.Plan, StateRoot: o.StateRoot, CallerHome: o.CallerHome, Command: sandbox.Command{
			Args: o.Args, Cwd: o.Cwd, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr, Terminal: o.Terminal,
			CwdNoLinks: o.CwdNoLinks, Top: o.Top, Closed: o.Closed,
		}})
	}
	return runWith(ctx, o, create, nil, nil, nil, (*sandbox.Sandbox).Destroy)
}

// runWith is Run with the sandbox from create (built now, or taken from a warm pool) and handed to
// finish at the end (Destroy, or a pool's teardown). The exec stream follows the descendants of track
// from its start: nil for sbx itself, the ancestor of a sandbox built now; a pooled sandbox's init, so
// that the kernel passes the run its own sandbox's events and not those of the server's other runs.
// events, when set, is that stream started already (see Pool.build); else it starts now, beside create.
func runWith(ctx context.Context, o Options, create func() (*sandbox.Sandbox, error), track []int,
	events *observe.Events, before []*observe.FileChanges, finish func(*sandbox.Sandbox) error) (*report.Report, error) {
	t0 := time.Now()
	rep := report.New(o.Plan.Profile, o.Args)
	changesDir, err := openChangesDir(o.Changes, o.StateRoot, o.Plan.Filesystem.Shares)
	if err != nil {
		return nil, err
	}
	if changesDir != nil {
		defer changesDir.Close()
	}
	rep.Notes = append(rep.Notes, o.Plan.Notes...)
	// The exec-event stream and the collector of kernel-reported denials (observe/denials.go) start
	// while the sandbox is built: both run before the command starts, which is all they need.
	cc := make(chan collectors, 1)
	go func() { cc <- startCollectors(o.Plan.Limits.Pids, track, events) }()
	sb, err := create()
	c := <-cc
	events = c.events
	switch err := c.eventsErr; {
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || err != nil && sandbox.Rootless():
		// Not root: the kernel gives the exec stream to root only, as it is for this kind of run.
		rep.Notes = append(rep.Notes, "exec events unavailable: "+err.Error())
	case err != nil:
		rep.MarkIncomplete("exec events", err)
	}
	if err != nil {
		c.denials.Stop(observe.DenialsScope{})
		if events != nil {
			events.Stop(nil)
		}
		return nil, err
	}
	if events != nil {
		// The sandbox's init may have been forked before the stream started (always so for a sandbox
		// from a warm pool): name it, whose descendants are the command's processes.
		events.Track(sb.InitPid())
	}
	rep.Notes = append(rep.Notes, sb.Notes...)
	rep.Limits.Enforced = enforced(sb, o)
	r := &run{ctx: ctx, opts: o, sb: sb, rep: rep, events: events, changesDir: changesDir, denials: c.denials,
		filesBefore: before}
	err = r.execute(ctx, t0)
	if !r.ran {
		// End the collectors; the report is not used.
		r.stopDenials()
		if events != nil {
			events.Stop(nil)
		}
		r.stopShareWatch()
	}
	t3 := time.Now()
	if derr := finish(sb); derr != nil {
		err = errors.Join(err, fmt.Errorf("tearing down: %w", derr))
	}
	rep.Timings.Teardown = ms(time.Since(t3))
	rep.Timings.Total = ms(time.Since(t0))
	// Lists are never null (report contract), also in the report of a run whose teardown failed.
	rep.FillLists()
	if err != nil {
		if r.ran {
			return rep, err
		}
		return nil, err
	}
	return rep, nil
}

// collectors are what observes a run from outside while it runs.
// layersBefore snapshots the sandbox's writable layers before its command starts.
func layersBefore(sb *sandbox.Sandbox) ([]*observe.FileChanges, error) {
	out := []*observe.FileChanges{}
	for _, l := range sb.Layers() {
		before, err := observe.Changes(l.Upper, l.Lower)
		if err != nil {
			return nil, fmt.Errorf("reading the writable layer: %w", err)
		}
		out = append(out, before)
	}
	return out, nil
}

type collectors struct {
	events    *observe.Events // nil when eventsErr says why
	eventsErr error
	denials   *observe.DenialsCollector
}

// startCollectors starts both at once; events, when set, is the exec stream started already. The exec
// stream's kernel-side filter makes room for the sandbox's pids limit and sbx's own processes beside it.
func startCollectors(pids int64, track []int, events *observe.Events) collectors {
	denials := make(chan *observe.DenialsCollector, 1)
	go func() { denials <- observe.StartDenials() }()
	var err error
	if events == nil {
		events, err = startEvents(pids, track)
	}
	return collectors{events: events, eventsErr: err, denials: <-denials}
}

// startEvents starts the exec stream of the descendants of track (nil: sbx itself).
func startEvents(pids int64, track []int) (*observe.Events, error) {
	return observe.StartEvents(observe.EventsOptions{InitFirst: true,
		Track: track, MaxProcesses: int(min(pids, 1<<20)) + 64})
}

// enforced says how each limit of the run is held: the sandbox's limits, and the timeout by sbx.
func enforced(sb *sandbox.Sandbox, o Options) []report.Enforced {
	var out []report.Enforced
	for _, e := range sb.Enforced() {
		out = append(out, report.Enforced{Limit: e.Limit, By: e.By})
	}
	if o.Timeout > 0 || o.Plan.Timeout > 0 {
		out = append(out, report.Enforced{Limit: "timeout", By: "sbx timer"})
	}
	return out
}

type run struct {
	ctx         context.Context
	opts        Options
	sb          *sandbox.Sandbox
	rep         *report.Report
	filesBefore []*observe.FileChanges // one per sandbox.Layers entry
	events      *observe.Events
	denials     *observe.DenialsCollector
	ran         bool            // the command ran and the report holds its observations
	changesDir  *os.File        // --changes DIR, opened once before the command runs
	mounts      []ownMount      // the sandbox's /dev/shm and /dev/mqueue, opened once the command started
	layerList   []sandbox.Layer // see layers
	// layerReading is the reading of the layers begun by readLayersEarly, nil before or without it.
	layerReading *layerReading
	obsStop      <-chan struct{} // see observeStop
	obsRelease   func()
	started      time.Time // just before the command started: what a writable share shows changed since is the run's
	shareWatch   *observe.ShareWatch
	hostCwd      *os.File // the host's working directory, opened before the command when its changes may be applied
	hostCwdErr   error
	decoyRead    bool // the command touched a decoy: its value may be in what it sent or left
	// inTree says whether a pid was the sandbox's at some time of a window (exec stream), nil without it.
	inTree func(pid int, from, to uint64) bool
}

func (r *run) execute(ctx context.Context, t0 time.Time) error {
	// No process snapshot before the command: until Start the sandbox holds only sbx's supervisor, which
	// snapshots leave out, so everything the after-snapshot finds is the command's doing.
	var err error
	// sbx's own whiteouts and opaque directories are in the upper layer already: only what changes
	// from here on is the command's. A pooled sandbox comes with this snapshot taken.
	if r.filesBefore == nil {
		if r.filesBefore, err = layersBefore(r.sb); err != nil {
			return err
		}
	}
	r.openHostCwd()
	if r.hostCwd != nil {
		defer r.hostCwd.Close()
	}
	r.startShareWatch()
	r.shareNote()
	t1 := time.Now()
	r.started = t1
	r.rep.Timings.Setup = ms(t1.Sub(t0))
	if c := r.sb.Console(); c != nil && r.opts.OnConsole != nil {
		r.opts.OnConsole(c)
	}
	var code int
	var end ending
	for _, b := range r.filesBefore {
		b.Started() // nothing of sbx's writes the layers from here on
	}
	cmd, err := r.sb.Start()
	switch {
	case err == nil:
		if r.opts.OnStart != nil {
			r.opts.OnStart(cmd.Pid)
		}
		r.openMounts()
		defer r.closeMounts()
		code, end, err = r.wait(ctx, cmd)
	case !errors.Is(err, sandbox.ErrGoneAfterGo) || r.sb.LimitHits().OOMKills == 0:
		// Also a supervisor that ended between go and its answer on its own (a profile's filter that
		// denies what its runtime needs): the command never ran, sbx's own failure.
		return err
	}
	// From here, err is the loss of the command: its wait failed, or the OOM killer ended the supervisor
	// once told to start it, before it said it had: the command ran (the OOM killer picks pid 1 only when
	// a command steered it there) and ended it.
	hits := r.sb.LimitHits()
	switch {
	case err != nil && ctx.Err() == nil && hits.OOMKills > 0:
		// The OOM killer took the sandbox's init: the command died with the sandbox, killed, and what it
		// left was never seen. The init starts the command with an OOM score of 1000 and keeps 0, so the
		// OOM killer picks it only when the command steered it there: lowered its own score (it may, down
		// to 0) and spread its memory over processes smaller than pid 1, or, running as the namespace's
		// root, opened /proc/1/oom_score_adj while pid 1 was undumpable (docs/security.md, "The supervisor's ids")
		// and raised it. Not a pass, as for any other end of the init.
		r.rep.MarkIncomplete("the command's end", err)
		r.sb.Kill()
		code, end, err = 128+int(syscall.SIGKILL), endKilled, nil
		r.rep.Notes = append(r.rep.Notes, "the OOM killer killed sbx's init inside the sandbox, and with it every process there")
	case err != nil && ctx.Err() == nil:
		// The command ran, but sbx lost track of it (its init is gone or answered nonsense): what it did
		// is still reported, as far as it can be, and the run does not pass.
		r.rep.MarkIncomplete("the command's end", err)
		r.sb.Kill()
		code, end, err = 128+int(syscall.SIGKILL), endKilled, nil
	}
	if err != nil {
		return err
	}
	r.rep.ExitCode, r.rep.TimedOut = code, end == endTimedOut
	r.rep.OOMKilled, r.rep.PidsLimitHit = hits.OOMKills > 0, hits.PidsMax > 0
	if hits.OOMKills > 0 {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("the memory limit was hit (limits.memory %s): the OOM killer killed %d process(es); give more with --memory SIZE or limits.memory in the profile",
			policy.FormatSize(r.opts.Plan.Limits.MemoryBytes), hits.OOMKills))
	}
	if hits.PidsMax > 0 {
		// A refused fork is EAGAIN, which programs report as "Resource temporarily unavailable".
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf(`the pids limit was hit (limits.pids %d): %d fork(s) refused with EAGAIN ("Resource temporarily unavailable"); allow more with --pids N or limits.pids in the profile, or start fewer at once (make -j N)`,
			r.opts.Plan.Limits.Pids, hits.PidsMax))
	}
	if note := diskNote(hits.Disk); note != "" {
		r.rep.Notes = append(r.rep.Notes, note)
	}
	t2 := time.Now()
	r.rep.Timings.Run = ms(t2.Sub(t1))
	if end == endExited {
		// A sandbox sbx killed has nothing left to look at.
		r.observe()
	}
	cmdPid := 0 // none known: the supervisor ended before it said which
	if cmd != nil {
		cmdPid = cmd.Pid
	}
	r.observeAfterward(cmdPid)
	r.toolchainHints()
	r.judge()
	r.applyChanges()
	bound(r.rep)
	r.rep.Timings.Observe = ms(time.Since(t2))
	r.ran = true
	return nil
}

// diskNote says, for the report, that the writable layer is full: the command's writes failed with
// "No space left on device", which says nothing of the limit behind it.
func diskNote(u sandbox.DiskUse) string {
	if !u.Full {
		return ""
	}
	what := fmt.Sprintf("%d MiB left", u.Free>>20)
	if u.NoInodes {
		what = fmt.Sprintf("no inode left for a new file (%d MiB free)", u.Free>>20)
	}
	return fmt.Sprintf(`the disk limit was hit: the writable layer (limits.disk %s) has %s, and writes past it fail with ENOSPC ("No space left on device"); give more with --disk SIZE or limits.disk in the profile`,
		policy.FormatSize(u.Size), what)
}

// waitResult is what the command's Wait gave.
type waitResult struct {
	code int
	err  error
}

// How a run ended.
type ending int

const (
	endExited   ending = iota // the command exited by itself
	endTimedOut               // sbx killed the sandbox when the timeout fired
	endKilled                 // sbx killed the sandbox after signals
)

// wait waits for the command, enforcing the timeout, forwarding signals and honouring ctx.
func (r *run) wait(ctx context.Context, cmd *sandbox.Running) (int, ending, error) {
	done := make(chan waitResult, 1)
	go func() {
		c, err := cmd.Wait()
		done <- waitResult{c, err}
	}()
	timeout := r.opts.Timeout
	if timeout == 0 {
		timeout = r.opts.Plan.Timeout
	}
	var timer <-chan time.Time
	if timeout > 0 {
		timer = time.After(timeout)
	}
	var grace <-chan time.Time
	signals := r.opts.Signals
	for {
		select {
		case res := <-done:
			return res.code, endExited, res.err
		case <-timer:
			return r.killAll(done), endTimedOut, nil
		case <-ctx.Done():
			r.killAll(done)
			return 0, endKilled, ctx.Err()
		case sig := <-signals:
			if grace != nil {
				return r.killAll(done), endKilled, nil
			}
			if s, ok := sig.(syscall.Signal); ok {
				cmd.Signal(s)
			}
			grace = time.After(DefaultGrace)
		case <-grace:
			return r.killAll(done), endKilled, nil
		}
	}
}

// killAll kills the whole sandbox at once (SIGKILL to its pid 1 takes every process of its pid namespace
// along, however fast they fork) and returns the command's status: 137, killed.
func (r *run) killAll(done <-chan waitResult) int {
	r.sb.Kill()
	<-done
	return 128 + int(syscall.SIGKILL)
}

// snapshot reads the frozen sandbox: its processes from the cgroup's lists of processes and of threads,
// and its sockets. What it could not read is marked incomplete; the rest is returned.
func (r *run) snapshot() *observe.Snap {
	pids, err := r.sb.Pids()
	if err != nil {
		r.rep.MarkIncomplete("the sandbox's processes", err)
	}
	tasks, err := r.sb.Tasks()
	if err != nil && !errors.Is(err, sandbox.ErrNoFreezer) {
		r.rep.MarkIncomplete("the sandbox's threads", err)
	}
	opts := observe.SnapshotOptions{HostPids: pids, HostTasks: tasks, InitHostPid: r.sb.InitPid(), NetNS: r.sb.NetNSPath()}
	if sandbox.Rootless() {
		opts.NetDiag = r.sb.NetDiag
	}
	snap, err := observe.Snapshot(opts)
	if err != nil {
		r.rep.MarkIncomplete("process and socket snapshot", err)
	}
	return snap
}

// snapshotAfter is the after snapshot: of the frozen sandbox, or, with only its init left, of its
// sockets alone, once (without root) the init's ending children are gone.
func (r *run) snapshotAfter(onlyInit bool) *observe.Snap {
	if !onlyInit {
		return r.snapshot()
	}
	if sandbox.Rootless() {
		r.reaped()
	}
	return r.socketsOnly()
}

// socketsOnly reads the sockets of a sandbox with only its init left, and no process: the init holds
// none in the sandbox's network namespace (its sock_diag socket is netlink, which no dump lists), so a
// socket found there is no process's, and the init's own files need not be read. Most runs leave no
// socket at all, which the kernel's counts say at a glance (NoSockets): the sock_diag dumps cost
// 0.4 ms of every warm run.
func (r *run) socketsOnly() *observe.Snap {
	if r.sb.NoSockets() {
		return &observe.Snap{}
	}
	opts := observe.SnapshotOptions{InitHostPid: r.sb.InitPid(), NetNS: r.sb.NetNSPath()}
	if sandbox.Rootless() {
		opts.NetDiag = r.sb.NetDiag
	}
	snap, err := observe.Snapshot(opts)
	if err != nil {
		r.rep.MarkIncomplete("socket snapshot", err)
	}
	return snap
}

// observe freezes the sandbox, takes the after snapshot and fills the report's observations. The
// sandbox stays frozen until Destroy, so that nothing changes under the rest of the observation (file
// changes, copies). It runs once the command was reaped (its exit status came from the supervisor's
// wait): the command is in no snapshot, and a process that took its pid since is reported like any other.
func (r *run) observe() {
	r.sb.Settle(settleMax)
	// Only the supervisor left, which starts nothing (most runs end so): nothing to freeze. The sockets
	// are read all the same: a socket lives while a file refers to it, and a file sent over a unix
	// socket (SCM_RIGHTS) and never received is referred to by that socket's queue, which a cycle of
	// such sockets keeps alive after every process is gone, until the kernel's collector happens to
	// run. A TCP listener kept so still completes handshakes.
	onlyInit := r.sb.OnlyInit()
	if !onlyInit {
		switch err := r.sb.Freeze(); {
		case errors.Is(err, sandbox.ErrNoFreezer):
			r.rep.Notes = append(r.rep.Notes, "the sandbox has no cgroup freezer: it was observed while it ran on")
		case err != nil:
			r.rep.MarkIncomplete("freezing the sandbox", err)
		}
	}
	r.readLayersEarly()
	after := r.snapshotAfter(onlyInit)
	r.rep.Processes.LeftRunning = nonNil(observe.LeftRunning(nil, after))
	r.rep.Sockets.Listening = nonNil(r.notFilter(after.Listening))
	r.rep.Sockets.Established = nonNil(r.notFilter(after.Established))
}

// reapMax bounds how long a sandbox with only its init left waits for its init's ending children to be
// gone (reaped).
const reapMax = 50 * time.Millisecond

// reaped waits, up to reapMax, until the init of a rootless sandbox with only its init left has no
// child at all: one in its exit (OnlyInit lets such a child pass) may still hold sockets, which a
// snapshot taken then lists with no owner (a daemon the command stopped, gpgconf --kill all ending
// gpg-agent). Sockets left once the children are gone are kept alive by something else (a unix
// socket's queue, see observe) and are reported.
func (r *run) reaped() {
	for deadline := time.Now().Add(reapMax); !r.sb.Childless() && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
}

// notFilter drops the sockets of sbx's DNS filter, which sbx keeps in the sandbox's namespace without
// root: they are not the command's.
func (r *run) notFilter(socks []report.Socket) []report.Socket {
	n := r.sb.Network()
	return slices.DeleteFunc(socks, func(s report.Socket) bool { return n.FilterSocket(s.Address, s.Port, s.Pid != 0) })
}

// stopDenials ends the collection of kernel-reported denials and returns what concerns the sandbox.
func (r *run) stopDenials() report.Denials {
	audit := r.denials.Stop(observe.ScopeOf(r.sb.InitPid(), r.events, r.rep.Processes.Execs, r.rep.Processes.LeftRunning))
	if audit.Lost > 0 {
		r.rep.MarkIncomplete("kernel denials", fmt.Errorf("%d audit records lost", audit.Lost))
	}
	return audit
}

// bound cuts the report's lists of processes, sockets and violations at their bounds, once
// policy.Compare has judged all of them, and says so with totals and truncated flags.
func bound(rep *report.Report) {
	p, s := &rep.Processes, &rep.Sockets
	p.LeftRunningTotal, p.LeftRunningTruncated = len(p.LeftRunning), len(p.LeftRunning) > observe.MaxLeftRunning
	p.LeftRunning = p.LeftRunning[:min(len(p.LeftRunning), observe.MaxLeftRunning)]
	s.ListeningTotal, s.EstablishedTotal = len(s.Listening), len(s.Established)
	s.Truncated = len(s.Listening) > observe.MaxSockets || len(s.Established) > observe.MaxSockets
	s.Listening = s.Listening[:min(len(s.Listening), observe.MaxSockets)]
	s.Established = s.Established[:min(len(s.Established), observe.MaxSockets)]
	rep.Violations = rep.Violations[:min(len(rep.Violations), report.MaxViolations)]
}

// observeAfterward collects what needs no live processes: execs, file changes, the network's records.
func (r *run) observeAfterward(cmdPid int) {
	r.decoysTouched()
	if r.events != nil {
		roots := []int{r.sb.InitPid()}
		if cmdPid > 0 {
			roots = append(roots, cmdPid)
		}
		execs, err := r.events.Stop(roots)
		whole := err == nil
		if err != nil {
			r.rep.MarkIncomplete("exec events", err)
		}
		err = r.events.FilterDegraded()
		if err != nil && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
			// As complete, but slower with runs in parallel: say so where it is not the usual lack of
			// privilege (rootless runs, unprivileged eBPF off), as a note.
			r.rep.Notes = append(r.rep.Notes, "exec events filtered by sbx, not in the kernel ("+err.Error()+
				"): every process on the host woke the reader")
		}
		if lost := r.events.Lost(); lost > 0 {
			r.rep.MarkIncomplete("exec events", fmt.Errorf("%d events lost, the exec list may be incomplete", lost))
		}
		r.rep.Processes.ExecsTotal = len(execs) + r.events.Dropped()
		if len(execs) > observe.MaxExecs {
			execs = execs[:observe.MaxExecs]
		}
		r.rep.Processes.ExecsTruncated = r.rep.Processes.ExecsTotal > len(execs)
		r.rep.Processes.Execs = nonNil(execs)
		if r.shareWatch != nil && whole && r.events.Lost() == 0 {
			// Only a whole log tells every process of the tree (for the share watch alone).
			r.inTree = r.events.InTree(roots)
		}
	}
	r.fileChanges()
	if n := r.sb.Network(); n != nil {
		r.rep.Network.Mode = n.Mode()
		denied, err := n.Denied()
		if err != nil {
			r.rep.MarkIncomplete("denied network attempts", err)
		}
		r.rep.Network.Denied = nonNil(denied)
		r.rep.Network.DNS = nonNil(n.DNS())
		r.rep.Notes = append(r.rep.Notes, n.Notes()...)
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
