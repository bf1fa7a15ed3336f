package text

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/report"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/render")

// renderNow is the clock the golden reports are rendered against.
var renderNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// TestRenderGolden renders reports built here and compares them with testdata/render/NAME.golden, with
// and without colour. Regenerate with go test ./report/text -run TestRenderGolden -update.
func TestRenderGolden(t *testing.T) {
	cases := map[string]*report.Report{
		"pass":        passReport(),
		"leftovers":   leftoversReport(),
		"network":     networkReport(),
		"files":       filesReport(),
		"denials":     denialsReport(),
		"persistence": persistenceReport(),
		"timeout":     timeoutReport(),
		"unrelated":   unrelatedRootsReport(),
		"hostileargv": hostileArgvReport(),
		"bidi":        bidiReport(),
		"truncated":   truncatedReport(),
	}
	for name, rep := range cases {
		for _, color := range []bool{false, true} {
			file := name
			if color {
				file += ".color"
			}
			t.Run(file, func(t *testing.T) {
				var buf bytes.Buffer
				(&renderer{w: &buf, color: color, now: renderNow}).render(rep)
				golden(t, filepath.Join("testdata", "render", file+".golden"), buf.String())
			})
		}
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got):\n%s", path, diff)
	}
}

// TestRenderNoColor checks that NO_COLOR wins over a terminal.
func TestRenderNoColor(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	var buf bytes.Buffer
	Write(&buf, leftoversReport(), Options{Color: true, Now: renderNow})
	if strings.Contains(buf.String(), "\x1b[") {
		t.Errorf("NO_COLOR set, output has escape codes:\n%s", buf.String())
	}
}

