package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// readmeExample is one `$ sudo bin/sbx exec ...` the README shows, with the output it shows.
type readmeExample struct {
	command string   // what follows "sudo bin/sbx ", continuation lines joined
	shown   []string // the output lines
	status  int      // the `$ echo $?` after it; -1 when it shows none
}

// readmeExamples are the runs README.md shows in its code blocks.
func readmeExamples(t *testing.T) []readmeExample {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []readmeExample
	blocks := strings.Split(string(b), "```")
	for i := 1; i < len(blocks); i += 2 {
		lines := strings.Split(strings.TrimPrefix(blocks[i], "\n"), "\n")
		if len(lines) == 0 || !strings.HasPrefix(lines[0], "$ sudo bin/sbx exec ") {
			continue
		}
		ex := readmeExample{command: strings.TrimPrefix(lines[0], "$ sudo bin/sbx "), status: -1}
		j := 1
		for ; j < len(lines) && strings.HasPrefix(lines[j], "    "); j++ {
			ex.command += "\n" + lines[j]
		}
		for ; j < len(lines); j++ {
			if lines[j] == "$ echo $?" && j+1 < len(lines) {
				ex.status, _ = strconv.Atoi(lines[j+1])
				break
			}
			ex.shown = append(ex.shown, lines[j])
		}
		out = append(out, ex)
	}
	return out
}

// shape is a line of a report with its numbers (pids, sizes, times) and runs of spaces made alike.
func shape(line string) string {
	line = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`).ReplaceAllString(line, "N")
	return strings.Join(strings.Fields(line), " ")
}

// runExample runs sbx with the example's command (as a shell reads it) and returns its stderr and exit
// status.
func runExample(t *testing.T, sbx, state, command string) (string, int) {
	cmd := exec.Command("sh", "-c", "exec "+sbx+" "+command)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), stateRootEnv+"="+state, serviceEnv+"=off")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return errb.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return errb.String(), 0
}

// TestReadmeExamples runs the sbx exec examples of README.md and checks what they show: the verdict
// line, every violation (✗) line, and the exit status, as sbx prints them now (numbers aside).
func TestReadmeExamples(t *testing.T) {
	testutil.RequireRoot(t, "the README's examples run sbx as root")
	examples := readmeExamples(t)
	if len(examples) < 2 {
		t.Fatalf("README.md shows %d sbx exec examples; the test expects its two", len(examples))
	}
	sbx, err := exec.LookPath("sbx")
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(testStateParent(), "readme-"+strconv.Itoa(os.Getpid()))
	t.Cleanup(func() { testutil.RemoveStateRoot(state) })
	for _, ex := range examples {
		// The classic example backgrounds a server and exits at once: its listener may not be up yet
		// when sbx looks (what sbx shows is what there is). A shown line must come in one of 3 runs.
		var missing []string
		var stderr string
		for range 3 {
			var code int
			stderr, code = runExample(t, sbx, state, ex.command)
			got := map[string]bool{}
			for line := range strings.Lines(stderr) {
				got[shape(line)] = true
			}
			missing = nil
			for _, line := range ex.shown {
				if (strings.HasPrefix(line, "sbx: ") || strings.HasPrefix(line, "  ✗ ")) && !got[shape(line)] {
					missing = append(missing, line)
				}
			}
			if ex.status >= 0 && code != ex.status {
				missing = append(missing, fmt.Sprintf("exit status %d (it is %d)", ex.status, code))
			}
			if len(missing) == 0 {
				break
			}
		}
		if len(missing) > 0 {
			t.Errorf("README.md shows %q for sbx %s; in 3 runs sbx never did; the last printed:\n%s", missing, ex.command, stderr)
		}
	}
}
