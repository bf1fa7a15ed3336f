package policy

import (
	"fmt"
	"net/netip"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sbx-dev/sbx/report"
)

// Compare judges a run: it replaces r.Violations with every broken expectation of exp, found in the
// observations r already holds, and sets r.Verdict to "violation" when there is one, "pass" otherwise.
// It checks, in this order: the timeout (a run killed by its timeout is a violation: it did not finish,
// so it cannot pass), processes left running (unless allowed), listeners not allowed, refused
// network attempts and DNS queries (when they count as violations), writes outside expect.writes and
// executables outside expect.execs (when those are set), persistence planted or tried (unless allowed;
// the findings are r.Persistence, which FindPersistence fills), and last each part of the observation
// that failed (report.Incomplete), whatever the expectations. Each message is one specific line.
func Compare(exp Expect, r *report.Report) {
	var v []report.Violation
	seen := map[report.Violation]bool{} // de-duplication in linear time: a flood of records must not cost O(n²)
	add := func(rule, format string, args ...any) {
		x := report.Violation{Rule: rule, Message: fmt.Sprintf(format, args...)}
		if !seen[x] {
			seen[x] = true
			v = append(v, x)
		}
	}
	if r.TimedOut {
		add(report.RuleTimeout, "the timeout fired before the command finished; sbx killed it and everything it started")
	}
	if !exp.LeftRunning {
		for _, p := range r.Processes.LeftRunning {
			add(report.RuleLeftRunning, "pid %d (%s) left running", p.Pid, commandLine(p.Argv, p.Exe, p.Comm))
		}
	}
	for _, s := range r.Sockets.Listening {
		if !listenerAllowed(exp.Listeners, s) {
			add(report.RuleListening, "%s listener on %s owned by %s", s.Proto, socketAddr(s), owner(s))
		}
	}
	if exp.DeniedIsViolation {
		for _, d := range r.Network.Denied {
			if d.Direction == report.DirectionIn {
				continue // someone else's attempt to reach the sandbox: recorded, not the command's doing
			}
			add(report.RuleDenied, "%s to %s denied (%s)", d.Proto, hostPort(d.Address, d.Port), plural(d.Count, "attempt"))
		}
	}
	if exp.DNSRefusedIsViolation {
		for _, q := range r.Network.DNS {
			if !q.Allowed {
				add(report.RuleDNS, "DNS query for %s refused%s", dnsWhat(q), dnsWhy(q))
			}
		}
	}
	if exp.Writes != nil {
		for _, c := range []struct {
			verb  string
			paths []string
		}{{"created", r.Files.Created}, {"modified", r.Files.Modified}, {"deleted", r.Files.Deleted}} {
			for _, p := range c.paths {
				if !matchAnyGlob(exp.Writes, p) {
					add(report.RuleFilesWrite, "%s %s outside expect.writes", p, c.verb)
				}
			}
		}
		if f := r.Files; f.Truncated {
			// What is not kept cannot be vouched for: a flood of changes inside the globs pushed one
			// outside them off the lists, and the run passed.
			listed := len(f.Created) + len(f.Modified) + len(f.Deleted)
			add(report.RuleFilesWrite, "%d file changes past the %d listed were not checked against expect.writes",
				max(f.Total.Created+f.Total.Modified+f.Total.Deleted-listed, 0), listed)
		}
	}
	persistenceViolations(exp, r, add)
	if !exp.CredentialsAllowed {
		for _, c := range r.Credentials {
			add(report.RuleCredentials, "%s: %s %s", c.Mechanism, c.Path, c.Access)
		}
	}
	if exp.Execs != nil {
		for _, e := range r.Processes.Execs {
			if !execAllowed(exp.Execs, e.Exe) {
				add(report.RuleExec, "pid %d executed %s (%s), not in expect.execs", e.Pid, e.Exe, commandLine(e.Argv, e.Exe, ""))
			}
		}
		if r.Processes.ExecsTruncated {
			// What is not kept cannot be vouched for.
			add(report.RuleExec, "%d execs past the first %d were not checked against expect.execs", r.Processes.ExecsTotal-len(r.Processes.Execs), len(r.Processes.Execs))
		}
	}
	for _, part := range r.Incomplete {
		add(report.RuleIncomplete, "%s could not be observed fully (see notes): the report may miss what the command did", part)
	}
	if v == nil {
		v = []report.Violation{}
	}
	r.Violations, r.ViolationsTotal = v, len(v)
	r.Verdict = report.VerdictPass
	if len(v) > 0 {
		r.Verdict = report.VerdictViolation
	}
}

