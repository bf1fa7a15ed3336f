package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// goPackages are the standard library's packages whose tests the go corpus runs: files, links and
// permissions, archives, processes and signals, temporary directories.
var goPackages = []string{"os", "io/fs", "io/ioutil", "path/filepath", "archive/tar", "archive/zip",
	"compress/gzip", "os/exec", "os/signal", "os/user", "syscall", "testing/fstest"}

// runGo runs the go corpus: `go test -short -json` of goPackages on the host and in `sbx exec`
// (--toolchains go: the caller's module and build caches below a throwaway layer), and compares each
// test's outcome; ids are go.PACKAGE.TEST.
func runGo(sbx, profile string, known []knownFailure) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		fmt.Println("go is not installed: the go corpus is left out")
		return nil
	}
	args := append([]string{gobin, "test", "-short", "-count=1", "-json"}, goPackages...)
	env := []string{"GOTOOLCHAIN=local", "GOFLAGS=", "GOPROXY=off", "GOTELEMETRY=off"}
	host, err := goSuite("host", args, env)
	if err != nil {
		return err
	}
	boxed := append([]string{sbx, "exec", "-q", "-p", profile, "--toolchains", "go"}, envFlags(env)...)
	res, err := goSuite("sbx", append(append(boxed, "--"), args...), env)
	if err != nil {
		return err
	}
	return compare(host, res, known, os.Stdout)
}

// envFlags are -e flags that give the sandboxed command env.
func envFlags(env []string) []string {
	var out []string
	for _, e := range env {
		out = append(out, "-e", e)
	}
	return out
}

