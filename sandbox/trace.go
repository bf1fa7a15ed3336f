package sandbox

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// tracer prints the time each step of sandbox creation took when SBX_TRACE is set: a tool for the
// benchmarks, silent otherwise.
type tracer struct {
	on    bool
	last  time.Time
	steps []string
}

func newTracer() *tracer { return &tracer{on: os.Getenv("SBX_TRACE") != "", last: time.Now()} }

// TraceLibcontainer says whether SBX_TRACE=lc asks for libcontainer's debug log too (its init's steps,
// timestamped by the caller's logger), for a look inside lc.run.
func TraceLibcontainer() bool { return os.Getenv("SBX_TRACE") == "lc" }

func (t *tracer) mark(step string) {
	if !t.on {
		return
	}
	now := time.Now()
	t.steps = append(t.steps, fmt.Sprintf("%s %.1fms", step, float64(now.Sub(t.last).Microseconds())/1000))
	t.last = now
}

func (t *tracer) done() {
	if t.on {
		fmt.Fprintf(os.Stderr, "sbx: trace: %s\n", strings.Join(t.steps, ", "))
	}
}
