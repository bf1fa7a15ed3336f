package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// tree builds root/{dir/file, abs -> outside, rel -> dir} and an outside directory that stands for the
// host.
func tree(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root + "/dir", outside + "/dir"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{root + "/dir/file", outside + "/dir/file"} {
		if err := os.WriteFile(f, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, root+"/abs"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("dir", root+"/rel"); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

func TestOpenFollowsNoLink(t *testing.T) {
	root, _ := tree(t)
	r, err := OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tests := []struct {
		rel  string
		want error // nil: opens
	}{
		{"dir/file", nil},
		{"/dir/file", nil},
		{"../../dir/file", nil}, // ".." stops at the root: root/dir/file
		{"abs/dir/file", unix.ELOOP},
		{"rel/file", unix.ELOOP},
		{"abs", unix.ELOOP},
	}
	for _, tt := range tests {
		f, err := Open(r, tt.rel, unix.O_RDONLY, 0)
		if !errors.Is(err, tt.want) && !(tt.want == nil && err == nil) {
			t.Errorf("Open(%q) = %v, want %v", tt.rel, err, tt.want)
		}
		if err == nil {
			p, _ := Path(f)
			if p != root+"/dir/file" {
				t.Errorf("Open(%q) opened %s", tt.rel, p)
			}
			f.Close()
		}
	}
}

func TestMkdirAllRefusesLinks(t *testing.T) {
	root, outside := tree(t)
	r, err := OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var made []string
	d, err := MkdirAll(r, "dir/a/b", 0o755, func(_ *os.File, rel string) error { made = append(made, rel); return nil })
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if len(made) != 2 || made[0] != "dir/a" || made[1] != "dir/a/b" {
		t.Errorf("made = %q, want [dir/a dir/a/b]", made)
	}
	for _, rel := range []string{"abs/new", "rel/new", "abs"} {
		if _, err := MkdirAll(r, rel, 0o755, nil); !errors.Is(err, ErrNotDir) {
			t.Errorf("MkdirAll(%q) = %v, want ErrNotDir", rel, err)
		}
	}
	if _, err := os.Stat(outside + "/new"); err == nil {
		t.Errorf("a directory was made outside the root")
	}
}

func TestResolveIn(t *testing.T) {
	root, _ := tree(t)
	tests := []struct{ in, want string }{
		{"/abs/dir", ""}, // absolute link: resolved inside root, where the target does not exist
		{"/rel/../dir", "/dir"},
		{"/../../dir", "/dir"},
		{"/rel", "/dir"},
	}
	for _, tt := range tests {
		got, err := ResolveIn(root, tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("ResolveIn(%q) = %q, want an error (the link's target is outside)", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ResolveIn(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestOpenNoLinks(t *testing.T) {
	root, _ := tree(t)
	if f, err := OpenNoLinks(root + "/dir"); err != nil {
		t.Errorf("OpenNoLinks(dir) = %v", err)
	} else {
		f.Close()
	}
	for _, p := range []string{root + "/abs/dir", root + "/rel"} {
		if _, err := OpenNoLinks(p); !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
			t.Errorf("OpenNoLinks(%s) = %v, want ELOOP or ENOTDIR", p, err)
		}
	}
}
