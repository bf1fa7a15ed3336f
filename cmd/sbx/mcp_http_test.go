package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPHTTP serves `sbx mcp --http 127.0.0.1:0` and drives it over streamable HTTP with the SDK's
// client: the tools are listed and a run comes back with its report. A non-loopback address is refused.
func TestMCPHTTP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: sbx creates namespaces, cgroups and mounts")
	}
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
		cmd.Process.Kill() // the server this test started, by its pid
		cmd.Wait()
		for _, d := range []string{"runs", "lc", ""} {
			os.Remove(filepath.Join(root, d))
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := regexp.MustCompile(`serving MCP on (http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	var endpoint string
	select {
	case endpoint = <-addr:
	case <-time.After(10 * time.Second):
		t.Fatal("sbx mcp --http did not say where it serves")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "sbx-test", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
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
