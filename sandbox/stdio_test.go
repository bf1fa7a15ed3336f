package sandbox

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReopenable: only what the command's user may open again by name passes as it is; the rest is
// relayed.
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
	cases := []struct {
		name string
		f    *os.File
		want bool
	}{
		{"a pipe of someone else, 0600", pipe(os.Geteuid(), 0o600), os.Geteuid() == 4242},
		{"a pipe anyone may write", pipe(os.Geteuid(), 0o622), true},
		{"a file: Landlock has no rule for the host's path", file, false},
		{"/dev/null on the host: relayed and discarded", null, false},
		{"a socket cannot be reopened at all", sock, true},
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
