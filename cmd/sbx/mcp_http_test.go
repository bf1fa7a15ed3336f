package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestMCPHTTP serves `sbx mcp --http 127.0.0.1:0` and drives it over streamable HTTP with the SDK's
// client, which sends the bearer token sbx printed: the tools are listed and a run comes back with its
// report. A request without the token, with a wrong one, or from another origin is refused; a
// non-loopback address is refused.
func TestMCPHTTP(t *testing.T) {
	testutil.RequireRoot(t, "sbx creates namespaces, cgroups and mounts")
	bin, err := exec.LookPath("sbx")
	if err != nil {
		t.Fatalf("sbx is not on PATH (testscript.Main puts it there): %v", err)
	}
	if out, err := exec.Command(bin, "mcp", "--http", "0.0.0.0:0").CombinedOutput(); err == nil ||
		!regexp.MustCompile(`not a loopback address`).Match(out) {
		t.Errorf("--http 0.0.0.0:0: %v, %s; want a refusal", err, out)
	}
	root := filepath.Join(testStateParent(), "mcphttp-"+filepath.Base(t.TempDir()))
	cmd := exec.Command(bin, "mcp", "--http", "127.0.0.1:0", "-w", t.TempDir())
	cmd.Env = append(os.Environ(), stateRootEnv+"="+root)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The server this test started, by its pid: SIGTERM lets it destroy its warm pool; SIGKILL and gc
		// are the fallback, so that no pooled sandbox outlives the test.
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		gc := exec.Command(bin, "gc")
		gc.Env = cmd.Env
		if out, err := gc.CombinedOutput(); err != nil {
			t.Errorf("sbx gc after the server: %v: %s", err, out)
		}
		testutil.RemoveStateRoot(root)
	})
	addr, tok := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := regexp.MustCompile(`serving MCP on (http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
			if m := regexp.MustCompile(`bearer token: (\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				tok <- m[1]
			}
		}
	}()
	var endpoint, token string
	for endpoint == "" || token == "" {
		select {
		case endpoint = <-addr:
		case token = <-tok:
		case <-time.After(10 * time.Second):
			t.Fatal("sbx mcp --http did not say where it serves and with which token")
		}
	}
	t.Run("refusals", func(t *testing.T) { checkHTTPRefusals(t, endpoint, token) })
	t.Run("flood", func(t *testing.T) { checkHTTPFlood(t, cmd.Process.Pid, endpoint, token) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "sbx-test", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: bearer{token}}}, nil)
	if err != nil {
		t.Fatalf("connecting over HTTP: %v", err)
	}
	defer sess.Close()
	tools, err := sess.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("listing tools: %v (%d tools)", err, len(tools.Tools))
	}
	_, out := callRun(ctx, t, sess, map[string]any{"command": "exit 3"})
	if out["exit_code"] != float64(3) || out["verdict"] != "pass" {
		t.Errorf("sbx_run over HTTP: exit_code %v, verdict %v; want 3, pass", out["exit_code"], out["verdict"])
	}
}

