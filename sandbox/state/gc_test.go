package state

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestGCNewRunDirs: gc leaves a run dir being created alone while its creator lives, however old the
// directory looks (a creator stalled before it made its lock), and removes one whose creator is gone,
// or that names none, once it is older than a second.
func TestGCNewRunDirs(t *testing.T) {
	root := t.TempDir()
	runs := RunsDir(root)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		kept bool
	}{
		{newPrefix + strconv.Itoa(os.Getpid()) + "-live", true},
		{newPrefix + strconv.Itoa(dead.Process.Pid) + "-dead", false},
		{newPrefix + "nopid", false},
	}
	old := time.Now().Add(-time.Hour)
	for _, c := range cases {
		dir := filepath.Join(runs, c.name)
		if err := os.MkdirAll(filepath.Join(dir, "layer"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(dir, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := GC(root); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		_, err := os.Stat(filepath.Join(runs, c.name, "layer"))
		if kept := err == nil; kept != c.kept {
			t.Errorf("%s: kept %v, want %v (%v)", c.name, kept, c.kept, err)
		}
	}
}