// dnsWhat names a logged DNS query: its name and type, or the reason when the message had no readable
// question.
func dnsWhat(q report.DNSQuery) string {
	switch {
	case q.Name == "" && q.Type == "":
		return "(unreadable)"
	case q.Type == "":
		return q.Name
	}
	return fmt.Sprintf("%s (%s)", q.Name, q.Type)
}

// dnsWhy is the reason and count of a refused query, for its violation message.
func dnsWhy(q report.DNSQuery) string {
	s := ""
	if q.Reason != "" {
		s = ": " + q.Reason
	}
	if q.Count > 1 {
		s += fmt.Sprintf(" (%d times)", q.Count)
	}
	return s
}

// listenerAllowed: tcp matches tcp and tcp6, udp matches udp and udp6, port 0 any port, unix any unix
// socket.
func listenerAllowed(allowed []Listener, s report.Socket) bool {
	proto := strings.TrimSuffix(s.Proto, "6")
	for _, l := range allowed {
		if l.Proto == proto && (l.Port == 0 || l.Port == s.Port || proto == "unix") {
			return true
		}
	}
	return false
}

// commandLine is a short one-line rendering of what a process runs.
func commandLine(argv []string, exe, comm string) string {
	s := strings.Join(argv, " ")
	if s == "" {
		s = exe
	}
	if s == "" {
		s = comm
	}
	if s == "" {
		s = "?"
	}
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return truncate(s, 80)
}

func socketAddr(s report.Socket) string {
	if s.Proto == "unix" {
		if s.Address == "" {
			return "an unnamed socket"
		}
		return s.Address
	}
	return hostPort(s.Address, s.Port)
}

func hostPort(addr string, port int) string {
	if a, err := netip.ParseAddr(addr); err == nil && a.Is6() && !a.Is4In6() {
		addr = "[" + addr + "]"
	}
	return addr + ":" + strconv.Itoa(port)
}

func owner(s report.Socket) string {
	if s.Pid == 0 {
		return "an unknown process"
	}
	name := filepath.Base(s.Exe)
	if s.Exe == "" {
		name = "?"
	}
	return fmt.Sprintf("%s (pid %d)", name, s.Pid)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func execAllowed(globs []string, exe string) bool {
	for _, g := range globs {
		if !strings.Contains(g, "/") {
			if ok, _ := path.Match(g, path.Base(exe)); ok {
				return true
			}
			continue
		}
		if matchGlob(g, exe) {
			return true
		}
	}
	return false
}

func matchAnyGlob(globs []string, p string) bool {
	for _, g := range globs {
		if matchGlob(g, p) {
			return true
		}
	}
	return false
}

// matchGlob matches a sandbox path against a glob: * and ? and [..] within one path element, ** across
// any number of elements (including none). A glob without wildcards matches the path itself and
// everything below it, so /work/out covers /work/out/a/b.
func matchGlob(glob, p string) bool {
	if !strings.ContainsAny(glob, "*?[") {
		g := strings.TrimSuffix(glob, "/")
		return p == g || strings.HasPrefix(p, g+"/") || g == ""
	}
	return matchParts(strings.Split(glob, "/"), strings.Split(p, "/"))
}

func matchParts(glob, parts []string) bool {
	for len(glob) > 0 {
		if glob[0] == "**" {
			for i := 0; i <= len(parts); i++ {
				if matchParts(glob[1:], parts[i:]) {
					return true
				}
			}
			return false
		}
		if len(parts) == 0 {
			return false
		}
		if ok, _ := path.Match(glob[0], parts[0]); !ok {
			return false
		}
		glob, parts = glob[1:], parts[1:]
	}
	return len(parts) == 0
}
