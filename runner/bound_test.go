package runner

import (
	"testing"

	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/report"
)

// TestBound checks that the report's lists are cut at their bounds with totals and flags, and that
// short lists are left alone.
func TestBound(t *testing.T) {
	rep := report.New("p", []string{"true"})
	rep.Processes.LeftRunning = make([]report.Process, observe.MaxLeftRunning+5)
	rep.Sockets.Listening = make([]report.Socket, observe.MaxSockets+1)
	rep.Sockets.Established = make([]report.Socket, 3)
	rep.Violations = make([]report.Violation, report.MaxViolations+7)
	rep.ViolationsTotal = len(rep.Violations)
	bound(rep)
	p, s := rep.Processes, rep.Sockets
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"left_running kept", len(p.LeftRunning), observe.MaxLeftRunning},
		{"left_running_total", p.LeftRunningTotal, observe.MaxLeftRunning + 5},
		{"left_running_truncated", p.LeftRunningTruncated, true},
		{"listening kept", len(s.Listening), observe.MaxSockets},
		{"listening_total", s.ListeningTotal, observe.MaxSockets + 1},
		{"established kept", len(s.Established), 3},
		{"established_total", s.EstablishedTotal, 3},
		{"sockets truncated", s.Truncated, true},
		{"violations kept", len(rep.Violations), report.MaxViolations},
		{"violations_total", rep.ViolationsTotal, report.MaxViolations + 7},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}
