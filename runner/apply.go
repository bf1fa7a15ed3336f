package runner

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/apply"
	"github.com/sbx-dev/sbx/internal/safefs"
	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/sandbox"
)

// openHostCwd opens the host's working directory before the command runs, when the run may apply its
// changes there: from then on its path is never walked again.
func (r *run) openHostCwd() {
	if mode := r.opts.Plan.Filesystem.Apply; mode == "" || mode == report.ApplyNever || r.opts.Cwd == "" || r.opts.Cwd == "/" {
		return
	}
	f, err := safefs.OpenNoLinks(r.opts.Cwd)
	if err != nil {
		r.hostCwdErr = err
		return
	}
	r.hostCwd = f
}

// applyChanges applies the working directory's changes to the host's, as the profile's apply mode and
// the verdict say, and fills the report's apply section. Called once the run is judged.
func (r *run) applyChanges() {
	a := &r.rep.Apply
	a.Mode = r.opts.Plan.Filesystem.Apply
	if a.Mode == "" {
		a.Mode = report.ApplyNever
	}
	cwd := path.Clean(r.opts.Cwd)
	layer, rel, inLayer := r.cwdLayer(cwd)
	switch {
	case a.Mode == report.ApplyNever:
		a.Reason = "mode never: the working directory's changes are discarded"
		if n := r.cwdChanges(cwd); n > 0 {
			what := "changes"
			if n == 1 {
				what = "change"
			}
			r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("%d %s in the working directory discarded; --apply keeps them when the run passes", n, what))
		}
		return
	case r.writableShareAt(cwd):
		a.Reason = "the working directory is a writable share: the command's writes reached the host at once"
		return
	case !inLayer:
		a.Reason = "the working directory is not in a writable layer (hidden or shared): nothing to apply"
		return
	case r.hostCwd == nil:
		a.Reason = fmt.Sprintf("the host's working directory could not be opened before the run: %v", r.hostCwdErr)
		return
	case a.Mode == report.ApplyOnPass && r.rep.Verdict != report.VerdictPass:
		a.Reason = "the verdict is " + r.rep.Verdict + ": nothing was applied (mode on-pass)"
		return
	}
	upperRoot, err := safefs.OpenRoot(layer.Upper)
	if err != nil {
		a.Reason = "the writable layer could not be read: " + err.Error()
		r.rep.MarkIncomplete("apply", err)
		return
	}
	defer upperRoot.Close()
	upper, err := safefs.OpenDir(upperRoot, rel)
	if errors.Is(err, unix.ENOENT) {
		a.Applied = true // nothing changed there
		return
	}
	if err != nil {
		a.Reason = "the writable layer could not be read: " + err.Error()
		r.rep.MarkIncomplete("apply", err)
		return
	}
	defer upper.Close()
	var view *os.File
	if layer.Merged != "" {
		if vr, err := safefs.OpenRoot(layer.Merged); err == nil {
			if view, err = safefs.OpenDir(vr, rel); err == nil {
				defer view.Close()
			}
			vr.Close()
		}
	}
	stop, release := r.stopOnSignal()
	defer release()
	findings := map[string]string{}
	for _, p := range r.rep.Persistence {
		findings[p.Path] = p.Mechanism
	}
	res := apply.Apply(apply.Options{Upper: upper, View: view, Host: r.hostCwd, Since: r.started, Stop: stop,
		Chown: !sandbox.Rootless(), Own: r.ownEntry(layer, rel), Journal: r.sb.ApplyJournal(cwd),
		Withhold: func(p string) string {
			if m, ok := findings[path.Join(cwd, p)]; ok {
				return "a persistence finding: " + m
			}
			return ""
		}})
	if res.Refused != "" {
		a.Reason = res.Refused
		return
	}
	a.Applied, a.Entries, a.Bytes, a.Withheld, a.Problems = true, res.Entries, res.Bytes, res.Withheld, res.Problems
	for i := range a.Withheld {
		a.Withheld[i].Path = path.Join(cwd, a.Withheld[i].Path)
	}
	for _, c := range res.Conflicts {
		e := c.ApplyEntry
		e.Path = path.Join(cwd, e.Path)
		a.Conflicts = append(a.Conflicts, e)
	}
	if len(res.Conflicts) > 0 {
		a.Kept = r.keepConflicts(upper, view, res.Conflicts)
	}
}

