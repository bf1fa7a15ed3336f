package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// stopSignals end a command that builds sandboxes: its context is cancelled and what it built is torn
// down, instead of the process dying and leaving the rest to sbx gc.
var stopSignals = []os.Signal{unix.SIGINT, unix.SIGTERM}

// cancelOnSignal makes c's context (cobra's Context, from ExecuteContext) one that sigs cancel. Only
// commands that build sandboxes take it: with a signal handler, a command that never looks at its
// context would no longer stop on Ctrl-C. Until c returns, every further one of sigs is swallowed, so
// that the teardown the first one started runs to its end. (exec's run forwards signals to the command
// itself, see runExec.)
func cancelOnSignal(c *cobra.Command, sigs ...os.Signal) *cobra.Command {
	run := c.RunE
	c.RunE = func(c *cobra.Command, args []string) error {
		ctx, stop := signalContext(c.Context(), sigs...)
		defer stop()
		c.SetContext(ctx)
		return run(c, args)
	}
	return c
}

// signalError is the cause of a context that a signal cancelled.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "stopped by " + signalName(e.sig) }

func signalName(s os.Signal) string {
	if n, ok := s.(syscall.Signal); ok && unix.SignalName(n) != "" {
		return unix.SignalName(n)
	}
	return s.String()
}

// signalContext is ctx, cancelled with a signalError cause when one of sigs arrives.
func signalContext(ctx context.Context, sigs ...os.Signal) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	if callerOf(ctx) != nil {
		// The service's CLI for a fast client: the signals are the client's (serve_raw.go), not the
		// service's process's.
		return ctx, func() { cancel(nil) }
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	go func() {
		select {
		case s := <-ch:
			cancel(signalError{s})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel(nil)
	}
}

// interrupted is the error of a command that a signal stopped (exit status 128+N, as a shell shows a
// process that signal N killed), or nil when ctx was not cancelled by a signal.
func interrupted(ctx context.Context, what string) error {
	var se signalError
	if !errors.As(context.Cause(ctx), &se) {
		return nil
	}
	code := exitSetup
	if n, ok := se.sig.(syscall.Signal); ok {
		code = 128 + int(n)
	}
	return &exitError{code: code, err: fmt.Errorf("%s: %w", what, se)}
}
