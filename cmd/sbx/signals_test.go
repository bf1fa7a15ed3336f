package main

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSignalContext: SIGINT cancels the context of a command that builds sandboxes, and the command
// ends as a shell shows one that SIGINT killed (130) with a line saying so; any other end of the
// context is no interruption.
func TestSignalContext(t *testing.T) {
	ctx, stop := signalContext(context.Background(), unix.SIGINT)
	defer stop()
	if err := unix.Kill(os.Getpid(), unix.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGINT did not cancel the context")
	}
	var ee *exitError
	if err := interrupted(ctx, "the probe was torn down"); !errors.As(err, &ee) || ee.code != 130 ||
		ee.Error() != "the probe was torn down: stopped by SIGINT" {
		t.Errorf("interrupted = %v, want status 130 and the signal named", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	sctx, stop2 := signalContext(ctx, unix.SIGINT)
	defer stop2()
	cancel()
	<-sctx.Done()
	if err := interrupted(sctx, "x"); err != nil {
		t.Errorf("a context cancelled without a signal: interrupted = %v", err)
	}
}
