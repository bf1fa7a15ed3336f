package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/runner"
	"github.com/sbx-dev/sbx/sandbox"
)

// RunInput is the input of sbx_run.
type RunInput struct {
	Command    string            `json:"command,omitempty" jsonschema:"shell command line, run with sh -c; give this or argv"`
	Argv       []string          `json:"argv,omitempty" jsonschema:"program and arguments, run without a shell; give this or command"`
	Cwd        string            `json:"cwd,omitempty" jsonschema:"working directory inside the sandbox, within one of the server's workspaces (relative: to the server's default); default: the server's"`
	Env        map[string]string `json:"env,omitempty" jsonschema:"variables to set; everything the profile does not pass is scrubbed"`
	Stdin      string            `json:"stdin,omitempty" jsonschema:"text fed to the command's standard input; default: empty"`
	TimeoutSec float64           `json:"timeout_sec,omitempty" jsonschema:"kill the whole sandbox after this many seconds; default: the profile's (capped by the server)"`
	Profile    string            `json:"profile,omitempty" jsonschema:"profile to apply, one of sbx_list_profiles; default: the server's default"`
	Network    *Network          `json:"network,omitempty" jsonschema:"narrow the profile's network (never widen it)"`
	Apply      string            `json:"apply,omitempty" jsonschema:"what the working directory's changes do on the host: never (discarded), on-pass (applied when the verdict is pass) or always (applied whatever the verdict; persistence findings, set-id bits and special files are still withheld); default: the profile's"`
}

// RunOutput is the structured content of sbx_run and sbx_get_report: the sbx.report/v1 report, its
// fields at the top level, plus the run's id and its captured output.
type RunOutput struct {
	report.Report
	ID              string `json:"id" jsonschema:"id of this run, for sbx_get_report and sbx://reports/{id}"`
	Stdout          string `json:"stdout" jsonschema:"the command's standard output, up to the server's cap"`
	Stderr          string `json:"stderr" jsonschema:"the command's standard error, up to the server's cap"`
	StdoutTruncated bool   `json:"stdout_truncated" jsonschema:"stdout was longer than the cap; stdout_bytes says how long"`
	StderrTruncated bool   `json:"stderr_truncated"`
	StdoutBytes     int64  `json:"stdout_bytes"`
	StderrBytes     int64  `json:"stderr_bytes"`
}

func (s *Server) addRunTool() {
	openWorld := true
	tool := &mcp.Tool{
		Name:  "sbx_run",
		Title: "Run a command in an sbx sandbox",
		Description: "Run one command in a throwaway Linux sandbox built from a profile and return what it did and " +
			"left behind: exit_code, verdict (pass or violation) with violations, processes left running, " +
			"listening sockets, refused network attempts, DNS queries, file changes, plus stdout and stderr " +
			"(capped). A non-zero exit or a violation is a normal result, not an error. The sandbox is torn " +
			"down before the call returns; files written inside it do not reach the host, unless apply " +
			"(or the profile) says so: with apply on-pass the working directory's changes are applied to " +
			"the host when the verdict is pass, and the result's apply section says what was applied, " +
			"withheld and in conflict.",
		Annotations: &mcp.ToolAnnotations{Title: "sbx run", OpenWorldHint: &openWorld},
	}
	in, out, inResolved, err := typedSchemas[RunInput, RunOutput]()
	if err != nil {
		// The types are this package's: a failure is a programming error, caught by every test.
		panic(fmt.Sprintf("sbx_run's schemas: %v", err))
	}
	tool.InputSchema, tool.OutputSchema = in, out
	s.mcp.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in RunInput
		if err := decodeArgs(req.Params.Arguments, inResolved, &in); err != nil {
			var res mcp.CallToolResult
			res.SetError(fmt.Errorf("validating \"arguments\": %v", err))
			return &res, nil
		}
		res, _, err := s.handleRun(ctx, req, in)
		if err != nil {
			var res mcp.CallToolResult
			res.SetError(err)
			return &res, nil
		}
		return res, nil
	})
}

// typedSchemas are the input and output schemas of a tool taking In and returning Out, as the SDK's
// typed AddTool infers them, and the input's resolved for validation.
//
// sbx_run is added with the SDK's untyped AddTool and these schemas: the typed one would check every
// report against the output schema (a marshal, an unmarshal into maps, a validation of a few hundred
// nodes and a marshal again: 0.18 ms for the report of `true` in a benchmark, more for larger ones, of
// a warm run of 5 ms). The report's conformance to
// its schema is the tests' to check (cmd/sbx's TestMCP checks every report it gets), not every call's.
func typedSchemas[In, Out any]() (in, out *jsonschema.Schema, inResolved *jsonschema.Resolved, err error) {
	if in, err = jsonschema.For[In](&jsonschema.ForOptions{}); err != nil {
		return nil, nil, nil, err
	}
	if inResolved, err = in.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true}); err != nil {
		return nil, nil, nil, err
	}
	if out, err = jsonschema.For[Out](&jsonschema.ForOptions{}); err != nil {
		return nil, nil, nil, err
	}
	return in, out, inResolved, nil
}

