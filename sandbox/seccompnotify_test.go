package sandbox

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
)

// TestNotifySeccomp checks the filter sbx hands runc when it records: the deny list notifies instead of
// failing, opens notify only with a write flag (reads keep a plain ALLOW rule), the other write
// syscalls notify, and nothing else changes: no syscall of the base's ALLOW rules moves, and no
// syscall is named under two actions without argument checks.
func TestNotifySeccomp(t *testing.T) {
	plan := builtinPlan(t, "default")
	sc := plan.Seccomp
	got := notifySeccomp(sc, plan.Record)
	actions := map[string][]specs.LinuxSyscall{}
	for _, r := range got.Syscalls {
		for _, n := range r.Names {
			actions[n] = append(actions[n], r)
		}
	}
	plainly := func(name string, act specs.LinuxSeccompAction) bool {
		rs := actions[name]
		return len(rs) == 1 && rs[0].Action == act && len(rs[0].Args) == 0
	}
	for _, n := range plan.Record.Syscalls {
		if !plainly(n, specs.ActNotify) {
			t.Errorf("deny-list %s: rules %+v, want one plain NOTIFY", n, actions[n])
		}
	}
	for _, n := range []string{"mkdir", "mkdirat", "renameat2", "linkat", "symlinkat", "creat"} {
		if !plainly(n, specs.ActNotify) {
			t.Errorf("write syscall %s: rules %+v, want one plain NOTIFY", n, actions[n])
		}
	}
	for _, n := range []string{"openat", "open"} {
		var allow, notify int
		for _, r := range actions[n] {
			if len(r.Args) != 1 || r.Args[0].Op != specs.OpMaskedEqual {
				t.Errorf("%s: rule %+v without the masked flag check", n, r)
				continue
			}
			switch r.Action {
			case specs.ActAllow:
				allow++
				if r.Args[0].Value != openWriteFlags || r.Args[0].ValueTwo != 0 {
					t.Errorf("%s: ALLOW rule %+v, want flags&write==0", n, r.Args[0])
				}
			case specs.ActNotify:
				notify++
			}
		}
		if allow != 1 || notify != 5 {
			t.Errorf("%s: %d ALLOW and %d NOTIFY rules, want 1 and 5", n, allow, notify)
		}
	}
	// The hot path: every other syscall keeps its rules as they were.
	for _, r := range sc.Syscalls {
		for _, n := range r.Names {
			if slices.Contains(plan.Record.Syscalls, n) || writeSyscalls[n].paths != nil {
				continue
			}
			if !slices.ContainsFunc(actions[n], func(g specs.LinuxSyscall) bool { return g.Action == r.Action }) {
				t.Errorf("%s: %s rule lost (now %+v)", n, r.Action, actions[n])
			}
		}
	}
	for _, n := range []string{"getpid", "read", "write", "close", "execve"} {
		if !plainly(n, specs.ActAllow) {
			t.Errorf("%s: rules %+v, want one plain ALLOW", n, actions[n])
		}
	}
}

// TestNotifySeccompOff: nothing recorded, nothing notifies.
func TestNotifySeccompOff(t *testing.T) {
	sc := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{
		{Names: []string{"openat", "getpid"}, Action: specs.ActAllow},
		{Names: []string{"mount"}, Action: specs.ActErrno},
	}}
	got := notifySeccomp(sc, policy.Record{})
	for _, r := range got.Syscalls {
		if r.Action == specs.ActNotify {
			t.Errorf("rule %+v notifies with recording off", r)
		}
	}
	if len(got.Syscalls) != 2 {
		t.Errorf("rules %+v, want the two of the input", got.Syscalls)
	}
}

func TestOpenFlagsAndArgs(t *testing.T) {
	if got := openFlags(unix.O_WRONLY | unix.O_CREAT | unix.O_TRUNC | unix.O_CLOEXEC); got != "O_WRONLY|O_CREAT|O_TRUNC" {
		t.Errorf("openFlags = %q", got)
	}
	for _, c := range []struct {
		name string
		args [6]uint64
		want string
	}{
		{"unshare", [6]uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWNS}, "CLONE_NEWUSER|CLONE_NEWNS"},
		{"unshare", [6]uint64{1 << 40}, "0x10000000000"},
		{"setns", [6]uint64{3, unix.CLONE_NEWNET}, "fd 3, CLONE_NEWNET"},
		{"ptrace", [6]uint64{unix.PTRACE_ATTACH, 1}, "PTRACE_ATTACH pid 1"},
		{"ptrace", [6]uint64{999, 7}, "request 999 pid 7"},
		{"bpf", [6]uint64{5}, "BPF_PROG_LOAD"},
		{"bpf", [6]uint64{77}, "cmd 77"},
		{"mount", [6]uint64{0, 0, 0, unix.MS_BIND | unix.MS_REC}, `"" on "" type "" MS_BIND|MS_REC`},
		{"reboot", [6]uint64{}, ""},
	} {
		req := &seccompNotif{Pid: 1 << 30, Args: c.args} // no such pid: strings read as empty
		if got := decodeArgs(c.name, req); got != c.want {
			t.Errorf("decodeArgs(%s, %v) = %q, want %q", c.name, c.args[:4], got, c.want)
		}
	}
}

