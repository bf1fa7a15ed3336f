package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// mcpSession starts `sbx mcp` (this test binary, which testscript.Main put on PATH as sbx) and connects
// the SDK's client to it over stdio. Progress messages are collected in *progress. args are sbx mcp's
// flags; none: -w a new temporary directory.
func mcpSession(t *testing.T, stateRoot string, progress *[]string, mu *sync.Mutex, args ...string) *mcp.ClientSession {
	t.Helper()
	bin, err := exec.LookPath("sbx")
	if err != nil {
		t.Fatalf("sbx is not on PATH (testscript.Main puts it there): %v", err)
	}
	if len(args) == 0 {
		args = []string{"-w", t.TempDir()}
	}
	cmd := exec.Command(bin, append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), stateRootEnv+"="+stateRoot)
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "sbx-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			*progress = append(*progress, req.Params.Message)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to sbx mcp: %v", err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// callRun calls sbx_run and decodes its structured content.
func callRun(ctx context.Context, t *testing.T, sess *mcp.ClientSession, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	params := &mcp.CallToolParams{Name: "sbx_run", Arguments: args}
	params.SetProgressToken("run-1")
	res, err := sess.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("sbx_run %v: %v", args, err)
	}
	var out map[string]any
	if res.StructuredContent != nil {
		// The server does not check its reports against the schema it lists (see mcpserver's
		// typedSchemas): every report a test gets is checked here.
		checkOutputSchema(ctx, t, sess, "sbx_run", res.StructuredContent)
		data, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatal(err)
		}
	}
	return res, out
}

// mcpStateRoot skips a test not run as root, and returns a state root of its own for the server,
// removed at the end (testutil.RemoveStateRoot).
func mcpStateRoot(t *testing.T, prefix string) string {
	t.Helper()
	testutil.RequireRoot(t, "sbx creates namespaces, cgroups and mounts")
	root := filepath.Join(testStateParent(), prefix+filepath.Base(t.TempDir()))
	t.Cleanup(func() { testutil.RemoveStateRoot(root) })
	return root
}