// decodeArgs checks a tool's arguments against its input schema, with the schema's defaults, and
// decodes them into v, as the SDK's typed tools do.
func decodeArgs(raw json.RawMessage, schema *jsonschema.Resolved, v any) error {
	m := map[string]any{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("unmarshaling arguments: %w", err)
		}
	}
	if err := schema.ApplyDefaults(&m); err != nil {
		return fmt.Errorf("applying schema defaults:\n%w", err)
	}
	if err := schema.Validate(&m); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// handleRun is sbx_run. Errors it returns become tool errors (refusals and sbx failures).
func (s *Server) handleRun(ctx context.Context, req *mcp.CallToolRequest, in RunInput) (*mcp.CallToolResult, *RunOutput, error) {
	args, err := in.args()
	if err != nil {
		return nil, nil, err
	}
	cwd, ws, err := resolveCwd(s.ws, s.cfg.Cwd, in.Cwd)
	if err != nil {
		return nil, nil, err
	}
	plan, err := s.plan(in, cwd)
	if err != nil {
		return nil, nil, err
	}
	if err := checkHidden(cwd, ws, plan.Filesystem.Hidden, plan.Profile); err != nil {
		return nil, nil, err
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	out, err := s.execute(ctx, req, in, plan, args, cwd, ws.path)
	if err != nil {
		return nil, nil, err
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the report: %w", err)
	}
	text := summary(out)
	if !s.reports.put(out, int64(len(raw))+1) {
		text += fmt.Sprintf("(this report is larger than the server keeps, %d bytes: sbx_get_report will not find it)\n", s.cfg.KeepBytes)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: json.RawMessage(raw)}, out, nil
}

// seconds is timeout_sec as a duration: one longer than a time.Duration holds (292 years), which the
// conversion would turn negative, is the longest (then capped by the server's MaxTimeout).
func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}

func (in RunInput) args() ([]string, error) {
	switch {
	case in.Command != "" && len(in.Argv) > 0:
		return nil, errors.New("give command or argv, not both")
	case in.Command != "":
		return []string{"sh", "-c", in.Command}, nil
	case len(in.Argv) > 0 && in.Argv[0] != "":
		return in.Argv, nil
	}
	return nil, errors.New("no command given: set command (a shell line) or argv")
}

// plan compiles the call's profile, narrowed by its network, with its env and timeout.
func (s *Server) plan(in RunInput, cwd string) (*policy.Plan, error) {
	p, err := s.profile(in.Profile)
	if err != nil {
		return nil, err
	}
	if p, err = narrow(p, in.Network); err != nil {
		return nil, err
	}
	ov := policy.Overrides{}
	for _, k := range sortedKeys(in.Env) {
		ov.Env = append(ov.Env, k+"="+in.Env[k])
	}
	if in.TimeoutSec < 0 {
		return nil, fmt.Errorf("timeout_sec %v is negative", in.TimeoutSec)
	}
	ov.Timeout = seconds(in.TimeoutSec)
	ov.ApplyMode = in.Apply
	key, err := planKey(p, cwd, ov)
	if err != nil {
		return nil, err
	}
	if plan := s.plans.get(key); plan != nil {
		return plan, nil
	}
	plan, err := policy.Compile(p, policy.CompileContext{Cwd: cwd, CallerEnv: s.cfg.Env, Overrides: ov})
	if err != nil {
		return nil, err
	}
	if max := s.cfg.MaxTimeout; max > 0 && (plan.Timeout == 0 || plan.Timeout > max) {
		plan.Timeout = max
	}
	s.plans.put(key, plan)
	return plan, nil
}

// planCache keeps the plans compiled lately. policy.Compile is a function of the profile as loaded
// (re-read from its file on every call), the working directory, the server's environment and the
// call's overrides, and nothing else; compiling took about a millisecond of every run. A plan is shared
// by every run it is found for: nothing changes a plan once compiled.
type planCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*policy.Plan
}

// maxPlans bounds the cache; past it, it starts over.
const maxPlans = 64

func planKey(p *policy.Profile, cwd string, ov policy.Overrides) ([sha256.Size]byte, error) {
	b, err := json.Marshal(struct {
		Profile   *policy.Profile
		File      string // where it came from: errors and notes name it
		Cwd       string
		Overrides policy.Overrides
	}{p, p.File(), cwd, ov})
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("keying the plan: %w", err)
	}
	return sha256.Sum256(b), nil
}

func (c *planCache) get(key [sha256.Size]byte) *policy.Plan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

