// Command compat runs corpora of other projects' tests on the host and inside `sbx exec`, side by side,
// and prints every case that fails only in the sandbox, each with its reason: a documented restriction
// of the profile (testdata/compat/known.txt) or, when none matches, a defect. It exits 1 when an
// sbx-only failure is undocumented, or when the file-heavy corpus takes more than 1.5 times the host's
// time. It is run by `make compat`, as root; it takes minutes, so `make test` leaves it out.
//
// The corpora (-suites):
//   - python: a slice of CPython's own regression suite (Debian's libpython3.11-testsuite), the same
//     interpreter on both sides (/usr/bin/python3.11, the one the suite belongs to);
//   - go: a slice of Go's standard library tests (go test -short), with the caller's Go caches
//     (--toolchains go);
//   - files: testdata/compat/files.sh, everyday work on 100,000 files (copies, create after delete,
//     rsync, archives, hard links, git, a parallel build), timed case by case; the host side on a fresh
//     ext4 made with mkfs's defaults (a user's disk), the sandbox's on its writable layer.
//
// Each side runs from a fresh working directory, one after the other, so that they do not compete for
// the machine.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// modules exercise files, processes, signals, sockets on loopback, terminals, mmap and multiprocessing,
// and finish in a few minutes on two cores.
var modules = []string{
	"test_os", "test_posix", "test_shutil", "test_pathlib", "test_tempfile", "test_glob", "test_fileio",
	"test_mailbox", "test_tarfile", "test_zipfile", "test_subprocess", "test_signal", "test_socket",
	"test_selectors", "test_asyncio.test_unix_events", "test_pty", "test_mmap", "test_fcntl",
	"test_resource", "test_threading", "test_multiprocessing_forkserver",
}

const python = "/usr/bin/python3.11"

