package supervisor

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sendReady sends ready as the supervisor does, with fd when fd >= 0.
func sendReady(c *Conn, fd int) error {
	m, err := c.NewReady()
	if err != nil {
		return err
	}
	return m.Send(fd)
}

// pair returns both ends of a control socket: sbx's and the supervisor's.
func pair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sbx, sup := NewConn(os.NewFile(uintptr(fds[0]), "sbx")), NewConn(os.NewFile(uintptr(fds[1]), "supervisor"))
	t.Cleanup(func() { sbx.Close(); sup.Close() })
	return sbx, sup
}

func TestConnRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		started Started
		ws      unix.WaitStatus
	}{
		{"started, exit 3", Started{Pid: 2, DiagFD: 7, PidFD: 9}, unix.WaitStatus(3 << 8)},
		{"started, killed", Started{Pid: 9, DiagFD: -1, PidFD: -1}, unix.WaitStatus(unix.SIGKILL)},
		{"not found", Started{Code: ExitNotFound, DiagFD: 5, PidFD: -1}, 0},
		{"not prepared", Started{Code: ExitSetup, DiagFD: -1, PidFD: -1, Reason: "landlock: needs ABI 1\nand \"more\"", Hint: "set degrade"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sbx, sup := pair(t)
			prep := Prepare{Read: []string{"/"}, Write: []string{"/tmp"}, Degrade: true,
				Seccomp: &Seccomp{Filter: []byte{6, 0, 0, 0, 0, 0, 0xff, 0x7f}, Flags: unix.SECCOMP_FILTER_FLAG_LOG}}
			if err := sbx.SendPrepare(prep); err != nil {
				t.Fatal(err)
			}
			raw, err := sup.ReadPrepare()
			if err != nil {
				t.Fatal(err)
			}
			var gotPrep Prepare
			if err := json.Unmarshal(raw, &gotPrep); err != nil || !reflect.DeepEqual(gotPrep, prep) {
				t.Fatalf("preparation %+v (%v), want %+v", gotPrep, err, prep)
			}
			if err := sendReady(sup, -1); err != nil {
				t.Fatal(err)
			}
			if fd, err := sbx.ReadReady(); err != nil || fd != -1 {
				t.Fatalf("ready: %d, %v", fd, err)
			}
			cfg := Config{Argv: [][]byte{[]byte("true"), {0xff}}, Env: [][]byte{[]byte("A=1")}, UID: 1000, GID: 1000}
			if err := sbx.SendGo(cfg); err != nil {
				t.Fatal(err)
			}
			raw, err = sup.ReadGo()
			if err != nil {
				t.Fatal(err)
			}
			var got Config
			if err := json.Unmarshal(raw, &got); err != nil || !reflect.DeepEqual(got, cfg) {
				t.Fatalf("config %+v (%v), want %+v", got, err, cfg)
			}
			if err := sup.SendStarted(tc.started); err != nil {
				t.Fatal(err)
			}
			st, err := sbx.ReadStarted()
			if err != nil || st != tc.started {
				t.Fatalf("started %+v (%v), want %+v", st, err, tc.started)
			}
			if st.Pid == 0 {
				return
			}
			if err := sup.SendExit(tc.ws); err != nil {
				t.Fatal(err)
			}
			if ws, err := sbx.ReadExit(); err != nil || ws != tc.ws {
				t.Fatalf("exit %v (%v), want %v", ws, err, tc.ws)
			}
		})
	}
}

// TestConnFailReasonBounded: a fail message's reason is cut at maxReason when sent, and a reason line
// over the bound is refused when read.
func TestConnFailReasonBounded(t *testing.T) {
	sbx, sup := pair(t)
	long := strings.Repeat("é", maxReason) // two bytes each
	go sup.SendStarted(Started{Code: ExitSetup, DiagFD: -1, PidFD: -1, Reason: long})
	st, err := sbx.ReadStarted()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Reason) > maxReason || !strings.HasPrefix(long, st.Reason) || st.Reason == "" {
		t.Errorf("reason of %d bytes, want a prefix of at most %d", len(st.Reason), maxReason)
	}
	// Whatever the supervisor sends, sbx reads: JSON spells "<", ">", "&" and control characters in six
	// bytes each, so a reason and a hint cut at maxReason may encode to six times as much.
	for _, c := range []string{"<", "\x01", "\"", "é"} {
		sbx, sup = pair(t)
		long := strings.Repeat(c, maxReason)
		go sup.SendStarted(Started{Code: ExitSetup, DiagFD: -1, PidFD: -1, Reason: long, Hint: long})
		st, err := sbx.ReadStarted()
		if err != nil {
			t.Fatalf("%q: %v", c, err)
		}
		if st.Reason == "" || !strings.HasPrefix(long, st.Reason) || st.Hint != st.Reason {
			t.Errorf("%q: reason of %d bytes, hint of %d, want the same prefix", c, len(st.Reason), len(st.Hint))
		}
	}
	sbx, sup = pair(t)
	go sup.write("fail 125 -1 -1\n{\"reason\":\"" + strings.Repeat("x", 16*maxReason) + "\"}\n")
	if _, err := sbx.ReadStarted(); !errors.Is(err, ErrProtocol) {
		t.Errorf("an over-long reason line: %v, want ErrProtocol", err)
	}
}

