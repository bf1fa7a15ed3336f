package runner

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sbx-dev/sbx/internal/safefs"
	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/state"
)

// ErrChangesDir is matched by the error of a --changes DIR that cannot be used.
var ErrChangesDir = errors.New("unusable --changes directory")

// openChangesDir creates dir and opens it once as the root handle every copy goes through, before the
// command runs: from then on the path is never walked again. A dir in a writable share is refused: the
// command could fill it with links and files of its own while it runs.
func openChangesDir(dir, stateRoot string, shares []policy.Share) (*os.File, error) {
	if dir == "" {
		return nil, nil
	}
	// sbx writes the command's files there as the caller: in the state root they could stand in for
	// what later runs trust (the compiled seccomp filters).
	if state.ReachesRoot(stateRoot, dir) {
		return nil, fmt.Errorf("%w: %s contains or lies in sbx's state root", ErrChangesDir, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrChangesDir, err)
	}
	f, err := safefs.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrChangesDir, err)
	}
	// The check is on what the handle is, not on the path: the path is never used again.
	real, err := safefs.Path(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %w", ErrChangesDir, err)
	}
	for _, sh := range shares {
		host, err := filepath.EvalSymlinks(sh.Host)
		if err != nil {
			host = sh.Host
		}
		if sh.Writable && (real == host || host == "/" || strings.HasPrefix(real, host+"/")) {
			f.Close()
			return nil, fmt.Errorf("%w: %s lies in the writable share %s", ErrChangesDir, dir, sh.Host)
		}
	}
	return f, nil
}

// fileChanges lists what the command changed in the writable layers and copies it out if asked. It
// never fails: what it could not read is a note and makes the run incomplete (observe.incomplete), what
// it could not copy is a note.
func (r *run) fileChanges() {
	stop := r.observeStop()
	defer r.releaseStop()
	lim := observe.Limits{Stop: stop}
	cp := &observe.Copier{Stop: stop, Budget: r.sb.DiskBytes()}
	var created, modified, deleted []report.FileChange
	var total report.Totals
	truncated := false
	collect := func(fc *observe.FileChanges, at string) {
		created = append(created, under(at, fc.Created)...)
		modified = append(modified, under(at, fc.Modified)...)
		deleted = append(deleted, under(at, fc.Deleted)...)
		total.Created += fc.Total.Created
		total.Modified += fc.Total.Modified
		total.Deleted += fc.Total.Deleted
		truncated = truncated || fc.Truncated
	}
	early := r.layerReading
	if early != nil {
		<-early.done
	}
	for i, l := range r.layers() {
		var fc *observe.FileChanges
		var err error
		if early != nil {
			fc, err = early.changes[i], early.errs[i]
		} else {
			lim.Keep = r.keepIn(l.At)
			fc, err = observe.ChangesSince(r.filesBefore[i], l.Upper, l.Lower, lim)
		}
		r.fileNotes(l.At, fc, err)
		// Deletions of every layer go into one DELETED.txt at the top, with their sandbox paths (below).
		r.copyLayer(cp, l.Upper, nil, l.At, slices.Concat(fc.Created, fc.Modified))
		collect(fc, l.At)
	}
	for _, m := range r.mounts {
		lim.Keep = r.keepIn(m.at)
		switch {
		case m.dir != nil:
			collect(r.tmpfsChanges(cp, m.at, m.dir, lim), m.at)
		case m.err != nil:
			r.rep.MarkIncomplete("file changes in "+m.at, m.err)
		}
	}
	r.copyNotes(cp)
	seen := map[string]bool{}
	complete := false
	if sc := r.stopShareWatch(); sc != nil {
		collect(&sc.FileChanges, "/")
		for _, c := range slices.Concat(sc.Created, sc.Modified, sc.Deleted) {
			seen[c.Path] = true
		}
		complete = len(sc.Problems) == 0 && sc.Unsettled == 0
	}
	if shares := r.writableShares(); len(shares) > 0 && !complete {
		// Without a complete watch (rootless runs; a watch that lost events) the persistence places
		// are looked at by their ctime. A complete watch knows better: a host process's change there
		// is not the command's.
		sc, sm, err := shareChanges(shares, r.started)
		if err != nil {
			r.rep.MarkIncomplete("file changes in writable shares", err)
		}
		sc, sm = notListed(sc, seen), notListed(sm, seen)
		created, modified = append(created, sc...), append(modified, sm...)
		total.Created += len(sc)
		total.Modified += len(sm)
	}
	// Each layer's reading is bounded; so is the report, across layers.
	for _, l := range []*[]report.FileChange{&created, &modified, &deleted} {
		if len(*l) > observe.DefaultMaxEntries {
			*l, truncated = keepFirst(*l, observe.DefaultMaxEntries, r.persistenceFinding), true
		}
	}
	if r.changesDir != nil && len(deleted) > 0 {
		cp.Copy(r.changesDir, r.changesDir, deleted) // only deletions: writes DELETED.txt, copies nothing
	}
	f := &r.rep.Files
	f.Details, f.Total, f.Truncated = nonNil(slices.Concat(created, modified, deleted)), total, truncated
	f.Created, f.Modified, f.Deleted = paths(created), paths(modified), paths(deleted)
	if truncated {
		note := fmt.Sprintf("file changes: the lists keep their first %d entries each; files.total counts all (%d created, %d modified, %d deleted)",
			observe.DefaultMaxEntries, total.Created, total.Modified, total.Deleted)
		if r.changesDir != nil {
			note += "; --changes copied only the listed entries"
		}
		r.rep.Notes = append(r.rep.Notes, note)
	}
}