func (c *planCache) put(key [sha256.Size]byte, plan *policy.Plan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxPlans {
		c.m = make(map[[sha256.Size]byte]*policy.Plan)
	}
	c.m[key] = plan
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// stdinOf is the command's stdin for the stdin argument: none (the sandbox's /dev/null) when it is
// empty, as a program started with nothing to read gets on the host; an empty pipe is not the same to
// programs that read stdin when it is a pipe and search their working directory otherwise (ripgrep).
func stdinOf(text string) io.Reader {
	if text == "" {
		return nil
	}
	return strings.NewReader(text)
}

// execute runs the command with progress notifications; runner.Run tears the sandbox down when ctx
// ends (a cancelled request), and its error then wraps ctx.Err().
func (s *Server) execute(ctx context.Context, req *mcp.CallToolRequest, in RunInput, plan *policy.Plan, args []string, cwd, top string) (*RunOutput, error) {
	prog := newProgress(ctx, req)
	prog.send(false, "starting a sandbox with profile "+plan.Profile)
	stdout := &capped{max: s.cfg.OutputCap, onFirst: func() { prog.send(false, "the command is writing output") }}
	stderr := &capped{max: s.cfg.OutputCap}
	stop := prog.tick(s.cfg.ProgressEvery)
	rep, err := s.cfg.Run(ctx, runner.Options{
		Plan: plan, Args: args, Cwd: cwd, CwdNoLinks: true, Top: top, Stdin: stdinOf(in.Stdin),
		Stdout: stdout, Stderr: stderr, StateRoot: s.cfg.StateRoot,
		OnStart: func(int) { prog.send(false, "the command started") },
	})
	stop()
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("cancelled; the sandbox was torn down: %w", ctx.Err())
	case err != nil && rep == nil:
		if se := (*sandbox.SupervisorError)(nil); errors.As(err, &se) && se.Hint != "" {
			// The command never ran: the sandbox could not hold it (Landlock, the filter). Say what to do.
			return nil, fmt.Errorf("sbx failed: %w; hint: %s", err, se.Hint)
		}
		return nil, fmt.Errorf("sbx failed: %w", err)
	case err != nil:
		// The command ran and was observed; what failed afterwards (the teardown) does not hide it.
		rep.Notes = append(rep.Notes, "sbx failed after the run: "+err.Error())
	}
	out := &RunOutput{Report: *rep, ID: newID()}
	out.Stdout, out.StdoutTruncated, out.StdoutBytes = stdout.result()
	out.Stderr, out.StderrTruncated, out.StderrBytes = stderr.result()
	prog.send(true, fmt.Sprintf("finished: %s, exit %d", rep.Verdict, rep.ExitCode))
	return out, nil
}

// summary is the text content for clients that read no structured content.
func summary(o *RunOutput) string {
	var b strings.Builder
	verdict := strings.ToUpper(o.Verdict)
	if o.TimedOut { // never PASS: the run did not finish
		verdict = "TIMED OUT"
	}
	fmt.Fprintf(&b, "sbx %s: %s, exit %d, profile %s, %.0f ms\n", o.ID, verdict, o.ExitCode, o.Profile, o.Timings.Total)
	for _, v := range o.Violations {
		fmt.Fprintf(&b, "  violation %s: %s\n", v.Rule, v.Message)
	}
	if a := o.Apply; a.Mode != "" && a.Mode != report.ApplyNever {
		if a.Applied {
			fmt.Fprintf(&b, "  applied %d entries (%d bytes) to the working directory; %d withheld, %d in conflict\n", a.Entries, a.Bytes, len(a.Withheld), len(a.Conflicts))
		} else {
			fmt.Fprintf(&b, "  not applied: %s\n", a.Reason)
		}
	}
	for _, part := range []struct {
		name, text string
		cut        bool
		n          int64
	}{{"stdout", o.Stdout, o.StdoutTruncated, o.StdoutBytes}, {"stderr", o.Stderr, o.StderrTruncated, o.StderrBytes}} {
		if part.n == 0 {
			continue
		}
		fmt.Fprintf(&b, "--- %s", part.name)
		if part.cut {
			fmt.Fprintf(&b, " (first %d of %d bytes)", len(part.text), part.n)
		}
		fmt.Fprintf(&b, " ---\n%s", part.text)
		if !strings.HasSuffix(part.text, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// progress sends notifications/progress for one call, when the client asked for them.
// Progress values only grow (the protocol requires it): each notification is one step further.
type progress struct {
	ctx   context.Context
	req   *mcp.CallToolRequest
	token any
	start time.Time
	mu    sync.Mutex
	step  float64
	ended bool
}

func newProgress(ctx context.Context, req *mcp.CallToolRequest) *progress {
	p := &progress{ctx: ctx, req: req, start: time.Now()}
	if req != nil && req.Params != nil {
		p.token = req.Params.GetProgressToken()
	}
	return p
}

// send notifies the next step; final marks the last one (progress == total).
func (p *progress) send(final bool, msg string) {
	if p.token == nil || p.req.Session == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.ended = final
	p.step++
	n := &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: p.step, Message: msg}
	if final {
		n.Total = p.step
	}
	_ = p.req.Session.NotifyProgress(p.ctx, n)
}

// tick sends a "running" notification every interval until stop is called.
func (p *progress) tick(every time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-p.ctx.Done():
				return
			case <-t.C:
				p.send(false, fmt.Sprintf("running for %s", time.Since(p.start).Round(time.Second)))
			}
		}
	}()
	return func() { close(done) }
}