func TestConnUnexpected(t *testing.T) {
	sbx, sup := pair(t)
	if err := sup.write("exit 0\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := sbx.ReadStarted(); !errors.Is(err, ErrProtocol) {
		t.Errorf("ReadStarted on exit: %v, want ErrProtocol", err)
	}
	if err := sup.write("pid 2 -1\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := sbx.ReadExit(); !errors.Is(err, ErrProtocol) {
		t.Errorf("ReadExit on pid: %v, want ErrProtocol", err)
	}
	if err := sbx.write("stop\n{}\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.ReadGo(); !errors.Is(err, ErrProtocol) {
		t.Errorf("ReadGo on stop: %v, want ErrProtocol", err)
	}
	sbx, sup = pair(t)
	if err := sbx.SendGo(Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.ReadPrepare(); !errors.Is(err, ErrProtocol) {
		t.Errorf("ReadPrepare on go: %v, want ErrProtocol", err)
	}
}

// notifyFD is the notification fd of an allow-everything filter loaded on a thread of its own (which
// ends with it), closed when the test ends.
func notifyFD(t *testing.T) int {
	t.Helper()
	allow := []byte{6, 0, 0, 0, 0, 0, 0xff, 0x7f}
	done := make(chan error, 1)
	fd := -1
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, and its filter with it
		var err error
		fd, err = loadSeccomp(&Seccomp{Filter: allow, Flags: unix.SECCOMP_FILTER_FLAG_NEW_LISTENER})
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// sameFile says whether two fds of this process are the same open file (kcmp KCMP_FILE).
func sameFile(a, b int) bool {
	const kcmpFile = 0
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(os.Getpid()), kcmpFile, uintptr(a), uintptr(b), 0)
	return errno == 0 && r == 0
}

// sendRaw sends msg with fds as the supervisor, however wrong.
func sendRaw(t *testing.T, c *Conn, msg string, fds ...int) {
	t.Helper()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(int(c.f.Fd()), []byte(msg), oob, nil, 0); err != nil {
		t.Fatal(err)
	}
}

// TestConnReadyFD: the notification fd rides along with ready, close-on-exec, and is the same file.
func TestConnReadyFD(t *testing.T) {
	sbx, sup := pair(t)
	nfd := notifyFD(t)
	if err := sendReady(sup, nfd); err != nil {
		t.Fatal(err)
	}
	fd, err := sbx.ReadReady()
	if err != nil || fd < 0 {
		t.Fatalf("ready: %d, %v", fd, err)
	}
	defer unix.Close(fd)
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("fd flags %#x (%v), want close-on-exec", flags, err)
	}
	if !sameFile(fd, nfd) {
		t.Fatal("the fd received is not the one sent")
	}
	// Anything else than ready is a protocol error, and an fd that comes with it is not kept.
	if err := sup.SendStarted(Started{Pid: 2, DiagFD: -1, PidFD: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := sbx.ReadReady(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("ReadReady on pid: %v, want ErrProtocol", err)
	}
}

// TestConnReadyGarbage: a ready that is not one, or comes with the wrong files, is refused or its
// files dropped; no fd that is not a seccomp notification fd is ever handed to the listener.
func TestConnReadyGarbage(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	pipe := int(w.Fd())
	for _, tc := range []struct {
		name string
		msg  string
		fds  func(nfd int) []int
		want string // "notify": the notification fd; "none": -1; "protocol": ErrProtocol
	}{
		{"ready 1 without an fd", "ready 1\n", func(int) []int { return nil }, "protocol"},
		{"ready 1 with a pipe", "ready 1\n", func(int) []int { return []int{pipe} }, "protocol"},
		{"ready 1 with two fds", "ready 1\n", func(n int) []int { return []int{n, pipe} }, "notify"},
		{"ready 0 with an fd", "ready 0\n", func(n int) []int { return []int{n} }, "none"},
		{"ready 2", "ready 2\n", func(n int) []int { return []int{n} }, "protocol"},
		{"garbage", "garbage\n", func(int) []int { return nil }, "protocol"},
		{"a short line", "read", func(int) []int { return nil }, "protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sbx, sup := pair(t)
			nfd := notifyFD(t)
			sendRaw(t, sup, tc.msg, tc.fds(nfd)...)
			fd, err := sbx.ReadReady()
			if fd >= 0 {
				defer unix.Close(fd)
			}
			switch tc.want {
			case "notify":
				if err != nil || !sameFile(fd, nfd) {
					t.Fatalf("ready: %d, %v, want the notification fd", fd, err)
				}
			case "none":
				if err != nil || fd != -1 {
					t.Fatalf("ready: %d, %v, want no fd", fd, err)
				}
			case "protocol":
				if !errors.Is(err, ErrProtocol) || fd != -1 {
					t.Fatalf("ready: %d, %v, want ErrProtocol and no fd", fd, err)
				}
			}
		})
	}
	// The supervisor died before ready.
	sbx, sup := pair(t)
	sup.Close()
	if fd, err := sbx.ReadReady(); !errors.Is(err, io.EOF) || fd != -1 {
		t.Fatalf("ready from a closed socket: %d, %v, want EOF", fd, err)
	}
}

// TestLoadSeccomp: a program is loaded on the calling thread only, and a malformed one is refused.
func TestLoadSeccomp(t *testing.T) {
	for _, bad := range []*Seccomp{{}, {Filter: make([]byte, 7)}, {Filter: make([]byte, 8*4097)},
		{Filter: []byte{6, 0, 0, 0, 0, 0, 0xff, 0x7f}, Flags: unix.SECCOMP_FILTER_FLAG_TSYNC}} {
		if _, err := loadSeccomp(bad); err == nil {
			t.Errorf("loaded a program of %d bytes, flags %#x", len(bad.Filter), bad.Flags)
		}
	}
	// ret ERRNO(ESRCH) for getppid, else allow.
	raw := onlyFor(unix.SYS_GETPPID, unix.SECCOMP_RET_ERRNO|uint32(unix.ESRCH), unix.SECCOMP_RET_ALLOW)
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, and its filter with it
		if _, err := loadSeccomp(&Seccomp{Filter: raw}); err != nil {
			done <- err
			return
		}
		if _, _, errno := unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0); errno != unix.ESRCH {
			done <- fmt.Errorf("getppid on the filtered thread: %v, want ESRCH", errno)
			return
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0); errno != 0 {
		t.Fatalf("getppid elsewhere: %v", errno)
	}
}