// TestMCP drives `sbx mcp` over stdio with the SDK's client: it lists the tools, runs a command that
// leaves a listener behind and reads the violation from the structured content, checks that a
// non-zero exit is a result and a widened network a refusal, and that a cancelled call leaves nothing
// running.
func TestMCP(t *testing.T) {
	root := mcpStateRoot(t, "mcp-")
	var mu sync.Mutex
	var progress []string
	sess := mcpSession(t, root, &progress, &mu)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("tools", func(t *testing.T) { checkTools(ctx, t, sess) })

	var id string
	t.Run("listener left behind", func(t *testing.T) {
		res, out := callRun(ctx, t, sess, map[string]any{
			// Ends once the listener is up (port 8765 is 223D in /proc/net/tcp): under emulation a fixed
			// half second was too short for python to bind.
			"command": "python3 -m http.server 8765 >/dev/null 2>&1 & i=0; until grep -q ':223D 00000000:0000 0A' /proc/net/tcp || [ $i -ge 600 ]; do sleep 0.05; i=$((i+1)); done; echo started; exit 0",
		})
		if res.IsError {
			t.Fatalf("tool error: %v", res.Content)
		}
		if out["schema"] != "sbx.report/v1" || out["verdict"] != "violation" || out["exit_code"] != 0.0 {
			t.Errorf("schema %v verdict %v exit_code %v, want sbx.report/v1 violation 0", out["schema"], out["verdict"], out["exit_code"])
		}
		if out["stdout"] != "started\n" || out["stdout_truncated"] != false {
			t.Errorf("stdout %q truncated %v, want \"started\\n\" false", out["stdout"], out["stdout_truncated"])
		}
		listening, _ := json.Marshal(out["sockets"].(map[string]any)["listening"])
		if !bytes.Contains(listening, []byte(`"port":8765`)) {
			t.Errorf("sockets.listening = %s, want the listener on 8765", listening)
		}
		text := res.Content[0].(*mcp.TextContent).Text
		if !strings.Contains(text, "VIOLATION") || !strings.Contains(text, "sockets.listening") {
			t.Errorf("text summary %q names neither the verdict nor the rule", text)
		}
		id, _ = out["id"].(string)
		checkHostGone(t, out)
		// Notifications travel beside the result: the last one may land just after CallTool returns.
		finished := func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(progress) >= 2 && strings.HasPrefix(progress[0], "starting") &&
				strings.HasPrefix(progress[len(progress)-1], "finished")
		}
		for deadline := time.Now().Add(5 * time.Second); !finished() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if !finished() {
			mu.Lock()
			defer mu.Unlock()
			t.Errorf("progress = %q, want starting ... finished", progress)
		}
	})

	t.Run("non-zero exit is a result", func(t *testing.T) {
		res, out := callRun(ctx, t, sess, map[string]any{"argv": []string{"sh", "-c", "echo oops >&2; exit 3"}})
		if res.IsError || out["exit_code"] != 3.0 || out["verdict"] != "pass" || out["stderr"] != "oops\n" {
			t.Errorf("IsError %v exit_code %v verdict %v stderr %q, want false 3 pass \"oops\\n\"", res.IsError, out["exit_code"], out["verdict"], out["stderr"])
		}
	})

	t.Run("a timeout is never a pass", func(t *testing.T) {
		res, out := callRun(ctx, t, sess, map[string]any{"command": "sleep 30", "timeout_sec": 0.3})
		text := res.Content[0].(*mcp.TextContent).Text
		if res.IsError || out["timed_out"] != true || out["verdict"] != "violation" || !strings.Contains(text, "TIMED OUT") || strings.Contains(text, "PASS") {
			t.Errorf("IsError %v timed_out %v verdict %v text %q, want a violation that says TIMED OUT", res.IsError, out["timed_out"], out["verdict"], text)
		}
	})
	t.Run("persistence named", func(t *testing.T) {
		res, out := callRun(ctx, t, sess, map[string]any{
			"command": "echo x > /etc/cron.d/sbx-mcp; echo x >> ~/.bashrc; exit 0",
		})
		persistence, _ := json.Marshal(out["persistence"])
		writes, _ := json.Marshal(out["denials"].(map[string]any)["writes"])
		if res.IsError || out["verdict"] != "violation" ||
			!bytes.Contains(persistence, []byte(`"mechanism":"cron","path":"/etc/cron.d/sbx-mcp"`)) ||
			!bytes.Contains(persistence, []byte(`"mechanism":"shell start-up file","path":"/tmp/.bashrc"`)) ||
			!bytes.Contains(writes, []byte(`"path":"/etc/cron.d/sbx-mcp"`)) {
			t.Errorf("verdict %v persistence %s denials.writes %s, want a violation naming cron and .bashrc", out["verdict"], persistence, writes)
		}
	})

	t.Run("widening the network is refused", func(t *testing.T) {
		res, _ := callRun(ctx, t, sess, map[string]any{"command": "true", "network": map[string]any{"allow": []string{"example.com:443"}}})
		if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "never widen") {
			t.Errorf("IsError %v content %v, want a refusal", res.IsError, res.Content)
		}
	})

	t.Run("past report by id", func(t *testing.T) {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "sbx_get_report", Arguments: map[string]any{"id": id}})
		if err != nil || res.IsError {
			t.Fatalf("sbx_get_report %s: %v %v", id, err, res)
		}
		checkOutputSchema(ctx, t, sess, "sbx_get_report", res.StructuredContent)
		list, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "sbx_get_report", Arguments: map[string]any{}})
		if err != nil || list.IsError {
			t.Fatalf("sbx_get_report without id: %v %v", err, list)
		}
		checkOutputSchema(ctx, t, sess, "sbx_get_report", list.StructuredContent)
		rr, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: "sbx://reports/" + id})
		if err != nil || !strings.Contains(rr.Contents[0].Text, `"verdict": "violation"`) {
			t.Errorf("resource sbx://reports/%s: %v", id, err)
		}
	})

	t.Run("stdin", func(t *testing.T) {
		// Without the stdin argument the command's stdin is the sandbox's /dev/null, as a program
		// started with nothing to read has on the host, which it may reopen by name: an empty pipe
		// sent programs that read a piped stdin (ripgrep) to search nothing. With it, a pipe carries it.
		probe := "stat -L -c %F /dev/stdin; cat /dev/stdin"
		for _, c := range []struct{ stdin, want string }{{"", "character special file\n"}, {"given\n", "fifo\ngiven\n"}} {
			args := map[string]any{"command": probe}
			if c.stdin != "" {
				args["stdin"] = c.stdin
			}
			res, out := callRun(ctx, t, sess, args)
			if res.IsError || out["stdout"] != c.want {
				t.Errorf("stdin %q: IsError %v stdout %q stderr %q, want %q", c.stdin, res.IsError, out["stdout"], out["stderr"], c.want)
			}
		}
	})

	t.Run("home follows HOME", func(t *testing.T) {
		// The user database gives the command's user the home HOME names, also when the call sets HOME
		// itself and the run takes a sandbox built ahead for another.
		for _, c := range []struct{ home, want string }{{"", "/tmp\n"}, {"/tmp/h", "/tmp/h\n"}, {"", "/tmp\n"}} {
			args := map[string]any{"command": "getent passwd $(id -u) | cut -d: -f6"}
			if c.home != "" {
				args["env"] = map[string]string{"HOME": c.home}
			}
			res, out := callRun(ctx, t, sess, args)
			if res.IsError || out["stdout"] != c.want {
				t.Errorf("HOME %q: IsError %v stdout %q stderr %q, want %q", c.home, res.IsError, out["stdout"], out["stderr"], c.want)
			}
		}
	})

	t.Run("cancel tears down", func(t *testing.T) { checkCancel(ctx, t, sess, root) })
	// The server keeps --warm 2 sandboxes built ahead; its shutdown destroys them and waits for the
	// teardowns it left in the background.
	t.Run("shutdown leaves nothing", func(t *testing.T) {
		sess.Close()
		if err := checkClean(root); err != nil {
			t.Error(err)
		}
	})
}

