package seccomp

import (
	"fmt"
	"path/filepath"
	"time"

	"runtime"
	"unsafe"

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
		if slices.ContainsFunc(policy.SetIDSyscalls, func(c policy.SetIDSyscall) bool { return c.Name == n }) {
			// The chmod family: allowed without a set-id bit, notified (then refused) with one.
			var allow, notify int
			for _, r := range actions[n] {
				switch {
				case len(r.Args) == 1 && r.Action == specs.ActAllow && r.Args[0].ValueTwo == 0:
					allow++
				case len(r.Args) == 1 && r.Action == specs.ActNotify && r.Args[0].ValueTwo == r.Args[0].Value:
					notify++
				default:
					t.Errorf("%s: unexpected rule %+v", n, r)
				}
			}
			if allow != 1 || notify != 2 {
				t.Errorf("%s: %d allow and %d notify rules on the mode, want 1 and 2", n, allow, notify)
			}
			continue
		}
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
			if _, write := writeSyscalls[n]; write || slices.Contains(plan.Record.Syscalls, n) {
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
	l := &Listener{wpaths: writeRoots([]string{"/tmp", "/work/"})}
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
	l := &Listener{fd: 3, seccomp: map[notifyKey]int{}, written: map[notifyKey]int{}}
	long := strings.Repeat("x", 4000)
	for i := range 2000 {
		l.keep(notifyKey{pid: 7, syscall: "openat", detail: "/etc/" + long + strconv.Itoa(i), write: true})
	}
	l.keep(notifyKey{pid: 7, syscall: "openat", detail: "/etc/" + long + "0", write: true}) // counted again
	d := l.Records(policy.Record{Writes: true})
	if l.bytes > maxNotifyBytes || len(d.Writes) == 0 || len(d.Writes) >= 2000 {
		t.Fatalf("%d bytes, %d writes kept", l.bytes, len(d.Writes))
	}
	if d.Writes[0].Count != 2 || !strings.Contains(d.Sources[0].Reason, "dropped") {
		t.Errorf("first count %d, sources %+v", d.Writes[0].Count, d.Sources)
	}
	// The same with the bound of records reached, by short paths.
	l = &Listener{fd: 3, seccomp: map[notifyKey]int{}, written: map[notifyKey]int{}}
	for i := range maxNotifyKeys + 10 {
		l.keep(notifyKey{pid: 7, syscall: "openat", detail: "/etc/x" + strconv.Itoa(i), write: true})
	}
	l.keep(notifyKey{pid: 7, syscall: "openat", detail: "/etc/cron.d/evil", write: true})
	l.keep(notifyKey{pid: 7, syscall: "openat", detail: "/etc/not-persistence", write: true})
	d = l.Records(policy.Record{Writes: true})
	if len(d.Writes) != maxNotifyKeys+1 || d.Writes[maxNotifyKeys].Path != "/etc/cron.d/evil" {
		t.Errorf("after the flood: %d writes kept (want %d), last %+v", len(d.Writes), maxNotifyKeys+1, d.Writes[len(d.Writes)-1])
	}
}

// resolveHere resolves p as a write of this process's (its main thread's) would be, in its own view.
func resolveHere(t *testing.T, p string, follow bool) resolution {
	t.Helper()
	b := append([]byte(p), 0)
	req := &seccompNotif{Pid: uint32(os.Getpid())}
	fdcwd := int64(unix.AT_FDCWD)
	req.Args[0] = uint64(fdcwd)
	req.Args[1] = uint64(uintptr(unsafe.Pointer(&b[0])))
	task := taskOf(os.Getpid())
	task.root = hereRoot
	r := task.resolveArg(req, req.Args[1], 0, false, follow, newBudget())
	runtime.KeepAlive(b)
	return r
}

// hereRoot is the root handle resolveHere's walks use (nil: each opens the task's root).
var hereRoot *rootHandle

// TestResolveInSandbox resolves write paths as the kernel would, here in this process's own view: links
// (absolute, relative, chained), a ".." after a link (physical, not lexical), /proc/self/fd/N and cwd,
// the last component followed or not, a loop unresolved, a missing directory judged as spelled.
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
	t.Chdir(d)
	gone := filepath.Join(d, "gone")
	for _, root := range []*rootHandle{nil, {fixed: true}} {
		hereRoot = root
		resolveCases(t, d, fdPath, f)
		// A file made in a removed cwd fails (ENOENT): judged where it is spelled, as before.
		if err := os.Mkdir(gone, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Chdir(gone)
		os.Remove(gone)
		if got := resolveHere(t, "new", true); got.outcome == unresolved || got.outcome == noWrite || got.path != gone+"/new" && got.path != gone+" (deleted)/new" {
			t.Errorf("root %v: a file in a removed cwd: %+v", root != nil, got)
		}
		t.Chdir(d)
		root.close()
	}
	hereRoot = nil
}

// resolveCases are TestResolveInSandbox's paths, resolved from the cwd d.
func resolveCases(t *testing.T, d, fdPath string, f *os.File) {
	t.Helper()
	for _, tc := range []struct {
		p      string
		follow bool
		want   string
		out    outcome
	}{
		{"real/new", true, d + "/real/new", landed},
		{"real/sub/./new/", true, d + "/real/sub/new", landed},
		{"abs/x", true, "/etc/x", landed},
		{"deep/../x", true, d + "/real/x", landed},
		{"flink", false, d + "/flink", landed},
		{"flink", true, d + "/real/file", landed},
		{"real/file/x", true, d + "/real/file/x", spelled},
		{"/etc/cron.d/new", true, "/etc/cron.d/new", landed},
		{d + "/abs/x", true, "/etc/x", landed},
		{d + "/chain/x", true, d + "/real/x", landed},
		{d + "/deep/../x", true, d + "/real/x", landed}, // lexically d/x
		{d + "/abs/../x", true, "/x", landed},
		{d + "/flink", true, d + "/real/file", landed},
		{d + "/flink", false, d + "/flink", landed},
		{fdPath + "/sub/y", true, d + "/real/sub/y", landed},
		{"/proc/thread-self/fd/" + strconv.Itoa(int(f.Fd())) + "/../z", true, d + "/z", landed},
		{d + "/missing/x", true, d + "/missing/x", spelled},
		{d + "/loop1/x", true, "", unresolved},
		{"", true, "", noWrite},
		{strings.Repeat("a/", 2100), true, "", noWrite}, // PATH_MAX: ENAMETOOLONG
	} {
		got := resolveHere(t, tc.p, tc.follow)
		// The one-call resolution judges a new file as spelled (it cannot tell it from a missing
		// directory, judged the same way).
		same := got.outcome == tc.out || tc.out == landed && got.outcome == spelled
		if !same || tc.out != unresolved && got.path != tc.want {
			t.Errorf("root %v: %.80s (follow %v): %+v, want %q, outcome %d", hereRoot != nil, tc.p, tc.follow, got, tc.want, tc.out)
		}
	}
}

// resolveAt resolves the path at addr for the task tid (a thread of this process).
func resolveAt(tid int, addr uint64, follow bool) resolution {
	req := &seccompNotif{Pid: uint32(tid)}
	fdcwd := int64(unix.AT_FDCWD)
	req.Args[0] = uint64(fdcwd)
	req.Args[1] = addr
	return taskOf(tid).resolveArg(req, addr, 0, false, follow, newBudget())
}

// TestResolveUnreadable: a path sbx's read of the process cannot reach (a page it may not read, a
// memfd_secret mapping, which the kernel itself reads), or that it reads only in part, is unresolved
// with the bytes it could read, never skipped.
func TestResolveUnreadable(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 2*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	copy(mem[4096-9:], "/etc/cron")
	if err := unix.Mprotect(mem[4096:], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	if r := resolveAt(os.Getpid(), base+4096, true); r.outcome != unresolved || r.path != "" || !strings.Contains(r.why, "after 0 bytes") {
		t.Errorf("an unreadable page: %+v, want unresolved after 0 bytes", r)
	}
	if r := resolveAt(os.Getpid(), base+4096-9, true); r.outcome != unresolved || r.path != "/etc/cron" {
		t.Errorf("a short read: %+v, want unresolved with the 9 bytes read", r)
	}
	fd, _, errno := unix.Syscall(unix.SYS_MEMFD_SECRET, 0, 0, 0)
	if errno != 0 {
		t.Logf("memfd_secret: %v (not enabled on this kernel): that case is left out", errno)
		return
	}
	defer unix.Close(int(fd))
	if err := unix.Ftruncate(int(fd), 4096); err != nil {
		t.Fatal(err)
	}
	sec, err := unix.Mmap(int(fd), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(sec)
	copy(sec, "/etc/cron.d/x\x00")
	if r := resolveAt(os.Getpid(), uint64(uintptr(unsafe.Pointer(&sec[0]))), true); r.outcome != unresolved {
		t.Errorf("a path in memfd_secret memory: %+v, want unresolved", r)
	}
}

// TestResolveLinkCount: links are followed as far as the kernel follows them (40 in all), and a path
// past that is unresolved, not judged; a walk past sbx's bounds per notification is unresolved too.
func TestResolveLinkCount(t *testing.T) {
	d := t.TempDir()
	chain := func(name string, n int, target string) string {
		prev := target
		for i := n; i > 0; i-- {
			l := fmt.Sprintf("%s/%s%d", d, name, i)
			if err := os.Symlink(prev, l); err != nil {
				t.Fatal(err)
			}
			prev = l
		}
		return prev
	}
	if r := resolveHere(t, chain("ok", 40, "/etc")+"/x", true); r.outcome != landed || r.path != "/etc/x" {
		t.Errorf("40 links: %+v, want /etc/x", r)
	}
	if r := resolveHere(t, chain("long", 41, "/etc")+"/x", true); r.outcome != unresolved || !strings.Contains(r.why, "more than 40 links") {
		t.Errorf("41 links: %+v, want unresolved", r)
	}
	// Links whose targets are long walks: past sbx's steps, before the kernel's 40 links.
	os.MkdirAll(d+"/a", 0o755)
	long := strings.Repeat("a/../", 800)
	prev := "/etc"
	for i := 30; i > 0; i-- {
		l := fmt.Sprintf("%s/w%d", d, i)
		os.Symlink(d+"/"+long+filepath.Base(prev), l)
		if i == 30 {
			os.Remove(l)
			os.Symlink("/etc", l)
		}
		prev = l
	}
	start := time.Now()
	r := resolveHere(t, prev+"/x", true)
	if r.outcome != unresolved || !strings.Contains(r.why, "bound per notification") {
		t.Errorf("a walk of %d steps: %+v, want unresolved past the bound", 30*1600, r)
	}
	if el := time.Since(start); el > 4*maxResolveTime {
		t.Errorf("the bounded walk took %v, want about %v at most", el, maxResolveTime)
	}
}

// TestResolveThreadSelf: for a thread with its own fd table and working directory (made without
// CLONE_FILES and CLONE_FS), /proc/self is the thread group's leader, whose fd and cwd the kernel
// follows, and /proc/thread-self the thread: resolved as the kernel does, not through the thread's own.
func TestResolveThreadSelf(t *testing.T) {
	leaderDir, threadDir := t.TempDir(), t.TempDir()
	lfd, err := unix.Open(leaderDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lfd)
	cwd, _ := os.Getwd()
	if err := os.Chdir(leaderDir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(cwd)
	type res struct{ self, threadSelf, selfCwd, threadCwd resolution }
	done := make(chan res)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var out res
		defer func() { done <- out }()
		if err := unix.Unshare(unix.CLONE_FILES | unix.CLONE_FS); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		tfd, err := unix.Open(threadDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil || unix.Dup2(tfd, lfd) != nil || unix.Chdir(threadDir) != nil {
			t.Errorf("the thread's own fd and cwd: %v", err)
			return
		}
		tid := unix.Gettid()
		at := func(p string) resolution {
			b := append([]byte(p), 0)
			defer runtime.KeepAlive(b)
			return resolveAt(tid, uint64(uintptr(unsafe.Pointer(&b[0]))), true)
		}
		fd := strconv.Itoa(lfd)
		out = res{at("/proc/self/fd/" + fd + "/x"), at("/proc/thread-self/fd/" + fd + "/x"), at("/proc/self/cwd/y"), at("/proc/thread-self/cwd/y")}
	}()
	got := <-done
	for _, c := range []struct {
		name string
		r    resolution
		want string
	}{
		{"/proc/self/fd/N", got.self, leaderDir + "/x"}, {"/proc/thread-self/fd/N", got.threadSelf, threadDir + "/x"},
		{"/proc/self/cwd", got.selfCwd, leaderDir + "/y"}, {"/proc/thread-self/cwd", got.threadCwd, threadDir + "/y"},
	} {
		if c.r.outcome != landed || c.r.path != c.want {
			t.Errorf("%s from the thread: %+v, want %s", c.name, c.r, c.want)
		}
	}
}

// TestNameWritersCovered checks the recorder's list against the kernel's: every syscall that makes,
// replaces or opens for writing a file by its name notifies the recorder under the default profile,
// and those the recorder cannot decode (a handle, a ring of requests) are refused outright.
func TestNameWritersCovered(t *testing.T) {
	plan := builtinPlan(t, "default")
	got := notifySeccomp(plan.Seccomp, plan.Record)
	actions := map[string][]specs.LinuxSeccompAction{}
	for _, r := range got.Syscalls {
		for _, n := range r.Names {
			actions[n] = append(actions[n], r.Action)
		}
	}
	recorded := []string{"open", "openat", "openat2", "creat", "mkdir", "mkdirat", "mknod", "mknodat",
		"link", "linkat", "symlink", "symlinkat", "rename", "renameat", "renameat2", "truncate", "bind"}
	for _, n := range recorded {
		if _, ok := writeSyscalls[n]; !ok {
			t.Errorf("%s writes a name and is not in writeSyscalls", n)
		}
		if !slices.Contains(actions[n], specs.ActNotify) {
			t.Errorf("%s: rules %v, want a NOTIFY rule", n, actions[n])
		}
	}
	if got.DefaultAction == specs.ActAllow {
		t.Fatalf("default action %s, want a refusal", got.DefaultAction)
	}
	for _, n := range []string{"open_by_handle_at", "io_uring_setup", "io_uring_enter", "io_uring_register",
		"mount", "move_mount", "fsopen", "fsmount", "open_tree", "acct", "swapon"} {
		// NOTIFY only as a recorded denial: the listener answers it with the errno.
		_, write := writeSyscalls[n]
		notified := slices.Contains(actions[n], specs.ActNotify)
		if slices.Contains(actions[n], specs.ActAllow) || write || notified && !slices.Contains(plan.Record.Syscalls, n) {
			t.Errorf("%s writes files the recorder cannot see: rules %v, want it refused", n, actions[n])
		}
	}
}

// TestChrootRefused: the listener keeps one handle on the sandbox's root only while the filter refuses
// chroot; a profile that allows it (a task could then have another root) gets a walk from each task's.
func TestChrootRefused(t *testing.T) {
	plan := builtinPlan(t, "default")
	if !chrootRefused(Filter(plan.Seccomp, plan.Record, true)) {
		t.Fatal("the default profile's filter lets chroot through")
	}
	aplan := profilePlan(t, "version: 1\nextends: default\nsyscalls:\n  allow: [chroot]\n")
	if chrootRefused(Filter(aplan.Seccomp, aplan.Record, true)) {
		t.Fatal("a profile that allows chroot keeps one root handle")
	}
	if chrootRefused(&specs.LinuxSeccomp{DefaultAction: specs.ActAllow}) {
		t.Fatal("a filter that allows by default keeps one root handle")
	}
}