// bearer adds a bearer token to every request of the SDK's client.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// checkHTTPRefusals sends raw initialize requests: without a token, with a wrong one, and from a
// foreign origin (with the right token) they are refused; from the endpoint's own loopback origin with
// the token the server answers.
func checkHTTPRefusals(t *testing.T, endpoint, token string) {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	localhost := "http://localhost:" + u.Port()
	tests := []struct {
		name, auth, origin string
		want               int
	}{
		{"no token", "", "", http.StatusUnauthorized},
		{"wrong token", "Bearer " + strings.Repeat("0", len(token)), "", http.StatusUnauthorized},
		{"token as basic", "Basic " + token, "", http.StatusUnauthorized},
		{"foreign origin", "Bearer " + token, "https://evil.example", http.StatusForbidden},
		{"foreign origin, no token", "", "https://evil.example", http.StatusForbidden},
		{"loopback, other port", "Bearer " + token, "http://127.0.0.1:1", http.StatusForbidden},
		{"loopback name, not the Host", "Bearer " + token, localhost, http.StatusForbidden},
		{"null origin", "Bearer " + token, "null", http.StatusForbidden},
		{"same origin", "Bearer " + token, "http://" + u.Host, http.StatusOK},
		{"no origin", "Bearer " + token, "", http.StatusOK},
	}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	for _, tt := range tests {
		req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(init))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		if tt.origin != "" {
			req.Header.Set("Origin", tt.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
}

// checkHTTPFlood opens 300 connections that send nothing (what any local user can do without the
// token): the server holds no more than its cap of them, and a caller with the token is answered during
// the flood. Before the caps each one held a descriptor with no timeout. What is counted is the server's
// sockets on the endpoint's port, not all its descriptors: the warm pool opens and closes descriptors of
// its own meanwhile. An evicted connection's descriptor is closed once the server's read of it returns,
// so the count is given a moment to settle.
func checkHTTPFlood(t *testing.T, pid int, endpoint, token string) {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	_, portStr, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portStr)
	for range 300 {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatalf("connecting: %v", err)
		}
		defer c.Close()
	}
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("a request with the token during the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a request with the token during the flood: status %d, want 200", resp.StatusCode)
	}
	// The listener, MaxUnauthenticated (16) silent connections and the caller's own: 18; a few more
	// may be between being evicted and closed.
	const want = 24
	var n int
	for deadline := time.Now().Add(testutil.Scaled(3 * time.Second)); ; time.Sleep(50 * time.Millisecond) {
		n = countPortSockets(t, pid, port)
		if n <= want || time.Now().After(deadline) {
			break
		}
	}
	if n > want {
		t.Errorf("the server holds %d sockets on port %d during a flood of 300 silent connections; want at most %d", n, port, want)
	}
	if n == 0 {
		t.Errorf("no socket of the server found on port %d: the count is broken", port)
	}
}

// countPortSockets counts pid's descriptors that are TCP sockets with local port port.
func countPortSockets(t *testing.T, pid int, port int) int {
	t.Helper()
	inodes := map[string]bool{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 {
				continue
			}
			_, hexPort, ok := strings.Cut(fs[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
				inodes[fs[9]] = true
			}
		}
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading the server's descriptors: %v", err)
	}
	n := 0
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if ino, ok := strings.CutPrefix(l, "socket:["); err == nil && ok && inodes[strings.TrimSuffix(ino, "]")] {
			n++
		}
	}
	return n
}

// TestMCPHTTPTokenFile: a --token-file that others may read (what the default umask gives) is refused
// before the server builds anything, with a hint naming chmod 600; a private one is served.
func TestMCPHTTPTokenFile(t *testing.T) {
	testutil.RequireRoot(t, "sbx mcp needs CAP_SYS_ADMIN")
	bin, err := exec.LookPath("sbx")
	if err != nil {
		t.Fatalf("sbx is not on PATH (testscript.Main puts it there): %v", err)
	}
	file := filepath.Join(t.TempDir(), "mcp-token")
	if err := os.WriteFile(file, []byte(strings.Repeat("ab", 32)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(file, 0o644)
	cmd := exec.Command(bin, "mcp", "--warm", "0", "--http", "127.0.0.1:0", "--token-file", file, "-w", t.TempDir())
	cmd.Env = append(os.Environ(), stateRootEnv+"="+filepath.Join(testStateParent(), "mcptok-"+filepath.Base(t.TempDir())))
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("sbx mcp served a world-readable token file: %s", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 || !strings.Contains(string(out), "chmod 600") || !strings.Contains(string(out), "group or others") {
		t.Errorf("sbx mcp --token-file (mode 0644): %v: %s; want exit 125, the mode named and a hint with chmod 600", err, out)
	}
}