func checkTools(ctx context.Context, t *testing.T, sess *mcp.ClientSession) {
	res, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		tools[tool.Name] = tool
	}
	for name, readOnly := range map[string]bool{"sbx_run": false, "sbx_list_profiles": true, "sbx_explain_profile": true, "sbx_get_report": true} {
		tool, ok := tools[name]
		if !ok {
			t.Errorf("tool %s missing", name)
			continue
		}
		if got := tool.Annotations != nil && tool.Annotations.ReadOnlyHint; got != readOnly {
			t.Errorf("%s: readOnlyHint %v, want %v", name, got, readOnly)
		}
	}
	for _, name := range []string{"sbx_run", "sbx_get_report"} {
		if tool := tools[name]; tool != nil && tool.OutputSchema == nil {
			t.Errorf("%s declares no output schema", name)
		}
	}
}

// checkOutputSchema validates a tool's structured content against the output schema the server lists
// for it, as a client would; the top level must be an object schema (MCP's rule for output schemas).
func checkOutputSchema(ctx context.Context, t *testing.T, sess *mcp.ClientSession, tool string, content any) {
	t.Helper()
	res, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res.Tools, func(x *mcp.Tool) bool { return x.Name == tool })
	if i < 0 || res.Tools[i].OutputSchema == nil {
		t.Fatalf("%s has no output schema", tool)
	}
	raw, _ := json.Marshal(res.Tools[i].OutputSchema)
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != "object" {
		t.Errorf("%s: output schema type %q, want object", tool, s.Type)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	data, _ := json.Marshal(content)
	_ = json.Unmarshal(data, &doc)
	if err := rs.Validate(doc); err != nil {
		t.Errorf("%s: structured content does not match its output schema: %v", tool, err)
	}
}

// checkHostGone: no process the report lists as left running exists on the host any more.
func checkHostGone(t *testing.T, out map[string]any) {
	left := out["processes"].(map[string]any)["left_running"].([]any)
	if len(left) == 0 {
		t.Errorf("nothing listed as left running")
	}
	for _, p := range left {
		pid := int(p.(map[string]any)["host_pid"].(float64))
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			t.Errorf("host pid %d of a left-running process still exists", pid)
		}
	}
}

// checkCancel starts a command that would run for minutes, cancels the call once its process is seen
// on the host, and checks that the process, the run's state and its mounts are gone.
func checkCancel(ctx context.Context, t *testing.T, sess *mcp.ClientSession, root string) {
	const marker = "31337"
	callCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := sess.CallTool(callCtx, &mcp.CallToolParams{Name: "sbx_run", Arguments: map[string]any{
			"command": "sleep " + marker + "1 & sleep " + marker + "2",
		}})
		done <- err
	}()
	if !waitFor(20*time.Second, func() bool { return len(sleepers(marker)) == 2 }) {
		cancel()
		t.Fatalf("the command's processes never showed up on the host")
	}
	pids := sleepers(marker)
	cancel()
	if err := <-done; err == nil {
		t.Errorf("a cancelled call returned no error")
	}
	// What is left are the warm pool's sandboxes, built ahead for the next calls (2 by default): no
	// more, and no process of the cancelled run.
	if !waitFor(10*time.Second, func() bool { return len(sleepers(marker)) == 0 && checkCleanBut(root, 2) == nil }) {
		t.Errorf("after cancel: processes %v still running (were %v); clean: %v", sleepers(marker), pids, checkCleanBut(root, 2))
	}
}

// sleepers returns the host pids of "sleep MARKER*" processes.
func sleepers(marker string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err == nil && bytes.HasPrefix(b, []byte("sleep\x00"+marker)) {
			out = append(out, filepath.Base(filepath.Dir(f)))
		}
	}
	return out
}