// cwdLayer finds the writable layer the working directory lies in and its path there.
func (r *run) cwdLayer(cwd string) (sandbox.Layer, string, bool) {
	ls := r.layers()
	for i := len(ls) - 1; i >= 0; i-- { // the working directory's own layer comes last
		at := strings.TrimSuffix(ls[i].At, "/")
		if cwd == ls[i].At || strings.HasPrefix(cwd, at+"/") {
			return ls[i], strings.TrimPrefix(strings.TrimPrefix(cwd, at), "/"), true
		}
	}
	return sandbox.Layer{}, "", false
}

// writableShareAt says whether the working directory is, or lies in, a writable share.
func (r *run) writableShareAt(cwd string) bool {
	for _, sh := range r.writableShares() {
		s := strings.TrimSuffix(sh.sandbox, "/")
		if cwd == sh.sandbox || strings.HasPrefix(cwd, s+"/") {
			return true
		}
	}
	return false
}

// cwdChanges counts the report's changes below the working directory that were discarded: those in a
// writable share below it reached the host.
func (r *run) cwdChanges(cwd string) int {
	n := 0
	for _, c := range r.rep.Files.Details {
		if strings.HasPrefix(c.Path, strings.TrimSuffix(cwd, "/")+"/") && !r.writableShareAt(c.Path) {
			n++
		}
	}
	return n
}

// ownEntry says which entries of the layer below the working directory are sbx's own preparation (the
// reading taken before the command ran), as long as the command left them as they were.
func (r *run) ownEntry(layer sandbox.Layer, rel string) func(string, *unix.Stat_t) bool {
	own := map[string]report.FileChange{}
	for i, l := range r.layers() {
		if l.At != layer.At || i >= len(r.filesBefore) || r.filesBefore[i] == nil {
			continue
		}
		b := r.filesBefore[i]
		for _, c := range append(append(append([]report.FileChange{}, b.Created...), b.Modified...), b.Deleted...) {
			own[c.Path] = c
		}
	}
	return func(p string, st *unix.Stat_t) bool {
		c, ok := own[path.Join("/", rel, p)]
		if !ok {
			return false
		}
		if c.Change == observe.Deleted { // sbx's whiteout: still one
			return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
		}
		return c.CTime.Unix() == st.Ctim.Sec && c.Mode == st.Mode
	}
}

// keepConflicts copies the run's versions of conflicting entries where the report names them: below
// --changes DIR when the run has one (everything is there already), else in a directory of the
// caller's state home.
func (r *run) keepConflicts(upper, view *os.File, cs []apply.Conflict) string {
	if r.changesDir != nil {
		return r.opts.Changes
	}
	dir := filepath.Join(stateHome(), "conflicts", r.sb.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		r.rep.Notes = append(r.rep.Notes, "apply: the run's copies of the conflicts could not be kept: "+err.Error())
		return ""
	}
	dst, err := safefs.OpenRoot(dir)
	if err != nil {
		r.rep.Notes = append(r.rep.Notes, "apply: the run's copies of the conflicts could not be kept: "+err.Error())
		return ""
	}
	defer dst.Close()
	cp := &observe.Copier{Budget: r.sb.DiskBytes()}
	var fromUpper, fromView []report.FileChange
	for _, c := range cs {
		fc := report.FileChange{Path: c.Path, Change: observe.Modified}
		if c.FromView && view != nil {
			fromView = append(fromView, fc)
		} else {
			fromUpper = append(fromUpper, fc)
		}
	}
	cp.Copy(upper, dst, fromUpper)
	if view != nil {
		cp.Copy(view, dst, fromView)
	}
	for _, p := range cp.Problems {
		r.rep.Notes = append(r.rep.Notes, "apply: a conflict's copy not kept: "+p)
	}
	return dir
}

// stateHome is where sbx keeps what outlives a run for the caller: $XDG_STATE_HOME/sbx, else
// ~/.local/state/sbx; /var/lib/sbx for root.
func stateHome() string {
	if os.Geteuid() == 0 {
		return "/var/lib/sbx"
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "sbx")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "sbx")
}
