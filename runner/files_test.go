package runner

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// runIn runs args in cwd with o's Changes; it fails the test when sbx itself fails.
func runIn(t *testing.T, p *policy.Plan, cwd, changes string, args ...string) (*report.Report, string) {
	t.Helper()
	var out bytes.Buffer
	rep, err := runValid(t, context.Background(), Options{
		Plan: p, Args: args, Cwd: cwd, Stdout: &out, Stderr: &out, StateRoot: testutil.StateRoot(t), Changes: changes,
	})
	if err != nil {
		t.Fatalf("Run: %v (output %q)", err, out.String())
	}
	return rep, out.String()
}

// tmpfsAt mounts a small tmpfs of the test's own at a fresh directory: a file system other than /.
func tmpfsAt(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatalf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestChangesDirNoEscape is issue 10's first class: the working directory on its own file system (its
// own overlay), the command renames the directory above it and plants dir -> x and x/proj -> HOST in
// the root layer, then writes f in its working directory. The copy of the root layer recreates the links
// in DIR; the copy of the working directory's layer must not follow them into HOST.
func TestChangesDirNoEscape(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	base := tmpfsAt(t)
	host := filepath.Join(t.TempDir(), "host") // stands for a host directory
	cwd := filepath.Join(base, "dir", "proj")
	mkdirs(t, host, cwd)
	out := filepath.Join(t.TempDir(), "changes")
	// The command's user owns the directories it renames and plants in: with the sandbox's user
	// namespace, not even its root may change what host root owns.
	p := plan(t)
	p.UID, p.GID = 65534, 65534
	for _, d := range []string{base, filepath.Join(base, "dir")} {
		if err := os.Chown(d, p.UID, p.GID); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf(`mv %[1]s/dir %[1]s/dir.old && mkdir %[1]s/x && ln -s x %[1]s/dir && ln -s %[2]s %[1]s/x/proj && echo pwned > f`, base, host)
	rep, output := runIn(t, p, cwd, out, "sh", "-c", script)
	if rep.ExitCode != 0 {
		t.Fatalf("the attack did not run: exit %d, %s", rep.ExitCode, output)
	}
	if entries, _ := os.ReadDir(host); len(entries) != 0 {
		t.Fatalf("the copy wrote into the host directory through planted links: %v", entries)
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.HasPrefix(n, "--changes: not copied") }) {
		t.Errorf("no note says what was not copied: %q", rep.Notes)
	}
}

// TestChangesDirInWritableShare: a --changes DIR the command can write into is refused before anything
// is built.
func TestChangesDirInWritableShare(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	share := t.TempDir()
	p := plan(t)
	p.Filesystem.Shares = []policy.Share{{Host: share, Sandbox: share, Writable: true}}
	_, err := runValid(t, context.Background(), Options{Plan: p, Args: []string{"true"}, Cwd: "/", StateRoot: testutil.StateRoot(t),
		Changes: filepath.Join(share, "review")})
	if !errors.Is(err, ErrChangesDir) {
		t.Fatalf("err = %v, want ErrChangesDir", err)
	}
}

// TestCwdThroughHostSymlink is issue 10's second class: a working directory reached through a host
// symlink (LINK -> REAL, as /var/run -> /run) must not make sbx change the host's files below REAL.
func TestCwdThroughHostSymlink(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	base := t.TempDir()
	real := filepath.Join(base, "real")
	mkdirs(t, filepath.Join(real, "x", "sub"))
	if err := os.WriteFile(filepath.Join(real, "x", "sub", "file"), []byte("host\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(real, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	p := plan(t)
	p.UID, p.GID = 65534, 65534
	// /tmp stays visible: under a hidden directory sbx rebuilds the path down to the working directory
	// as directories of its own, which hides the link.
	p.Filesystem.Hidden = []string{"/root", "/home", "/run"}
	rep, output := runIn(t, p, filepath.Join(base, "link", "x", "sub"), "", "sh", "-c", "pwd; echo new > made")
	if rep.ExitCode != 0 {
		t.Fatalf("exit %d: %s", rep.ExitCode, output)
	}
	if !strings.Contains(output, filepath.Join(real, "x", "sub")) {
		t.Errorf("the command ran in %q, want the resolved %s", output, filepath.Join(real, "x", "sub"))
	}
	for _, f := range []string{"x", "x/sub", "x/sub/file"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(real, f), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 0 {
			t.Errorf("host %s now owned by uid %d", f, st.Uid)
		}
		if f == "x" && st.Mode&0o777 != 0o700 {
			t.Errorf("host x now has mode %o, want 700", st.Mode&0o777)
		}
	}
	if _, err := os.Stat(filepath.Join(real, "x", "sub", "made")); err == nil {
		t.Errorf("the command's write reached the host")
	}
}

// TestFileObservationNeverAborts: a path longer than PATH_MAX and a tree nested deeper than sbx walks
// leave a report; what could not be read makes the run incomplete, the rest is listed.
func TestFileObservationNeverAborts(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	script := `import os
os.chdir("/tmp")
for _ in range(20):
    os.mkdir("l" * 250); os.chdir("l" * 250)
open("deep-file", "w").write("x")
os.chdir("/tmp")
for _ in range(300):
    os.mkdir("n"); os.chdir("n")
open("bottom", "w").write("y")
`
	rep, output := runIn(t, plan(t), t.TempDir(), "", "python3", "-c", script)
	if rep.ExitCode != 0 {
		t.Fatalf("exit %d: %s", rep.ExitCode, output)
	}
	if !slices.ContainsFunc(rep.Files.Created, func(p string) bool { return strings.HasSuffix(p, "/deep-file") }) {
		t.Errorf("the file below a path longer than PATH_MAX is not listed")
	}
	if rep.Verdict != report.VerdictViolation || !slices.ContainsFunc(rep.Violations, func(v report.Violation) bool {
		return v.Rule == report.RuleIncomplete
	}) || !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "nested deeper") }) {
		t.Errorf("verdict %s, violations %+v: want observe.incomplete for the too-deep tree", rep.Verdict, rep.Violations)
	}
}

