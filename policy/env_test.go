package policy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVisibleEnv(t *testing.T) {
	fs := Filesystem{Hidden: []string{"/root", "/home", "/tmp/"}, Shares: []Share{{Host: "/root/tools", Sandbox: "/root/tools"}}}
	tests := []struct {
		name, path, cwd, shell string
		shellSet               bool
		wantPath, wantShell    string
		wantNotes              int
	}{
		{name: "pyenv shims dropped", path: "/root/.pyenv/shims:/usr/bin:/bin", cwd: "/work", shell: "/bin/bash",
			wantPath: "/usr/bin:/bin", wantShell: "/bin/bash", wantNotes: 1},
		{name: "share keeps its entries", path: "/root/tools/bin:/usr/bin", cwd: "/work", shell: "/bin/bash",
			wantPath: "/root/tools/bin:/usr/bin", wantShell: "/bin/bash"},
		{name: "working directory below a hidden one keeps its subtree", path: "/home/u/proj/bin:/home/u/bin:/usr/bin",
			cwd: "/home/u/proj", shell: "/bin/zsh", wantPath: "/home/u/proj/bin:/usr/bin", wantShell: "/bin/zsh", wantNotes: 1},
		{name: "working directory that is the hidden one shows nothing", path: "/home/bin:/usr/bin", cwd: "/home",
			wantPath: "/usr/bin", wantShell: DefaultShell, wantNotes: 1},
		{name: "hidden shell falls back", path: "/usr/bin", cwd: "/", shell: "/root/.local/bin/fish",
			wantPath: "/usr/bin", wantShell: DefaultShell},
		{name: "relative shell falls back", path: "/usr/bin", cwd: "/", shell: "bash", wantPath: "/usr/bin", wantShell: DefaultShell},
		{name: "set shell kept", path: "/usr/bin", cwd: "/", shell: "/bin/bash", shellSet: true, wantPath: "/usr/bin", wantShell: "/bin/dash"},
		{name: "relative and empty entries kept", path: "bin::/tmp/x:/usr/bin", cwd: "/", wantPath: "bin::/usr/bin",
			wantShell: DefaultShell, wantNotes: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"PATH": tt.path}
			if tt.shellSet {
				env["SHELL"] = "/bin/dash"
			}
			notes := visibleEnv(env, fs, tt.cwd, tt.shell, tt.shellSet)
			got := []any{env["PATH"], env["SHELL"], len(notes)}
			if diff := cmp.Diff([]any{tt.wantPath, tt.wantShell, tt.wantNotes}, got); diff != "" {
				t.Errorf("PATH, SHELL, notes (-want +got):\n%s", diff)
			}
		})
	}
}