// layers are the sandbox's writable layers, read once: without root sbx.Layers opens up what the command
// closed to its owner, a walk of every layer, and peek asks for them once per file it reads (10,000
// look-alike persistence files cost 7 minutes).
func (r *run) layers() []sandbox.Layer {
	if r.layerList == nil {
		r.layerList = r.sb.Layers()
	}
	return r.layerList
}

// writableShares are the run's writable shares.
func (r *run) writableShares() []shareAt {
	var out []shareAt
	for _, sh := range r.sb.Shares() {
		if sh.Writable {
			out = append(out, shareAt{host: sh.Host, sandbox: sh.Sandbox})
		}
	}
	return out
}

// shareNote says in the report what of the writable shares is looked at.
func (r *run) shareNote() {
	var names []string
	for _, sh := range r.writableShares() {
		names = append(names, sh.sandbox)
	}
	if len(names) == 0 {
		return
	}
	note := fmt.Sprintf("writable shares (%s): what the command writes there lands on the host at once", strings.Join(names, ", "))
	if r.shareWatch != nil {
		note += "; what the sandbox's processes created, modified or deleted there is listed in files from the kernel's file events (a directory renamed is listed as itself, not its entries; a write through a shared memory map shows when the file is closed); the host's own writes there are left out"
	} else {
		why := "the kernel's file events need root"
		if !sandbox.Rootless() {
			why = "the kernel's file events could not be had: see file changes in writable shares"
		}
		note += " and is not listed in files (" + why + "), but for the places below each share's top where persistence lies (.git/hooks, .git/config, .envrc, shell startup and ssh files, systemd user units, python .pth files), which are listed and judged when the run changed them"
	}
	r.rep.Notes = append(r.rep.Notes, note)
}

// keepIn says which entries of a layer mounted at at plant persistence (observe.Limits.Keep).
func (r *run) keepIn(at string) func(report.FileChange) bool {
	return func(c report.FileChange) bool {
		c.Path = path.Join(at, c.Path)
		return r.persistenceFinding(c)
	}
}

// persistenceFinding says whether a change (a sandbox path) plants persistence as policy.FindPersistence
// will judge it, content included: only those are kept past the bounds of the file lists. Kept by path
// alone, 10,000 directories named .bashrc or .pth files that run nothing used up the allowance, and a
// git hook planted after them was in no list, and the run passed.
func (r *run) persistenceFinding(c report.FileChange) bool {
	if c.Kind == "dir" || c.Change == observe.Deleted || !policy.MaybePersistence(c.Path) {
		return false
	}
	return policy.PersistenceMechanism(c.Path, func() []byte { return r.peek(c.Path) }) != ""
}

