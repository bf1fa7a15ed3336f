// Package text renders an sbx.report/v1 report for a person: the verdict first, then the violations,
// the tree of what was left running with the fds worth a look, and short tables of everything else.
//
// The rendering is bounded (long lists are cut, with a line saying how much is left out) and safe to
// print on a terminal: every string the sandboxed command could choose (command lines, paths, names) is
// cleaned of control and invisible format characters first. The JSON report always has everything.
// It imports nothing of sbx but package report and, like it, builds without cgo.
package text

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/sbx-dev/sbx/report"
)

// Limits that keep the human report short; the JSON report always has everything.
const (
	argvWidth   = 72 // characters of a process's command line
	maxFiles    = 10 // paths per kind of file change
	maxRows     = 20 // rows of any other table
	maxFDsShown = 12 // fds per process in the tree
)

// Options say how to render.
type Options struct {
	// Color paints the verdict, headings and marks with SGR escape codes; the caller sets it when w is
	// a terminal. NO_COLOR in the environment (https://no-color.org) turns it off whatever it says.
	Color bool
	// Now is the clock the ages of processes are measured against; zero means time.Now().
	Now time.Time
}

// Write renders r for a person on w.
func Write(w io.Writer, r *report.Report, o Options) {
	if os.Getenv("NO_COLOR") != "" {
		o.Color = false
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	rr := &renderer{w: w, color: o.Color, now: o.Now}
	rr.render(r)
}

// renderer holds what the sections share: where to write, whether to paint, and the clock ages are
// measured against (fixed in tests).
type renderer struct {
	w     io.Writer
	color bool
	now   time.Time
}

func (rr *renderer) render(r *report.Report) {
	rr.verdict(r)
	rr.cut(len(r.Violations), r.ViolationsTotal, "violations")
	rr.tree(r.Processes.LeftRunning)
	rr.cut(len(r.Processes.LeftRunning), r.Processes.LeftRunningTotal, "processes left running")
	rr.sockets("listening", r.Sockets.Listening)
	rr.cut(len(r.Sockets.Listening), r.Sockets.ListeningTotal, "listening sockets")
	rr.sockets("established", r.Sockets.Established)
	rr.cut(len(r.Sockets.Established), r.Sockets.EstablishedTotal, "established sockets")
	rr.denied(r.Network.Denied)
	rr.dns(r.Network.DNS)
	rr.files(r.Files)
	rr.apply(r.Apply)
	rr.persistence(r.Persistence)
	rr.credentials(r.Credentials)
	rr.denials(r.Denials)
	rr.notes(r.Notes)
}

// cut says that the report keeps only kept of total entries of a list.
func (rr *renderer) cut(kept, total int, what string) {
	if total > kept {
		fmt.Fprintln(rr.w, rr.paint(sgrDim, fmt.Sprintf("  ... %d more %s not kept (the report lists the first %d)", total-kept, what, kept)))
	}
}

// paint wraps s in an SGR colour code when colour is on. Only whole lines and words outside tables are
// painted, so that escape codes never upset column widths.
func (rr *renderer) paint(code, s string) string {
	if !rr.color || s == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

const (
	sgrBold   = "1"
	sgrDim    = "2"
	sgrRed    = "31"
	sgrBoldRd = "1;31"
	sgrGreen  = "32"
	sgrYellow = "33"
)

func (rr *renderer) heading(title string) {
	fmt.Fprintln(rr.w, rr.paint(sgrBold, title+":"))
}

func (rr *renderer) verdict(r *report.Report) {
	verdict := rr.paint(sgrGreen, "PASS")
	switch {
	case r.TimedOut: // never PASS: the run did not finish (the report's verdict is violation, rule timeout)
		verdict = rr.paint(sgrBoldRd, "TIMED OUT")
	case r.Verdict == report.VerdictViolation:
		verdict = rr.paint(sgrBoldRd, "VIOLATION")
	}
	status := fmt.Sprintf("exit %d", r.ExitCode)
	if r.OOMKilled {
		status += ", out of memory"
	}
	// The network mode that applied, which --allow (contract) or an MCP call may have set apart from
	// the profile's own.
	network := ""
	if r.Network.Mode != "" {
		network = "  network " + clean(r.Network.Mode)
	}
	fmt.Fprintf(rr.w, "sbx: %s  %s  profile %s%s  %.0f ms\n", verdict, status, r.Profile, network, r.Timings.Total)
	for _, v := range r.Violations {
		fmt.Fprintf(rr.w, "  %s %s: %s\n", rr.paint(sgrRed, "✗"), v.Rule, clean(v.Message))
	}
}

// tree draws what was left running as a forest: a process under its parent when the parent is left
// running too, else at the top level (its parent exited, or it is a child of the sandbox's init).
func (rr *renderer) tree(procs []report.Process) {
	if len(procs) == 0 {
		return
	}
	rr.heading("left running")
	byPid := make(map[int]bool, len(procs))
	for _, p := range procs {
		byPid[p.Pid] = true
	}
	children := make(map[int][]report.Process)
	var roots []report.Process
	for _, p := range procs {
		if p.PPid != p.Pid && byPid[p.PPid] {
			children[p.PPid] = append(children[p.PPid], p)
		} else {
			roots = append(roots, p)
		}
	}
	byPidOrder := func(a, b report.Process) int { return a.Pid - b.Pid }
	slices.SortFunc(roots, byPidOrder)
	for _, c := range children {
		slices.SortFunc(c, byPidOrder)
	}
	seen := make(map[int]bool)
	for i, p := range roots {
		rr.node(p, "  ", i == len(roots)-1, true, children, seen)
	}
}

// node draws p and, below it, its children. prefix is the indentation drawn so far; top marks a root,
// which gets no branch of its own.
func (rr *renderer) node(p report.Process, prefix string, last, top bool, children map[int][]report.Process, seen map[int]bool) {
	if seen[p.Pid] {
		return // a pid loop in a broken report; draw each process once
	}
	seen[p.Pid] = true
	branch, cont := "", ""
	if !top {
		branch, cont = "├─ ", "│  "
		if last {
			branch, cont = "└─ ", "   "
		}
	}
	line := fmt.Sprintf("%s  %s", rr.paint(sgrBold, "pid "+strconv.Itoa(p.Pid)), argvString(p.Argv, p.Exe, argvWidth))
	if flags := rr.processFlags(p); flags != "" {
		line += "  " + flags
	}
	fmt.Fprintf(rr.w, "%s%s%s\n", prefix, branch, line)
	inner := prefix + cont
	kids := children[p.Pid]
	fdPrefix := inner + "   "
	if len(kids) > 0 {
		fdPrefix = inner + "│  "
	}
	rr.fds(fdPrefix, p.FDs)
	for i, c := range kids {
		rr.node(c, inner, i == len(kids)-1, false, children, seen)
	}
}

// processFlags says what is unusual about a process, and its age.
func (rr *renderer) processFlags(p report.Process) string {
	var flags []string
	if p.Orphaned {
		flags = append(flags, rr.paint(sgrYellow, "orphaned"))
	}
	if p.Deleted {
		flags = append(flags, rr.paint(sgrRed, "exe deleted"))
	}
	if renamed(p) {
		flags = append(flags, rr.paint(sgrYellow, fmt.Sprintf("renamed: comm %q, exe %s", p.Comm, clean(p.Exe))))
	}
	if p.State == "Z" {
		flags = append(flags, "zombie")
	}
	if p.LeaderExited {
		flags = append(flags, rr.paint(sgrYellow, "main thread exited, threads run on"))
	}
	if !p.Started.IsZero() {
		flags = append(flags, "up "+age(rr.now.Sub(p.Started)))
	}
	if len(flags) == 0 {
		return ""
	}
	return "(" + strings.Join(flags, ", ") + ")"
}

// commLen is the kernel's limit on a process name (TASK_COMM_LEN without its NUL).
const commLen = 15

// renamed reports whether a process calls itself something its executable does not explain. The kernel
// names a process after the file it executed, which for a symlink (python3 -> python3.11) or a script
// run through its interpreter is not the executable's base name: those names count as explained too.
func renamed(p report.Process) bool {
	if p.Comm == "" || p.Exe == "" {
		return false
	}
	names := []string{p.Exe}
	if len(p.Argv) > 0 {
		names = append(names, p.Argv[0])
	}
	if len(p.Argv) > 1 {
		names = append(names, p.Argv[1]) // "#!" scripts: argv is interpreter, script, ...
	}
	for _, n := range names {
		base := filepath.Base(strings.TrimSuffix(n, " (deleted)"))
		if len(base) > commLen {
			base = base[:commLen]
		}
		if base == p.Comm {
			return false
		}
	}
	return true
}

// fds lists the fds worth a look: files, sockets, pipes, memfds and anything deleted. stdio on
// /dev/null or a terminal, devices and anonymous inodes (epoll, eventfd) are only counted.
func (rr *renderer) fds(prefix string, fds []report.FD) {
	shown, hidden := 0, 0
	for _, fd := range fds {
		if !interesting(fd) {
			hidden++
			continue
		}
		if shown == maxFDsShown {
			hidden++
			continue
		}
		shown++
		desc := truncate(fd.Target, argvWidth)
		if fd.Socket != "" {
			desc = clean(fd.Socket)
		}
		if fd.Deleted {
			desc += " " + rr.paint(sgrRed, "(deleted)")
		}
		fmt.Fprintf(rr.w, "%sfd %d → %s\n", prefix, fd.FD, desc)
	}
	if hidden > 0 && shown > 0 {
		fmt.Fprintf(rr.w, "%s%s\n", prefix, rr.paint(sgrDim, fmt.Sprintf("+%d fds not shown (stdio, devices, epoll, ...)", hidden)))
	}
}

func interesting(fd report.FD) bool {
	if fd.Deleted {
		return true
	}
	switch fd.Kind {
	case "dev", "anon":
		return false
	}
	return true
}

// argvString is a command line as a shell would take it back, cut to width with an ellipsis.
func argvString(argv []string, exe string, width int) string {
	if len(argv) == 0 {
		if exe == "" {
			return "?"
		}
		return "[" + exe + "]" // no command line: a kernel-like or zombie process
	}
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = shellQuote(a)
	}
	return truncate(strings.Join(parts, " "), width)
}

// shellQuote quotes an argument that a shell would split or expand.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	if !strings.ContainsAny(s, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// truncate cuts s to width runes, marking the cut with "…". Control characters are escaped so that a
// hostile command line cannot drive the terminal.
func truncate(s string, width int) string {
	s = clean(s)
	runes := []rune(s)
	if len(runes) <= width {
		return s
	}
	return string(runes[:width-1]) + "…"
}

// clean makes s safe to print on a terminal: control characters, which a hostile file or process name
// could use to drive the terminal, become "?"; format characters (Unicode category Cf: the bidi controls
// U+202A-U+202E and U+2066-U+2069 that reorder what follows, zero-width spaces and joiners, soft hyphens,
// tags) and the line and paragraph separators, which a reader cannot see but which change what the line
// seems to say, are written as \u escapes (U+202E becomes \u202e).
func clean(s string) string {
	if !strings.ContainsFunc(s, needsCleaning) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case isControl(r):
			b.WriteByte('?')
		case invisible(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func needsCleaning(r rune) bool { return isControl(r) || invisible(r) }

// isControl holds for C0, DEL and C1.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 }

// invisible holds for format characters and the line and paragraph separators.
func invisible(r rune) bool {
	return unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// age is a duration rounded for people: 850ms, 12s, 3m4s, 2h5m.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return strings.TrimSuffix(d.Round(time.Second).String(), "0s")
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

// table writes a heading and aligned rows, at most maxRows of them.
func (rr *renderer) table(title string, header []string, rows [][]string) {
	if len(rows) == 0 {
		return
	}
	rr.heading(title)
	tw := tabwriter.NewWriter(rr.w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  %s\n", strings.Join(header, "\t"))
	for i, row := range rows {
		if i == maxRows {
			fmt.Fprintf(tw, "  ... and %d more\n", len(rows)-maxRows)
			break
		}
		for j := range row {
			row[j] = truncate(row[j], argvWidth)
		}
		fmt.Fprintf(tw, "  %s\n", strings.Join(row, "\t"))
	}
	tw.Flush()
}

// sockets lists one socket a line, "proto address  pid N exe" (scripts match this form), with the
// remote end for connected ones.
func (rr *renderer) sockets(title string, socks []report.Socket) {
	if len(socks) == 0 {
		return
	}
	rr.heading(title)
	for i, s := range socks {
		if i == maxRows {
			fmt.Fprintf(rr.w, "  ... and %d more\n", len(socks)-maxRows)
			break
		}
		addr := s.Local()
		if s.Proto == "unix" && addr == "" {
			addr = "(unnamed)"
		}
		if s.Remote != "" {
			addr += " -> " + s.Remote
		}
		line := fmt.Sprintf("  %-5s %s  pid %s %s", s.Proto, truncate(addr, argvWidth), pidString(s.Pid), clean(s.Exe))
		fmt.Fprintln(rr.w, strings.TrimRight(line, " "))
	}
}

func pidString(pid int) string {
	if pid == 0 {
		return "?"
	}
	return strconv.Itoa(pid)
}

func (rr *renderer) denied(ds []report.Denied) {
	rows := make([][]string, 0, len(ds))
	for _, d := range ds {
		proto := d.Proto
		if d.Direction == report.DirectionIn {
			proto += " in" // someone on the uplink side tried to reach the sandbox's port
		}
		rows = append(rows, []string{proto, d.Address, strconv.Itoa(d.Port), strconv.Itoa(d.Count)})
	}
	rr.table("denied network", []string{"PROTO", "ADDRESS", "PORT", "COUNT"}, rows)
}

func (rr *renderer) dns(qs []report.DNSQuery) {
	rows := make([][]string, 0, len(qs))
	for _, q := range qs {
		verdict := "refused"
		if q.Allowed {
			verdict = "allowed"
		}
		if q.Reason != "" {
			verdict += ": " + q.Reason
		}
		if q.Count > 1 {
			verdict += fmt.Sprintf(" (%d times)", q.Count)
		}
		rows = append(rows, []string{q.Name, q.Type, verdict})
	}
	rr.table("dns queries", []string{"NAME", "TYPE", "ANSWER"}, rows)
}

// files lists the changes by kind, each capped at maxFiles, with sizes from the details.
func (rr *renderer) files(f report.Files) {
	if len(f.Created)+len(f.Modified)+len(f.Deleted) == 0 {
		return
	}
	detail := make(map[string]report.FileChange, len(f.Details))
	for _, d := range f.Details {
		detail[d.Change+" "+d.Path] = d
	}
	type row struct{ change, size, path string }
	var rows []row
	for _, kind := range []struct {
		change string
		paths  []string
		total  int // beyond the report's bound, the lists hold fewer paths than the run changed
	}{{"created", f.Created, f.Total.Created}, {"modified", f.Modified, f.Total.Modified}, {"deleted", f.Deleted, f.Total.Deleted}} {
		for i, p := range kind.paths {
			if i == maxFiles {
				rows = append(rows, row{kind.change, "", fmt.Sprintf("... and %d more", max(kind.total, len(kind.paths))-maxFiles)})
				break
			}
			r := row{change: kind.change, path: truncate(p, argvWidth)}
			if d, ok := detail[kind.change+" "+p]; ok {
				r.size = fileSize(d)
				if d.Kind == "dir" {
					r.path += "/"
				}
			}
			rows = append(rows, r)
		}
	}
	width := 0
	for _, r := range rows {
		width = max(width, len(r.size))
	}
	rr.heading("files")
	for _, r := range rows {
		fmt.Fprintf(rr.w, "  %-8s  %*s  %s\n", r.change, width, r.size, r.path)
	}
}

func fileSize(d report.FileChange) string {
	switch d.Kind {
	case "dir":
		return "dir"
	case "symlink":
		return "link"
	case "other":
		return "special"
	}
	return byteSize(d.Size)
}

// byteSize is a size in binary units, as people read them: 812 B, 4.0 KiB, 1.5 MiB.
func byteSize(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// denials lists what the kernel refused, or says in one line why it could not tell.
func (rr *renderer) denials(d report.Denials) {
	if !d.Available {
		if d.Reason != "" {
			// The first clause is enough here; the JSON report has the whole reason and what to do.
			short := d.Reason
			if i := strings.IndexAny(short, ",("); i > 0 {
				short = strings.TrimSpace(short[:i])
			}
			fmt.Fprintln(rr.w, rr.paint(sgrDim, "kernel denials: not reported ("+clean(short)+")"))
		}
		return
	}
	// The same refusal by many processes (a loop running one program) is one row.
	type key struct{ by, exe, what, detail string }
	var order []key
	pids, counts := map[key][]int{}, map[key]int{}
	add := func(k key, pid, n int) {
		if _, ok := counts[k]; !ok {
			order = append(order, k)
		}
		pids[k] = append(pids[k], pid)
		counts[k] += n
	}
	for _, s := range d.Seccomp {
		detail := s.Action
		if s.Args != "" {
			detail = s.Args
		}
		add(key{"seccomp", s.Exe, s.Syscall, detail}, s.Pid, s.Count)
	}
	for _, l := range d.Landlock {
		add(key{"landlock", l.Exe, l.Access, l.Path}, l.Pid, l.Count)
	}
	for _, w := range d.Writes {
		add(key{"write", w.Exe, w.Syscall, w.Path}, w.Pid, w.Count)
	}
	rows := make([][]string, 0, len(order))
	for _, k := range order {
		pid := pidString(pids[k][0])
		if n := len(pids[k]); n > 1 {
			pid = fmt.Sprintf("%d procs", n)
		}
		rows = append(rows, []string{k.by, pid, clean(k.exe), k.what, k.detail, strconv.Itoa(counts[k])})
	}
	rr.table("kernel denials", []string{"BY", "PID", "EXE", "WHAT", "DETAIL", "COUNT"}, rows)
}

// persistence lists what would make something run later: "cron  /etc/cron.d/x  refused".
// apply says what of the working directory's changes reached the host: a line per group. Silent for mode
// never (the note on discarded changes says it when there were any).
func (rr *renderer) apply(a report.Apply) {
	if a.Mode == "" || a.Mode == report.ApplyNever {
		return
	}
	rr.heading("apply (" + a.Mode + ")")
	if !a.Applied {
		fmt.Fprintf(rr.w, "  not applied: %s\n", clean(a.Reason))
		return
	}
	fmt.Fprintf(rr.w, "  applied   %d entries, %s to the host's working directory\n", a.Entries, byteSize(a.Bytes))
	for i, e := range a.Withheld {
		if i == maxFiles {
			fmt.Fprintf(rr.w, "  withheld  ... and %d more\n", len(a.Withheld)-maxFiles)
			break
		}
		fmt.Fprintf(rr.w, "  withheld  %s: %s\n", clean(truncate(e.Path, argvWidth)), clean(e.Why))
	}
	for i, e := range a.Conflicts {
		if i == maxFiles {
			fmt.Fprintf(rr.w, "  conflict  ... and %d more\n", len(a.Conflicts)-maxFiles)
			break
		}
		fmt.Fprintf(rr.w, "  conflict  %s: %s\n", clean(truncate(e.Path, argvWidth)), clean(e.Why))
	}
	if a.Kept != "" {
		fmt.Fprintf(rr.w, "  kept      the run's copies of the conflicts: %s\n", clean(a.Kept))
	}
	for _, p := range a.Problems {
		fmt.Fprintf(rr.w, "  failed    %s\n", clean(p))
	}
}

func (rr *renderer) credentials(cs []report.Credential) {
	rows := make([][]string, 0, len(cs))
	for _, c := range cs {
		rows = append(rows, []string{c.Mechanism, c.Path, c.Access})
	}
	rr.table("credentials (decoys)", []string{"SECRET", "DECOY", "ACCESS"}, rows)
}

func (rr *renderer) persistence(ps []report.Persistence) {
	rows := make([][]string, 0, len(ps))
	for _, p := range ps {
		rows = append(rows, []string{p.Mechanism, p.Path, p.Change})
	}
	rr.table("persistence", []string{"MECHANISM", "PATH", "CHANGE"}, rows)
}

func (rr *renderer) notes(notes []string) {
	if len(notes) == 0 {
		return
	}
	rr.heading("notes")
	for _, n := range notes {
		fmt.Fprintf(rr.w, "  - %s\n", clean(n))
	}
}
