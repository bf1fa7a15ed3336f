package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/selfexe"
	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/runner"
)

// The defaults of sbx serve.
const (
	serveDefaultWarm = 2
	serveDefaultRuns = 64
	// serveRequestWait bounds how long a connection may take to send its request and its go; the CLI
	// sends both at once.
	serveRequestWait = 10 * time.Second
)

type serveFlags struct {
	socket string
	warm   int
	runs   int
}

func newServeCmd(io stdio) *cobra.Command {
	var f serveFlags
	c := cancelOnSignal(&cobra.Command{
		Use:   "serve [flags]",
		Short: "Serve this user's sbx exec runs from warm sandboxes (a service on a Unix socket)",
		Long: `serve keeps sandboxes built ahead (a warm pool, as sbx mcp does) and carries out the runs that
sbx exec hands it over a Unix socket: the caller's own service for each user (root's for root). sbx
exec uses it when its socket is there and the caller's (` + "`" + serviceEnv + "`" + ` names another socket; ` + serviceEnv + `=off
never uses one) and runs cold when there is none, it is of another build of sbx, or it fails before
the run starts; sbx exec -v says which. The run, its exit status, signals and report are those of a
cold run; only the timings differ. Each run gets a fresh sandbox, never one that served another.

The socket: /run/sbx.sock for root, $XDG_RUNTIME_DIR/sbx.sock for another user; systemd's socket
activation hands it over (see docs/cli.md for the units). Stop it with SIGTERM: runs in progress are
torn down, the idle sandboxes removed.

Examples:
  sbx serve &                      # then: sbx exec -v -- true
  systemctl --user enable --now sbx.socket`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return serve(c.Context(), io, f) },
	}, stopSignals...)
	fl := c.Flags()
	fl.StringVar(&f.socket, "socket", "", "listen on `PATH` (default: $"+serviceEnv+", else /run/sbx.sock for root, $XDG_RUNTIME_DIR/sbx.sock for others)")
	fl.IntVar(&f.warm, "warm", serveDefaultWarm, "sandboxes to keep built ahead for the profile and working directory of the last run (0: every run cold)")
	fl.IntVar(&f.runs, "max-runs", serveDefaultRuns, "runs carried out at once; a CLI beyond them runs cold")
	return c
}

// server is sbx serve's state.
type server struct {
	pool      *runner.Pool
	stateRoot string
	build     string
	rawBuild  string // build as the fast client names it (serve_raw.go)
	env       map[string]string
	limits    callerLimits
	slots     chan struct{} // one per run in progress
	warn      func(error)
	plans     planCache // of the fast clients' runs

	served, warm atomic.Int64 // runs carried out, and of those in a sandbox of the pool
	handedBack   atomic.Int64 // requests answered with a reason to run cold
	fast         atomic.Int64 // runs carried out for a fast client (serve_raw.go)

	mu      sync.Mutex
	closing bool
	runs    map[chan os.Signal]struct{} // the signals of the runs in progress
	wg      sync.WaitGroup
}

func serve(ctx context.Context, io stdio, f serveFlags) error {
	if err := checkBuild(nil); err != nil {
		return err
	}
	if err := checkPrivileges("sbx serve"); err != nil {
		return err
	}
	if f.warm < 0 || f.runs < 1 {
		return setupError(errors.New("--warm must be 0 or more and --max-runs 1 or more"), "")
	}
	// Each CLI says whether to paint its report; the service's own environment does not (text.Write).
	os.Unsetenv("NO_COLOR")
	// The service builds a sandbox per run: its binary sealed once here, not for each (selfexe).
	selfexe.Seal()
	ln, err := serviceListener(f.socket)
	if err != nil {
		return err
	}
	warn := func(err error) { fmt.Fprintf(io.err, "sbx: warning: %v\n", err) }
	s := &server{
		pool: runner.NewPool(f.warm, stateRoot(), warn), stateRoot: stateRoot(), build: buildID(), rawBuild: binaryID(), env: serviceEnvValues(), limits: ownCallerLimits(),
		slots: make(chan struct{}, f.runs), warn: warn, runs: map[chan os.Signal]struct{}{},
	}
	fmt.Fprintf(io.err, "sbx: serving sbx exec on %s (uid %d, %d warm)\n", ln.Addr(), os.Geteuid(), f.warm)
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, net.ErrClosed) {
				break
			}
			warn(fmt.Errorf("accepting a connection: %w", err))
			time.Sleep(10 * time.Millisecond) // out of descriptors: do not spin
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer conn.Close()
			s.handle(conn)
		}()
	}
	s.stop()
	s.wg.Wait()
	if err := s.pool.Close(); err != nil {
		warn(err)
	}
	fmt.Fprintf(io.err, "sbx: served %d runs, %d of them in a warm sandbox, %d for a fast client; %d handed back to run cold\n",
		s.served.Load(), s.warm.Load(), s.fast.Load(), s.handedBack.Load())
	return nil
}