func TestWritable(t *testing.T) {
	l := &notifyListener{wpaths: writeRoots([]string{"/tmp", "/work/"})}
	for p, want := range map[string]bool{
		"/tmp": true, "/tmp/a/b": true, "/work/x": true, "/dev/null": true, "/dev/stdout": true,
		"/proc/self/fd/1": true, "/proc/123/fd/4": true,
		"/tmpx": false, "/etc/cron.d/x": false, "/proc/sys/kernel/core_pattern": false, "/": false,
	} {
		if got := l.writable(p); got != want {
			t.Errorf("writable(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestNotifyBounds: a command flooding distinct refusals costs sbx a bounded amount of memory, and the
// report says records were dropped; a refused write that could plant persistence is kept past the
// bounds, other records are not.
func TestNotifyBounds(t *testing.T) {
	l := &notifyListener{fd: 3, seccomp: map[notifyKey]int{}, written: map[notifyKey]int{}}
	long := strings.Repeat("x", 4000)
	for i := range 2000 {
		l.keep(notifyKey{pid: 7, syscall: "openat", detail: "/etc/" + long + strconv.Itoa(i), write: true})
	}
	l.keep(notifyKey{pid: 7, syscall: "openat", detail: "/etc/" + long + "0", write: true}) // counted again
	d := l.records(policy.Record{Writes: true})
	if l.bytes > maxNotifyBytes || len(d.Writes) == 0 || len(d.Writes) >= 2000 {
		t.Fatalf("%d bytes, %d writes kept", l.bytes, len(d.Writes))
	}
	if d.Writes[0].Count != 2 || !strings.Contains(d.Sources[0].Reason, "dropped") {
		t.Errorf("first count %d, sources %+v", d.Writes[0].Count, d.Sources)
	}
	// The same with the bound of records reached, by short paths.
	l = &notifyListener{fd: 3, seccomp: map[notifyKey]int{}, written: map[notifyKey]int{}}
	for i := range maxNotifyKeys + 10 {
		l.keep(notifyKey{pid: 7, syscall: "openat", detail: "/etc/x" + strconv.Itoa(i), write: true})
	}
	l.keep(notifyKey{pid: 7, syscall: "openat", detail: "/etc/cron.d/evil", write: true})
	l.keep(notifyKey{pid: 7, syscall: "openat", detail: "/etc/not-persistence", write: true})
	d = l.records(policy.Record{Writes: true})
	if len(d.Writes) != maxNotifyKeys+1 || d.Writes[maxNotifyKeys].Path != "/etc/cron.d/evil" {
		t.Errorf("after the flood: %d writes kept (want %d), last %+v", len(d.Writes), maxNotifyKeys+1, d.Writes[len(d.Writes)-1])
	}
}

// TestResolveInSandbox resolves write paths as the kernel would, here in this process's own view: links
// (absolute, relative, chained), a ".." after a link (physical, not lexical), /proc/self/fd/N and cwd,
// the last component followed or not, a loop refused, a missing directory said so.
func TestResolveInSandbox(t *testing.T) {
	d := t.TempDir()
	for _, c := range [][2]string{{"/etc", "abs"}, {"real", "rel"}, {"rel", "chain"}, {"real/sub", "deep"}, {"loop1", "loop2"}, {"loop2", "loop1"}, {"real/file", "flink"}} {
		if err := os.MkdirAll(d+"/real/sub", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(c[0], d+"/"+c[1]); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(d + "/real")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fdPath := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	for _, tc := range []struct {
		p      string
		follow bool
		want   string
		err    error
	}{
		{d + "/abs/x", true, "/etc/x", nil},
		{d + "/chain/x", true, d + "/real/x", nil},
		{d + "/deep/../x", true, d + "/real/x", nil}, // lexically d/x
		{d + "/abs/../x", true, "/x", nil},
		{d + "/flink", true, d + "/real/file", nil},
		{d + "/flink", false, d + "/flink", nil},
		{fdPath + "/sub/y", true, d + "/real/sub/y", nil},
		{"/proc/thread-self/fd/" + strconv.Itoa(int(f.Fd())) + "/../z", true, d + "/z", nil},
		{d + "/missing/x", true, "", errNotThere},
		{d + "/loop1/x", true, "", nil},
	} {
		got, err := resolveInSandbox(os.Getpid(), tc.p, tc.follow)
		if tc.p == d+"/loop1/x" {
			if err == nil || errors.Is(err, errNotThere) {
				t.Errorf("%s: %q, %v, want an error for the loop", tc.p, got, err)
			}
			continue
		}
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s (follow %v): %q, %v, want %q, %v", tc.p, tc.follow, got, err, tc.want, tc.err)
		}
	}
}