func TestRenamed(t *testing.T) {
	tests := []struct {
		name string
		p    report.Process
		want bool
	}{
		{"same", report.Process{Comm: "sleep", Exe: "/usr/bin/sleep", Argv: []string{"sleep", "9"}}, false},
		{"symlink", report.Process{Comm: "python3", Exe: "/usr/bin/python3.11", Argv: []string{"python3"}}, false},
		{"script", report.Process{Comm: "job.sh", Exe: "/usr/bin/dash", Argv: []string{"/bin/sh", "./job.sh"}}, false},
		{"long name cut by the kernel", report.Process{Comm: "a-very-long-nam", Exe: "/bin/a-very-long-name", Argv: []string{"x"}}, false},
		{"prctl rename", report.Process{Comm: "kworker/0:1", Exe: "/usr/bin/sleep", Argv: []string{"sleep", "9"}}, true},
		{"unknown comm", report.Process{Exe: "/usr/bin/sleep"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := renamed(tt.p); got != tt.want {
				t.Errorf("renamed(%+v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func baseReport() *report.Report {
	r := report.New("default", []string{"sh", "-c", "true"})
	r.Timings.Total = 31.4
	return r
}

func passReport() *report.Report {
	r := baseReport()
	r.Denials = report.Denials{Available: true, Seccomp: []report.SeccompDenial{}, Landlock: []report.LandlockDenial{}}
	return r
}

func leftoversReport() *report.Report {
	r := baseReport()
	r.Command = []string{"sh", "-c", "nohup sleep 300 & python3 -m http.server 8765 & ./daemon & exit 0"}
	r.Verdict = report.VerdictViolation
	r.Violations = []report.Violation{
		{Rule: report.RuleLeftRunning, Message: "3 processes left running: sleep (pid 7), python3 (pid 8), daemon (pid 9)"},
		{Rule: report.RuleListening, Message: "tcp 0.0.0.0:8765 (python3, pid 8) is not an allowed listener"},
	}
	started := renderNow.Add(-1500 * time.Millisecond)
	r.Processes.LeftRunning = []report.Process{
		{Pid: 9, PPid: 1, Exe: "/tmp/daemon", Comm: "[kworker/0:1]", Argv: []string{"./daemon", "--quiet"},
			Started: renderNow.Add(-2 * time.Minute), Orphaned: true, Deleted: true, State: "S",
			FDs: []report.FD{
				{FD: 0, Target: "/dev/null", Kind: "dev"},
				{FD: 1, Target: "/dev/null", Kind: "dev"},
				{FD: 2, Target: "/dev/null", Kind: "dev"},
				{FD: 3, Target: "/tmp/daemon.log", Kind: "file", Deleted: true},
				{FD: 4, Target: "/memfd:payload", Kind: "memfd", Deleted: true},
				{FD: 5, Target: "anon_inode:[eventpoll]", Kind: "anon"},
			}},
		{Pid: 7, PPid: 1, Exe: "/usr/bin/sleep", Comm: "sleep", Argv: []string{"sleep", "300"}, Started: started,
			Orphaned: true, State: "S", FDs: []report.FD{
				{FD: 0, Target: "/dev/pts/0", Kind: "dev"},
				{FD: 1, Target: "/tmp/nohup.out", Kind: "file"},
				{FD: 2, Target: "/tmp/nohup.out", Kind: "file"},
			}},
		{Pid: 8, PPid: 1, Exe: "/usr/bin/python3.11", Comm: "python3",
			Argv: []string{"python3", "-m", "http.server", "8765"}, Started: started, State: "S",
			FDs: []report.FD{
				{FD: 3, Target: "socket:[1001]", Kind: "socket", Socket: "tcp 0.0.0.0:8765 LISTEN"},
				{FD: 4, Target: "socket:[1002]", Kind: "socket", Socket: "udp 0.0.0.0:5353 UNCONN"},
				{FD: 5, Target: "socket:[1003]", Kind: "socket", Socket: "unix stream @sbx-test LISTEN"},
				{FD: 6, Target: "pipe:[1004]", Kind: "pipe"},
			}},
		{Pid: 12, PPid: 8, Exe: "/usr/bin/dash", Comm: "sh", Argv: []string{"sh", "-c", "while :; do sleep 1; done"},
			Started: renderNow.Add(-time.Second), State: "S"},
		{Pid: 13, PPid: 12, Exe: "/usr/bin/sleep", Comm: "sleep", Argv: []string{"sleep", "1"},
			Started: renderNow.Add(-200 * time.Millisecond), State: "S"},
		{Pid: 14, PPid: 8, Exe: "/usr/bin/cat", Comm: "cat", Argv: []string{"cat"},
			Started: renderNow.Add(-3*time.Hour - 5*time.Minute), State: "Z"},
	}
	r.Sockets.Listening = []report.Socket{
		{Proto: "tcp", Address: "0.0.0.0", Port: 8765, State: "LISTEN", Pid: 8, Exe: "/usr/bin/python3.11"},
		{Proto: "tcp6", Address: "::", Port: 8765, State: "LISTEN", Pid: 8, Exe: "/usr/bin/python3.11"},
		{Proto: "udp", Address: "0.0.0.0", Port: 5353, State: "UNCONN", Pid: 8, Exe: "/usr/bin/python3.11"},
		{Proto: "unix", Type: "stream", Address: "@sbx-test", State: "LISTEN", Pid: 8, Exe: "/usr/bin/python3.11"},
	}
	r.Notes = []string{"exec events: 2 events lost, the exec list may be incomplete"}
	return r
}

func networkReport() *report.Report {
	r := baseReport()
	r.Command = []string{"curl", "https://example.com"}
	r.Network.Mode = report.NetworkContract
	r.Verdict = report.VerdictViolation
	r.Violations = []report.Violation{{Rule: report.RuleDenied, Message: "2 destinations refused by the network contract"}}
	r.Sockets.Established = []report.Socket{
		{Proto: "tcp", Address: "10.200.0.2", Port: 40112, Remote: "93.184.216.34:443", State: "ESTABLISHED", Pid: 3, Exe: "/usr/bin/curl"},
		{Proto: "tcp6", Address: "fd00::2", Port: 40113, Remote: "[2606:2800:220:1::]:443", State: "ESTABLISHED"},
	}
	r.Network.Denied = []report.Denied{
		{Proto: "tcp", Address: "169.254.169.254", Port: 80, Count: 3},
		{Proto: "udp", Address: "10.0.0.1", Port: 53, Count: 1},
	}
	r.Network.DNS = []report.DNSQuery{
		{Name: "example.com.", Type: "A", Allowed: true},
		{Name: "example.com.", Type: "AAAA", Allowed: true},
		{Name: "c2VjcmV0.exfil.example.", Type: "TXT", Allowed: false},
	}
	return r
}

func filesReport() *report.Report {
	r := baseReport()
	r.Command = []string{"sh", "-c", "mkdir -p /tmp/a/b && seq 100000 > /tmp/a/b/big && rm /etc/motd"}
	add := func(path, kind, change string, size int64) {
		r.Files.Details = append(r.Files.Details, report.FileChange{Path: path, Kind: kind, Change: change, Size: size})
		switch change {
		case "created":
			r.Files.Created = append(r.Files.Created, path)
		case "modified":
			r.Files.Modified = append(r.Files.Modified, path)
		case "deleted":
			r.Files.Deleted = append(r.Files.Deleted, path)
		}
	}
	add("/tmp/a", "dir", "created", 0)
	add("/tmp/a/b", "dir", "created", 0)
	add("/tmp/a/b/big", "file", "created", 588895)
	add("/tmp/link", "symlink", "created", 0)
	for i := range 12 {
		add("/tmp/many/"+strings.Repeat("f", i+1), "file", "created", int64(i))
	}
	add("/etc/hosts", "file", "modified", 3*1024*1024+512)
	add("/etc/motd", "file", "deleted", 286)
	return r
}

func denialsReport() *report.Report {
	r := baseReport()
	r.Command = []string{"sh", "-c", "unshare -n true; echo x > /usr/x"}
	r.ExitCode = 2
	r.Denials = report.Denials{Available: true,
		Seccomp: []report.SeccompDenial{
			{Pid: 3, HostPid: 4242, Exe: "/usr/bin/unshare", Syscall: "unshare", Action: "errno", Count: 1},
			{Pid: 4, HostPid: 4243, Exe: "/usr/bin/unshare", Syscall: "unshare", Action: "errno", Count: 1},
			{Pid: 5, HostPid: 4244, Exe: "/usr/bin/keyctl", Syscall: "keyctl", Action: "errno", Count: 3},
		},
		Landlock: []report.LandlockDenial{
			{Pid: 2, HostPid: 4241, Exe: "/usr/bin/dash", Access: "fs.make_reg", Path: "/usr", Count: 1},
		},
	}
	return r
}

// persistenceReport: what the example leaves behind and tries, recorded by sbx itself with kernel
// audit off (no "not reported" line), and a planted path with terminal escapes.
func persistenceReport() *report.Report {
	r := baseReport()
	r.Command = []string{"sh", "-c", "echo x > /etc/cron.d/x; echo x >> ~/.bashrc"}
	r.Verdict = report.VerdictViolation
	r.Violations = []report.Violation{
		{Rule: report.RulePersistence, Message: "shell start-up file: /tmp/.bashrc created"},
		{Rule: report.RulePersistence, Message: "cron: /etc/cron.d/x write refused, tried"},
	}
	r.Files.Created = []string{"/tmp/.bashrc", "/tmp/.git/hooks/\x1b[2Jx"}
	r.Persistence = []report.Persistence{
		{Mechanism: "shell start-up file", Path: "/tmp/.bashrc", Change: "created"},
		{Mechanism: "git hook", Path: "/tmp/.git/hooks/\x1b[2Jx", Change: "created"},
		{Mechanism: "cron", Path: "/etc/cron.d/x", Change: "refused"},
	}
	r.Denials = report.Denials{Available: true,
		Seccomp: []report.SeccompDenial{{Pid: 3, HostPid: 4242, Exe: "/usr/bin/unshare", Syscall: "unshare",
			Args: "CLONE_NEWUSER", Action: "errno", Source: report.SourceSeccompNotify, Count: 1}},
		Landlock: []report.LandlockDenial{},
		Writes: []report.WriteDenial{{Pid: 2, HostPid: 4241, Exe: "/usr/bin/dash", Syscall: "openat",
			Path: "/etc/cron.d/x", Flags: "O_WRONLY|O_CREAT|O_TRUNC", Count: 1}},
		Sources: []report.DenialSource{
			{Name: report.SourceSeccompNotify, Recorded: true, Covers: "the deny list"},
			{Name: report.SourceAudit, Covers: "seccomp and Landlock", Reason: "kernel audit is off"},
		},
	}
	return r
}

func timeoutReport() *report.Report {
	r := baseReport()
	r.Command = []string{"sleep", "1000"}
	r.TimedOut = true
	r.ExitCode = 137
	r.Denials.Reason = "kernel audit is disabled"
	return r
}

// unrelatedRootsReport has a process whose parent is not in the list and a process listed as its own
// parent: both are drawn at the top level, each once.
func unrelatedRootsReport() *report.Report {
	r := baseReport()
	r.Processes.LeftRunning = []report.Process{
		{Pid: 5, PPid: 5, Exe: "/usr/bin/sleep", Comm: "sleep", Argv: []string{"sleep", "5"}},
		{Pid: 4, PPid: 40, Exe: "/usr/bin/sleep", Comm: "sleep", Argv: []string{"sleep", "4"}},
		{Pid: 6, PPid: 1, Exe: "/usr/bin/sleep", Comm: "sleep"},
	}
	return r
}

// hostileArgvReport has a command line with terminal escapes and one far too long for a line.
func hostileArgvReport() *report.Report {
	r := baseReport()
	r.Processes.LeftRunning = []report.Process{
		{Pid: 2, PPid: 1, Exe: "/usr/bin/python3.11", Comm: "python3",
			Argv: []string{"python3", "-c", "print('\x1b[2J\x1b[Hpwned')\n" + strings.Repeat("x = 1\n", 40)}},
	}
	return r
}

// bidiReport hides what it says behind Unicode format characters: a right-to-left override that makes
// "evil.sh" read as "hs.live", isolates, a zero-width space and a line separator. The human report must
// show each of them as an escape.
func bidiReport() *report.Report {
	r := baseReport()
	r.Command = []string{"sh", "-c", "touch /tmp/\u202ehs.live"}
	r.Processes.LeftRunning = []report.Process{
		{Pid: 2, PPid: 1, Exe: "/usr/bin/\u2066python3\u2069", Comm: "python3",
			Argv: []string{"python3", "-c", "safe\u200b\u202e# )(lave"}},
	}
	r.Files.Created = []string{"/tmp/\u202ehs.live", "/tmp/a\u2028b", "/tmp/\ufeffbom\u00ad"}
	r.Notes = []string{"note with \u202eesrever\u202c inside"}
	return r
}

// truncatedReport kept only part of its lists: the human report says how much is missing.
func truncatedReport() *report.Report {
	r := leftoversReport()
	r.Processes.LeftRunningTotal, r.Processes.LeftRunningTruncated = 300, true
	r.Processes.LeftRunning[0].LeaderExited = true
	r.Sockets.ListeningTotal, r.Sockets.Truncated = len(r.Sockets.Listening)+2000, true
	r.ViolationsTotal = len(r.Violations) + 1500
	return r
}