func main() {
	sbx := flag.String("sbx", "bin/sbx", "path of the sbx binary")
	known := flag.String("known", "testdata/compat/known.txt", "documented sbx-only failures")
	profile := flag.String("p", "default", "profile of the sandboxed run")
	only := flag.String("modules", "", "comma-separated test modules instead of the built-in slice")
	suites := flag.String("suites", "python,go,files", "comma-separated corpora: python, go, files")
	files := flag.Int("files", 100000, "size of the file-heavy corpus's tree")
	flag.Parse()
	mods := modules
	if *only != "" {
		mods = strings.Split(*only, ",")
	}
	bin, err := filepath.Abs(*sbx) // the suites run in directories of their own
	if err == nil {
		var k []knownFailure
		if k, err = loadKnown(*known); err == nil {
			err = runSuites(strings.Split(*suites, ","), bin, *profile, k, mods, *files)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		os.Exit(1)
	}
}

// runSuites runs each corpus named, all of them even when one fails, and returns their errors.
func runSuites(names []string, sbx, profile string, known []knownFailure, mods []string, files int) error {
	var errs []error
	for _, name := range names {
		fmt.Printf("\n=== %s\n", name)
		var err error
		switch name {
		case "python":
			err = run(sbx, profile, known, mods)
		case "go":
			err = runGo(sbx, profile, known)
		case "files":
			err = runFiles(sbx, profile, known, files)
		default:
			err = fmt.Errorf("unknown corpus %q (python, go, files)", name)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func run(sbx, profile string, known []knownFailure, mods []string) error {
	if _, err := os.Stat("/usr/lib/python3.11/test/test_os.py"); err != nil {
		return fmt.Errorf("CPython's test suite is missing (apt-get install libpython3.11-testsuite): %w", err)
	}
	// VSOCK cases talk to the hypervisor (cid 2), which is no loopback: never run them.
	args := append([]string{python, "-m", "test", "-v", "--timeout", "600", "--ignore", "*VSOCK*"}, mods...)
	host, err := suite("host", args)
	if err != nil {
		return err
	}
	boxed, err := suite("sbx", append([]string{sbx, "exec", "-q", "-p", profile, "--"}, args...))
	if err != nil {
		return err
	}
	return compare(host, boxed, known, os.Stdout)
}

// suite runs the test suite through argv in a fresh directory and returns each case's outcome.
func suite(name string, argv []string) (map[string]string, error) {
	dir, err := os.MkdirTemp("", "sbx-compat-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return nil, fmt.Errorf("running the suite (%s): %w", name, err)
	}
	res := parse(&out)
	fmt.Printf("%s: %d cases in %s (exit %d)\n", name, len(res), time.Since(start).Round(time.Second), cmd.ProcessState.ExitCode())
	if len(res) == 0 {
		return nil, fmt.Errorf("%s: no test case ran:\n%s", name, tail(out.String(), 40))
	}
	return res, nil
}

// caseStart is the start of unittest's verbose line for a case: "test_x (test.test_os.FileTests.test_x)";
// " ... OUTCOME" follows on the same line, or after a docstring or the case's own output.
var (
	caseStart = regexp.MustCompile(`^(\w+) \(([\w.]+)\)`)
	outcome   = regexp.MustCompile(`(?:^|\.\.\. )(ok|FAIL|ERROR|skipped|expected failure|unexpected success)\b`)
)

// parse reads unittest's verbose output into case id → outcome.
func parse(r io.Reader) map[string]string {
	res := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var pending string
	for sc.Scan() {
		line := sc.Text()
		if m := caseStart.FindStringSubmatch(line); m != nil {
			pending = m[2]
			line = line[len(m[0]):]
		}
		if pending == "" {
			continue
		}
		if m := outcome.FindStringSubmatch(line); m != nil {
			res[pending] = m[1]
			pending = ""
		}
	}
	return res
}

// knownFailure is one documented sbx-only failure: cases matching Pattern (path.Match on the dotted
// id) fail in the sandbox for Reason.
type knownFailure struct{ Pattern, Reason string }

// loadKnown reads "PATTERN  reason" lines; # starts a comment.
func loadKnown(file string) ([]knownFailure, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the documented failures: %w", err)
	}
	var out []knownFailure
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pat, reason, ok := strings.Cut(line, " ")
		if _, err := path.Match(pat, ""); err != nil || !ok {
			return nil, fmt.Errorf("%s:%d: want PATTERN REASON", file, i+1)
		}
		out = append(out, knownFailure{pat, strings.TrimSpace(reason)})
	}
	return out, nil
}

// compare prints the cases that pass (or are skipped) on the host and fail in the sandbox, and those
// skipped only in the sandbox, each with its documented reason, and fails when a failure matches no
// documented restriction (a skip is the test's own judgement of the environment, not a failure).
func compare(host, boxed map[string]string, known []knownFailure, w io.Writer) error {
	var failed, skipped []string
	for id, outcome := range boxed {
		h, ok := host[id]
		switch {
		case !ok:
		case (outcome == "FAIL" || outcome == "ERROR") && h != "FAIL" && h != "ERROR":
			failed = append(failed, id)
		case outcome == "skipped" && h == "ok":
			skipped = append(skipped, id)
		}
	}
	slices.Sort(failed)
	slices.Sort(skipped)
	undocumented := 0
	fmt.Fprintf(w, "\n%d case(s) fail only in sbx:\n", len(failed))
	for _, id := range failed {
		reason := "DEFECT (undocumented)"
		if k := match(known, id); k != nil {
			reason = k.Reason
		} else {
			undocumented++
		}
		fmt.Fprintf(w, "  %s %s: %s\n", id, boxed[id], reason)
	}
	fmt.Fprintf(w, "%d case(s) skipped only in sbx:\n", len(skipped))
	for _, id := range skipped {
		reason := "(no reason listed)"
		if k := match(known, id); k != nil {
			reason = k.Reason
		}
		fmt.Fprintf(w, "  %s: %s\n", id, reason)
	}
	if undocumented > 0 {
		return fmt.Errorf("%d sbx-only failure(s) are not in the documented restrictions", undocumented)
	}
	fmt.Fprintln(w, "no undocumented sbx-only failure")
	return nil
}

func match(known []knownFailure, id string) *knownFailure {
	for i, k := range known {
		if ok, _ := path.Match(k.Pattern, id); ok {
			return &known[i]
		}
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