// keepFirst cuts cs to its first n entries, and keeps beyond them (up to n more) those that plant
// persistence (keep): the report judges each of those, whatever came before it.
func keepFirst(cs []report.FileChange, n int, keep func(report.FileChange) bool) []report.FileChange {
	out := cs[:n:n]
	for _, c := range cs[n:] {
		if len(out) < 2*n && keep(c) {
			out = append(out, c)
		}
	}
	return out
}

// stopOnSignal returns a channel closed when the caller signals sbx or cancels the run, so that reading
// and copying what the command left end at once; release ends the watch.
func (r *run) stopOnSignal() (<-chan struct{}, func()) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-r.opts.Signals:
		case <-r.ctx.Done():
		case <-done:
			return
		}
		close(stop)
	}()
	return stop, func() { close(done) }
}

// layerReading is the reading of the writable layers begun by readLayersEarly.
type layerReading struct {
	done    chan struct{} // closed when changes and errs are set
	changes []*observe.FileChanges
	errs    []error
}

// readLayersEarly begins the reading of each writable layer as soon as nothing in the sandbox can
// change it any more (the command reaped, the sandbox frozen or down to its init), beside the after
// snapshot and the collectors' ends, instead of after them: fileChanges takes its result. It reads
// only the layers and, for what to keep past the lists' bounds, the files there (persistenceFinding);
// nothing of the report.
func (r *run) readLayersEarly() {
	layers := r.layers()
	lr := &layerReading{done: make(chan struct{}), changes: make([]*observe.FileChanges, len(layers)), errs: make([]error, len(layers))}
	stop := r.observeStop()
	go func() {
		defer close(lr.done)
		for i, l := range layers {
			lr.changes[i], lr.errs[i] = observe.ChangesSince(r.filesBefore[i], l.Upper, l.Lower, observe.Limits{Stop: stop, Keep: r.keepIn(l.At)})
		}
	}()
	r.layerReading = lr
}

// observeStop is closed when a signal comes or the run is cancelled while the file changes are read
// and copied: one for the early reading of the layers and fileChanges, ended by releaseStop.
func (r *run) observeStop() <-chan struct{} {
	if r.obsStop == nil {
		r.obsStop, r.obsRelease = r.stopOnSignal()
	}
	return r.obsStop
}

func (r *run) releaseStop() {
	if r.obsRelease != nil {
		r.obsRelease()
		r.obsStop, r.obsRelease = nil, nil
	}
}

// fileNotes turns what a reading could not see into notes that make the run incomplete.
func (r *run) fileNotes(at string, fc *observe.FileChanges, err error) {
	if err != nil && len(fc.Problems) == 0 {
		r.rep.MarkIncomplete("file changes in "+at, err)
	}
	for _, p := range fc.Problems {
		r.rep.MarkIncomplete("file changes in "+at, errors.New(p))
	}
	for _, n := range fc.Notes {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("file changes in %s: %s", at, n))
	}
}

// copyLayer copies one layer's changes into its place below --changes DIR, through the root handle
// opened before the command ran. src is the layer's tree: a path of sbx's own, or an open handle.
func (r *run) copyLayer(cp *observe.Copier, srcPath string, src *os.File, at string, changes []report.FileChange) {
	if r.changesDir == nil || len(changes) == 0 {
		return
	}
	if src == nil {
		var err error
		if src, err = safefs.OpenRoot(srcPath); err != nil {
			cp.Problems = append(cp.Problems, fmt.Sprintf("%s: %v", at, err))
			return
		}
		defer src.Close()
	}
	dst, err := safefs.MkdirAll(r.changesDir, at, 0o755, nil)
	if err != nil {
		cp.Problems = append(cp.Problems, fmt.Sprintf("%s: %v", at, err))
		return
	}
	defer dst.Close()
	if err := cp.Copy(src, dst, changes); errors.Is(err, observe.ErrCopyStopped) {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("--changes: copying stopped by a signal after %d entries (%d bytes); the rest of %s was not copied", cp.Files, cp.Bytes, r.opts.Changes))
	}
}