// goSuite runs go test -json through argv and returns each test's outcome (ok, FAIL, skipped), and each
// package's that failed as a whole (its build, a crash) as go.PACKAGE.
func goSuite(name string, argv, env []string) (map[string]string, error) {
	dir, err := os.MkdirTemp("", "sbx-compat-go-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = io.Discard
	start := time.Now()
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return nil, fmt.Errorf("running go test (%s): %w", name, err)
	}
	res := map[string]string{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct{ Action, Package, Test string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Package == "" {
			continue
		}
		id := "go." + ev.Package
		if ev.Test != "" {
			id += "." + ev.Test
		}
		switch ev.Action {
		case "pass":
			if ev.Test != "" {
				res[id] = "ok"
			}
		case "fail":
			res[id] = "FAIL"
		case "skip":
			if ev.Test != "" {
				res[id] = "skipped"
			}
		}
	}
	fmt.Printf("%s: %d tests in %s (exit %d)\n", name, len(res), time.Since(start).Round(time.Second), cmd.ProcessState.ExitCode())
	if len(res) == 0 {
		return nil, fmt.Errorf("%s: no test ran:\n%s", name, tail(out.String(), 40))
	}
	return res, nil
}

// fileCase is one case of the file-heavy corpus: its exit status, wall time and output's digest.
type fileCase struct {
	name   string
	status int
	ms     int
	digest string
}

// maxFilesRatio is the file-heavy corpus's bound: the sandbox within 1.5 times the host's time.
const maxFilesRatio = 1.5

// runFiles runs the file-heavy corpus (testdata/compat/files.sh) with a tree of n files: on the host in
// a fresh ext4 of mkfs's defaults (root's; else a directory of the host's temporary file system), and
// in `sbx exec` with a writable layer large enough for it. A case that fails or prints otherwise only in
// the sandbox is a failure (ids files.NAME), and the sandbox's total time past maxFilesRatio times the
// host's fails the corpus.
func runFiles(sbx, profile string, known []knownFailure, n int) error {
	script, err := filepath.Abs("testdata/compat/files.sh")
	if err != nil {
		return err
	}
	hostDir, done, err := freshExt4()
	if err != nil {
		return err
	}
	defer done()
	env := []string{"FILES=" + strconv.Itoa(n)}
	host, err := fileSuite("host", hostDir, []string{"sh", script}, env)
	if err != nil {
		return err
	}
	boxDir, err := os.MkdirTemp("/var/tmp", "sbx-compat-files-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(boxDir)
	argv := append([]string{sbx, "exec", "-q", "-p", profile, "--disk", "8GiB", "--ro", script}, envFlags(env)...)
	boxed, err := fileSuite("sbx", boxDir, append(argv, "--", "sh", script), nil)
	if err != nil {
		return err
	}
	hostRes, boxRes := map[string]string{}, map[string]string{}
	var hostMs, boxMs int
	fmt.Printf("%-12s %9s %9s %7s\n", "case", "host ms", "sbx ms", "ratio")
	for _, h := range host {
		i := slices.IndexFunc(boxed, func(b fileCase) bool { return b.name == h.name })
		if i < 0 {
			continue
		}
		b := boxed[i]
		id := "files." + h.name
		hostRes[id], boxRes[id] = outcomeOf(h, ""), outcomeOf(b, h.digest)
		hostMs += h.ms
		boxMs += b.ms
		fmt.Printf("%-12s %9d %9d %6.2fx  %s\n", h.name, h.ms, b.ms, float64(b.ms)/float64(max(h.ms, 1)), boxRes[id])
	}
	ratio := float64(boxMs) / float64(max(hostMs, 1))
	fmt.Printf("%-12s %9d %9d %6.2fx  (bound %.2fx)\n", "total", hostMs, boxMs, ratio, maxFilesRatio)
	err = compare(hostRes, boxRes, known, os.Stdout)
	if ratio > maxFilesRatio {
		err = errors.Join(err, fmt.Errorf("the file-heavy corpus took %.2f times the host's time in sbx (bound %.2f)", ratio, maxFilesRatio))
	}
	return err
}

// outcomeOf is a case's outcome as compare takes it: ok, or FAIL for a failed case and, in the sandbox,
// for a case whose output differs from the host's (want, "" on the host's side).
func outcomeOf(c fileCase, want string) string {
	if c.status != 0 || want != "" && c.digest != want {
		return "FAIL"
	}
	return "ok"
}

// fileSuite runs the corpus through argv in dir and returns its cases in order.
func fileSuite(name, dir string, argv, env []string) ([]fileCase, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return nil, fmt.Errorf("running the file corpus (%s): %w", name, err)
	}
	var cases []fileCase
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 || f[0] != "case" {
			if strings.HasPrefix(line, "  | ") {
				fmt.Printf("%s: %s\n", name, line)
			}
			continue
		}
		st, _ := strconv.Atoi(f[2])
		ms, _ := strconv.Atoi(f[3])
		cases = append(cases, fileCase{name: f[1], status: st, ms: ms, digest: f[4]})
	}
	fmt.Printf("%s: %d cases in %s (exit %d)\n", name, len(cases), time.Since(start).Round(time.Second), cmd.ProcessState.ExitCode())
	if len(cases) == 0 {
		return nil, fmt.Errorf("%s: no case ran:\n%s", name, tail(out.String(), 40))
	}
	return cases, nil
}

// freshExt4 mounts a new ext4 made with mkfs's defaults (a sparse 8 GiB image in /var/tmp, through a
// loop device) and returns a directory on it and what removes it all. Without root (no mount), a
// directory of the host's /var/tmp serves, and a line says so.
func freshExt4() (string, func(), error) {
	base, err := os.MkdirTemp("/var/tmp", "sbx-compat-host-")
	if err != nil {
		return "", nil, err
	}
	removeBase := func() { os.RemoveAll(base) }
	if os.Geteuid() != 0 {
		fmt.Println("not root: the host's side runs in /var/tmp's own file system")
		return base, removeBase, nil
	}
	img, mnt := filepath.Join(base, "ext4.img"), filepath.Join(base, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		removeBase()
		return "", nil, err
	}
	for _, argv := range [][]string{{"truncate", "-s", "8G", img}, {"mkfs.ext4", "-q", "-F", img}, {"mount", "-o", "loop", img, mnt}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			removeBase()
			return "", nil, fmt.Errorf("%s: %w: %s", argv[0], err, bytes.TrimSpace(out))
		}
	}
	// A directory of its own: the file system's root holds lost+found.
	work := filepath.Join(mnt, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		exec.Command("umount", mnt).Run()
		removeBase()
		return "", nil, err
	}
	return work, func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "compat: umount %s: %v: %s\n", mnt, err, out)
			return // the image stays with its mount rather than under it
		}
		removeBase()
	}, nil
}
