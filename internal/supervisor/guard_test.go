package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGuard: a writable bind's source is refused when, as opened (links followed), it is the guarded
// directory, one it lies in, or anything inside it; a read-only bind and an unrelated source pass.
func TestGuard(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "home", "state")
	for _, d := range []string{filepath.Join(state, "cache"), filepath.Join(base, "proj", "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(state, "cache", "filter"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"to-state": state, "to-cache": filepath.Join(state, "cache"),
		"to-filter": filepath.Join(state, "cache", "filter"), "to-home": filepath.Join(base, "home")}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(base, "proj", name)); err != nil {
			t.Fatal(err)
		}
	}
	g := guardOf(t, state)
	for _, tc := range []struct {
		source   string
		readOnly bool
		refused  bool
	}{
		{"proj/sub", false, false},
		{"proj/to-state", false, true},
		{"proj/to-cache", false, true},
		{"proj/to-filter", false, true},
		{"proj/to-home", false, true},
		{"proj/to-state", true, false},
		{"home/state/cache/filter", false, true},
	} {
		m := Mount{Source: filepath.Join(base, tc.source), Type: "bind", Flags: unix.MS_BIND | unix.MS_REC}
		if tc.readOnly {
			m.Flags |= unix.MS_RDONLY
		}
		fd, err := OpenSource(m, g)
		if err == nil {
			unix.Close(fd)
		}
		if refused := errors.Is(err, ErrReachesGuarded); refused != tc.refused || (err != nil && !refused) {
			t.Errorf("%s (read-only %v): %v, want refused %v", tc.source, tc.readOnly, err, tc.refused)
		}
	}
}

// guardOf is the Guard of dir: its identity and those of the directories above it up to /.
func guardOf(t *testing.T, dir string) *Guard {
	t.Helper()
	g := &Guard{}
	for d := dir; ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			t.Fatal(err)
		}
		id := FileID{st.Dev, st.Ino}
		if d == dir {
			g.Root = &id
		}
		g.Above = append(g.Above, id)
		if d == "/" {
			return g
		}
	}
}

// TestOpenSourceNoLinks: a share's source (Mount.NoLinks) is not opened through a link, whichever part
// of its path the link is; other binds follow links as mount(2) does.
func TestOpenSourceNoLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("open_tree(OPEN_TREE_CLONE) needs root")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "real", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path    string
		noLinks bool
		wantErr error
	}{
		{"real/sub", true, nil},
		{"link", true, unix.ELOOP},
		{"link/sub", true, unix.ELOOP},
		{"link/sub", false, nil},
	} {
		fd, err := OpenSource(Mount{Source: filepath.Join(dir, tc.path), Flags: unix.MS_RDONLY, NoLinks: tc.noLinks}, nil)
		if fd >= 0 {
			unix.Close(fd)
		}
		if !errors.Is(err, tc.wantErr) && (err != nil || tc.wantErr != nil) {
			t.Errorf("OpenSource(%s, NoLinks %v) = %v, want %v", tc.path, tc.noLinks, err, tc.wantErr)
		}
	}
}
