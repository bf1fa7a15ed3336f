package observe

import (
	"fmt"
	"path"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/safefs"
	"github.com/sbx-dev/sbx/report"
)

// ShareWatch's end (Stop): the events still queued read, the sandbox's operations added up per path,
// and the net changes listed with each remaining entry's size and kind.

// ShareChanges is what Stop found.
type ShareChanges struct {
	FileChanges
	// Unsettled counts operations of processes that exited before their events were read, which could
	// not be told the sandbox's or the host's (no exec stream): they are not listed, a Problem says so.
	Unsettled int
}

// Stop reads the events still queued, stops watching and returns the net changes below the shares,
// with sandbox paths. Call it once the sandbox's processes are frozen or gone. inTree says whether a
// process of pid was in the sandbox's fork tree at some time within [from, to] (CLOCK_MONOTONIC ns):
// it settles the operations of processes that exited before their events were read (nil: they are
// counted as Unsettled).
func (w *ShareWatch) Stop(inTree func(pid int, from, to uint64) bool) *ShareChanges {
	_ = w.f.SetReadDeadline(time.Now())
	<-w.done
	w.drain()
	// Closing a group with a filesystem mark waits for the kernel's SRCU grace period (1.5 to 18 ms
	// measured here): nothing is read from it any more, so that wait is no run's.
	go w.f.Close()
	w.f = nil
	defer w.close()
	out := &ShareChanges{}
	out.Problems = w.lost()
	// Whose: sure, or settled by the exec stream; the rest is the host's, or Unsettled.
	sandbox := func(op shareOp) bool {
		switch {
		case op.sure:
			return true
		case inTree == nil:
			out.Unsettled++
			return false
		}
		return inTree(op.pid, op.from, op.to)
	}
	unplaced := 0
	for _, p := range w.unplaced {
		if sandbox(p.op) {
			unplaced++
		}
	}
	if unplaced > 0 {
		out.Problems = append(out.Problems, fmt.Sprintf("%d changes in directories removed before sbx could place them", unplaced))
	}
	states, order := w.states(sandbox)
	if out.Unsettled > 0 {
		out.Problems = append(out.Problems, fmt.Sprintf("%d changes by processes that exited before sbx read them could not be told the sandbox's or the host's (no exec stream)", out.Unsettled))
	}
	w.list(out, states, order)
	return out
}

// lost says what the reading missed, whoever's it was: the queue's overflow, read errors, bounds.
func (w *ShareWatch) lost() []string {
	var out []string
	for _, sh := range w.shares {
		// Paths are placed by where the kernel has the share: moved on the host meanwhile, its
		// changes may have been taken for another directory's.
		if p, err := safefs.Path(sh.root); err != nil || p != sh.real {
			out = append(out, fmt.Sprintf("the share %s was moved or removed on the host during the run", sh.Host))
		}
	}
	if w.lostPending > 0 {
		out = append(out, fmt.Sprintf("%d changes in removed directories past the bound of %d waiting to be placed", w.lostPending, maxPending))
	}
	if w.overflow {
		out = append(out, "the kernel's queue of file events overflowed: changes were lost")
	}
	return append(out, w.problems...)
}

// states adds up the sandbox's operations per path (where each ended), in the order the paths were
// first changed.
func (w *ShareWatch) states(sandbox func(shareOp) bool) (map[string]*pathState, []string) {
	states := map[string]*pathState{}
	var order []string
	ends := map[string]place{}
	for _, op := range w.ops {
		if !sandbox(op) {
			continue
		}
		op.rel = w.finalRel(op, ends)
		p := w.sandboxPath(op)
		st := states[p]
		if st == nil {
			st = &pathState{before: op.kind != opCreate, exists: true} // a replaced entry was there
			states[p] = st
			order = append(order, p)
		}
		if op.kind != opWrite {
			st.exists = op.kind != opDelete // a write changes no entry: to a removed file, it stays removed
		}
		st.dir = op.dir
		st.host = op
	}
	return states, order
}

