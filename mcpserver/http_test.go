package mcpserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const testToken = "0123456789abcdef0123456789abcdef"

// serveLimited serves an endpoint that answers 200 "ok" behind authHandler, with lim, on a loopback port.
func serveLimited(t *testing.T, lim HTTPLimits) (string, *limitListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "ok %d", len(b))
	})
	hs, l := newHTTPServer(ln, authHandler(testToken, lim, next), lim)
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String(), l.(*limitListener)
}

func testLimits() HTTPLimits {
	return HTTPLimits{MaxConns: 8, MaxUnauthenticated: 3, HeaderTimeout: 300 * time.Millisecond,
		BodyTimeout: 300 * time.Millisecond, IdleTimeout: 400 * time.Millisecond, MaxHeaderBytes: 4096, MaxBody: 1024}
}

// closedWithin says whether the server closes c within d (a read gets EOF or a reset, not a timeout).
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.ReadAll(c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func request(token, body string) string {
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	return fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", auth, len(body), body)
}

// TestHTTPUnauthenticatedFlood: connections that send nothing hold no more than MaxUnauthenticated slots
// (the oldest are closed as new ones come), each for no longer than the header timeout, and a caller
// with the token gets in during the flood. Before the caps, every silent connection stayed open.
func TestHTTPUnauthenticatedFlood(t *testing.T) {
	addr, l := serveLimited(t, testLimits())
	var silent []net.Conn
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, request(testToken, "hi"))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a request with the token during the flood: %v %v; want 200", resp, err)
	}
	if open, unauth, refused := l.counts(); unauth > 3 || open > 4 || refused < 17 {
		t.Errorf("during the flood: %d open, %d unauthenticated, %d refused; want at most 4, 3, at least 17", open, unauth, refused)
	}
	if !closedWithin(silent[0], 100*time.Millisecond) {
		t.Error("the oldest silent connection is still open past the cap")
	}
	if !closedWithin(silent[19], time.Second) {
		t.Error("a silent connection is still open past the header timeout")
	}
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if open, unauth, _ := l.counts(); unauth == 0 && open == 1 {
			break
		}
	}
	if open, unauth, _ := l.counts(); unauth != 0 || open != 1 {
		t.Errorf("after the header timeout: %d open, %d unauthenticated; want 1 (the caller with the token), 0", open, unauth)
	}
	if !closedWithin(c, time.Second) {
		t.Error("an idle authenticated connection is still open past the idle timeout")
	}
}

// TestHTTPRefusedClosed: a request without the token is answered 401 and its connection closed; a body
// past the bound is 413, one sent too slowly 408.
func TestHTTPRefusedClosed(t *testing.T) {
	addr, l := serveLimited(t, testLimits())
	tests := []struct {
		name   string
		send   string
		status int
	}{
		{"no token", request("", "hi"), 401},
		{"wrong token", request("fedcba9876543210fedcba9876543210", "hi"), 401},
		{"body over the bound", request(testToken, strings.Repeat("x", 2000)), 413},
		{"slow body", strings.TrimSuffix(request(testToken, "0123456789"), "0123456789") + "01", 408},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tc.send)
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			if resp.StatusCode != tc.status {
				t.Errorf("status %d; want %d", resp.StatusCode, tc.status)
			}
			// Closed once answered (the server waits up to 500 ms for the client to read before it resets).
			if !closedWithin(c, 2*time.Second) {
				t.Error("the connection stays open after a refusal")
			}
		})
	}
	if _, unauth, _ := l.counts(); unauth != 0 {
		t.Errorf("%d unauthenticated connections left", unauth)
	}
}

// TestReadTokenFile: a token file that group or others may read or write, a link, a FIFO or another
// user's file is refused (ErrTokenFile for the modes and the owner); a private one is read.
func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(testToken+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	private := write("private", 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(private, link)
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o600)
	tests := []struct {
		name     string
		file     string
		ok, mode bool
	}{
		{"private", private, true, false},
		{"world-readable (the default umask)", write("world", 0o644), false, true},
		{"group-readable", write("group", 0o640), false, true},
		{"others may write", write("otherw", 0o602), false, true},
		{"a link", link, false, false},
		{"a fifo", fifo, false, false},
	}
	if os.Geteuid() == 0 {
		other := write("other", 0o600)
		os.Chown(other, 65534, 65534)
		tests = append(tests, struct {
			name     string
			file     string
			ok, mode bool
		}{"another user's", other, false, true})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var tok string
			var err error
			go func() { tok, err = ReadTokenFile(tc.file); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("ReadTokenFile blocked")
			}
			if tc.ok != (err == nil) || tc.ok && tok != testToken {
				t.Fatalf("got %q, %v; want ok=%v", tok, err, tc.ok)
			}
			if errors.Is(err, ErrTokenFile) != tc.mode {
				t.Errorf("errors.Is(%v, ErrTokenFile) = %v; want %v", err, !tc.mode, tc.mode)
			}
		})
	}
}
