// Package runner carries out one sbx run from a compiled plan to a report: it creates the sandbox, takes
// the before snapshot, runs the command, waits for it (with timeout, signals and cancellation), takes the
// after snapshot, compares what it saw with the plan's expectations and tears everything down.
//
// It is the library form of `sbx exec`; the CLI and the MCP server only add flags and rendering.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

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
	Plan    *policy.Plan
	Args    []string
	Cwd     string
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	Timeout time.Duration // 0: the plan's; both 0: none
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
}

// Run carries out one run. The error is non-nil only when sbx itself failed (it then matches
// sandbox.ErrSetup or wraps what failed); the command's own failure is in the report's exit code.
func Run(ctx context.Context, o Options) (*report.Report, error) {
	t0 := time.Now()
	rep := report.New(o.Plan.Profile, o.Args)
	// The event stream starts before the sandbox so that it sees the command's first exec.
	events, err := observe.StartEvents(observe.EventsOptions{IgnoreExe: sandbox.InitExe})
	if err != nil {
		rep.Notes = append(rep.Notes, "exec events unavailable: "+err.Error())
	}
	sb, err := sandbox.Create(sandbox.Config{Plan: o.Plan, StateRoot: o.StateRoot, Command: sandbox.Command{
		Args: o.Args, Cwd: o.Cwd, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr, Terminal: o.Terminal,
	}})
	if err != nil {
		if events != nil {
			events.Stop(nil)
		}
		return nil, err
	}
	rep.Notes = append(rep.Notes, sb.Notes...)
	rep.Limits.Enforced = enforced(sb, o)
	r := &run{opts: o, sb: sb, rep: rep, events: events}
	denials := observe.StartDenials() // kernel-reported denials: observe/denials.go
	err = r.execute(ctx, t0)
	rep.Denials = denials.Stop(observe.ScopeOf(sb.InitPid(), events, rep.Processes.Execs, rep.Processes.LeftRunning))
	t3 := time.Now()
	if derr := sb.Destroy(); derr != nil {
		err = errors.Join(err, fmt.Errorf("tearing down: %w", derr))
	}
	rep.Timings.Teardown = ms(time.Since(t3))
	rep.Timings.Total = ms(time.Since(t0))
	if err != nil {
		return nil, err
	}
	return rep, nil
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
	opts        Options
	sb          *sandbox.Sandbox
	rep         *report.Report
	filesBefore []*observe.FileChanges // one per sandbox.Layers entry
	events      *observe.Events
}

func (r *run) execute(ctx context.Context, t0 time.Time) error {
	// No process snapshot before the command: until Start the sandbox holds only sbx's supervisor, which
	// snapshots leave out, so everything the after-snapshot finds is the command's doing.
	var err error
	// sbx's own whiteouts and opaque directories are in the upper layer already: only what changes
	// from here on is the command's.
	for _, l := range r.sb.Layers() {
		before, err := observe.Changes(l.Upper, l.Lower)
		if err != nil {
			return fmt.Errorf("reading the writable layer: %w", err)
		}
		r.filesBefore = append(r.filesBefore, before)
	}
	t1 := time.Now()
	r.rep.Timings.Setup = ms(t1.Sub(t0))
	if c := r.sb.Console(); c != nil && r.opts.OnConsole != nil {
		r.opts.OnConsole(c)
	}
	cmd, err := r.sb.Start()
	if err != nil {
		return err
	}
	if r.opts.OnStart != nil {
		r.opts.OnStart(cmd.Pid)
	}
	code, end, err := r.wait(ctx, cmd)
	hits := r.sb.LimitHits()
	if err != nil && ctx.Err() == nil && hits.OOMKills > 0 {
		// The OOM killer took the sandbox's init (it prefers the command, but not always): the command
		// died with the sandbox, killed.
		code, end, err = 128+int(syscall.SIGKILL), endKilled, nil
		r.rep.Notes = append(r.rep.Notes, "the OOM killer killed sbx's init inside the sandbox, and with it every process there")
	}
	if err != nil {
		return err
	}
	r.rep.ExitCode, r.rep.TimedOut = code, end == endTimedOut
	r.rep.OOMKilled, r.rep.PidsLimitHit = hits.OOMKills > 0, hits.PidsMax > 0
	if hits.OOMKills > 0 {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("the memory limit was hit: the OOM killer killed %d process(es)", hits.OOMKills))
	}
	if hits.PidsMax > 0 {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("the pids limit was hit: %d fork(s) refused", hits.PidsMax))
	}
	t2 := time.Now()
	r.rep.Timings.Run = ms(t2.Sub(t1))
	if end == endExited {
		// A sandbox sbx killed has nothing left to look at.
		if err := r.observe(cmd.Pid); err != nil {
			return err
		}
	}
	if err := r.observeAfterward(cmd.Pid); err != nil {
		return err
	}
	policy.Compare(r.opts.Plan.Expect, r.rep)
	r.rep.Timings.Observe = ms(time.Since(t2))
	return nil
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