// copyNotes says in the report what the copy left out.
func (r *run) copyNotes(cp *observe.Copier) {
	if r.changesDir == nil {
		return
	}
	for _, p := range cp.Problems {
		r.rep.Notes = append(r.rep.Notes, "--changes: not copied: "+p)
	}
	if n := cp.Dropped(); n > 0 {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("--changes: %d more entries not copied", n))
	}
	if len(cp.Skipped) > 0 {
		cp.WriteSkipped(r.changesDir)
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("--changes: %d entries not copied (special files, or beyond the disk limit of %d bytes): listed in %s",
			len(cp.Skipped), r.sb.DiskBytes(), filepath.Join(r.opts.Changes, "NOT-COPIED.txt")))
	}
}

// under puts the paths of a layer mounted at at into the sandbox's view.
func under(at string, cs []report.FileChange) []report.FileChange {
	if at == "/" {
		return cs
	}
	for i := range cs {
		cs[i].Path = at + cs[i].Path
		if cs[i].PathB64 != "" {
			cs[i].PathB64 = observe.PathB64(cs[i].Path)
		}
	}
	return cs
}

// ownMounts are the sandbox's own file systems, empty at the start, whose changes are reported with the
// layers': its shared memory, and its POSIX message queues (mq_open, a file in /dev/mqueue), which
// outlive the processes that made them until the sandbox goes.
var ownMounts = []string{"/dev/shm", "/dev/mqueue"}

// ownMount is one of ownMounts, opened once the command started (openTmpfs).
type ownMount struct {
	at  string
	dir *os.File // nil: err says why, or the sandbox has none
	err error
}

// openMounts opens ownMounts; the caller closes them with closeMounts.
func (r *run) openMounts() {
	for _, at := range ownMounts {
		dir, err := r.openTmpfs(at)
		if errors.Is(err, os.ErrNotExist) {
			err = nil // a sandbox without one
		}
		r.mounts = append(r.mounts, ownMount{at: at, dir: dir, err: err})
	}
}

func (r *run) closeMounts() {
	for _, m := range r.mounts {
		if m.dir != nil {
			m.dir.Close()
		}
	}
}

// openTmpfs opens the sandbox's tmpfs mount (its /dev/shm) through the sandbox's pid 1 (its /proc
// root, then no link below it), once the command has started: the handle keeps the tmpfs, which lives
// in the sandbox's mount namespace, readable after the sandbox is gone, so that a run sbx killed (a
// timeout, a signal the command ignored) still reports what the command left there. Read at the end
// through /proc instead, it was silently missing from such a run's report. The pid is the sandbox's
// init only while the sandbox's cgroup holds it: checked before and after the open, so that a reused
// pid never makes sbx read another process's files.
func (r *run) openTmpfs(mount string) (*os.File, error) {
	if !r.initAlive() {
		return nil, errors.New("the sandbox's init is gone")
	}
	root, err := safefs.OpenRoot(fmt.Sprintf("/proc/%d/root", r.sb.InitPid()))
	if err != nil {
		return nil, err
	}
	defer root.Close()
	dir, err := safefs.OpenDir(root, mount)
	if err != nil {
		return nil, err
	}
	if !r.initAlive() {
		dir.Close()
		return nil, errors.New("the sandbox's init is gone")
	}
	return dir, nil
}

// tmpfsChanges lists what the command left in the sandbox's tmpfs (dir, opened by openTmpfs), which
// starts empty (everything there is created), and copies it out with the rest when asked.
func (r *run) tmpfsChanges(cp *observe.Copier, mount string, dir *os.File, lim observe.Limits) *observe.FileChanges {
	fc := observe.ChangesSinceDir(nil, dir, "", lim)
	r.fileNotes(mount, fc, nil)
	r.copyLayer(cp, "", dir, mount, fc.Created)
	return fc
}

// initAlive says whether the sandbox's init is still in the sandbox's cgroup.
func (r *run) initAlive() bool {
	pids, err := r.sb.Pids()
	return err == nil && slices.Contains(pids, r.sb.InitPid())
}

func paths(cs []report.FileChange) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Path)
	}
	return out
}
