package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/report"
)

// renderHuman writes the report for a person: the verdict first, then what was left behind.
func renderHuman(w io.Writer, r *report.Report, color bool) {
	paint := func(code, s string) string {
		if !color {
			return s
		}
		return "\x1b[" + code + "m" + s + "\x1b[0m"
	}
	verdict := paint("32", "PASS")
	if r.Verdict == report.VerdictViolation {
		verdict = paint("1;31", "VIOLATION")
	}
	status := fmt.Sprintf("exit %d", r.ExitCode)
	if r.TimedOut {
		status = "timed out"
	}
	fmt.Fprintf(w, "sbx: %s  %s  profile %s  %.0f ms\n", verdict, status, r.Profile, r.Timings.Total)
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  ✗ %s: %s\n", v.Rule, v.Message)
	}
	if len(r.Processes.LeftRunning) > 0 {
		fmt.Fprintf(w, "left running:\n")
		for _, p := range r.Processes.LeftRunning {
			renderProcess(w, p)
		}
	}
	if len(r.Sockets.Listening) > 0 {
		fmt.Fprintf(w, "listening:\n")
		for _, s := range r.Sockets.Listening {
			fmt.Fprintf(w, "  %-5s %s  pid %d %s\n", s.Proto, hostPort(s), s.Pid, s.Exe)
		}
	}
}

func renderProcess(w io.Writer, p observe.Process) {
	var flags []string
	if p.Orphaned {
		flags = append(flags, "orphaned")
	}
	if p.Deleted {
		flags = append(flags, "exe deleted")
	}
	extra := ""
	if len(flags) > 0 {
		extra = " (" + strings.Join(flags, ", ") + ")"
	}
	fmt.Fprintf(w, "  pid %d  %s%s\n", p.Pid, strings.Join(p.Argv, " "), extra)
	for _, fd := range p.FDs {
		if fd.FD <= 2 && fd.Kind == "dev" {
			continue // the terminal or /dev/null on stdio is not news
		}
		desc := fd.Target
		if fd.Socket != "" {
			desc = fd.Socket
		}
		fmt.Fprintf(w, "      fd %d → %s\n", fd.FD, desc)
	}
}

func hostPort(s observe.Socket) string {
	if s.Proto == "unix" {
		return s.Address
	}
	if strings.Contains(s.Address, ":") {
		return fmt.Sprintf("[%s]:%d", s.Address, s.Port)
	}
	return fmt.Sprintf("%s:%d", s.Address, s.Port)
}
