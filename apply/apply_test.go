package apply

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
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

// overlay mounts an overlay over host as sbx does for the working directory (metacopy, hence redirects
// for renamed directories) and returns its upper and merged directories; unmounted with the test.
func overlay(t *testing.T, host string) (upper, merged string) {
	t.Helper()
	testutil.RequireRoot(t, "mounting an overlay")
	d := t.TempDir()
	upper, work, merged := filepath.Join(d, "upper"), filepath.Join(d, "work"), filepath.Join(d, "merged")
	for _, p := range []string{upper, work, merged} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := "lowerdir=" + host + ",upperdir=" + upper + ",workdir=" + work + ",metacopy=on,redirect_dir=on"
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Skipf("overlay with metacopy: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })
	return upper, merged
}

// start is the run's start: past the slack after the host's set-up, whose entries are older.
func start() time.Time {
	time.Sleep(2 * slack)
	return time.Now()
}

func sh(t *testing.T, dir, script string) {
	t.Helper()
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

func roots(t *testing.T, dirs ...string) []*os.File {
	var out []*os.File
	for _, d := range dirs {
		f, err := safefs.OpenRoot(d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		out = append(out, f)
	}
	return out
}

// tree lists a directory's entries with kind, mode, size, content digest and link target: what a round
// trip must keep.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		line := rel + " " + fi.Mode().String()
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			line += fmt.Sprintf(" %x %d", sha256.Sum256(b), len(b))
		}
		out = append(out, line)
		return nil
	})
	return out
}

// TestRoundTrip: what a command does in the sandbox's view of the working directory is what the host's
// working directory holds after Apply: files and directories created, modified, deleted and renamed,
// modes, symlinks (as links), hard links, sparse and large files, odd names, a directory emptied and
// remade; set-id bits, FIFOs are not applied and are said to be withheld.
func TestRoundTrip(t *testing.T) {
	host := t.TempDir()
	sh(t, host, `
		mkdir -p keep sub/deep gone/inner renamed-dir remade
		echo keep > keep/a; echo old > sub/b; echo x > sub/deep/c; echo y > gone/inner/d
		echo r > renamed-dir/f; echo old1 > remade/one; echo old2 > remade/two
		echo m > modeonly; chmod 644 modeonly; echo f > file-to-rename; ln -s keep/a oldlink
		echo linked > hl1
	`)
	upper, merged := overlay(t, host)
	since := start()
	sh(t, merged, `
		echo new > new.txt; echo changed > sub/b; rm -r gone; mv renamed-dir moved-dir
		mv file-to-rename renamed-file; chmod 600 modeonly; ln -sf sub/b oldlink; ln -s /etc/passwd abs
		rm -r remade; mkdir remade; echo fresh > remade/three
		mkdir -p newdir/x; echo n > newdir/x/y
		ln hl1 hl2
		truncate -s 64M sparse; echo tail >> sparse
		head -c 3000000 /dev/urandom > large
		printf 'nl' > "$(printf 'a\nb')"; printf 'bad' > "$(printf 'x\377y')"
		cp /bin/true setid; chmod 4755 setid
		mkfifo fifo
	`)
	want := tree(t, merged)
	r := roots(t, upper, merged, host)
	res := Apply(Options{Upper: r[0], View: r[1], Host: r[2], Since: since, Chown: true})
	if res.Refused != "" || len(res.Problems) > 0 || len(res.Conflicts) > 0 {
		t.Fatalf("Apply: refused %q, problems %q, conflicts %+v", res.Refused, res.Problems, res.Conflicts)
	}
	unix.Unmount(filepath.Dir(upper)+"/merged", unix.MNT_DETACH) // the host is read without the overlay
	got := tree(t, host)
	// What is never applied: set-id bits (the file arrives without them), the FIFO.
	want = slices.DeleteFunc(want, func(l string) bool { return strings.HasPrefix(l, "fifo ") })
	for i, l := range want {
		if strings.HasPrefix(l, "setid ") {
			want[i] = strings.Replace(l, "urwxr-xr-x", "-rwxr-xr-x", 1)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("host after Apply:\n%s\nwant the sandbox's view:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, w := range []string{"/setid", "/fifo"} {
		if !slices.ContainsFunc(res.Withheld, func(e report.ApplyEntry) bool { return e.Path == w }) {
			t.Errorf("withheld lacks %s: %+v", w, res.Withheld)
		}
	}
	var a, b unix.Stat_t
	unix.Lstat(filepath.Join(host, "hl1"), &a)
	unix.Lstat(filepath.Join(host, "hl2"), &b)
	if a.Ino != b.Ino {
		t.Errorf("hl1 and hl2 are two files on the host, want one with two names")
	}
	var sp unix.Stat_t
	unix.Stat(filepath.Join(host, "sparse"), &sp)
	if sp.Blocks*512 > 1<<20 {
		t.Errorf("sparse file takes %d bytes on the host: its hole was written", sp.Blocks*512)
	}
	if ents, _ := os.ReadDir(host); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), TempPrefix) }) {
		t.Errorf("a temporary file was left: %v", ents)
	}
}

