package runner

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
)

// BenchmarkRunTrue is one whole cold run of `true` with the default profile, in process: for profiles
// of sbx's own side of a run (go test -cpuprofile).
func BenchmarkRunTrue(b *testing.B) {
	testutil.RequireRoot(b, "sandboxes")
	p, err := policy.Load("default")
	if err != nil {
		b.Fatal(err)
	}
	pl, err := policy.Compile(p, policy.CompileContext{Cwd: "/tmp", CallerEnv: os.Environ()})
	if err != nil {
		b.Fatal(err)
	}
	root := testutil.StateRoot(b)
	for b.Loop() {
		rep, err := Run(context.Background(), Options{Plan: pl, Args: []string{"true"}, Cwd: "/tmp", StateRoot: root,
			Stdout: io.Discard, Stderr: io.Discard})
		if err != nil || rep.ExitCode != 0 {
			b.Fatal(err, rep)
		}
	}
}