// finalRel is where op's entry is at the end: its directory, looked up now by its handle (once per
// directory: ends), holds it under its name. A directory renamed after the event was read (a command
// that moves .git away, writes a hook, and moves it back) then shows where it ended, not where it
// passed. A directory gone or moved out of the share leaves the path of the event.
func (w *ShareWatch) finalRel(op shareOp, ends map[string]place) string {
	end, ok := ends[op.dirKey]
	if !ok {
		end = outside
		if h, _, fsid, _, err := decodeFid([]byte(op.dirKey)); err == nil {
			if pl, ok := w.resolve(fsid, h); ok {
				end = pl
			}
		}
		ends[op.dirKey] = end
	}
	if end.share != op.share {
		return op.rel
	}
	rel := end.rel
	if op.name != "." && op.name != "" {
		rel = path.Join(rel, op.name)
	}
	if w.shares[op.share].file && rel != path.Base(w.shares[op.share].Host) {
		return op.rel
	}
	return rel
}

// drain reads what is still queued after the reader ended.
func (w *ShareWatch) drain() {
	buf := make([]byte, shareReadSize)
	for range 1 << 16 {
		from := monotonic()
		n, err := unix.Read(int(w.f.Fd()), buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			if err != nil && err != unix.EAGAIN {
				w.problem(fmt.Sprintf("reading file events: %v", err))
			}
			return
		}
		w.batch(buf[:n], from)
	}
}

// pathState is what the operations on one path add up to.
type pathState struct {
	before, exists, dir bool
	host                shareOp
}

// list turns the paths' states into the lists, in the order the paths were first changed, with each
// remaining entry's size and kind read without following a link.
func (w *ShareWatch) list(out *ShareChanges, states map[string]*pathState, order []string) {
	max := w.opts.MaxEntries
	for _, p := range order {
		st := states[p]
		c := report.FileChange{Path: p, Kind: "file"}
		if st.dir {
			c.Kind = "dir"
		}
		var list *[]report.FileChange
		switch {
		case !st.before && st.exists:
			c.Change, list = Created, &out.Created
			out.Total.Created++
		case st.before && st.exists:
			c.Change, list = Modified, &out.Modified
			out.Total.Modified++
		case st.before && !st.exists:
			c.Change, list = Deleted, &out.Deleted
			out.Total.Deleted++
		default:
			continue // made and removed within the run
		}
		c.PathB64 = PathB64(p)
		if c.Change != Deleted {
			w.stat(&c, st.host)
		}
		if len(*list) >= max && (c.Change == Deleted || !w.keepChange(c) || len(*list) >= 2*max) {
			out.Truncated = true
			continue
		}
		*list = append(*list, c)
	}
	if w.dropped > 0 {
		out.Truncated = true
		out.Notes = append(out.Notes, fmt.Sprintf("%d more changes were not recorded past the bound of %d operations", w.dropped, 4*max))
	}
}

// stat fills in a listed entry's size, kind, mode and times, read below the share's root handle with
// no link followed. An entry gone meanwhile keeps what the event said.
func (w *ShareWatch) stat(c *report.FileChange, op shareOp) {
	dir, name := safefs.Split(op.rel)
	d, err := safefs.Open(w.shares[op.share].root, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return
	}
	defer d.Close()
	var st unix.Statx_t
	if unix.Statx(int(d.Fd()), name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC,
		unix.STATX_TYPE|unix.STATX_MODE|unix.STATX_SIZE|unix.STATX_CTIME|unix.STATX_MTIME, &st) != nil {
		return
	}
	c.Size, c.Mode = int64(st.Size), uint32(st.Mode)
	c.CTime, c.ModTime = time.Unix(st.Ctime.Sec, int64(st.Ctime.Nsec)), time.Unix(st.Mtime.Sec, int64(st.Mtime.Nsec))
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		c.Kind = "file"
	case unix.S_IFDIR:
		c.Kind, c.Size = "dir", 0
	case unix.S_IFLNK:
		c.Kind = "symlink"
	default:
		c.Kind = "other"
	}
}
