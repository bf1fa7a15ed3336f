package policy

import (
	"path/filepath"
	"slices"
	"strings"
)

// DefaultShell is SHELL when the profile sets none and the caller's shell is not visible in the sandbox.
const DefaultShell = "/bin/sh"

// visibleEnv applies the rules that tie the environment to what the sandbox shows (fs; cwd is the
// command's working directory) to env, the compiled environment, and says what it changed:
//   - PATH keeps only entries the command can reach: one below a hidden path is dropped unless a share
//     or the working directory's own subtree brings it back (see hidden). A dropped entry would make
//     the command silently run another program than on the host (a pyenv shim before /usr/bin).
//   - SHELL, unless the profile or a flag sets it, is the caller's when it is visible in the sandbox,
//     else DefaultShell: make's $(SHELL), tmux and editors need one, and no login shell is looked up.
func visibleEnv(env map[string]string, fs Filesystem, cwd, callerShell string, shellSet bool) (notes []string) {
	if p, ok := env["PATH"]; ok {
		var kept, dropped []string
		for _, e := range strings.Split(p, ":") {
			if filepath.IsAbs(e) && hidden(filepath.Clean(e), fs, cwd) {
				if !slices.Contains(dropped, e) { // a PATH often names one entry twice
					dropped = append(dropped, e)
				}
			} else {
				kept = append(kept, e)
			}
		}
		if len(dropped) > 0 {
			env["PATH"] = strings.Join(kept, ":")
			notes = append(notes, "PATH: left out what the sandbox hides: "+strings.Join(dropped, ", "))
		}
	}
	if !shellSet {
		env["SHELL"] = DefaultShell
		if filepath.IsAbs(callerShell) && !hidden(filepath.Clean(callerShell), fs, cwd) {
			env["SHELL"] = callerShell
		}
	}
	return notes
}

// hidden reports whether path is out of the command's sight: at or below a hidden path, and neither
// within a share nor within the working directory when that lies strictly below the hidden path (the
// sandbox's hiding rule: a working directory that is the hidden directory itself shows nothing).
func hidden(path string, fs Filesystem, cwd string) bool {
	for _, sh := range fs.Shares {
		if Within(path, sh.Sandbox) {
			return false
		}
	}
	for _, c := range fs.Caches {
		if Within(path, c.Host) {
			return false
		}
	}
	for _, h := range fs.Hidden {
		h = filepath.Clean(h)
		if Within(path, h) && !(cwd != h && Within(cwd, h) && Within(path, cwd)) {
			return true
		}
	}
	return false
}

// Within reports whether path is dir or below it (both clean and absolute).
func Within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}