func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestMCPCwd checks that a caller's cwd stays in the server's workspaces: outside them, through a
// symbolic link (even one that stays inside), and below a path the profile hides, it is refused; a
// relative cwd is taken from the default one.
func TestMCPCwd(t *testing.T) {
	root := mcpStateRoot(t, "mcpcwd-")
	ws := t.TempDir()
	for _, err := range []error{
		// A repository above the workspace, below the hidden /tmp: the report's note on hidden
		// repositories named it, a path of the operator's outside every workspace.
		os.Mkdir(filepath.Join(filepath.Dir(ws), ".git"), 0o755),
		os.Mkdir(filepath.Join(ws, "sub"), 0o755),
		os.Symlink("/etc", filepath.Join(ws, "out")),
		os.Symlink("sub", filepath.Join(ws, "in")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var progress []string
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The workspace / lets callers reach /root, which the default profile hides; ws is a workspace too
	// (below the hidden /tmp, which is the operator's choice).
	sess := mcpSession(t, root, &progress, &mu, "--workspace", "/", "--workspace", ws, "-w", ws)
	tests := []struct {
		name, cwd string
		refusal   string // "" = runs, and pwd prints want
		want      string
	}{
		{name: "default", cwd: "", want: ws},
		{name: "relative", cwd: "sub", want: filepath.Join(ws, "sub")},
		{name: "hidden path", cwd: "/root", refusal: "which profile default hides"},
		{name: "below a hidden path", cwd: "/run/sbx", refusal: "which profile default hides"},
		{name: "link out of the workspace", cwd: filepath.Join(ws, "out"), refusal: "symbolic link"},
		{name: "link inside the workspace", cwd: filepath.Join(ws, "in"), refusal: "symbolic link"},
		{name: "dot-dot", cwd: "sub/../../..", refusal: "which profile default hides"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out := callRun(ctx, t, sess, map[string]any{"command": "pwd", "cwd": tt.cwd})
			text := res.Content[0].(*mcp.TextContent).Text
			if tt.refusal != "" {
				if !res.IsError || !strings.Contains(text, tt.refusal) {
					t.Errorf("cwd %q: IsError %v, %q; want a refusal saying %q", tt.cwd, res.IsError, text, tt.refusal)
				}
				return
			}
			if res.IsError || out["stdout"] != tt.want+"\n" {
				t.Errorf("cwd %q: IsError %v, stdout %q (%s); want %q", tt.cwd, res.IsError, out["stdout"], text, tt.want)
			}
			if all, _ := json.Marshal(out); strings.Contains(text+string(all), filepath.Dir(ws)+",") {
				t.Errorf("cwd %q: the report names %s, above the workspace: %s", tt.cwd, filepath.Dir(ws), text)
			}
		})
	}

	// With only ws as workspace, / is outside.
	only := mcpSession(t, root, &progress, &mu, "-w", ws)
	res, _ := callRun(ctx, t, only, map[string]any{"command": "pwd", "cwd": "/etc"})
	if text := res.Content[0].(*mcp.TextContent).Text; !res.IsError || !strings.Contains(text, "outside the server's workspaces") {
		t.Errorf("cwd /etc with workspace %s: IsError %v, %q; want a refusal", ws, res.IsError, text)
	}
}

// TestMCPApply: sbx_run with apply on-pass writes the working directory's changes to the workspace
// when the run passes (the structured result and the text summary say so) and not when it is a
// violation; without apply they are discarded.
func TestMCPApply(t *testing.T) {
	testutil.RequireRoot(t, "sbx mcp needs CAP_SYS_ADMIN")
	root := mcpStateRoot(t, "mcpapply-")
	ws := t.TempDir()
	var mu sync.Mutex
	var progress []string
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess := mcpSession(t, root, &progress, &mu, "-w", ws)
	for _, tt := range []struct {
		name, apply, command, file string
		want                       bool
	}{
		{"discarded", "", "echo x > discarded", "discarded", false},
		{"on pass", "on-pass", "echo x > applied", "applied", true},
		{"violation", "on-pass", "echo x > violated; nohup sleep 300 >/dev/null 2>&1 &", "violated", false},
	} {
		args := map[string]any{"command": tt.command}
		if tt.apply != "" {
			args["apply"] = tt.apply
		}
		res, out := callRun(ctx, t, sess, args)
		text := res.Content[0].(*mcp.TextContent).Text
		_, err := os.Stat(filepath.Join(ws, tt.file))
		if got := err == nil; got != tt.want {
			t.Errorf("%s: %s on the host: %v, want %v (%s)", tt.name, tt.file, got, tt.want, text)
		}
		a, _ := out["apply"].(map[string]any)
		if a["applied"] != tt.want {
			t.Errorf("%s: apply section %v, want applied %v", tt.name, a, tt.want)
		}
		if tt.want && !strings.Contains(text, "applied 1 entries") {
			t.Errorf("%s: the summary does not say what was applied: %q", tt.name, text)
		}
	}
}