// stop ends the runs in progress as a second signal ends a cold run: torn down at once.
func (s *server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	for sigs := range s.runs {
		endRun(sigs)
	}
}

// endRun makes the run whose signals are sigs end at once: two signals (runner.Options.Signals).
func endRun(sigs chan os.Signal) {
	for range 2 {
		select {
		case sigs <- unix.SIGTERM:
		default:
		}
	}
}

// handle carries out the run of one connection, from an sbx exec of the service's own uid.
func (s *server) handle(c *net.UnixConn) {
	pid, why := ownPeer(c)
	if why != "" {
		return // another user's, or a sandbox's: not served, not answered
	}
	_ = c.SetDeadline(time.Now().Add(serveRequestWait))
	body, files, err := readFrameBody(c, 3, maxServiceFrame)
	if err != nil {
		return
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if strings.HasPrefix(string(body), rawMagic+"\x00") {
		s.handleRaw(c, pid, body, files)
		return
	}
	var req serviceRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return
	}
	handBack := func(why string) {
		s.handedBack.Add(1)
		_ = writeFrame(c, serviceReply{Fallback: why})
	}
	if why := s.refuse(&req); why != "" {
		handBack(why)
		return
	}
	sigs := make(chan os.Signal, 4)
	release, why := s.admit(sigs)
	if why != "" {
		handBack(why)
		return
	}
	defer release()
	if err := writeFrame(c, serviceReply{Ready: true}); err != nil {
		return
	}
	var msg serviceMsg
	if _, err := readFrame(c, &msg, 0); err != nil || !msg.Go {
		return // the CLI gave up and runs cold
	}
	_ = c.SetDeadline(time.Time{})
	go forwardSignals(sigs, func() (int, error) {
		var msg serviceMsg
		_, err := readFrame(c, &msg, 0)
		return msg.Signal, err
	})
	o := runner.Options{
		Plan: req.Plan, Args: req.Args, Cwd: req.Cwd, Stdin: files[0], Stdout: files[1], Stderr: files[2],
		Closed: req.Closed, StateRoot: req.StateRoot, Changes: req.Changes, Signals: sigs, CallerHome: req.CallerHome,
	}
	rep, warm, runErr := s.carryOut(o)
	// Its stdio closed here before the reply: the CLI's caller sees the end of the command's output
	// no later than with a cold run.
	for _, f := range files {
		f.Close()
	}
	files = nil
	reply := serviceReply{Done: true, Warm: warm}
	if rep != nil {
		reply.Status = &runStatus{ExitCode: rep.ExitCode, TimedOut: rep.TimedOut, Verdict: rep.Verdict}
		f := execFlags{quiet: req.Quiet, format: reportFormat(req.Format)}
		if req.JSON {
			f.jsonOut = "-"
		}
		reply.Rendered = renderReport(f, rep, req.Color)
	}
	if runErr != nil {
		reply.Err, reply.Hint = runErr.Error(), hintFor(runErr)
	}
	_ = c.SetWriteDeadline(time.Now().Add(serveRequestWait))
	if err := writeFrame(c, reply); err != nil {
		s.warn(fmt.Errorf("a run's result did not reach its sbx exec: %w", err))
	}
}

// carryOut runs o, in a sandbox of the pool when it holds one.
func (s *server) carryOut(o runner.Options) (rep *report.Report, warm bool, err error) {
	if o.StateRoot == s.stateRoot {
		rep, warm, err = s.pool.RunWarm(context.Background(), o)
	} else {
		// Another state root (a test's own): its runs are cold, so that the pool's sandboxes stay in one.
		rep, err = runner.Run(context.Background(), o)
	}
	s.served.Add(1)
	if warm {
		s.warm.Add(1)
	}
	return rep, warm, err
}

