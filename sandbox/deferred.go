package sandbox

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/sbx-dev/sbx/policy"
)

// A deferred sandbox is built before its command is known, for a warm pool: namespaces, cgroup, overlay,
// seccomp, the network contract and the waiting supervisor are all in place, and the command
// (argv, environment, stdio) arrives with Use. It serves exactly one command, like every sandbox.
//
// Its stdio are relays that exist from Create on and are bound to the caller's streams by Use: the
// command sees pipes of its own user, as it does in a cold run for stdio it may not reopen (stdio.go),
// so that it can still reopen /dev/stdout; nothing inside runs before Start, so nothing is written
// before they are bound. Its stdout and stderr are two pipes even when the caller's are one writer.

// ErrNotDeferred is returned by Use on a sandbox that was built with its command, or was used already.
var ErrNotDeferred = errors.New("sandbox: not a deferred sandbox, or used already")

// ErrStale is returned by Use on a deferred sandbox that no longer hides what a new one would: a
// hidden path appeared, or an entry appeared in a hidden directory whose entries it hid one by one (the
// way down to the working directory or a share), since it was built. Stop and Destroy it, and build
// a new one.
var ErrStale = errors.New("sandbox: the host changed below a hidden path since the sandbox was built")

// lateStdio are a deferred sandbox's stdio until Use binds them.
type lateStdio struct {
	ready    chan struct{}
	once     sync.Once
	in       io.Reader
	out, err io.Writer
}

// deferStdio gives a deferred sandbox's command relays that Use binds later.
func (cfg *Config) deferStdio() {
	if !cfg.Deferred {
		return
	}
	l := &lateStdio{ready: make(chan struct{})}
	cfg.late = l
	cfg.Command.Stdin, cfg.Command.Stdout, cfg.Command.Stderr = lateReader{l}, lateWriter{l, false}, lateWriter{l, true}
	cfg.Command.Terminal = false
}

// bind connects the relays to the caller's streams (nil: no input, output discarded), once; later calls
// do nothing. A nil lateStdio (a sandbox built with its command) does nothing.
func (l *lateStdio) bind(in io.Reader, out, errw io.Writer) bool {
	if l == nil {
		return false
	}
	bound := false
	l.once.Do(func() {
		l.in, l.out, l.err = in, out, errw
		close(l.ready)
		bound = true
	})
	return bound
}

// noInput says whether Use bound no input (nil): the command's stdin is then /dev/null
// (supervisor.Config.NoInput), not the relay. A sandbox built with its command says no: its stdio()
// passes /dev/null itself.
func (l *lateStdio) noInput() bool {
	if l == nil {
		return false
	}
	select {
	case <-l.ready:
		return l.in == nil
	default:
		return false
	}
}

type lateReader struct{ l *lateStdio }

func (r lateReader) Read(p []byte) (int, error) {
	<-r.l.ready
	if r.l.in == nil {
		return 0, io.EOF
	}
	return r.l.in.Read(p)
}

type lateWriter struct {
	l      *lateStdio
	stderr bool
}

func (w lateWriter) Write(p []byte) (int, error) {
	<-w.l.ready
	dst := w.l.out
	if w.stderr {
		dst = w.l.err
	}
	if dst == nil {
		return len(p), nil
	}
	return dst.Write(p)
}

// Use gives a deferred sandbox its command: argv, stdio and the plan it runs under, which must be the
// plan the sandbox was built for but for the command's environment and timeout (the caller keys its
// pool by that). The working directory is the one the sandbox was built in. Start follows.
func (s *Sandbox) Use(cmd Command, plan *policy.Plan) error {
	if !s.cfg.Deferred || len(cmd.Args) == 0 || cmd.Terminal {
		return fmt.Errorf("%w: %d args, terminal %v", ErrNotDeferred, len(cmd.Args), cmd.Terminal)
	}
	if s.rootfs != nil && s.rootfs.HiddenChanged() {
		s.cfg.late.bind(nil, nil, nil) // its supervisor sees end of input, its output goes nowhere
		return ErrStale
	}
	if !s.cfg.late.bind(cmd.Stdin, cmd.Stdout, cmd.Stderr) {
		return ErrNotDeferred
	}
	if home := envValue(plan.Env, "HOME"); s.passwd != "" && home != envValue(s.cfg.Plan.Env, "HOME") {
		if err := rewritePasswd(s.passwd, s.ids.UID, home); err != nil {
			return err
		}
	}
	s.cfg.Command.Args = cmd.Args
	s.cfg.Plan = plan
	return nil
}

// Stop waits until the command's output has been passed on, killing what is left in the sandbox first,
// so that a caller can answer with the command's complete output before the (slower) rest of the
// teardown, Destroy, which must still follow. When the command was started and only the supervisor is
// left (it lets go of the command's stdio once it has answered go), every writer is gone already and
// nothing needs to die first: Destroy kills it.
func (s *Sandbox) Stop() {
	if s.container == nil || s.init == nil || s.initPid <= 0 {
		return
	}
	if !s.answered || !s.OnlyInit() {
		s.Kill()
		s.init.Wait() // Destroy's own Wait then returns at once
	}
	s.relays.close() // every writer inside is dead: the relays pass on what is left and end
}
