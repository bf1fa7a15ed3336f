package observe

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/safefs"
	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/report"
)

// openRoot opens dir as a root to copy from or to, closed with the test.
func openRoot(t *testing.T, dir string) *os.File {
	t.Helper()
	f, err := safefs.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestCopyNeverFollowsLinks: links in the layer, and links that an earlier copy (another layer) left
// in the destination, are never followed; the entry is a Problem and nothing lands outside dest.
func TestCopyNeverFollowsLinks(t *testing.T) {
	base := t.TempDir()
	host := filepath.Join(base, "host") // stands for a host directory the copy must not write into
	src, dest := filepath.Join(base, "upper"), filepath.Join(base, "dest")
	for _, d := range []string{host, src, dest + "/x"} {
		mustOK(t, os.MkdirAll(d, 0o755))
	}
	// What the copy of an earlier layer recreated in dest: x/proj -> host, dir -> x.
	mustOK(t, os.Symlink(host, dest+"/x/proj"))
	mustOK(t, os.Symlink("x", dest+"/dir"))
	mustOK(t, os.Symlink(host, src+"/link"))
	writeFile(t, host+"/secret", "host\n")

	cp := &Copier{Budget: 1 << 20}
	changes := []report.FileChange{
		{Path: "/x/proj/f", Kind: "file", Change: Created},
		{Path: "/dir/proj/f", Kind: "file", Change: Created},
		{Path: "/link/secret", Kind: "file", Change: Created},
	}
	// The later layer's files, at the paths that lead through the links.
	mustOK(t, os.MkdirAll(src+"/x/proj", 0o755))
	writeFile(t, src+"/x/proj/f", "planted\n")
	mustOK(t, os.MkdirAll(src+"/dir/proj", 0o755))
	writeFile(t, src+"/dir/proj/f", "planted\n")
	mustOK(t, cp.Copy(openRoot(t, src), openRoot(t, dest), changes))
	entries, _ := os.ReadDir(host)
	if len(entries) != 1 {
		t.Errorf("host dir holds %d entries, want only its own secret: the copy followed a link", len(entries))
	}
	if _, err := os.Lstat(dest + "/link/secret"); err == nil {
		t.Errorf("the layer's link was followed: dest/link/secret exists")
	}
	if len(cp.Problems) != 3 {
		t.Errorf("problems = %q, want one per refused entry", cp.Problems)
	}
}

// TestCopySparseSpecialBudgetStop: holes stay holes, a FIFO is listed and never opened, the budget
// bounds the data written, and a closed Stop ends the copy at once.
func TestCopySparseSpecialBudgetStop(t *testing.T) {
	base := t.TempDir()
	src, dest := filepath.Join(base, "upper"), filepath.Join(base, "dest")
	mustOK(t, os.MkdirAll(src, 0o755))
	mustOK(t, os.MkdirAll(dest, 0o755))
	f, err := os.Create(src + "/sparse")
	mustOK(t, err)
	_, err = f.WriteAt([]byte("end"), 100<<30) // 100 GiB apparent, one block used
	mustOK(t, err)
	f.Close()
	mustOK(t, unix.Mkfifo(src+"/fifo", 0o644))
	writeFile(t, src+"/big", strings.Repeat("x", 64<<10))
	changes := []report.FileChange{
		{Path: "/sparse", Kind: "file", Change: Created},
		{Path: "/fifo", Kind: "other", Change: Created},
		{Path: "/big", Kind: "file", Change: Created},
	}
	cp := &Copier{Budget: 32 << 10}
	done := make(chan error, 1)
	go func() { done <- cp.Copy(openRoot(t, src), openRoot(t, dest), changes) }()
	select {
	case err := <-done:
		mustOK(t, err)
	case <-time.After(testutil.Scaled(20 * time.Second)):
		t.Fatal("the copy hangs")
	}
	var st unix.Stat_t
	mustOK(t, unix.Stat(dest+"/sparse", &st))
	if st.Size != 100<<30+3 || st.Blocks*512 > 1<<20 {
		t.Errorf("sparse copy: size %d, %d bytes allocated; want 100 GiB apparent and a hole", st.Size, st.Blocks*512)
	}
	if _, err := os.Lstat(dest + "/big"); err == nil {
		t.Errorf("a file beyond the budget was copied")
	}
	if _, err := os.Lstat(dest + "/fifo"); err == nil {
		t.Errorf("the fifo was copied")
	}
	if !slices.ContainsFunc(cp.Skipped, func(s string) bool { return strings.HasPrefix(s, "/fifo: fifo") }) ||
		!slices.ContainsFunc(cp.Skipped, func(s string) bool { return strings.HasPrefix(s, "/big: ") }) {
		t.Errorf("skipped = %q, want the fifo and the big file", cp.Skipped)
	}

	stop := make(chan struct{})
	close(stop)
	cp = &Copier{Budget: 1 << 30, Stop: stop}
	dest2 := filepath.Join(base, "dest2")
	mustOK(t, os.Mkdir(dest2, 0o755))
	if err := cp.Copy(openRoot(t, src), openRoot(t, dest2), changes); !errors.Is(err, ErrCopyStopped) {
		t.Errorf("stopped copy: err = %v, want ErrCopyStopped", err)
	}
}

// TestCopyListsOneLinePerName: a name with a newline (a FIFO the command named so) adds no line of its
// own to NOT-COPIED.txt or DELETED.txt: such a line is written quoted. It added "/etc/passwd" as a line.
func TestCopyListsOneLinePerName(t *testing.T) {
	base := t.TempDir()
	src, dest := filepath.Join(base, "upper"), filepath.Join(base, "dest")
	mustOK(t, os.MkdirAll(src, 0o755))
	mustOK(t, os.MkdirAll(dest, 0o755))
	evil := "x\n/etc/passwd" // a directory "x\n" holding etc/passwd
	mustOK(t, os.MkdirAll(src+"/x\n/etc", 0o755))
	mustOK(t, unix.Mkfifo(src+"/"+evil, 0o644))
	cp := &Copier{Budget: 1 << 20}
	mustOK(t, cp.Copy(openRoot(t, src), openRoot(t, dest), []report.FileChange{
		{Path: "/" + evil, Kind: "other", Change: Created},
		{Path: "/" + evil, Kind: "file", Change: Deleted},
		{Path: "/plain", Kind: "file", Change: Deleted},
	}))
	mustOK(t, cp.WriteSkipped(openRoot(t, dest)))
	for _, name := range []string{"NOT-COPIED.txt", "DELETED.txt"} {
		b, err := os.ReadFile(filepath.Join(dest, name))
		mustOK(t, err)
		for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			if strings.HasPrefix(line, "/etc/passwd") {
				t.Errorf("%s has a line of the name's own: %q", name, b)
			}
		}
		if !strings.Contains(string(b), `"/x\n/etc/passwd`) {
			t.Errorf("%s = %q, want the name quoted", name, b)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "DELETED.txt")); !strings.Contains(string(b), "\n/plain\n") {
		t.Errorf("DELETED.txt = %q, want a plain name as it is", b)
	}
}