// TestFilesBoundedAndKept: the lists keep their first entries with totals; a non-UTF-8 name keeps its
// bytes in path_b64; a sparse file is copied as a hole; a same-size rewrite with its mtime restored in
// the working directory is modified.
func TestFilesBoundedAndKept(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "data.txt"), []byte("aaaa\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Unix(1_600_000_000, 0)
	if err := os.Chtimes(filepath.Join(cwd, "data.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	p := plan(t)
	p.UID, p.GID = 65534, 65534
	out := filepath.Join(t.TempDir(), "changes")
	n := observe.DefaultMaxEntries + 5
	rep, output := runIn(t, p, cwd, "", "sh", "-c", fmt.Sprintf(`cd /tmp && mkdir d && cd d && seq %d | xargs touch`, n))
	if rep.ExitCode != 0 {
		t.Fatalf("exit %d: %s", rep.ExitCode, output)
	}
	f := rep.Files
	if !f.Truncated || len(f.Created) != observe.DefaultMaxEntries || f.Total.Created != n+1 {
		t.Errorf("truncated %v, %d created kept, total %d; want true, %d, %d", f.Truncated, len(f.Created),
			f.Total.Created, observe.DefaultMaxEntries, n+1)
	}

	script := `touch "/tmp/$(printf 'caf\351')" && truncate -s 200M /tmp/sparse && printf 'bbbb\n' > data.txt && touch -d @1600000000 data.txt`
	rep, output = runIn(t, p, cwd, out, "sh", "-c", script)
	if rep.ExitCode != 0 {
		t.Fatalf("exit %d: %s", rep.ExitCode, output)
	}
	f = rep.Files
	if !slices.Contains(f.Modified, filepath.Join(cwd, "data.txt")) {
		t.Errorf("modified = %v, want the same-size rewrite of data.txt", f.Modified)
	}
	want := base64.StdEncoding.EncodeToString([]byte("/tmp/caf\xe9"))
	if !slices.ContainsFunc(f.Details, func(c report.FileChange) bool { return c.PathB64 == want }) {
		t.Errorf("no detail keeps the non-UTF-8 name in path_b64")
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(out, "tmp", "sparse"), &st); err != nil {
		t.Fatalf("the sparse file was not copied: %v", err)
	}
	if st.Size != 200<<20 || st.Blocks*512 > 1<<20 {
		t.Errorf("sparse copy: size %d, %d bytes allocated; want 200 MiB apparent and no data", st.Size, st.Blocks*512)
	}
}

// TestChangesCopyStopsOnSignal: a signal while --changes copies ends the copy at once, and the report
// says how far it got.
func TestChangesCopyStopsOnSignal(t *testing.T) {
	testutil.RequireRoot(t, "creates namespaces, cgroups and mounts")
	p := plan(t)
	p.Limits.MemoryBytes, p.Limits.DiskBytes = 768<<20, 512<<20
	out := filepath.Join(t.TempDir(), "changes")
	big := filepath.Join(out, "tmp", "big")
	sigs := make(chan os.Signal, 1)
	// The file appears in DIR only once the copy has begun, after the command exited: watched for until
	// the run returns, however long the command takes to write it (minutes in an emulated VM).
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Microsecond):
			}
			if _, err := os.Lstat(big); err == nil {
				sigs <- unix.SIGINT
				return
			}
		}
	}()
	var output bytes.Buffer
	rep, err := runValid(t, context.Background(), Options{
		Plan: p, Args: []string{"sh", "-c", "head -c 400M /dev/zero | tr '\\0' x > /tmp/big"}, Cwd: t.TempDir(),
		Stdout: &output, Stderr: &output, StateRoot: testutil.StateRoot(t), Changes: out, Signals: sigs,
	})
	if err != nil {
		t.Fatalf("Run: %v (%s)", err, output.String())
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "copying stopped by a signal") }) {
		t.Errorf("notes = %q, want the copy stopped by the signal", rep.Notes)
	}
	if _, err := os.Lstat(big); err == nil {
		t.Errorf("the partly copied file was left in DIR")
	}
}

// TestGlobInWhole: a probe reads a directory whole; one with more entries than the bound is an error
// (the run is then incomplete), not a listing cut silently where a planted hook could hide.
func TestGlobInWhole(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		if err := os.WriteFile(filepath.Join(dir, ".git", "hooks", fmt.Sprintf("n%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	got, err := globIn(root, ".git/hooks/*")
	if err != nil || len(got) != 3000 {
		t.Errorf("globIn: %d names, %v; want all 3000 (more than one read's worth) and no error", len(got), err)
	}
	d, err := root.Open(".git/hooks")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := readAllNames(d, 2999); err == nil {
		t.Errorf("readAllNames past its bound: no error")
	}
}