// TestPrepareHandsOverFirst: the thread that loads the filter sends ready, with the notification fd,
// before any other syscall, so that sbx can answer whatever the filter notifies next. The supervisor's
// side runs in a child (this test binary again) with one P, the filter notifies every syscall but
// sendmsg (the Go runtime's futex among them), and sbx's side answers nothing before it holds the fd,
// then lets everything through. When ready was sent by another thread after a hand-off from the
// filtered one, waking that thread was a futex nobody could answer yet: a profile denying futex hung
// sbx for good.
func TestPrepareHandsOverFirst(t *testing.T) {
	if os.Getenv("SBX_TEST_PREPARE_CHILD") == "1" {
		os.Exit(prepareChild())
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sbx, child := NewConn(os.NewFile(uintptr(fds[0]), "sbx")), os.NewFile(uintptr(fds[1]), "supervisor")
	defer sbx.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPrepareHandsOverFirst$")
	cmd.Env = append(os.Environ(), "SBX_TEST_PREPARE_CHILD=1", "GOMAXPROCS=1")
	cmd.ExtraFiles, cmd.Stderr = []*os.File{child}, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child.Close()
	defer cmd.Process.Kill()
	got := make(chan int, 1)
	gotErr := make(chan error, 1)
	go func() {
		fd, err := sbx.ReadReady()
		got <- fd
		gotErr <- err
	}()
	select {
	case fd := <-got:
		if err := <-gotErr; err != nil || fd < 0 {
			t.Fatalf("ready: fd %d, %v; want the notification fd", fd, err)
		}
		defer unix.Close(fd)
		go continueAll(fd)
	case <-time.After(20 * time.Second):
		t.Fatal("no ready from the supervisor: the filtered thread waits on a notification nobody can answer")
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the supervisor's side: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor's side did not end")
	}
}

// prepareChild is the supervisor's side of TestPrepareHandsOverFirst, on fd 3: prepare with a filter
// that notifies every syscall but sendmsg, then start true from the filtered thread.
func prepareChild() int {
	raw := onlyFor(unix.SYS_SENDMSG, unix.SECCOMP_RET_ALLOW, unix.SECCOMP_RET_USER_NOTIF)
	prep, _ := json.Marshal(Prepare{Read: []string{"/"}, Degrade: true, Seccomp: &Seccomp{Filter: raw, Flags: unix.SECCOMP_FILTER_FLAG_NEW_LISTENER}})
	rd, err := NewConn(os.NewFile(3, "ctl")).NewReady()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st := prepare(prep, rd, nil)
	if st.fatal != nil || st.readyErr != nil {
		fmt.Fprintln(os.Stderr, "prepare:", st.fatal, st.readyErr)
		return 1
	}
	pid, err := st.start("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil || !ws.Exited() || ws.ExitStatus() != 0 {
		fmt.Fprintln(os.Stderr, "true under the filter:", ws, err)
		return 1
	}
	return 0
}

// onlyFor is a filter program, as the supervisor gets it, that returns ret for syscall nr and other
// for the rest: ld [0]; jeq #nr, 0, 1; ret ret; ret other.
func onlyFor(nr int, ret, other uint32) []byte {
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: uint32(nr)},
		{Code: unix.BPF_RET | unix.BPF_K, K: ret},
		{Code: unix.BPF_RET | unix.BPF_K, K: other},
	}
	raw := make([]byte, 0, 32)
	for _, in := range prog {
		raw = binary.NativeEndian.AppendUint16(raw, in.Code)
		raw = append(raw, in.Jt, in.Jf)
		raw = binary.NativeEndian.AppendUint32(raw, in.K)
	}
	return raw
}

