package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
)

// TestCheckStateShares: a writable share that contains the state root or lies in it is refused, by
// path, through a symlink or a bind mount of the same directory, also before the state root exists.
func TestCheckStateShares(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	state := filepath.Join(home, ".local", "state", "sbx")
	fresh := filepath.Join(home, "new", "sbx") // not made yet
	for _, d := range []string{filepath.Join(state, "cache"), filepath.Join(base, "other"), filepath.Join(base, "alias")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(home, ".local"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	bound := false
	if unix.Mount(home, filepath.Join(base, "alias"), "", unix.MS_BIND, "") == nil {
		bound = true
		t.Cleanup(func() { unix.Unmount(filepath.Join(base, "alias"), unix.MNT_DETACH) })
	}
	for _, tc := range []struct {
		name, root, share string
		writable, refused bool
	}{
		{"the state root", state, state, true, true},
		{"its parent", state, filepath.Join(home, ".local"), true, true},
		{"the home", state, home, true, true},
		{"/", state, "/", true, true},
		{"its cache", state, filepath.Join(state, "cache"), true, true},
		{"a symlink to its parent", state, filepath.Join(base, "link"), true, true},
		{"a path through a symlink", state, filepath.Join(base, "link", "state", "sbx", "cache"), true, true},
		{"a bind mount of the home", state, filepath.Join(base, "alias"), true, true},
		{"a path in a bind mount of it", state, filepath.Join(base, "alias", ".local", "state", "sbx", "cache"), true, true},
		{"read-only", state, home, false, false},
		{"a sibling", state, filepath.Join(base, "other"), true, false},
		{"a state root not made yet", fresh, home, true, true},
		{"beside a state root not made yet", fresh, filepath.Join(base, "other"), true, false},
		{"a path not made yet in it", state, filepath.Join(state, "new", "dir"), true, true},
		{"a path not made yet beside it", state, filepath.Join(base, "other", "new"), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !bound && strings.HasPrefix(tc.share, filepath.Join(base, "alias")) {
				t.Skip("no bind mount (not root)")
			}
			err := CheckShares(tc.root, []policy.Share{{Host: tc.share, Sandbox: "/x", Writable: tc.writable}})
			if got := errors.Is(err, ErrShare); got != tc.refused {
				t.Errorf("share %s, state root %s: %v, want refused %v", tc.share, tc.root, err, tc.refused)
			}
		})
	}
}
