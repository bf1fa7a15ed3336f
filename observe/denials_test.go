package observe

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/report"
)

func TestParseAuditRecord(t *testing.T) {
	tests := []struct {
		name       string
		rec        string
		wantSerial uint64
		want       map[string]string
	}{
		{"seccomp", `audit(1795996958.361:1221): auid=4294967295 uid=0 pid=11891 comm=".sbx" exe="/dev/.sbx" sig=0 arch=c000003e syscall=272 code=0x50000`,
			1221, map[string]string{"auid": "4294967295", "uid": "0", "pid": "11891", "comm": ".sbx", "exe": "/dev/.sbx",
				"sig": "0", "arch": "c000003e", "syscall": "272", "code": "0x50000"}},
		// A name with a space is hex-encoded by audit_log_untrustedstring.
		{"hex path", `audit(1.2:7): domain=1ca7364e2 blockers=fs.make_reg path=2F746D702F6120622F dev="overlay" ino=9`,
			7, map[string]string{"domain": "1ca7364e2", "blockers": "fs.make_reg", "path": "/tmp/a b/", "dev": "overlay", "ino": "9"}},
		{"no header, trailing NUL", "pid=3 exe=\"/bin/sh\"\x00", 0, map[string]string{"pid": "3", "exe": "/bin/sh"}},
		{"user message", `audit(1.2:9): pid=1 msg='sbx-denials-end=ab'`, 9, map[string]string{"pid": "1", "msg": "'sbx-denials-end=ab'"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serial, got := parseAuditRecord([]byte(tt.rec))
			if serial != tt.wantSerial {
				t.Errorf("serial = %d, want %d", serial, tt.wantSerial)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDenialsCollect feeds records as the kernel sends them (the kinds seen on kernel 6.18 with audit on)
// and checks what is kept for a sandbox whose init is host pid 100.
func TestDenialsCollect(t *testing.T) {
	c := &DenialsCollector{fd: -1, seccomp: map[seccompKey]int{}, syscalls: map[uint64]procOfEvent{}, domains: map[string]int{}}
	feed := func(typ uint16, rec string) { c.handle(typ, []byte(rec)) }
	// The sandbox's unshare, twice; a host process's refused syscall; the Go runtime's clone3 fallback.
	for range 2 {
		feed(auditSeccomp, `audit(1.0:1): uid=0 pid=102 comm="unshare" exe="/usr/bin/unshare" sig=0 arch=c000003e syscall=272 compat=0 code=0x50000`)
	}
	feed(auditSeccomp, `audit(1.0:2): uid=0 pid=999 comm="python3" exe="/usr/bin/python3.11" sig=0 arch=c000003e syscall=438 code=0x50000`)
	feed(auditSeccomp, `audit(1.0:3): uid=0 pid=100 comm=".sbx" exe="/dev/.sbx" sig=0 arch=c000003e syscall=435 code=0x50000`)
	feed(auditSeccomp, `audit(1.0:4): uid=0 pid=103 comm="x" exe="/tmp/x" sig=31 arch=c000003e syscall=9999 code=0x80000000`)
	// A Landlock denial of the sandbox's domain (created by its init), then one of another domain.
	feed(auditLandlockAccess, `audit(1.0:5): domain=1ca7364e2 blockers=fs.make_reg path="/usr" dev="overlay" ino=9`)
	feed(auditLandlockDomain, `audit(1.0:5): domain=1ca7364e2 status=allocated mode=enforcing pid=100 uid=0 exe="/dev/.sbx" comm=".sbx"`)
	feed(auditSyscall, `audit(1.0:5): arch=c000003e syscall=257 success=no exit=-13 ppid=100 pid=101 comm="sh" exe="/usr/bin/dash"`)
	feed(auditLandlockAccess, `audit(1.0:6): domain=1ca7364e2 blockers=fs.make_reg path="/usr" dev="overlay" ino=9`)
	feed(auditSyscall, `audit(1.0:6): arch=c000003e syscall=257 success=no exit=-13 ppid=100 pid=101 comm="sh" exe="/usr/bin/dash"`)
	feed(auditLandlockAccess, `audit(1.0:7): domain=abc blockers=fs.write_file path="/etc/passwd" dev="vda" ino=1`)
	feed(auditLandlockDomain, `audit(1.0:7): domain=abc status=allocated mode=enforcing pid=555 uid=0 exe="/usr/bin/other" comm="other"`)

	got := c.collect(DenialsScope{HostPids: []int{100, 101, 102, 103}, SandboxPid: map[int]int{100: 1, 101: 2, 102: 3}})
	want := report.Denials{Available: true,
		Seccomp: []report.SeccompDenial{
			{Pid: 3, HostPid: 102, Exe: "/usr/bin/unshare", Syscall: "unshare", Action: "errno", Source: SourceAudit, Count: 2},
			{Pid: 0, HostPid: 103, Exe: "/tmp/x", Syscall: "#9999", Action: "kill_process", Source: SourceAudit, Count: 1},
		},
		Landlock: []report.LandlockDenial{{Pid: 2, HostPid: 101, Exe: "/usr/bin/dash", Access: "fs.make_reg", Path: "/usr", Count: 2}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("collect (-want +got):\n%s", diff)
	}
}

func TestEachAuditMsg(t *testing.T) {
	// Two messages, the first with an unpadded length, as audit sends them.
	msg := func(typ uint16, text string) []byte {
		b := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(text)+3)
		binary.NativeEndian.PutUint32(b, uint32(unix.NLMSG_HDRLEN+len(text)))
		binary.NativeEndian.PutUint16(b[4:], typ)
		b = append(b, text...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	buf := append(msg(1326, "abcde"), msg(1423, "xyz1")...)
	var got []string
	eachAuditMsg(buf, func(typ uint16, data []byte) { got = append(got, string(data)) })
	if diff := cmp.Diff([]string{"abcde", "xyz1"}, got); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
}

// TestStartDenialsStatesReason checks that a collector on a host with audit off says so instead of
// returning empty lists as if nothing had been denied.
func TestStartDenialsStatesReason(t *testing.T) {
	on, err := auditEnabled()
	if err != nil {
		t.Skipf("no audit status: %v", err)
	}
	c := StartDenials()
	t0 := time.Now()
	d := c.Stop(DenialsScope{})
	// With audit off the end-of-run marker never comes back (the kernel drops user messages): Stop
	// must not wait for it.
	if took := time.Since(t0); !on && took >= syncTimeout {
		t.Errorf("audit off: Stop took %v, waiting for a marker audit does not send", took)
	}
	switch {
	case !on && (d.Available || d.Reason == "" || !errors.Is(c.reason, ErrAuditUnavailable)):
		t.Errorf("audit off: got %+v, want unavailable with a reason", d)
	case on && os.Geteuid() == 0 && !d.Available:
		t.Errorf("audit on, running as root: unavailable: %s", d.Reason)
	}
	if d.Seccomp == nil || d.Landlock == nil {
		t.Errorf("nil lists: %+v", d)
	}
}

// BenchmarkDenialsStartStop is the collector's cost per run: with audit off, one AUDIT_GET; with audit
// on, a multicast socket, a reader goroutine and the end-of-run marker's round trip through kauditd.
func BenchmarkDenialsStartStop(b *testing.B) {
	for b.Loop() {
		StartDenials().Stop(DenialsScope{HostPids: []int{1}})
	}
}

// TestMergeDenials: sbx's own records come first; audit adds what they lack and nothing they hold
// (user_notif records, the same process and syscall, a Landlock refusal of a recorded write or of its
// parent directory); sources and availability say who recorded what.
func TestMergeDenials(t *testing.T) {
	own := report.Denials{Available: true,
		Seccomp: []report.SeccompDenial{{HostPid: 10, Syscall: "unshare", Args: "CLONE_NEWUSER", Source: SourceSeccompNotify, Count: 1}},
		Writes:  []report.WriteDenial{{HostPid: 11, Syscall: "openat", Path: "/etc/cron.d/x", Count: 1}},
		Sources: []report.DenialSource{{Name: SourceSeccompNotify, Recorded: true}, {Name: SourceWriteNotify, Recorded: true}},
	}
	audit := report.Denials{Available: true,
		Seccomp: []report.SeccompDenial{
			{HostPid: 10, Syscall: "unshare", Action: "errno", Source: SourceAudit, Count: 1},
			{HostPid: 12, Syscall: "mount", Action: "user_notif", Source: SourceAudit, Count: 1},
			{HostPid: 13, Syscall: "#9999", Action: "kill_process", Source: SourceAudit, Count: 1},
		},
		Landlock: []report.LandlockDenial{
			{HostPid: 11, Access: "fs.make_reg", Path: "/etc/cron.d", Count: 1},
			{HostPid: 11, Access: "fs.read_file", Path: "/etc/shadow-x", Count: 1},
		},
		Sources: []report.DenialSource{{Name: SourceAudit, Recorded: true}},
	}
	got := MergeDenials(own, audit)
	if !got.Available || got.Reason != "" {
		t.Errorf("available %v reason %q", got.Available, got.Reason)
	}
	if len(got.Seccomp) != 2 || got.Seccomp[0].Source != SourceSeccompNotify || got.Seccomp[1].Syscall != "#9999" {
		t.Errorf("seccomp = %+v, want the notified unshare and the audit-only #9999", got.Seccomp)
	}
	if len(got.Landlock) != 1 || got.Landlock[0].Path != "/etc/shadow-x" {
		t.Errorf("landlock = %+v, want only the read", got.Landlock)
	}
	if len(got.Writes) != 1 || len(got.Sources) != 3 {
		t.Errorf("writes %+v sources %+v", got.Writes, got.Sources)
	}

	// audit off, own recording on: available, and the audit source keeps its reason
	off := report.Denials{Reason: "kernel audit is off", Sources: []report.DenialSource{{Name: SourceAudit, Reason: "kernel audit is off"}}}
	got = MergeDenials(own, off)
	if !got.Available || got.Reason != "" || got.Sources[2].Reason != "kernel audit is off" {
		t.Errorf("audit off: %+v", got)
	}
	// nothing recorded at all: unavailable with audit's reason, lists not null
	got = MergeDenials(report.Denials{}, off)
	if got.Available || got.Reason != "kernel audit is off" || got.Seccomp == nil || got.Writes == nil || got.Landlock == nil {
		t.Errorf("nothing recorded: %+v", got)
	}
}
