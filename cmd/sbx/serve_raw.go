package main

// The fast client's side of the sbx service. An sbx exec that finds its service's socket as it starts
// (internal/cgprime's constructor, before Go's runtime and sbx's package inits run) hands the service
// its whole command line, environment, working directory and stdio, and waits for the exit status:
// the service runs the CLI's own code for it (run, with a caller in the context), so that the flags,
// the messages, the report and the exit status are those of the CLI by construction. Where the
// service cannot stand in for the CLI (see caller.back), it hands the run back before anything was
// written, and the CLI goes on as without the fast client: through the service (service_client.go),
// or cold.
//
// The frames are those of service.go (a 4-byte big-endian length, then the body), their bodies
// NUL-separated fields instead of JSON:
//
//	client → service  "sbx-raw 1", build, cwd, socket, closed, nofile, nofile max, memlock,
//	                  memlock max, timer slack, umask, argc, argv..., envc, env... (stdio as SCM_RIGHTS)
//	service → client  "back", why                  the CLI goes on (nothing was written)
//	                  "ready", message             the run is about to start; message is what the
//	                                               client prints if the service then ends mid-run
//	                  "exit", status               the end (also without "ready": an error of the
//	                                               command line, printed by the service)
//	client → service  "go" after "ready", then "signal", N for each signal the client receives

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	goio "io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/runner"
)

// rawMagic opens a fast client's request.
const rawMagic = "sbx-raw 1"

// errHandBack: the service does not stand in for the CLI; run prints nothing for it.
var errHandBack = errors.New("the run is handed back to the CLI")

// fastCaller is the sbx exec process a service runs the CLI for, as that process sees its world.
type fastCaller struct {
	s      *server
	c      *net.UnixConn
	pid    int // the client, checked by ownPeer
	socket string
	env    []string
	cwd    string
	closed [3]bool
	limits callerLimits
	umask  int
	sigs   chan os.Signal
	// why is set when the run is handed back; started once the client said go.
	why     string
	started bool
	warm    bool
}

type callerKey struct{}

// callerOf is the caller the service runs the CLI for in ctx, nil in the CLI itself.
func callerOf(ctx context.Context) *fastCaller {
	cl, _ := ctx.Value(callerKey{}).(*fastCaller)
	return cl
}

// back hands the run back to the CLI, for why; only before anything was written.
func (cl *fastCaller) back(why string) error {
	cl.why = why
	return errHandBack
}

func (cl *fastCaller) getenv(key string) string {
	for _, kv := range cl.env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// parseRaw reads a fast client's request.
func parseRaw(body []byte) (cl *fastCaller, build string, args []string, err error) {
	f := strings.Split(string(body), "\x00")
	const head = 12 // magic .. argc
	if len(f) < head || f[0] != rawMagic {
		return nil, "", nil, errors.New("not a request of this protocol")
	}
	var n [7]uint64 // closed .. umask
	for i := range n {
		if n[i], err = strconv.ParseUint(f[4+i], 10, 64); err != nil {
			return nil, "", nil, fmt.Errorf("field %d: %w", 4+i, err)
		}
	}
	cl = &fastCaller{cwd: f[2], socket: f[3], umask: int(n[6])}
	for i := range cl.closed {
		cl.closed[i] = n[0]&(1<<i) != 0
	}
	cl.limits = callerLimits{NoFile: n[1], NoFileMax: n[2], Memlock: n[3], MemlockMax: n[4], TimerSlack: n[5]}
	argc, err := strconv.Atoi(f[head-1])
	if err != nil || argc < 1 || head+argc >= len(f) {
		return nil, "", nil, errors.New("a bad argument count")
	}
	args = f[head : head+argc]
	envc, err := strconv.Atoi(f[head+argc])
	if err != nil || envc < 0 || head+argc+1+envc != len(f) {
		return nil, "", nil, errors.New("a bad environment count")
	}
	cl.env = f[head+argc+1:]
	if !filepath.IsAbs(cl.cwd) || args[0] != "exec" || n[6] > 0o777 {
		return nil, "", nil, errors.New("a request that is not an sbx exec's")
	}
	return cl, f[1], args, nil
}

// writeFields sends a frame of fields.
func writeFields(c *net.UnixConn, fields ...string) error {
	return writeBody(c, []byte(strings.Join(fields, "\x00")))
}

// readFields reads a frame of fields from the fast client (no descriptors).
func readFields(c *net.UnixConn) ([]string, error) {
	body, files, err := readFrameBody(c, 0, 4096)
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		return nil, err
	}
	return strings.Split(string(body), "\x00"), nil
}

// handleRaw runs the CLI for a fast client (pid, checked by ownPeer) whose request is body, with its
// stdio files.
func (s *server) handleRaw(c *net.UnixConn, pid int, body []byte, files []*os.File) {
	back := func(why string) {
		s.handedBack.Add(1)
		_ = writeFields(c, "back", why)
	}
	cl, build, args, err := parseRaw(body)
	if err != nil {
		back("the service could not read the request: " + err.Error())
		return
	}
	if build != s.rawBuild || s.rawBuild == "" {
		back("the service runs another build of sbx: restart it (systemctl restart sbx, or --user without root)")
		return
	}
	cl.s, cl.c, cl.pid = s, c, pid
	code := runContext(context.WithValue(context.Background(), callerKey{}, cl), args, files[0], files[1], files[2])
	if cl.why != "" {
		back(cl.why)
		return
	}
	// The command's stdio closed before the status: the caller sees the end of its output no later
	// than with a cold run.
	for _, f := range files {
		f.Close()
	}
	_ = c.SetWriteDeadline(time.Now().Add(serveRequestWait))
	if err := writeFields(c, "exit", strconv.Itoa(code)); err != nil && cl.started {
		s.warn(fmt.Errorf("a run's exit status did not reach its sbx exec: %w", err))
	}
}

