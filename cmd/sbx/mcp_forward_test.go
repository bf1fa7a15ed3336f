package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbx-dev/sbx/mcpserver"
)

// TestMCPFlagDefaults: sbx mcp's flags (defined for builds with and without the server) default to
// what the server itself defaults to.
func TestMCPFlagDefaults(t *testing.T) {
	if mcpDefaultKeep != mcpserver.DefaultKeepReports || mcpDefaultOutputCap != mcpserver.DefaultOutputCap ||
		mcpDefaultConcurrency != mcpserver.DefaultMaxConcurrent {
		t.Errorf("sbx mcp's flag defaults (keep %d, output-cap %d, concurrency %d) are not mcpserver's (%d, %d, %d)",
			mcpDefaultKeep, mcpDefaultOutputCap, mcpDefaultConcurrency,
			mcpserver.DefaultKeepReports, mcpserver.DefaultOutputCap, mcpserver.DefaultMaxConcurrent)
	}
}

// TestMCPForward: sbx built as make build builds bin/sbx (tag nomcp, no MCP server linked) hands
// sbx mcp over to sbx-mcp next to it, with the same command line and descriptors, so that a client
// that started sbx mcp talks to the server; without sbx-mcp it fails with exit status 125, one line
// and a hint. It builds that binary; sbx-mcp is this test binary, which runs as sbx when its argv[0]
// is named so (testscript.Main).
func TestMCPForward(t *testing.T) {
	dir := t.TempDir()
	bin, goTool := buildSbx(t, filepath.Join(dir, "sbx"), "seccomp nomcp")
	full, err := exec.LookPath("sbx")
	if err != nil {
		t.Fatalf("sbx is not on PATH (testscript.Main puts it there): %v", err)
	}
	out, err := exec.Command(goTool, "list", "-tags", "seccomp nomcp", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range []string{"github.com/modelcontextprotocol/go-sdk/mcp", "github.com/sbx-dev/sbx/mcpserver",
		"github.com/google/jsonschema-go/jsonschema", "net/http", "encoding/gob"} {
		if slices.Contains(strings.Fields(string(out)), pkg) {
			t.Errorf("sbx built with the tag nomcp links %s", pkg)
		}
	}

	missing := exec.Command(bin, "mcp", "-w", dir)
	var errb bytes.Buffer
	missing.Stderr = &errb
	_ = missing.Run()
	msg := errb.String()
	if missing.ProcessState.ExitCode() != exitSetup || strings.Count(msg, "\n") != 2 ||
		!strings.HasPrefix(msg, "sbx: error: sbx mcp runs the MCP server's binary "+filepath.Join(dir, "sbx-mcp")+", which is missing") ||
		!strings.Contains(msg, "sbx: hint: make build puts bin/sbx-mcp next to bin/sbx") {
		t.Errorf("sbx mcp without sbx-mcp: status %d, stderr %q", missing.ProcessState.ExitCode(), msg)
	}

	if err := os.Symlink(full, filepath.Join(dir, "sbx-mcp")); err != nil {
		t.Fatal(err)
	}
	bad := exec.Command(bin, "mcp", "--no-such-flag")
	errb.Reset()
	bad.Stderr = &errb
	_ = bad.Run()
	if bad.ProcessState.ExitCode() != exitSetup || !strings.Contains(errb.String(), "unknown flag: --no-such-flag") {
		t.Errorf("sbx mcp --no-such-flag: status %d, stderr %q", bad.ProcessState.ExitCode(), errb.String())
	}

	cmd := exec.Command(bin, "mcp", "-w", dir, "--warm", "0")
	cmd.Env = append(os.Environ(), stateRootEnv+"="+filepath.Join(dir, "state"))
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "sbx-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to sbx mcp through the build without the server: %v", err)
	}
	defer sess.Close()
	if init := sess.InitializeResult(); init == nil || init.ServerInfo == nil || init.ServerInfo.Name != "sbx" {
		t.Errorf("the server that answered is not sbx's: %+v", init)
	}
	tools, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(tools.Tools, func(tool *mcp.Tool) bool { return tool.Name == "sbx_run" }) {
		t.Errorf("the server through sbx's hand-over lists no sbx_run: %v", tools.Tools)
	}
}
