package main

import (
	"errors"
	"fmt"
	goio "io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/runner"
)

// serviceWait bounds how long the CLI waits for the service to take a run before it runs cold: the
// service answers at once unless it is stuck.
const serviceWait = 5 * time.Second

// errServiceLost: the service ended while it carried out the run (it crashed or was stopped).
var errServiceLost = errors.New("the sbx service ended during the run")

// serviceRun is a run's result as the service gave it: the report rendered as the CLI asked (rep holds
// only what the exit status is made of; nil when the command did not run), and sbx's own error, as
// runner.Run gives them.
type serviceRun struct {
	rep  *report.Report
	rend rendered
	warm bool // the service's warm pool held a sandbox for it
	err  error
}

// viaService hands the run o to the caller's sbx service, with req's rendering. ok is false when the
// service did not take it (there is none, it is not the caller's, of another build, or it failed
// before the run started): why says so, and the caller runs cold.
// beforeGo is called once the service took the run, before it starts.
func viaService(o runner.Options, req serviceRequest, beforeGo func()) (run serviceRun, why string, ok bool) {
	if os.Getenv(serviceEnv) == "off" {
		return serviceRun{}, serviceEnv + "=off", false
	}
	stdio := []any{o.Stdin, o.Stdout, o.Stderr}
	fds := make([]int, 0, 3)
	for _, s := range stdio {
		f, isFile := s.(*os.File)
		if !isFile {
			return serviceRun{}, "sbx's stdio are not files", false
		}
		fds = append(fds, int(f.Fd()))
	}
	path := serviceSocket()
	if why := checkServiceSocket(path); why != "" {
		return serviceRun{}, why, false
	}
	conn, err := net.DialTimeout("unix", path, serviceWait)
	if err != nil {
		return serviceRun{}, fmt.Sprintf("no service at %s: %v", path, unwrapSyscall(err)), false
	}
	c := conn.(*net.UnixConn)
	defer c.Close()
	if _, why := ownPeer(c); why != "" {
		return serviceRun{}, fmt.Sprintf("the service at %s is not the caller's: %s", path, why), false
	}
	req.Proto, req.Build, req.Env, req.Limits = serviceProto, buildID(), serviceEnvValues(), ownCallerLimits()
	req.Plan, req.Args = o.Plan, o.Args
	req.Cwd, req.Closed, req.StateRoot, req.Changes, req.CallerHome = o.Cwd, o.Closed, o.StateRoot, o.Changes, o.CallerHome
	req.View = ownView(runner.HostPaths(o.Plan, o.Cwd))
	if req.Changes != "" {
		if req.Changes, err = filepath.Abs(req.Changes); err != nil {
			return serviceRun{}, "--changes: " + err.Error(), false
		}
	}
	if !allUTF8(reflect.ValueOf(req)) {
		return serviceRun{}, "an argument, a path or a variable is not UTF-8", false
	}
	_ = c.SetDeadline(time.Now().Add(serviceWait))
	if err := writeFrame(c, req, fds...); err != nil {
		return serviceRun{}, "the service did not take the request: " + err.Error(), false
	}
	var r serviceReply
	if _, err = readFrame(c, &r, 0); err != nil {
		return serviceRun{}, "the service did not answer: " + err.Error(), false
	}
	if !r.Ready {
		if r.Fallback == "" {
			r.Fallback = "the service refused the run"
		}
		return serviceRun{}, r.Fallback, false
	}
	beforeGo()
	if err := writeFrame(c, serviceMsg{Go: true}); err != nil {
		return serviceRun{}, "the service did not take the run: " + err.Error(), false
	}
	_ = c.SetDeadline(time.Time{})
	// From here the run is the service's: the signals sbx gets are its, and its result is sbx's.
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-o.Signals:
				if n, isSig := s.(syscall.Signal); isSig {
					_ = writeFrame(c, serviceMsg{Signal: int(n)})
				}
			}
		}
	}()
	var res serviceReply
	if _, err := readFrame(c, &res, 0); err != nil || !res.Done {
		if err == nil || errors.Is(err, goio.EOF) {
			err = errServiceLost
		} else {
			err = fmt.Errorf("%w: %w", errServiceLost, err)
		}
		return serviceRun{err: err}, "", true
	}
	run = serviceRun{rend: res.Rendered, warm: res.Warm}
	if st := res.Status; st != nil {
		// What the CLI reads of the report (execStatus); what it writes of it the service rendered.
		run.rep = &report.Report{ExitCode: st.ExitCode, TimedOut: st.TimedOut, Verdict: st.Verdict}
	}
	if res.Err != "" {
		run.err = &serviceError{msg: res.Err, hint: res.Hint}
	}
	return run, "", true
}

// serviceError is sbx's own error as the service reported it, with the hint it gave.
type serviceError struct{ msg, hint string }

func (e *serviceError) Error() string { return e.msg }

// checkServiceSocket says why path is no socket of the caller's to use ("" when it is): a socket the
// caller owns, in a directory that only it or root can change.
func checkServiceSocket(path string) string {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fmt.Sprintf("no service at %s", path)
	}
	uid := uint32(os.Geteuid())
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Uid != uid {
		return fmt.Sprintf("%s is not a socket of the caller's", path)
	}
	var dir unix.Stat_t
	if err := unix.Stat(filepath.Dir(path), &dir); err != nil || (dir.Uid != uid && dir.Uid != 0) ||
		(dir.Mode&0o022 != 0 && dir.Mode&unix.S_ISVTX == 0) {
		return fmt.Sprintf("the directory of %s is not the caller's alone", path)
	}
	return ""
}

// unwrapSyscall is err's innermost errno, for a short reason.
func unwrapSyscall(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}
