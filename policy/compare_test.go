package policy

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/report"
)

func TestCompare(t *testing.T) {
	base := func() *report.Report { return report.New("t", []string{"sh"}) }
	py := report.Process{Pid: 12, Exe: "/usr/bin/python3.11", Argv: []string{"python3", "-m", "http.server", "8765"}}
	tcp := report.Socket{Proto: "tcp", Address: "0.0.0.0", Port: 8765, Pid: 13, Exe: "/usr/bin/python3"}
	tcp6 := report.Socket{Proto: "tcp6", Address: "::", Port: 9000, Pid: 13, Exe: "/usr/bin/python3"}
	tests := []struct {
		name  string
		exp   Expect
		setup func(r *report.Report)
		want  []report.Violation
	}{
		{name: "clean run passes", exp: Expect{DeniedIsViolation: true}, setup: func(r *report.Report) {}},
		{name: "left running and listening", exp: Expect{}, setup: func(r *report.Report) {
			r.Processes.LeftRunning = []report.Process{py}
			r.Sockets.Listening = []report.Socket{tcp}
		}, want: []report.Violation{
			{Rule: report.RuleLeftRunning, Message: "pid 12 (python3 -m http.server 8765) left running"},
			{Rule: report.RuleListening, Message: "tcp listener on 0.0.0.0:8765 owned by python3 (pid 13)"},
		}},
		{name: "allowed listener passes, other port does not", exp: Expect{LeftRunning: true, Listeners: []Listener{{Proto: "tcp", Port: 8765}}}, setup: func(r *report.Report) {
			r.Processes.LeftRunning = []report.Process{py}
			r.Sockets.Listening = []report.Socket{tcp, tcp6}
		}, want: []report.Violation{{Rule: report.RuleListening, Message: "tcp6 listener on [::]:9000 owned by python3 (pid 13)"}}},
		{name: "tcp:* covers tcp6, unix:* covers unix", exp: Expect{Listeners: []Listener{{Proto: "tcp"}, {Proto: "unix"}}}, setup: func(r *report.Report) {
			r.Sockets.Listening = []report.Socket{tcp, tcp6, {Proto: "unix", Address: "/tmp/s"}}
		}},
		{name: "udp listener needs udp", exp: Expect{Listeners: []Listener{{Proto: "tcp"}}}, setup: func(r *report.Report) {
			r.Sockets.Listening = []report.Socket{{Proto: "udp6", Address: "::1", Port: 5353}}
		}, want: []report.Violation{{Rule: report.RuleListening, Message: "udp6 listener on [::1]:5353 owned by an unknown process"}}},
		{name: "denied network and dns", exp: Expect{DeniedIsViolation: true, DNSRefusedIsViolation: true}, setup: func(r *report.Report) {
			r.Network.Denied = []report.Denied{{Proto: "tcp", Address: "169.254.169.254", Port: 80, Count: 3}}
			r.Network.DNS = []report.DNSQuery{{Name: "evil.example", Type: "A"}, {Name: "pypi.org", Type: "A", Allowed: true}, {Name: "evil.example", Type: "A"}}
		}, want: []report.Violation{
			{Rule: report.RuleDenied, Message: "tcp to 169.254.169.254:80 denied (3 attempts)"},
			{Rule: report.RuleDNS, Message: "DNS query for evil.example (A) refused"},
		}},
		{name: "a timed-out run never passes", exp: Expect{LeftRunning: true}, setup: func(r *report.Report) { r.TimedOut = true },
			want: []report.Violation{{Rule: report.RuleTimeout, Message: "the timeout fired before the command finished; sbx killed it and everything it started"}}},
		{name: "denied network ignored", exp: Expect{}, setup: func(r *report.Report) {
			r.Network.Denied = []report.Denied{{Proto: "tcp", Address: "10.0.0.1", Port: 80, Count: 1}}
		}},
		{name: "writes outside globs", exp: Expect{Writes: []string{"/tmp/**", "/work/out"}}, setup: func(r *report.Report) {
			r.Files.Created = []string{"/tmp/a/b/c", "/work/out/x", "/work/src/y"}
			r.Files.Deleted = []string{"/etc/hosts"}
		}, want: []report.Violation{
			{Rule: report.RuleFilesWrite, Message: "/work/src/y created outside expect.writes"},
			{Rule: report.RuleFilesWrite, Message: "/etc/hosts deleted outside expect.writes"},
		}},
		{name: "writes past the bound are not vouched for", exp: Expect{Writes: []string{"/tmp/**"}}, setup: func(r *report.Report) {
			r.Files.Created = []string{"/tmp/a", "/tmp/b"}
			r.Files.Total = report.Totals{Created: 10001, Deleted: 1}
			r.Files.Truncated = true
		}, want: []report.Violation{{Rule: report.RuleFilesWrite, Message: "10000 file changes past the 2 listed were not checked against expect.writes"}}},
		{name: "execs outside allow list", exp: Expect{Execs: []string{"/usr/bin/python3*", "sh"}}, setup: func(r *report.Report) {
			r.Processes.Execs = []report.Exec{{Pid: 2, Exe: "/bin/sh"}, {Pid: 3, Exe: "/usr/bin/python3.11"}, {Pid: 4, Exe: "/usr/bin/curl", Argv: []string{"curl", "-s", "x"}}}
		}, want: []report.Violation{{Rule: report.RuleExec, Message: "pid 4 executed /usr/bin/curl (curl -s x), not in expect.execs"}}},
		{name: "execs past the bound are not vouched for", exp: Expect{Execs: []string{"sh"}}, setup: func(r *report.Report) {
			r.Processes.Execs = []report.Exec{{Pid: 2, Exe: "/bin/sh"}}
			r.Processes.ExecsTotal, r.Processes.ExecsTruncated = 5000, true
		}, want: []report.Violation{{Rule: report.RuleExec, Message: "4999 execs past the first 1 were not checked against expect.execs"}}},
		{name: "an observation that failed never passes, whatever is allowed", exp: Expect{LeftRunning: true}, setup: func(r *report.Report) {
			r.MarkIncomplete("exec events", errors.New("read process events: EIO"))
			r.MarkIncomplete("exec events", errors.New("3 events lost"))
		}, want: []report.Violation{{Rule: report.RuleIncomplete, Message: "exec events could not be observed fully (see notes): the report may miss what the command did"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			tt.setup(r)
			Compare(tt.exp, r)
			want := tt.want
			if want == nil {
				want = []report.Violation{}
			}
			if diff := cmp.Diff(want, r.Violations); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
			wantVerdict := report.VerdictPass
			if len(want) > 0 {
				wantVerdict = report.VerdictViolation
			}
			if r.Verdict != wantVerdict {
				t.Errorf("verdict %q, want %q", r.Verdict, wantVerdict)
			}
		})
	}
}

// TestIssueListenerExample: extends default with left_running allow and tcp:8765 turns the
// background-listener example into a pass, and another port is still a violation.
func TestIssueListenerExample(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "srv.yaml", "version: 1\nextends: default\nexpect:\n  left_running: allow\n  listeners: [\"tcp:8765\"]\n")
	p, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Compile(p, CompileContext{Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	r := report.New("srv", nil)
	r.Processes.LeftRunning = []report.Process{{Pid: 5, Argv: []string{"python3", "-m", "http.server", "8765"}}}
	r.Sockets.Listening = []report.Socket{{Proto: "tcp", Address: "0.0.0.0", Port: 8765, Pid: 5}}
	Compare(plan.Expect, r)
	if r.Verdict != report.VerdictPass || len(r.Sockets.Listening) != 1 {
		t.Fatalf("verdict %s %v", r.Verdict, r.Violations)
	}
	r.Sockets.Listening = append(r.Sockets.Listening, report.Socket{Proto: "tcp", Address: "0.0.0.0", Port: 8766, Pid: 5})
	Compare(plan.Expect, r)
	if r.Verdict != report.VerdictViolation || len(r.Violations) != 1 {
		t.Fatalf("verdict %s %v", r.Verdict, r.Violations)
	}
}
