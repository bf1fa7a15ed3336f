package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sbx-dev/sbx/policy"
)

// toolPrograms are the programs that use each toolchain's caches: a failed run that ran one of them
// while its toolchain's caches were not shown gets a hint.
var toolPrograms = map[string][]string{
	"go":    {"go"},
	"npm":   {"npm", "npx", "node", "yarn", "pnpm"},
	"pip":   {"pip", "pip3", "python", "python3", "uv"},
	"cargo": {"cargo", "rustc", "rustup"},
	"maven": {"mvn", "mvnw"},
}

// toolchainHints notes, for a command that failed, each toolchain whose caches the host has and the
// sandbox does not show, when the command ran one of its programs (the exec events, else the
// command's own name) or a refused write landed below one of its caches (a cache path the command
// was pointed at, under a hidden home): the flag and the profile field that show them. A build that
// finds no cache says so in its own words ("module lookup disabled by GOPROXY=off", npm's
// ENOTCACHED), which name neither.
func (r *run) toolchainHints() {
	if r.rep.ExitCode == 0 {
		return
	}
	shown := map[string]bool{}
	for _, c := range r.sb.Caches() {
		shown[c.Toolchain] = true
	}
	ran := map[string]bool{}
	names := []string{}
	if len(r.opts.Args) > 0 {
		names = append(names, filepath.Base(r.opts.Args[0]))
	}
	for _, e := range r.rep.Processes.Execs {
		names = append(names, filepath.Base(e.Exe))
		if len(e.Argv) > 0 {
			names = append(names, filepath.Base(e.Argv[0]))
		}
	}
	for tool, progs := range toolPrograms {
		for _, n := range names {
			if slices.Contains(progs, n) || (tool == "pip" && strings.HasPrefix(n, "python3.")) {
				ran[tool] = true
			}
		}
	}
	var denied []string
	for _, d := range r.rep.Denials.Writes {
		denied = append(denied, d.Path)
	}
	for _, d := range r.rep.Denials.Landlock {
		denied = append(denied, d.Path)
	}
	byTool := map[string][]policy.Cache{}
	var order []string
	for _, c := range r.opts.Plan.Filesystem.KnownCaches {
		if shown[c.Toolchain] {
			continue
		}
		reached := ran[c.Toolchain] || slices.ContainsFunc(denied, func(p string) bool { return policy.Within(p, c.Host) })
		if st, err := os.Stat(c.Host); !reached || err != nil || !st.IsDir() {
			continue
		}
		if byTool[c.Toolchain] == nil {
			order = append(order, c.Toolchain)
		}
		byTool[c.Toolchain] = append(byTool[c.Toolchain], c)
	}
	for _, tool := range order {
		var what []string
		for _, c := range byTool[tool] {
			what = append(what, c.What+" "+c.Host)
		}
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("toolchains: the command failed, and it used %s, whose caches on the host the sandbox does not show (%s): --toolchains %s or filesystem.toolchains: [%s] shows them read-only below a throwaway layer (auto: every toolchain's)",
			tool, strings.Join(what, ", "), tool, tool))
	}
}