// continueAll lets every notification of the listener fd through until it is closed.
func continueAll(fd int) {
	for {
		var req [80]byte // struct seccomp_notif; its id comes first
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req))); e != 0 {
			if e == unix.EINTR || e == unix.ENOENT {
				continue
			}
			return
		}
		var resp [24]byte // struct seccomp_notif_resp: id, val, error, flags
		copy(resp[:8], req[:8])
		binary.NativeEndian.PutUint32(resp[20:], unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE)
		for {
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
			if e != unix.EINTR {
				break
			}
		}
	}
}

// TestSetupFailedHint: a build that failed on a read-only mount point says so in its hint (a share onto
// a path the host lacks, below a read-only part of a rootless sandbox); a share that failed points at
// the shares' paths; a step of sbx's own that the kernel refused names the step and the kernel, never
// the shares (stock 6.1 and 6.12 kernels refused the masking with EINVAL, and the hint spoke of --rw).
func TestSetupFailedHint(t *testing.T) {
	for _, tc := range []struct {
		err  error
		hint string
	}{
		{fmt.Errorf("mounting /mnt/a: opening the mount point: %w", unix.EROFS), roHint},
		{fmt.Errorf("mounting /mnt/a: %w", unix.ENOTDIR), buildHint},
		{stepFailed("mounting /mnt/a", true, unix.EINVAL), buildHint},
		{stepFailed("masking /proc/acpi", false, fmt.Errorf("open_tree: %w", unix.EINVAL)), fmt.Sprintf(kernelHint, "masking /proc/acpi")},
		{stepFailed("mounting /proc", false, unix.EPERM), fmt.Sprintf(lsmHint, "mounting /proc")},
		{stepFailed("making /dev", false, unix.ENOENT), "building the sandbox failed at a step of sbx's own (making /dev), not at a share; run 'sbx gc' and try again, and report it with 'sbx version --json' if it stays"},
	} {
		sbx, sup := pair(t)
		go sup.SendSetupFailed(tc.err)
		_, err := sbx.ReadReady()
		var be *BuildError
		if !errors.As(err, &be) || be.Hint != tc.hint || !strings.Contains(be.Reason, tc.err.Error()) {
			t.Errorf("%v: got %v (%+v), want a BuildError with hint %q", tc.err, err, be, tc.hint)
		}
	}
}

// TestSbxGone: the supervisor sees sbx's end of the control socket closed, also when sbx's last
// message (go) is still unread, and not while sbx holds it open.
func TestSbxGone(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	if sbxGone(fds[0]) {
		t.Error("sbx gone while its end is open")
	}
	if _, err := unix.Write(fds[1], []byte("go")); err != nil {
		t.Fatal(err)
	}
	if sbxGone(fds[0]) {
		t.Error("sbx gone while its end is open, with a message unread")
	}
	unix.Close(fds[1])
	if !sbxGone(fds[0]) {
		t.Error("sbx's end closed, with a message unread: not seen")
	}
}