// refuse says why the service does not carry out req ("" when it does): the CLI then runs cold.
func (s *server) refuse(req *serviceRequest) string {
	switch {
	case req.Proto != serviceProto:
		return fmt.Sprintf("the service speaks protocol %d, this sbx %d: restart the service", serviceProto, req.Proto)
	case req.Build != s.build || s.build == "":
		return "the service runs another build of sbx: restart it (systemctl restart sbx, or --user without root)"
	case req.Plan == nil || len(req.Args) == 0 || !filepath.IsAbs(req.Cwd) ||
		(req.StateRoot != "" && !filepath.IsAbs(req.StateRoot)) || (req.Changes != "" && !filepath.IsAbs(req.Changes)):
		return "the request is incomplete"
	case !filepath.IsAbs(req.CallerHome):
		return "this sbx's caller has no home directory (HOME), where decoys go"
	}
	if req.Limits != s.limits {
		return fmt.Sprintf("the service's limits differ from this sbx's (open files, locked memory, timer slack: %+v, not %+v)", s.limits, req.Limits)
	}
	if why := req.View.differs(ownView(runner.HostPaths(req.Plan, req.Cwd))); why != "" {
		return why
	}
	for _, k := range serviceEnvKeys {
		if req.Env[k] != s.env[k] {
			return fmt.Sprintf("the service's %s differs from this sbx's", k)
		}
	}
	return ""
}

// admit takes a slot for a run whose signals are sigs and tracks them (track); why says why not. release
// gives both back.
func (s *server) admit(sigs chan os.Signal) (release func(), why string) {
	select {
	case s.slots <- struct{}{}:
	default:
		return nil, fmt.Sprintf("the service carries out %d runs already (--max-runs)", cap(s.slots))
	}
	if !s.track(sigs) {
		<-s.slots
		return nil, "the service is stopping"
	}
	return func() {
		s.untrack(sigs)
		<-s.slots
	}, ""
}

// track registers a run's signals for stop; false when the service is stopping.
func (s *server) track(sigs chan os.Signal) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.runs[sigs] = struct{}{}
	return true
}

func (s *server) untrack(sigs chan os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.runs, sigs)
}

// forwardSignals passes the signals the CLI sends (next reads one: 0 for a frame without one) to the
// run; when the CLI is gone (killed), the run ends at once, as a cold run ends with its sbx.
func forwardSignals(sigs chan os.Signal, next func() (int, error)) {
	for {
		n, err := next()
		if err != nil {
			endRun(sigs)
			return
		}
		if n > 0 && n < 65 {
			select {
			case sigs <- syscall.Signal(n):
			default:
			}
		}
	}
}

// serviceListener is the service's socket: the one systemd passed (socket activation), else one made
// at path (default serviceSocket()), mode 0600. A stale socket there (nobody listens) is replaced;
// one a service listens on is an error.
func serviceListener(path string) (*net.UnixListener, error) {
	if pid, _ := strconv.Atoi(os.Getenv("LISTEN_PID")); pid == os.Getpid() && os.Getenv("LISTEN_FDS") != "" {
		os.Unsetenv("LISTEN_PID")
		os.Unsetenv("LISTEN_FDS")
		os.Unsetenv("LISTEN_FDNAMES")
		f := os.NewFile(3, "systemd socket")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return nil, setupError(fmt.Errorf("the socket systemd passed: %w", err), "the unit's .socket must be a ListenStream= of a Unix socket")
		}
		ul, ok := ln.(*net.UnixListener)
		if !ok {
			ln.Close()
			return nil, setupError(errors.New("the socket systemd passed is not a Unix socket"), "the unit's .socket must be a ListenStream= of a Unix socket")
		}
		return ul, nil
	}
	if path == "" {
		path = serviceSocket()
		if os.Getenv(serviceEnv) == "off" {
			return nil, setupError(errors.New(serviceEnv+"=off names no socket"), "give --socket PATH, or unset "+serviceEnv)
		}
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, setupError(fmt.Errorf("a service listens on %s already", path), "stop it first, or give --socket another path")
	}
	var st unix.Stat_t
	if unix.Lstat(path, &st) == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK || int(st.Uid) != os.Geteuid() {
			return nil, setupError(fmt.Errorf("%s is there and is not a socket of this user's", path), "remove it, or give --socket another path")
		}
		os.Remove(path) // a stale socket of an ended service
	}
	old := unix.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, setupError(fmt.Errorf("listening on %s: %w", path, err), "give --socket a path in a directory of this user's")
	}
	return ln, nil
}