// TestConflict: a host file changed during the run keeps the host's content; the run's change of it is
// a conflict; a file the host created where the run created one too is one as well; the rest applies.
func TestConflict(t *testing.T) {
	host := t.TempDir()
	sh(t, host, `echo host > both; echo host > del; echo a > other`)
	upper, merged := overlay(t, host)
	since := start()
	sh(t, merged, `echo run > both; rm del; echo run > other; echo run > created`)
	sh(t, host, `echo host-during-run > both; echo host-during-run > del; echo host > created`)
	r := roots(t, upper, merged, host)
	res := Apply(Options{Upper: r[0], View: r[1], Host: r[2], Since: since})
	for _, c := range []string{"/both", "/del", "/created"} {
		if !slices.ContainsFunc(res.Conflicts, func(x Conflict) bool { return x.Path == c }) {
			t.Errorf("conflicts lack %s: %+v", c, res.Conflicts)
		}
	}
	for name, want := range map[string]string{"both": "host-during-run\n", "del": "host-during-run\n", "created": "host\n", "other": "run\n"} {
		if b, _ := os.ReadFile(filepath.Join(host, name)); !bytes.Equal(b, []byte(want)) {
			t.Errorf("%s on the host: %q, want %q", name, b, want)
		}
	}
}

// TestNoLinksFollowed: a host directory replaced by a link to outside the working directory during the
// run is not written through: the entry below it is a problem, and outside stays untouched.
func TestNoLinksFollowed(t *testing.T) {
	host, outside := t.TempDir(), t.TempDir()
	sh(t, host, `mkdir d; echo a > d/f`)
	upper, merged := overlay(t, host)
	since := start()
	sh(t, merged, `echo run > d/f; echo new > d/g`)
	sh(t, host, "mv d d.host; ln -s "+outside+" d")
	r := roots(t, upper, merged, host)
	res := Apply(Options{Upper: r[0], View: r[1], Host: r[2], Since: since})
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("written through a host link: %v", ents)
	}
	if len(res.Problems) == 0 && len(res.Conflicts) == 0 {
		t.Errorf("no problem or conflict for entries below a host link: %+v", res)
	}
}

// TestOwn: entries sbx put in the layer itself (a hidden path's whiteout) are never applied.
func TestOwn(t *testing.T) {
	host := t.TempDir()
	sh(t, host, `echo secret > .env; echo a > a`)
	upper, merged := overlay(t, host)
	since := start()
	if err := unix.Mknod(filepath.Join(upper, ".env"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	sh(t, merged, `echo b > a`)
	r := roots(t, upper, merged, host)
	res := Apply(Options{Upper: r[0], View: r[1], Host: r[2], Since: since,
		Own: func(rel string, st *unix.Stat_t) bool { return rel == "/.env" }})
	if b, _ := os.ReadFile(filepath.Join(host, ".env")); string(b) != "secret\n" {
		t.Errorf(".env on the host: %q: sbx's own whiteout was applied", b)
	}
	if b, _ := os.ReadFile(filepath.Join(host, "a")); string(b) != "b\n" || res.Entries != 1 {
		t.Errorf("a on the host: %q, %d entries applied", b, res.Entries)
	}
}

// BenchmarkApply10000 applies 10,000 new files (the bench's "10,000 files written"). Compare with the
// host's own creation of as many files on the same file system (seq 10000 | xargs touch): apply's cost
// is the host's file creation.
func BenchmarkApply10000(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		testutil.RequireRoot(b, "mounting an overlay")
		host := b.TempDir()
		d := b.TempDir()
		upper, work, merged := filepath.Join(d, "upper"), filepath.Join(d, "work"), filepath.Join(d, "merged")
		for _, p := range []string{upper, work, merged} {
			os.Mkdir(p, 0o755)
		}
		if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+host+",upperdir="+upper+",workdir="+work+",metacopy=on"); err != nil {
			b.Skip(err)
		}
		cmd := exec.Command("sh", "-c", "mkdir w; cd w; seq 10000 | xargs touch")
		cmd.Dir = merged
		cmd.Run()
		since := time.Now()
		var fs []*os.File
		for _, p := range []string{upper, merged, host} {
			f, _ := safefs.OpenRoot(p)
			fs = append(fs, f)
		}
		b.StartTimer()
		res := Apply(Options{Upper: fs[0], View: fs[1], Host: fs[2], Since: since, Chown: true})
		b.StopTimer()
		if res.Entries != 10001 {
			b.Fatalf("%d entries applied: %+v", res.Entries, res.Problems)
		}
		for _, f := range fs {
			f.Close()
		}
		unix.Unmount(merged, unix.MNT_DETACH)
		b.StartTimer()
	}
}

// TestCleanTemps: what a kill left under a temporary name in a journaled directory is removed (files and
// links, never followed), and nothing else.
func TestCleanTemps(t *testing.T) {
	host, outside := t.TempDir(), t.TempDir()
	sh(t, host, "mkdir d; echo x > d/"+TempPrefix+"a; ln -s "+outside+" d/"+TempPrefix+"b; echo keep > d/keep; mkdir d/"+TempPrefix+"dir")
	sh(t, outside, "echo o > f")
	r := roots(t, host)
	n, err := CleanTemps(r[0], []string{"d", "missing"})
	if err != nil || n != 2 {
		t.Errorf("CleanTemps: %d, %v; want 2 removed", n, err)
	}
	for _, p := range []string{"d/keep", "d/" + TempPrefix + "dir"} {
		if _, err := os.Lstat(filepath.Join(host, p)); err != nil {
			t.Errorf("%s removed", p)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "f")); err != nil {
		t.Errorf("followed the link: %v", err)
	}
}
