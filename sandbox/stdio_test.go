package sandbox

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReopenable: only what the command's user may open again by name passes as it is; the rest is
// relayed. A socket passed as it was listed the host's interfaces and addresses to a command without
// network (SIOCGIFCONF), and as stdout read what its peer sent.
func TestReopenable(t *testing.T) {
	ids := IDMap{HostUID: 4242, HostGID: 4242}
	pipe := func(uid int, mode uint32) *os.File {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		if os.Geteuid() == 0 {
			if err := w.Chown(uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Chmod(os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
		return w
	}
	file, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	sock := os.NewFile(uintptr(fds[0]), "sock")
	defer sock.Close()
	defer unix.Close(fds[1])
	zero, err := os.OpenFile("/dev/zero", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	cases := []struct {
		name string
		f    *os.File
		want bool
	}{
		{"a pipe of someone else, 0600", pipe(os.Geteuid(), 0o600), os.Geteuid() == 4242},
		{"a pipe anyone may write", pipe(os.Geteuid(), 0o622), true},
		{"a file: Landlock has no rule for the host's path", file, false},
		{"/dev/null on the host: relayed and discarded", null, false},
		{"a socket: its ioctls answer in the host's network namespace, and it reads its peer", sock, false},
		{"a character device other than a terminal: its ioctls are the device's", zero, false},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, struct {
			name string
			f    *os.File
			want bool
		}{"a pipe of the command's user", pipe(4242, 0o600), true})
	}
	for _, c := range cases {
		if got := reopenable(c.f, ids, 0o2); got != c.want {
			t.Errorf("%s: reopenable = %v, want %v", c.name, got, c.want)
		}
	}
}

// notComparable is a writer that == would panic on.
type notComparable []byte

func (n notComparable) Write(p []byte) (int, error) { return len(p), nil }

// TestSameTarget: stdout and stderr share a relay when they are one file, so that their order holds.
func TestSameTarget(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dup, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	g := os.NewFile(uintptr(dup), "dup")
	defer g.Close()
	other, err := os.Create(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var buf bytes.Buffer
	cases := []struct {
		name string
		a, b io.Writer
		want bool
	}{
		{"one file through two fds", f, g, true},
		{"two files", f, other, false},
		{"one buffer", &buf, &buf, true},
		{"writers == cannot compare", notComparable{}, notComparable{}, false},
		{"no stderr", f, nil, false},
	}
	for _, c := range cases {
		if got := sameTarget(c.a, c.b); got != c.want {
			t.Errorf("%s: sameTarget = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestRelayOrder: a relay passes everything on, in order, to a file (splice) and to a buffer.
func TestRelayOrder(t *testing.T) {
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: several splices
	for _, toFile := range []bool{true, false} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		var dst io.Writer = &buf
		var f *os.File
		if toFile {
			if f, err = os.Create(filepath.Join(t.TempDir(), "out")); err != nil {
				t.Fatal(err)
			}
			dst = f
		}
		done := make(chan struct{})
		go func() {
			relay(dst, r)
			close(done)
		}()
		w.Write(want)
		w.Close()
		<-done
		got := buf.Bytes()
		if toFile {
			got, _ = os.ReadFile(f.Name())
			f.Close()
		}
		if !bytes.Equal(got, want) {
			t.Errorf("to a file %v: got %d bytes, want %d, in order", toFile, len(got), len(want))
		}
		r.Close()
	}
}

// openPty opens a new pty pair: its master and its slave, in raw mode (what is written arrives as is).
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no ptys: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, m.Fd(), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		t.Fatal(errno)
	}
	sfd := int(r)
	s := os.NewFile(uintptr(sfd), "pts")
	t.Cleanup(func() { s.Close() })
	tio, err := unix.IoctlGetTermios(sfd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	tio.Lflag &^= unix.ICANON | unix.ECHO
	if err := unix.IoctlSetTermios(sfd, unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	return m, s
}

// TestTerminalOutput: a terminal passed as the command's stdout reaches the command as that very
// terminal, for writing only, or, when its name leads elsewhere (a pty master's opens a new pair), is
// relayed: what the command writes arrives where the caller's descriptor leads. The master's name gave
// the command a new, unread pty, which swallowed its output and then blocked it.
func TestTerminalOutput(t *testing.T) {
	master, slave := openPty(t)
	for _, c := range []struct {
		name     string
		out      *os.File // the caller's stdout
		read     *os.File // where what is written there arrives
		terminal bool     // the command gets a terminal (else a relay)
	}{
		{"pty slave", slave, master, true},
		{"pty master", master, slave, false},
	} {
		var r relays
		w, err := r.output(c.out, IDMap{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := isTerminal(w); got != c.terminal {
			t.Errorf("%s: the command's stdout is a terminal: %v, want %v", c.name, got, c.terminal)
		}
		if c.terminal {
			want, _ := unix.IoctlGetUint32(int(c.out.Fd()), unix.TIOCGDEV)
			if got, err := unix.IoctlGetUint32(int(w.Fd()), unix.TIOCGDEV); err != nil || got != want {
				t.Errorf("%s: the command's terminal is device %#x (%v), want the caller's %#x", c.name, got, err, want)
			}
			if _, err := w.Read(make([]byte, 1)); err == nil {
				t.Errorf("%s: the command's terminal is open for reading", c.name)
			}
		}
		if _, err := w.Write([]byte("hello\n")); err != nil {
			t.Fatalf("%s: writing: %v", c.name, err)
		}
		r.close()
		unix.SetNonblock(int(c.read.Fd()), true)
		buf := make([]byte, 64)
		var got []byte
		for i := 0; i < 100 && !bytes.Contains(got, []byte("hello")); i++ {
			n, _ := unix.Read(int(c.read.Fd()), buf)
			if n > 0 {
				got = append(got, buf[:n]...)
			} else {
				time.Sleep(10 * time.Millisecond)
			}
		}
		unix.SetNonblock(int(c.read.Fd()), false)
		if !bytes.Contains(got, []byte("hello")) {
			t.Errorf("%s: the caller's side read %q, want the command's hello", c.name, got)
		}
	}
}

// TestTerminalModesBack: what the command changed on the caller's terminal through the descriptor it
// got (echo off, exclusive mode, output stopped, its line discipline) is set back when the sandbox ends;
// it outlived sbx. The terminal as stdin (its stdout no terminal) passed as the caller's read-write
// descriptor, whose changes were never set back; it passes for reading only now.
func TestTerminalModesBack(t *testing.T) {
	for _, c := range []struct {
		name string
		pass func(*relays, *os.File) (*os.File, error)
		dir  string // what the command may not do with it
	}{
		{"stdout", func(r *relays, f *os.File) (*os.File, error) { return r.output(f, IDMap{}) }, "read"},
		{"stdin", func(r *relays, f *os.File) (*os.File, error) { return r.input(f, IDMap{}) }, "write"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, slave := openPty(t)
			before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
			if err != nil {
				t.Fatal(err)
			}
			var r relays
			w, err := c.pass(&r, slave)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := unix.IoctlGetUint32(int(slave.Fd()), unix.TIOCGDEV)
			if got, err := unix.IoctlGetUint32(int(w.Fd()), unix.TIOCGDEV); err != nil || got != want {
				t.Fatalf("the command's %s is device %#x (%v), want the caller's terminal %#x", c.name, got, err, want)
			}
			if c.dir == "write" {
				_, err = w.Write([]byte("x"))
			} else {
				_, err = w.Read(make([]byte, 1))
			}
			if err == nil {
				t.Errorf("the command's %s is open to %s", c.name, c.dir)
			}
			tio := *before
			tio.Lflag ^= unix.ECHO | unix.ISIG
			if err := unix.IoctlSetTermios(int(w.Fd()), unix.TCSETS, &tio); err != nil {
				t.Fatalf("the command's change of the terminal's modes: %v", err)
			}
			if err := unix.IoctlSetInt(int(w.Fd()), unix.TIOCEXCL, 0); err != nil {
				t.Fatalf("the command's TIOCEXCL: %v", err)
			}
			if err := unix.IoctlSetInt(int(w.Fd()), unix.TCXONC, unix.TCOOFF); err != nil {
				t.Fatalf("the command's TCXONC: %v", err)
			}
			const nNull = 27 // N_NULL, a line discipline that drops everything
			nullSet := unix.IoctlSetPointerInt(int(w.Fd()), unix.TIOCSETD, nNull) == nil
			r.close()
			if d, err := unix.IoctlGetInt(int(slave.Fd()), unix.TIOCGETD); nullSet && (err != nil || d != 0) {
				t.Errorf("the terminal's line discipline after the run: %d (%v), want N_TTY (0)", d, err)
			}
			unix.SetNonblock(int(slave.Fd()), true)
			if _, err := unix.Write(int(slave.Fd()), []byte("x")); err != nil {
				t.Errorf("writing to the terminal after the run: %v, want its output started again", err)
			}
			unix.SetNonblock(int(slave.Fd()), false)
			if after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS); err != nil || *after != *before {
				t.Errorf("the terminal's modes after the run: lflag %#x (%v), want %#x as before", after.Lflag, err, before.Lflag)
			}
			if excl, err := unix.IoctlGetInt(int(slave.Fd()), unix.TIOCGEXCL); err != nil || excl != 0 {
				t.Errorf("the terminal after the run: exclusive %d (%v), want 0", excl, err)
			}
		})
	}
}

// TestSocketRelayed: a socket given as stdin or stdout reaches the command as a pipe that sbx relays,
// both ways of the data intact.
func TestSocketRelayed(t *testing.T) {
	pair := func() (*os.File, *os.File) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, b := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	inCaller, inPeer := pair()
	outCaller, outPeer := pair()
	var r relays
	in, err := r.input(inCaller, IDMap{HostUID: os.Geteuid(), HostGID: os.Getegid()})
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.output(outCaller, IDMap{HostUID: os.Geteuid(), HostGID: os.Getegid()})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]*os.File{"stdin": in, "stdout": out} {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
			t.Errorf("the command's %s: mode %#o (%v), want a pipe", name, st.Mode&unix.S_IFMT, err)
		}
	}
	inPeer.Write([]byte("question"))
	buf := make([]byte, 64)
	n, err := in.Read(buf)
	if err != nil || string(buf[:n]) != "question" {
		t.Errorf("the command read %q (%v) from its stdin, want the peer's question", buf[:n], err)
	}
	out.Write([]byte("answer"))
	r.started()
	r.close()
	n, err = outPeer.Read(buf)
	if err != nil || string(buf[:n]) != "answer" {
		t.Errorf("the peer read %q (%v), want the command's answer", buf[:n], err)
	}
}
