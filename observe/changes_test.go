package observe

import (
	"encoding/base64"
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

// testOverlay is a real overlay mount on a private tmpfs, prepared the way sbx prepares its rootfs.
type testOverlay struct {
	lower, upper, merged string
}

// newTestOverlay builds lower with a few files, pre-creates an opaque /tmp and a whiteout for
// /etc/shadow in upper (what sbx does before the command runs), and mounts the overlay. Everything is
// unmounted in t.Cleanup.
func newTestOverlay(t testing.TB) *testOverlay {
	t.Helper()
	return newTestOverlayOpts(t, "")
}

// newTestOverlayOpts is newTestOverlay with more mount options (",metacopy=on").
func newTestOverlayOpts(t testing.TB, more string) *testOverlay {
	t.Helper()
	testutil.RequireRoot(t, "creates pid and net namespaces, reads other processes' /proc entries")
	base := t.TempDir()
	// A tmpfs of its own: the upper layer needs a filesystem with trusted xattrs, and the unmount in
	// Cleanup then removes every trace.
	mount(t, "tmpfs", base, "tmpfs", "size=16m")
	o := &testOverlay{
		lower: filepath.Join(base, "lower"), upper: filepath.Join(base, "upper"),
		merged: filepath.Join(base, "merged"),
	}
	work := filepath.Join(base, "work")
	for _, f := range []string{"etc/keep.conf", "etc/modify.conf", "etc/delete.conf", "etc/shadow",
		"tmp/hostfile", "usr/bin/tool"} {
		writeFile(t, filepath.Join(o.lower, f), "lower "+f+"\n")
	}
	for _, d := range []string{o.upper + "/tmp", o.upper + "/etc", work, o.merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Setxattr(o.upper+"/tmp", "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(o.upper+"/etc/shadow", unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	opts := "lowerdir=" + o.lower + ",upperdir=" + o.upper + ",workdir=" + work + more
	mount(t, "overlay", o.merged, "overlay", opts)
	return o
}

func mount(t testing.TB, source, target, fstype, data string) {
	t.Helper()
	if err := unix.Mount(source, target, fstype, 0, data); err != nil {
		t.Fatalf("mount %s on %s: %v", fstype, target, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(target, 0); err != nil {
			t.Errorf("unmount %s: %v", target, err)
		}
	})
}

func writeFile(t testing.TB, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestChanges modifies the tree through the overlay and checks Changes and DiffChanges.
func TestChanges(t *testing.T) {
	o := newTestOverlay(t)
	before, err := Changes(o.upper, o.lower)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("before: only sbx's preparation", func(t *testing.T) {
		// /tmp exists in lower: the opaque dir replaces it and is not listed; the whiteout is a deletion.
		if got := paths(before.Created); len(got) != 0 {
			t.Errorf("created = %v, want none", got)
		}
		if got := paths(before.Deleted); !slices.Equal(got, []string{"/etc/shadow"}) {
			t.Errorf("deleted = %v, want [/etc/shadow]", got)
		}
	})

	m := o.merged
	writeFile(t, m+"/tmp/a/b/c.txt", "nested\n")
	writeFile(t, m+"/etc/new.conf", "new\n")
	writeFile(t, m+"/etc/modify.conf", "modified, longer\n")
	writeFile(t, m+"/etc/shadow", "recreated after being hidden\n")
	mustOK(t, os.Symlink("/etc/new.conf", m+"/tmp/link"))
	mustOK(t, os.Remove(m+"/etc/delete.conf"))
	mustOK(t, os.Remove(m+"/usr/bin/tool"))
	after, err := Changes(o.upper, o.lower)
	if err != nil {
		t.Fatal(err)
	}
	created, modified, deleted := DiffChanges(before, after)

	tests := []struct {
		name string
		got  []report.FileChange
		want []string // "path kind size"
	}{
		{"created", created, []string{"/etc/new.conf file 4", "/etc/shadow file 29", "/tmp/a dir 0",
			"/tmp/a/b dir 0", "/tmp/a/b/c.txt file 7", "/tmp/link symlink 13"}},
		{"modified", modified, []string{"/etc/modify.conf file 17"}},
		{"deleted", deleted, []string{"/etc/delete.conf file 22", "/usr/bin/tool file 19"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, c := range tt.got {
				got = append(got, c.Path+" "+c.Kind+" "+itoa(int(c.Size)))
				if c.Change != tt.name {
					t.Errorf("%s: Change = %q, want %q", c.Path, c.Change, tt.name)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}

	t.Run("copy", func(t *testing.T) {
		dest := filepath.Join(t.TempDir(), "changes")
		all := slices.Concat(created, modified, deleted)
		mustOK(t, os.Mkdir(dest, 0o755))
		cp := &Copier{Budget: 1 << 20}
		mustOK(t, cp.Copy(openRoot(t, o.upper), openRoot(t, dest), all))
		if len(cp.Problems) > 0 {
			t.Errorf("problems: %q", cp.Problems)
		}
		files := []struct{ path, want string }{
			{"tmp/a/b/c.txt", "nested\n"},
			{"etc/modify.conf", "modified, longer\n"},
			{"DELETED.txt", "/etc/delete.conf\n/usr/bin/tool\n"},
		}
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(dest, f.path))
			if err != nil || string(b) != f.want {
				t.Errorf("%s: got %q, %v; want %q", f.path, b, err, f.want)
			}
		}
		if l, err := os.Readlink(filepath.Join(dest, "tmp/link")); err != nil || l != "/etc/new.conf" {
			t.Errorf("tmp/link: got %q, %v; want a symlink to /etc/new.conf", l, err)
		}
	})
}

// TestDiffChanges covers the classification rules on synthetic readings.
func TestDiffChanges(t *testing.T) {
	f := func(p, kind, change string, size int64) report.FileChange {
		return report.FileChange{Path: p, Kind: kind, Change: change, Size: size}
	}
	tests := []struct {
		name                              string
		before, after                     FileChanges
		wantCreated, wantMod, wantDeleted []string
	}{
		{
			name:   "unchanged entries left out",
			before: FileChanges{Created: []report.FileChange{f("/run/x", "file", Created, 3)}},
			after:  FileChanges{Created: []report.FileChange{f("/run/x", "file", Created, 3)}},
		},
		{
			name:    "sbx's file rewritten is modified",
			before:  FileChanges{Created: []report.FileChange{f("/run/x", "file", Created, 3)}},
			after:   FileChanges{Created: []report.FileChange{f("/run/x", "file", Created, 9)}},
			wantMod: []string{"/run/x"},
		},
		{
			name:        "sbx's file removed is deleted",
			before:      FileChanges{Created: []report.FileChange{f("/run/x", "file", Created, 3)}},
			wantDeleted: []string{"/run/x"},
		},
		{
			name:   "pre-existing dir with a new child is not modified",
			before: FileChanges{Created: []report.FileChange{f("/run", "dir", Created, 0)}},
			after: FileChanges{Created: []report.FileChange{
				{Path: "/run", Kind: "dir", Change: Created, ModTime: timeAt(5)},
				f("/run/new", "file", Created, 1)}},
			wantCreated: []string{"/run/new"},
		},
		{
			name:        "hidden path recreated is created",
			before:      FileChanges{Deleted: []report.FileChange{f("/etc/shadow", "file", Deleted, 10)}},
			after:       FileChanges{Modified: []report.FileChange{f("/etc/shadow", "file", Modified, 2)}},
			wantCreated: []string{"/etc/shadow"},
		},
		{
			name:   "whiteout present before is not a deletion",
			before: FileChanges{Deleted: []report.FileChange{f("/etc/shadow", "file", Deleted, 10)}},
			after:  FileChanges{Deleted: []report.FileChange{f("/etc/shadow", "file", Deleted, 10)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, m, d := DiffChanges(&tt.before, &tt.after)
			for _, x := range []struct {
				what      string
				got, want []string
			}{{"created", paths(c), tt.wantCreated}, {"modified", paths(m), tt.wantMod},
				{"deleted", paths(d), tt.wantDeleted}} {
				if !slices.Equal(x.got, x.want) {
					t.Errorf("%s = %v, want %v", x.what, x.got, x.want)
				}
			}
		})
	}
}

func paths(cs []report.FileChange) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Path)
	}
	return out
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func timeAt(sec int64) time.Time { return time.Unix(sec, 0) }

// TestChangesSinceBounds: the lists keep their first MaxEntries, the totals count everything.
func TestChangesSinceBounds(t *testing.T) {
	upper := t.TempDir()
	for i := range 50 {
		writeFile(t, filepath.Join(upper, "d", itoa(i)), "")
	}
	fc, err := ChangesSince(nil, upper, "", Limits{MaxEntries: 10})
	mustOK(t, err)
	if len(fc.Created) != 10 || fc.Total.Created != 51 || !fc.Truncated {
		t.Errorf("kept %d, total %d, truncated %v; want 10, 51, true", len(fc.Created), fc.Total.Created, fc.Truncated)
	}
}

// TestChangesNeverFails: a path longer than PATH_MAX, a tree nested deeper than the walk goes, and a
// name that is not UTF-8 are read or reported as Problems, never an error that loses the rest.
func TestChangesNeverFails(t *testing.T) {
	upper := t.TempDir()
	long := strings.Repeat("l", 250)
	d, err := safefs.OpenRoot(upper)
	mustOK(t, err)
	// The last directory of the walk down, not the first.
	defer func() { d.Close() }()
	for range 20 { // 20 * 251 bytes: beyond PATH_MAX
		mustOK(t, unix.Mkdirat(int(d.Fd()), long, 0o755))
		next, err := safefs.OpenDir(d, long)
		mustOK(t, err)
		d.Close()
		d = next
	}
	fd, err := unix.Openat(int(d.Fd()), "deep-file", unix.O_CREAT|unix.O_WRONLY, 0o644)
	mustOK(t, err)
	unix.Close(fd)
	deep := upper + "/deep"
	mustOK(t, os.MkdirAll(deep+strings.Repeat("/n", maxDepth+2), 0o755))
	bad := "caf\xe9"
	writeFile(t, filepath.Join(upper, bad), "x")

	fc, err := ChangesSince(nil, upper, "", Limits{})
	mustOK(t, err)
	var longFound, badFound bool
	for _, c := range fc.Created {
		longFound = longFound || strings.HasSuffix(c.Path, "/deep-file") && len(c.Path) > unix.PathMax
		if c.Path == "/"+bad {
			got, _ := base64.StdEncoding.DecodeString(c.PathB64)
			badFound = string(got) == "/"+bad
		}
	}
	if !longFound {
		t.Errorf("the file below a path longer than PATH_MAX is missing")
	}
	if !badFound {
		t.Errorf("the non-UTF-8 name has no lossless path_b64")
	}
	if len(fc.Problems) != 1 || !strings.Contains(fc.Problems[0], "nested deeper") {
		t.Errorf("problems = %q, want the too-deep tree", fc.Problems)
	}
}

// TestChangesSameSizeRewrite: a file sbx put in the upper layer (the working directory handed over with
// a chown) rewritten with the same size and its mtime restored is modified; one only touched back is not.
func TestChangesSameSizeRewrite(t *testing.T) {
	for name, opts := range map[string]string{"plain": "", "metacopy": ",metacopy=on"} {
		t.Run(name, func(t *testing.T) {
			o := newTestOverlayOpts(t, opts)
			m := o.merged
			for _, f := range []string{"/etc/keep.conf", "/etc/modify.conf"} {
				mustOK(t, os.Lchown(m+f, 1000, 1000)) // what giveTo does
			}
			before, err := Changes(o.upper, o.lower)
			mustOK(t, err)
			time.Sleep(20 * time.Millisecond) // ctime granularity
			st, err := os.Stat(m + "/etc/modify.conf")
			mustOK(t, err)
			writeFile(t, m+"/etc/modify.conf", strings.Replace("lower etc/modify.conf\n", "lower", "LOWER", 1))
			mustOK(t, os.Chtimes(m+"/etc/modify.conf", st.ModTime(), st.ModTime()))
			st, err = os.Stat(m + "/etc/keep.conf")
			mustOK(t, err)
			mustOK(t, os.Chtimes(m+"/etc/keep.conf", st.ModTime(), st.ModTime()))
			after, err := ChangesSince(before, o.upper, o.lower, Limits{})
			mustOK(t, err)
			if got := paths(after.Modified); !slices.Equal(got, []string{"/etc/modify.conf"}) {
				t.Errorf("modified = %v, want [/etc/modify.conf]", got)
			}
		})
	}
}

// TestChangesLinkNotModified: a new hard link of a lower file (which overlayfs copies up to link it)
// is a created name, and the file it links to is not modified; a write through a link, a chmod or an
// xattr set on a lower file are modifications.
func TestChangesLinkNotModified(t *testing.T) {
	for name, opts := range map[string]string{"plain": "", "metacopy": ",metacopy=on", "index": ",metacopy=on,index=on"} {
		t.Run(name, func(t *testing.T) {
			o := newTestOverlayOpts(t, opts)
			m := o.merged
			before, err := Changes(o.upper, o.lower)
			mustOK(t, err)
			mustOK(t, os.Link(m+"/etc/keep.conf", m+"/etc/keep.link"))
			mustOK(t, os.Link(m+"/etc/modify.conf", m+"/etc/modify.link"))
			f, err := os.OpenFile(m+"/etc/modify.link", os.O_WRONLY|os.O_APPEND, 0)
			mustOK(t, err)
			_, err = f.WriteString("more\n")
			mustOK(t, err)
			mustOK(t, f.Close())
			mustOK(t, os.Chmod(m+"/usr/bin/tool", 0o755))
			// user.* where the upper's file system has them (tmpfs only since 6.6), else trusted.*
			err = unix.Setxattr(m+"/etc/delete.conf", "user.note", []byte("x"), 0)
			if errors.Is(err, unix.EOPNOTSUPP) || os.Getenv("SBX_TEST_TRUSTED_XATTR") != "" {
				err = unix.Setxattr(m+"/etc/delete.conf", "trusted.note", []byte("x"), 0)
			}
			mustOK(t, err)
			after, err := ChangesSince(before, o.upper, o.lower, Limits{})
			mustOK(t, err)
			if got := paths(after.Created); !slices.Equal(got, []string{"/etc/keep.link", "/etc/modify.link"}) {
				t.Errorf("created = %v, want the two links", got)
			}
			if got := paths(after.Modified); !slices.Equal(got, []string{"/etc/delete.conf", "/etc/modify.conf", "/usr/bin/tool"}) {
				t.Errorf("modified = %v, want [/etc/delete.conf /etc/modify.conf /usr/bin/tool]", got)
			}
		})
	}
}

// TestChangesPassesOverUnchanged: a reading after the command passes over the directories of sbx's
// preparation that nothing changed since (FileChanges.Started), and finds exactly what a whole reading
// finds: a decoy written, removed or chmodded in a directory passed over, a name added, a directory
// made below one, a directory changed in the same tick of the clock as the start.
func TestChangesPassesOverUnchanged(t *testing.T) {
	prepare := func(t *testing.T) *testOverlay {
		o := newTestOverlay(t)
		for _, f := range []string{"/root/.aws/credentials", "/root/.ssh/id_rsa", "/root/.config/gh/hosts.yml", "/etc/decoy"} {
			writeFile(t, o.merged+f, "decoy "+f)
		}
		return o
	}
	cases := map[string]struct {
		change func(m string) error
		full   int // directories read whole at most
	}{
		"nothing":      {func(string) error { return nil }, 0},
		"decoy read":   {func(m string) error { _, err := os.ReadFile(m + "/root/.aws/credentials"); return err }, 0},
		"decoy write":  {func(m string) error { return os.WriteFile(m+"/root/.aws/credentials", []byte("stolen!"), 0o644) }, 0},
		"decoy chmod":  {func(m string) error { return os.Chmod(m+"/root/.ssh/id_rsa", 0o600) }, 0},
		"decoy gone":   {func(m string) error { return os.Remove(m + "/root/.config/gh/hosts.yml") }, 1},
		"name added":   {func(m string) error { return os.WriteFile(m+"/root/.ssh/authorized_keys", []byte("k"), 0o644) }, 1},
		"dir below":    {func(m string) error { return os.MkdirAll(m+"/root/.config/gh/x/y", 0o755) }, 3},
		"lower copied": {func(m string) error { return os.WriteFile(m+"/etc/keep.conf", []byte("changed"), 0o644) }, 1},
		"tmp written":  {func(m string) error { return os.WriteFile(m+"/tmp/new", []byte("n"), 0o644) }, 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := prepare(t)
			before, err := Changes(o.upper, o.lower)
			mustOK(t, err)
			if len(before.dirs) < 5 {
				t.Fatalf("the reading kept %d directories, want every one of the preparation", len(before.dirs))
			}
			time.Sleep(30 * time.Millisecond) // past the coarse clock's tick: the preparation is older
			before.Started()
			mustOK(t, tc.change(o.merged))
			got, err := ChangesSince(before, o.upper, o.lower, Limits{})
			mustOK(t, err)
			whole := *before
			whole.start = unix.Timespec{}
			want, err := ChangesSince(&whole, o.upper, o.lower, Limits{})
			mustOK(t, err)
			sameChanges(t, got, want)
			if want.replayed != 0 || got.replayed == 0 || got.read > tc.full {
				t.Errorf("passed over %d, read %d directories whole (a whole reading: %d, %d); want at most %d read",
					got.replayed, got.read, want.replayed, want.read, tc.full)
			}
			if name != "nothing" && name != "decoy read" && len(got.Created)+len(got.Modified)+len(got.Deleted) == 0 {
				t.Errorf("the change was not found")
			}
		})
	}
	// A change in the same tick as the start: the directory's ctime may be the one of the reading, so
	// it is read whole, never passed over. Many rounds: most fall within one tick.
	t.Run("same tick", func(t *testing.T) {
		o := prepare(t)
		for i := range 30 {
			d := o.merged + "/root/.aws/d" + itoa(i)
			mustOK(t, os.Mkdir(d, 0o755))
			before, err := Changes(o.upper, o.lower)
			mustOK(t, err)
			before.Started()
			writeFile(t, d+"/new", "n")
			got, err := ChangesSince(before, o.upper, o.lower, Limits{})
			mustOK(t, err)
			if p := paths(got.Created); !slices.Equal(p, []string{"/root/.aws/d" + itoa(i) + "/new"}) {
				t.Fatalf("round %d: created %v, want the new file", i, p)
			}
		}
	})
	// Without Started (a reading not taken before a command) nothing is passed over.
	t.Run("not started", func(t *testing.T) {
		o := prepare(t)
		before, err := Changes(o.upper, o.lower)
		mustOK(t, err)
		time.Sleep(30 * time.Millisecond)
		got, err := ChangesSince(before, o.upper, o.lower, Limits{})
		mustOK(t, err)
		if got.replayed != 0 {
			t.Errorf("passed over %d directories without a start", got.replayed)
		}
	})
}

func sameChanges(t *testing.T, got, want *FileChanges) {
	t.Helper()
	for _, l := range []struct {
		name      string
		got, want []report.FileChange
	}{{"created", got.Created, want.Created}, {"modified", got.Modified, want.Modified}, {"deleted", got.Deleted, want.Deleted}} {
		if !slices.EqualFunc(l.got, l.want, func(a, b report.FileChange) bool { return a == b }) {
			t.Errorf("%s = %v, a whole reading: %v", l.name, paths(l.got), paths(l.want))
		}
	}
	if !slices.Equal(got.Problems, want.Problems) || !slices.Equal(got.Notes, want.Notes) {
		t.Errorf("problems %q notes %q, a whole reading: %q %q", got.Problems, got.Notes, want.Problems, want.Notes)
	}
}

// TestUnchangedNeedsEarlierTick: a directory is passed over only when its ctime lies strictly before
// the start: one stamped in the start's own tick of the coarse clock may have changed since.
func TestUnchangedNeedsEarlierTick(t *testing.T) {
	start := unix.Timespec{Sec: 100, Nsec: 4000000}
	s := &dirStamp{ino: 7, mtime: unix.Timespec{Sec: 99}, ctime: unix.Timespec{Sec: 100, Nsec: 3999999}}
	w := &walker{prior: map[string]*dirStamp{"/d": s}, start: start}
	st := unix.Stat_t{Mode: unix.S_IFDIR | 0o755, Ino: 7, Mtim: s.mtime, Ctim: s.ctime}
	if w.unchanged("/d", &st) != s {
		t.Errorf("a directory stamped before the start's tick is not passed over")
	}
	for name, f := range map[string]func(*unix.Stat_t){
		"same tick": func(st *unix.Stat_t) { st.Ctim = start },
		"inode":     func(st *unix.Stat_t) { st.Ino = 8 },
		"mtime":     func(st *unix.Stat_t) { st.Mtim.Nsec++ },
		"not a dir": func(st *unix.Stat_t) { st.Mode = unix.S_IFREG | 0o644 },
	} {
		st2 := st
		f(&st2)
		s2 := *s
		s2.ctime = st2.Ctim
		w.prior["/d"] = &s2
		if w.unchanged("/d", &st2) != nil {
			t.Errorf("%s: passed over", name)
		}
	}
}

// BenchmarkChangesSincePrepared reads, after a command that changed nothing, an upper layer holding what
// sbx prepares in a root layer (decoys in 20 directories below a hidden home, whiteouts): whole, and
// passing over what is unchanged since the reading before the start.
func BenchmarkChangesSincePrepared(b *testing.B) {
	o := newTestOverlay(b)
	for i := range 20 {
		writeFile(b, o.merged+"/root/.d"+itoa(i)+"/sub/credentials", "decoy")
	}
	before, err := Changes(o.upper, o.lower)
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	before.Started()
	whole := *before
	whole.start = unix.Timespec{}
	for name, bf := range map[string]*FileChanges{"whole": &whole, "passing-over": before} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := ChangesSince(bf, o.upper, o.lower, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
