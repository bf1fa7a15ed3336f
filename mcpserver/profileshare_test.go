package mcpserver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProfileInShare: a server refuses to start when a profile file it reads again on every call (the
// profile's own, or one it extends) lies in a share that an offered profile makes writable: the command
// of one call could rewrite the profile of the next (a wider network, the host's home shared
// read-write), which no caller may do. A read-only share, or a profile outside the share, is fine.
func TestProfileInShare(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string // relative to the test's dir; "DIR" in a text is that dir
		offer []string
		want  bool // refused
	}{
		{"its own file in its writable share", map[string]string{
			"proj/p.yaml": "version: 1\nname: p\nextends: default\nfilesystem:\n  share:\n    - {host: DIR/proj, mode: rw}\n",
		}, []string{"proj/p.yaml"}, true},
		{"the file it extends in its writable share", map[string]string{
			"p.yaml":         "version: 1\nname: p\nextends: ./proj/base.yaml\nfilesystem:\n  share:\n    - {host: DIR/proj, mode: rw}\n",
			"proj/base.yaml": "version: 1\nextends: default\n",
		}, []string{"p.yaml"}, true},
		{"in another offered profile's writable share", map[string]string{
			"w.yaml":      "version: 1\nname: w\nextends: default\nfilesystem:\n  share:\n    - {host: DIR/proj, mode: rw}\n",
			"proj/q.yaml": "version: 1\nname: q\nextends: default\n",
		}, []string{"w.yaml", "proj/q.yaml"}, true},
		{"a writable share beside it", map[string]string{
			"p.yaml":     "version: 1\nname: p\nextends: default\nfilesystem:\n  share:\n    - {host: DIR/proj, mode: rw}\n",
			"proj/x.txt": "",
		}, []string{"p.yaml"}, false},
		{"a read-only share over it", map[string]string{
			"proj/p.yaml": "version: 1\nname: p\nextends: default\nfilesystem:\n  share:\n    - {host: DIR/proj, mode: ro}\n",
		}, []string{"proj/p.yaml", "default"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range c.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				text = strings.ReplaceAll(text, "DIR", dir)
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var offer []string
			for _, o := range c.offer {
				if o != "default" {
					o = filepath.Join(dir, o)
				}
				offer = append(offer, o)
			}
			s, err := New(Config{Profiles: offer, Workspaces: []string{dir}, Env: []string{"PATH=/usr/bin:/bin"}})
			if err == nil {
				s.Close()
			}
			if got := errors.Is(err, ErrProfileInShare); got != c.want {
				t.Errorf("New: %v; refused for a profile in a writable share: %v, want %v", err, got, c.want)
			}
		})
	}
}
