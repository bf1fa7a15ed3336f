package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/policy"
)

func TestHiddenRepoNote(t *testing.T) {
	base := t.TempDir()
	mk := func(dirs ...string) {
		for _, d := range dirs {
			if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("home/u/repo/.git", "home/u/repo/src/pkg", "home/u/wt/src", "home/u/plain/sub", "srv/repo/.git", "srv/repo/sub", "home/u/link/sub")
	if err := os.WriteFile(filepath.Join(base, "home/u/wt/.git"), []byte("gitdir: /x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "home/u/repo/.git"), filepath.Join(base, "home/u/link/.git")); err != nil {
		t.Fatal(err)
	}
	// A .git of another user's above the working directory (planted in a directory open to all, as
	// /tmp/.git) is no repository of the caller's.
	mk("home/shared/.git", "home/shared/mine/sub")
	if err := os.Chown(filepath.Join(base, "home/shared/.git"), 4321, 4321); err != nil {
		t.Fatal(err)
	}
	hidden := []string{filepath.Join(base, "home")}
	tests := []struct {
		name, cwd string
		shares    []string
		top       string // the highest directory the note may name (an MCP caller's workspace)
		want      string // the repository the note names; "" for no note
	}{
		{"subdirectory of a hidden repository", "home/u/repo/src/pkg", nil, "", "home/u/repo"},
		{"a linked worktree's .git file", "home/u/wt/src", nil, "", "home/u/wt"},
		{"the repository's root is the working directory", "home/u/repo", nil, "", ""},
		{"no repository above", "home/u/plain/sub", nil, "", ""},
		{"repository not hidden", "srv/repo/sub", nil, "", ""},
		{"repository shared", "home/u/repo/src", []string{"home/u/repo"}, "", ""},
		{"a link named .git is no repository", "home/u/link/sub", nil, "", ""},
		{"another user's .git above", "home/shared/mine/sub", nil, "", ""},
		{"a repository above the workspace", "home/u/repo/src/pkg", nil, "home/u/repo/src", ""},
		{"a repository within the workspace", "home/u/repo/src/pkg", nil, "home/u/repo", "home/u/repo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := policy.Filesystem{Hidden: hidden}
			for _, s := range tt.shares {
				p := filepath.Join(base, s)
				fs.Shares = append(fs.Shares, policy.Share{Host: p, Sandbox: p})
			}
			top := ""
			if tt.top != "" {
				top = filepath.Join(base, tt.top)
			}
			got := hiddenRepoNote(fs, filepath.Join(base, tt.cwd), top)
			if tt.want == "" {
				if got != "" {
					t.Fatalf("note %q, want none", got)
				}
				return
			}
			if repo := filepath.Join(base, tt.want); !strings.Contains(got, "repository "+repo+",") || !strings.Contains(got, "run sbx from "+repo+" ") {
				t.Fatalf("note %q, want one naming %s", got, repo)
			}
		})
	}
}
