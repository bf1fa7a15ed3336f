package runner

import (
	"encoding/binary"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
)

// TestKernelDenials runs a command that the seccomp filter refuses a syscall (unshare) and Landlock
// refuses a write (/usr is the plan's read-only, and the command runs as root, so only Landlock says
// no), and checks that both are reported, or that the report says why the kernel cannot report them.
//
// Kernel audit is a host setting that sbx never changes. SBX_TEST_AUDIT=enable lets this test turn it
// on for its own duration (and restore it) to exercise the reporting path on a host where it is off.
func TestKernelDenials(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	on := auditForTest(t)
	res, out := runCmd(t, plan(t), 30*time.Second, "sh", "-c", "unshare -n true; echo x > /usr/sbx-denied; exit 0")
	d := res.Report.Denials
	if !on {
		if d.Available || !strings.Contains(d.Reason, "audit is off") {
			t.Fatalf("audit off: denials = %+v, want unavailable with the reason", d)
		}
		t.Skipf("kernel audit is off: the report says so (%q); SBX_TEST_AUDIT=enable checks the records", d.Reason)
	}
	if !d.Available {
		t.Fatalf("audit on, yet denials unavailable: %s", d.Reason)
	}
	if !slices.ContainsFunc(d.Seccomp, func(s report.SeccompDenial) bool {
		return s.Syscall == "unshare" && s.Exe == "/usr/bin/unshare" && s.Pid > 0 && s.Count == 1
	}) {
		t.Errorf("seccomp denials = %+v, want unshare by /usr/bin/unshare (output: %s)", d.Seccomp, out)
	}
	if !slices.ContainsFunc(d.Landlock, func(l report.LandlockDenial) bool {
		return strings.Contains(l.Access, "fs.make_reg") && strings.HasPrefix(l.Path, "/usr")
	}) {
		t.Errorf("landlock denials = %+v, want fs.make_reg under /usr (output: %s)", d.Landlock, out)
	}
	for _, s := range d.Seccomp {
		if s.Syscall == "clone3" {
			t.Errorf("clone3's ENOSYS fallback reported as a denial: %+v", s)
		}
	}
}

// TestRecordedDenials runs the default profile's plan with a command refused a deny-list syscall and a
// write: sbx's own records hold both whether kernel audit is on or off, and when it is on, audit adds no
// duplicate of either (SBX_TEST_AUDIT=enable turns it on for the test, as above).
func TestRecordedDenials(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	on := auditForTest(t)
	prof, err := policy.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(prof, policy.CompileContext{Cwd: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p.UID, p.GID = 0, 0 // root without capabilities: only Landlock refuses the write
	res, out := runCmd(t, p, 30*time.Second, "sh", "-c", "unshare -n true; echo x > /usr/sbx-denied; exit 0")
	d := res.Report.Denials
	if !d.Available {
		t.Fatalf("denials unavailable: %s (output %s)", d.Reason, out)
	}
	var notified, audited int
	for _, s := range d.Seccomp {
		if s.Syscall == "unshare" {
			if s.Source == observe.SourceSeccompNotify && s.Args == "CLONE_NEWNET" && s.Exe == "/usr/bin/unshare" && s.Pid > 0 {
				notified++
			} else {
				audited++
			}
		}
	}
	if notified != 1 || audited != 0 {
		t.Errorf("seccomp denials = %+v, want unshare once, from seccomp-notify (audit on: %v)", d.Seccomp, on)
	}
	if !slices.ContainsFunc(d.Writes, func(w report.WriteDenial) bool { return w.Path == "/usr/sbx-denied" }) {
		t.Errorf("writes = %+v, want /usr/sbx-denied", d.Writes)
	}
	for _, l := range d.Landlock {
		if l.Path == "/usr" || l.Path == "/usr/sbx-denied" {
			t.Errorf("audit's Landlock record of the write sbx recorded kept: %+v", l)
		}
	}
	names := map[string]bool{}
	for _, s := range d.Sources {
		names[s.Name] = s.Recorded
	}
	if !names[observe.SourceSeccompNotify] || !names[observe.SourceWriteNotify] || names[observe.SourceAudit] != on {
		t.Errorf("sources = %+v (audit on: %v)", d.Sources, on)
	}
}

// auditStatus reads whether kernel audit is on (AUDIT_GET).
func auditStatus() (bool, error) {
	m, err := auditRequest(unix.AUDIT_GET, nil)
	if err != nil || len(m) < 8 {
		return false, err
	}
	return binary.NativeEndian.Uint32(m[4:]) != 0, nil
}

// setAudit turns kernel audit on or off (AUDIT_SET with AUDIT_STATUS_ENABLED).
func setAudit(t *testing.T, on bool) {
	st := make([]byte, 44) // struct audit_status
	binary.NativeEndian.PutUint32(st[0:], 1)
	if on {
		binary.NativeEndian.PutUint32(st[4:], 1)
	}
	if _, err := auditRequest(unix.AUDIT_SET, st); err != nil {
		t.Fatalf("setting audit enabled=%v: %v", on, err)
	}
}

// auditRequest sends one request and returns the payload of the reply of the same type, or nil after
// an ACK.
func auditRequest(typ uint16, data []byte) ([]byte, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	msg := make([]byte, unix.NLMSG_HDRLEN+len(data))
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	copy(msg[unix.NLMSG_HDRLEN:], data)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, err
		}
		if n < unix.NLMSG_HDRLEN {
			continue
		}
		switch binary.NativeEndian.Uint16(buf[4:]) {
		case typ:
			return slices.Clone(buf[unix.NLMSG_HDRLEN:n]), nil
		case unix.NLMSG_ERROR:
			if e := int32(binary.NativeEndian.Uint32(buf[unix.NLMSG_HDRLEN:])); e != 0 {
				return nil, unix.Errno(-e)
			}
			if typ != unix.AUDIT_GET {
				return nil, nil
			}
		}
	}
}

// auditForTest says whether kernel audit is on; with SBX_TEST_AUDIT=enable it turns audit on for the
// test's duration when it is off (and restores it afterwards).
func auditForTest(t *testing.T) bool {
	on, err := auditStatus()
	if err != nil {
		t.Fatalf("reading the audit status: %v", err)
	}
	if !on && os.Getenv("SBX_TEST_AUDIT") == "enable" {
		setAudit(t, true)
		t.Cleanup(func() { setAudit(t, false) })
		on = true
	}
	return on
}