func (r *run) snapshot() (*observe.Snap, error) {
	pids, err := r.sb.Pids()
	if err != nil {
		return nil, fmt.Errorf("listing the sandbox's processes: %w", err)
	}
	opts := observe.SnapshotOptions{HostPids: pids, InitHostPid: r.sb.InitPid(), NetNS: r.sb.NetNSPath()}
	if sandbox.Rootless() {
		opts.NetDiag = r.sb.NetDiag
	}
	snap, err := observe.Snapshot(opts)
	if err != nil {
		return nil, fmt.Errorf("taking a snapshot: %w", err)
	}
	return snap, nil
}

// observe takes the after snapshot and fills the report's observations.
func (r *run) observe(cmdPid int) error {
	r.sb.Settle(settleMax)
	after, err := r.snapshot()
	if err != nil {
		return err
	}
	r.rep.Processes.LeftRunning = nonNil(observe.LeftRunning(nil, after, cmdPid))
	r.rep.Sockets.Listening = nonNil(after.Listening)
	r.rep.Sockets.Established = nonNil(after.Established)
	return nil
}

// observeAfterward collects what needs no live processes: execs, file changes, the network's records.
func (r *run) observeAfterward(cmdPid int) error {
	if r.events != nil {
		execs, err := r.events.Stop([]int{r.sb.InitPid(), cmdPid})
		if err != nil {
			r.rep.Notes = append(r.rep.Notes, "exec events: "+err.Error())
		}
		if lost := r.events.Lost(); lost > 0 {
			r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("exec events: %d events lost, the exec list may be incomplete", lost))
		}
		r.rep.Processes.Execs = nonNil(execs)
	}
	if err := r.fileChanges(); err != nil {
		return err
	}
	if n := r.sb.Network(); n != nil {
		r.rep.Network.Mode = report.NetworkContract
		denied, err := n.Denied()
		if err != nil {
			return fmt.Errorf("reading denied network attempts: %w", err)
		}
		r.rep.Network.Denied = nonNil(denied)
		r.rep.Network.DNS = nonNil(n.DNS())
	}
	return nil
}

// fileChanges lists what the command changed in the writable layers and copies it out if asked.
func (r *run) fileChanges() error {
	var created, modified, deleted []observe.FileChange
	for i, l := range r.sb.Layers() {
		after, err := observe.Changes(l.Upper, l.Lower)
		if err != nil {
			return fmt.Errorf("reading the writable layer: %w", err)
		}
		c, m, d := observe.DiffChanges(r.filesBefore[i], after)
		if r.opts.Changes != "" {
			dest := filepath.Join(r.opts.Changes, l.At)
			// Deletions of every layer go into one DELETED.txt at the top, with their sandbox paths.
			if err := observe.CopyChanges(l.Upper, slices.Concat(c, m), dest); err != nil {
				return fmt.Errorf("copying the changed files to %s: %w", r.opts.Changes, err)
			}
		}
		created = append(created, under(l.At, c)...)
		modified = append(modified, under(l.At, m)...)
		deleted = append(deleted, under(l.At, d)...)
	}
	if r.opts.Changes != "" && len(deleted) > 0 {
		if err := observe.CopyChanges(r.opts.Changes, deleted, r.opts.Changes); err != nil {
			return fmt.Errorf("listing the deleted files in %s: %w", r.opts.Changes, err)
		}
	}
	shm, err := r.tmpfsChanges("/dev/shm")
	if err != nil {
		return err
	}
	created = append(created, shm...)
	f := &r.rep.Files
	f.Details = slices.Concat(created, modified, deleted)
	f.Created, f.Modified, f.Deleted = paths(created), paths(modified), paths(deleted)
	return nil
}

// under puts the paths of a layer mounted at at into the sandbox's view.
func under(at string, cs []observe.FileChange) []observe.FileChange {
	if at == "/" {
		return cs
	}
	for i := range cs {
		cs[i].Path = at + cs[i].Path
	}
	return cs
}

// tmpfsChanges lists what the command left in one of the sandbox's own tmpfs mounts, which start empty
// (everything there is created), and copies it out with the rest when asked. It reads the mount through
// the sandbox's pid 1, so only while the sandbox is up: a sandbox sbx killed has nothing to show.
func (r *run) tmpfsChanges(mount string) ([]observe.FileChange, error) {
	dir := fmt.Sprintf("/proc/%d/root%s", r.sb.InitPid(), mount)
	if _, err := os.Stat(dir); err != nil {
		return nil, nil
	}
	fc, err := observe.Changes(dir, "")
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", mount, err)
	}
	if r.opts.Changes != "" && len(fc.Created) > 0 {
		if err := observe.CopyChanges(dir, fc.Created, filepath.Join(r.opts.Changes, mount)); err != nil {
			return nil, fmt.Errorf("copying the changed files to %s: %w", r.opts.Changes, err)
		}
	}
	return under(mount, fc.Created), nil
}

func paths(cs []observe.FileChange) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Path)
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