// servedPaths are the paths of an exec's flags the service reads or writes for the caller; one in
// /proc or /dev names the service's own process (/proc/self, /dev/stdout), and is handed back.
func servedPaths(f execFlags) []string {
	paths := []string{f.workdir, f.jsonOut, f.changes}
	if !policy.IsBuiltinName(f.profile) {
		paths = append(paths, f.profile)
	}
	return append(append(paths, f.overrides.RW...), f.overrides.RO...)
}

// check hands back an exec the service would not run as the CLI does.
func (cl *fastCaller) check(f execFlags) error {
	if f.probe {
		return cl.back("--probe runs cold")
	}
	for _, p := range servedPaths(f) {
		if p == "/proc" || p == "/dev" || strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/dev/") {
			return cl.back(p + " names a file of the process that opens it")
		}
	}
	return nil
}

// abs is path made absolute in the caller's working directory ("" and "-" as they are).
func (cl *fastCaller) abs(path string) string {
	if path == "" || path == "-" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(cl.cwd, path)
}

// view is what the caller sees of the files at paths and of its namespaces, read through its /proc:
// the service serves only a caller whose view is its own (callerView.differs).
func (cl *fastCaller) view(paths []string) callerView {
	v := callerView{Umask: cl.umask, NS: make(map[string]string, len(viewNamespaces)), Paths: paths}
	proc := fmt.Sprintf("/proc/%d", cl.pid)
	for _, ns := range viewNamespaces {
		v.NS[ns], _ = os.Readlink(proc + "/ns/" + ns)
	}
	through := make([]string, len(paths))
	for i, p := range paths {
		through[i] = proc + "/root" + p
	}
	v.IDs = runner.Identities(through)
	return v
}

// run carries out the CLI's run in the service (runCommand's part), once its checks pass and the
// client said go.
func (cl *fastCaller) run(f execFlags, opts runner.Options) (*report.Report, rendered, error) {
	req := serviceRequest{
		Proto: serviceProto, Build: cl.s.build, Limits: cl.limits, Plan: opts.Plan, Args: opts.Args, Cwd: opts.Cwd,
		Closed: opts.Closed, StateRoot: opts.StateRoot, Changes: opts.Changes, CallerHome: opts.CallerHome,
		Env: make(map[string]string, len(serviceEnvKeys)),
	}
	for _, k := range serviceEnvKeys {
		req.Env[k] = cl.getenv(k)
	}
	req.View = cl.view(runner.HostPaths(opts.Plan, opts.Cwd))
	if why := cl.s.refuse(&req); why != "" {
		return nil, rendered{}, cl.back(why)
	}
	// The files the CLI would open itself: the profile's, the report's and the changes' directories.
	var more []string
	profile := ""
	if !policy.IsBuiltinName(f.profile) {
		profile = cl.abs(f.profile)
	}
	for _, p := range []string{profile, cl.abs(f.jsonOut), opts.Changes} {
		if filepath.IsAbs(p) {
			more = append(more, filepath.Dir(p))
		}
	}
	if why := cl.view(more).differs(ownView(more)); why != "" {
		return nil, rendered{}, cl.back(why)
	}
	release, why := cl.s.admit(cl.sigs)
	if why != "" {
		return nil, rendered{}, cl.back(why)
	}
	defer release()
	var lost bytes.Buffer
	printError(&lost, errServiceLost, hintFor(errServiceLost))
	_ = cl.c.SetDeadline(time.Now().Add(serveRequestWait))
	if err := writeFields(cl.c, "ready", lost.String()); err != nil {
		return nil, rendered{}, cl.back("the client is gone")
	}
	if m, err := readFields(cl.c); err != nil || len(m) != 1 || m[0] != "go" {
		return nil, rendered{}, cl.back("the client is gone")
	}
	cl.started = true
	cl.s.fast.Add(1)
	_ = cl.c.SetDeadline(time.Time{})
	go forwardSignals(cl.sigs, func() (int, error) {
		m, err := readFields(cl.c)
		if err != nil || len(m) != 2 || m[0] != "signal" {
			return 0, err
		}
		n, _ := strconv.Atoi(m[1])
		return n, nil
	})
	rep, warm, err := cl.s.carryOut(opts)
	cl.warm = warm
	var rend rendered
	if rep != nil {
		rend = renderReport(f, rep, reportColor(opts.Stderr))
	}
	return rep, rend, err
}

// sayServed is -v's line for a run that went through the service at socket.
func sayServed(w goio.Writer, socket string, warm bool) {
	note := ""
	if warm {
		note = " (a warm sandbox)"
	}
	fmt.Fprintf(w, "sbx: the run went through the sbx service at %s%s\n", socket, note)
}
