package policy

import (
	"bytes"
	"path"
	"slices"
	"strings"

	"github.com/sbx-dev/sbx/report"
)

// Persistence mechanisms: how a file left behind (or a write tried) would make something run later,
// outside the run that wrote it. These names are what reports and violations carry.
const (
	MechCron         = "cron"
	MechAt           = "at job"
	MechSystemd      = "systemd unit"
	MechShellStartup = "shell start-up file"
	MechSSHKeys      = "ssh authorized_keys"
	MechSSHConfig    = "ssh config"
	MechPreload      = "ld.so preload"
	MechLinkerConfig = "ld.so config"
	MechSudoers      = "sudoers"
	MechRCLocal      = "rc.local"
	MechInitScript   = "init script"
	MechUdev         = "udev rule"
	MechGitHook      = "git hook"
	MechGitHooksPath = "git core.hooksPath"
	MechPythonPth    = "python .pth file"
	MechPythonSite   = "python site customization"
	MechEnvrc        = "direnv .envrc"
	MechGitConfig    = "git config that runs a program"
	MechAutostart    = "desktop autostart entry"
	MechSessionEnv   = "session environment (environment.d)"
	MechUserBin      = "program in ~/.local/bin"
	MechEditor       = "editor start-up file"
	MechTerminal     = "terminal multiplexer or readline start-up file"
	MechXSession     = "X session start-up file"
	MechPackageTool  = "package tool config that runs a program"
	MechSetID        = "set-id file"
)

// persistenceRule is one row of the persistence table. A path matches when one of its tests holds:
// exact is the whole path, under a directory prefix (the path is below it, not the directory itself),
// prefix a plain string prefix, base the file name, within a directory name anywhere in the path with
// the file below it, and suffix+within both. inspect, when set, must also hold of the file's content;
// unknown is what a content that cannot be read (a refused write) counts as.
type persistenceRule struct {
	mech    string
	exact   []string
	under   []string
	prefix  []string
	base    []string
	within  []string // "/.ssh/" matches any path with that element sequence and a file below
	suffix  string   // with within: the file name must end so
	ends    []string // "/.ssh/config" matches any path that ends so
	inspect func(content []byte) bool
	unknown bool
}

// persistenceTable is the one table of persistence mechanisms sbx names (documented in
// docs/profiles.md, section "Persistence"). First match wins, so more specific rows come first.
var persistenceTable = []persistenceRule{
	{mech: MechAt, under: []string{"/var/spool/cron/atjobs", "/var/spool/cron/atspool", "/var/spool/at"}},
	{mech: MechCron, prefix: []string{"/etc/cron", "/etc/anacrontab"}, under: []string{"/var/spool/cron"}},
	{mech: MechSystemd, under: []string{"/etc/systemd/system", "/etc/systemd/user", "/lib/systemd/system",
		"/usr/lib/systemd/system", "/lib/systemd/user", "/usr/lib/systemd/user", "/usr/local/lib/systemd/system",
		"/run/systemd/system", "/etc/systemd/system.conf.d", "/etc/systemd/user.conf.d"},
		within: []string{"/.config/systemd/user/", "/.local/share/systemd/user/"}},
	{mech: MechShellStartup, exact: []string{"/etc/profile", "/etc/bash.bashrc", "/etc/environment", "/etc/zshrc",
		"/etc/zprofile", "/etc/zshenv", "/etc/bash.bash_logout"},
		under: []string{"/etc/profile.d", "/etc/zsh"},
		base: []string{".bashrc", ".bash_aliases", ".profile", ".bash_profile", ".bash_login", ".bash_logout", ".zshrc", ".zprofile",
			".zshenv", ".zlogin", ".zlogout", ".kshrc", ".mkshrc", ".cshrc", ".tcshrc"},
		within: []string{"/.config/fish/"}},
	{mech: MechSSHKeys, base: []string{"authorized_keys", "authorized_keys2"}},
	// The files of ssh that run commands (ProxyCommand, LocalCommand, rc) or set a login's environment;
	// known_hosts and keys run nothing.
	{mech: MechSSHConfig, ends: []string{"/.ssh/config", "/.ssh/rc", "/.ssh/environment"},
		exact: []string{"/etc/ssh/sshd_config", "/etc/ssh/ssh_config", "/etc/ssh/sshrc"},
		under: []string{"/etc/ssh/sshd_config.d", "/etc/ssh/ssh_config.d"}},
	{mech: MechPreload, exact: []string{"/etc/ld.so.preload"}},
	{mech: MechLinkerConfig, exact: []string{"/etc/ld.so.conf"}, under: []string{"/etc/ld.so.conf.d"}},
	{mech: MechSudoers, exact: []string{"/etc/sudoers"}, under: []string{"/etc/sudoers.d"}},
	{mech: MechRCLocal, exact: []string{"/etc/rc.local", "/etc/rc.d/rc.local"}},
	{mech: MechInitScript, under: []string{"/etc/init.d", "/etc/init", "/etc/rc0.d", "/etc/rc1.d", "/etc/rc2.d",
		"/etc/rc3.d", "/etc/rc4.d", "/etc/rc5.d", "/etc/rc6.d", "/etc/rcS.d"}},
	{mech: MechUdev, under: []string{"/etc/udev/rules.d", "/lib/udev/rules.d", "/usr/lib/udev/rules.d", "/run/udev/rules.d"}},
	{mech: MechGitHook, within: []string{"/.git/hooks/"}},
	{mech: MechGitHooksPath, within: []string{"/.git/"}, suffix: "/.git/config", inspect: setsHooksPath},
	// git's configuration, wherever git reads it: the repository's, the user's (~/.gitconfig,
	// ~/.config/git/config) and the system's. Any key that names a program, an alias that runs one, and
	// any include (which pulls in a file that may) is a finding.
	{mech: MechGitConfig, within: []string{"/.git/"}, suffix: "/.git/config", inspect: gitConfigRuns},
	{mech: MechGitConfig, base: []string{".gitconfig"}, ends: []string{"/.config/git/config"},
		exact: []string{"/etc/gitconfig"}, inspect: gitConfigRuns, unknown: true},
	{mech: MechAutostart, within: []string{"/.config/autostart/", "/etc/xdg/autostart/"}, suffix: ".desktop"},
	{mech: MechSessionEnv, within: []string{"/.config/environment.d/"}, under: []string{"/etc/environment.d"}},
	{mech: MechUserBin, within: []string{"/.local/bin/"}},
	{mech: MechEditor, base: []string{".vimrc", ".gvimrc", ".exrc", ".nexrc", ".emacs"},
		within: []string{"/.vim/plugin/", "/.vim/autoload/", "/.config/nvim/", "/.emacs.d/", "/.local/share/nvim/site/"},
		exact:  []string{"/etc/vim/vimrc", "/etc/vim/vimrc.local"}},
	{mech: MechTerminal, base: []string{".tmux.conf", ".screenrc", ".inputrc"}, within: []string{"/.config/tmux/"},
		exact: []string{"/etc/tmux.conf", "/etc/inputrc", "/etc/screenrc"}},
	{mech: MechXSession, base: []string{".xinitrc", ".xsession", ".xsessionrc", ".xprofile"}},
	{mech: MechPackageTool, base: []string{".npmrc", ".yarnrc", ".yarnrc.yml"}, ends: []string{"/.cargo/config", "/.cargo/config.toml"}},
	{mech: MechPythonPth, within: []string{"/site-packages/", "/dist-packages/"}, suffix: ".pth",
		inspect: pthRunsCode, unknown: true},
	{mech: MechPythonSite, base: []string{"sitecustomize.py", "usercustomize.py"},
		within: []string{"/sitecustomize/", "/usercustomize/"}},
	{mech: MechEnvrc, base: []string{".envrc"}},
}

// PersistenceMechanism names the persistence mechanism a sandbox path belongs to, or "" for none.
// content, when not nil, returns (a bounded prefix of) the file's content for the rules that look at
// it; a nil content makes those rules never match.
func PersistenceMechanism(p string, content func() []byte) string {
	p = path.Clean("/" + p)
	for _, r := range persistenceTable {
		if !r.matches(p) {
			continue
		}
		if r.inspect != nil {
			if content == nil && !r.unknown || content != nil && !r.inspect(content()) {
				continue
			}
		}
		return r.mech
	}
	return ""
}

// MaybePersistence says whether a sandbox path could be a persistence mechanism, whatever its content:
// such a path is kept for judging past the bounds of the report's file lists.
func MaybePersistence(p string) bool {
	p = path.Clean("/" + p)
	return slices.ContainsFunc(persistenceTable, func(r persistenceRule) bool { return r.matches(p) })
}

// gitProgramKeys are git configuration keys (section.key, or section.*.key for any subsection, lower
// case) whose value git runs as a program (git-config(1)).
var gitProgramKeys = []string{
	"core.fsmonitor", "core.sshcommand", "core.pager", "core.editor", "core.askpass", "core.gitproxy",
	"core.hookspath", "sequence.editor", "diff.external", "diff.*.textconv", "diff.*.command",
	"merge.*.driver", "filter.*.clean", "filter.*.smudge", "filter.*.process", "credential.helper",
	"credential.*.helper", "gpg.program", "gpg.*.program", "pager.*", "difftool.*.cmd", "mergetool.*.cmd",
	"sendemail.smtpserver", "sendemail.*.smtpserver", "sendemail.tocmd", "sendemail.cccmd", "web.browser",
	"browser.*.cmd", "browser.*.path", "man.*.cmd", "man.*.path", "instaweb.httpd", "remote.*.uploadpack",
	"remote.*.receivepack", "remote.*.vcs", "uploadpack.packobjectshook", "protocol.allow", "protocol.*.allow",
	"include.path", "includeif.*.path", "alias.*", "submodule.*.update", "core.alternaterefscommand",
	"receive.procreceiverefs", "trailer.*.command", "trailer.*.cmd",
}

// maxGitConfigRead is how much of a git config is read (the content peek's bound): a file that fills it
// may hide a key past it, and counts as a finding.
const maxGitConfigRead = 64 << 10

// gitConfigRuns says whether a git configuration file makes git run a program: a key of
// gitProgramKeys (an alias only when it starts with "!", a protocol rule only when it allows ext, a
// submodule's update only as "!command"), or an include. Read as git reads it: sections with or
// without a subsection, keys case-insensitive, continued lines, comments.
func gitConfigRuns(b []byte) bool {
	if len(b) >= maxGitConfigRead {
		return true
	}
	section, sub := "", ""
	lines := strings.Split(strings.ReplaceAll(string(b), "\\\n", ""), "\n")
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				return true // git refuses it; what it means is not known
			}
			head := strings.TrimSpace(line[1:end])
			section, sub = head, ""
			if i := strings.IndexAny(head, " \t"); i >= 0 {
				section, sub = head[:i], strings.Trim(strings.TrimSpace(head[i:]), `"`)
			} else if i := strings.IndexByte(head, '.'); i >= 0 { // [section.sub], the old form
				section, sub = head[:i], head[i+1:]
			}
			section = strings.ToLower(section)
			line = strings.TrimSpace(line[end+1:])
			if line == "" {
				continue
			}
		}
		key, value, _ := strings.Cut(line, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		value = strings.Trim(strings.TrimSpace(value), `"`)
		if gitKeyRuns(section, sub, key, value) {
			return true
		}
	}
	return false
}

func gitKeyRuns(section, sub, key, value string) bool {
	full := section + "." + key
	any := section + ".*." + key
	if sub == "" {
		any = ""
	}
	for _, k := range gitProgramKeys {
		if k != full && k != any && !(strings.HasSuffix(k, ".*") && strings.TrimSuffix(k, "*") == section+".") {
			continue
		}
		switch {
		case section == "alias":
			return strings.HasPrefix(value, "!")
		case section == "protocol":
			return strings.Contains(strings.ToLower(sub+" "+value), "ext") && !strings.EqualFold(value, "never")
		case section == "submodule":
			return strings.HasPrefix(value, "!")
		}
		return true
	}
	return false
}

// setsHooksPath: git runs hooks from core.hooksPath, which a .git/config may name.
func setsHooksPath(b []byte) bool { return bytes.Contains(bytes.ToLower(b), []byte("hookspath")) }

// benignPth are lines of .pth files that tools write in every environment: setuptools' shim in each
// venv (distutils-precedence.pth), recognised by their exact bytes.
var benignPth = []string{
	"import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'; enabled and __import__('_distutils_hack').add_shim();",
}

// pthRunsCode says whether a .pth file runs code when Python starts: site.py executes its lines that
// begin with "import" and adds the others to sys.path. Known tools' lines are not counted.
func pthRunsCode(b []byte) bool {
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "import ") && !strings.HasPrefix(line, "import\t") {
			continue
		}
		if !slices.Contains(benignPth, strings.TrimRight(line, " \t\r")) {
			return true
		}
	}
	return false
}

func (r persistenceRule) matches(p string) bool {
	if slices.Contains(r.exact, p) {
		return true
	}
	for _, d := range r.under {
		if strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	for _, pre := range r.prefix {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	base := path.Base(p)
	if slices.Contains(r.base, base) {
		return true
	}
	for _, e := range r.ends {
		if strings.HasSuffix(p, e) {
			return true
		}
	}
	for _, w := range r.within {
		i := strings.Index(p, w)
		if i < 0 || len(p) == i+len(w) {
			continue
		}
		if r.suffix == "" || strings.HasSuffix(p, r.suffix) {
			if r.mech == MechGitHook && strings.HasSuffix(base, ".sample") {
				continue // git init writes inert *.sample hooks
			}
			return true
		}
	}
	return false
}

// Changes a persistence finding can stem from: the three of files, and a write the sandbox refused.
const (
	ChangeCreated  = "created"
	ChangeModified = "modified"
	ChangeRefused  = "refused"
	ChangeDeleted  = "deleted"
)

// The set-id bits of a file's mode (S_ISUID, S_ISGID).
const (
	setUID = 0o4000
	setGID = 0o2000
)

// FindPersistence classifies every created or modified file of r and every write the sandbox refused
// (r.Denials.Writes) and sets r.Persistence. Directories and deletions are not findings: a directory
// plants nothing by itself, and removing a file makes nothing run. content, when not nil, reads a
// bounded prefix of a changed file as the sandbox saw it (for rules that look inside, such as
// core.hooksPath in .git/config).
func FindPersistence(r *report.Report, content func(path string) []byte) {
	out := []report.Persistence{}
	seen := map[report.Persistence]bool{}
	add := func(p, change string) {
		var read func() []byte
		if content != nil && change != ChangeRefused {
			read = func() []byte { return content(p) }
		}
		m := PersistenceMechanism(p, read)
		f := report.Persistence{Mechanism: m, Path: p, Change: change}
		if m == "" || seen[f] {
			return
		}
		seen[f] = true
		out = append(out, f)
	}
	dirs := map[string]bool{}
	for _, d := range r.Files.Details {
		if d.Kind == "dir" {
			dirs[d.Path] = true
		}
		// A set-id file runs with its owner's ids for whoever starts it, once it is where the host
		// sees it (a share, the applied working directory).
		if d.Kind == "file" && d.Mode&(setUID|setGID) != 0 && d.Change != ChangeDeleted {
			f := report.Persistence{Mechanism: MechSetID, Path: d.Path, Change: d.Change}
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	for _, c := range []struct {
		change string
		paths  []string
	}{{ChangeCreated, r.Files.Created}, {ChangeModified, r.Files.Modified}} {
		for _, p := range c.paths {
			if !dirs[p] {
				add(p, c.change)
			}
		}
	}
	changed := map[string]bool{}
	for _, p := range slices.Concat(r.Files.Created, r.Files.Modified) {
		changed[p] = true
	}
	for _, w := range r.Denials.Writes {
		if !changed[w.Path] { // a write that landed after all (Landlock degraded) is listed as the change
			add(w.Path, ChangeRefused)
		}
	}
	r.Persistence = out
}

// persistenceViolations adds one violation per finding of r.Persistence (FindPersistence) unless the
// profile allows persistence.
func persistenceViolations(exp Expect, r *report.Report, add func(rule, format string, args ...any)) {
	if exp.PersistenceAllowed {
		return
	}
	for _, f := range r.Persistence {
		verb := f.Change
		if f.Change == ChangeRefused {
			verb = "write refused, tried"
		}
		add(report.RulePersistence, "%s: %s %s", f.Mechanism, f.Path, verb)
	}
}

// NeverNotify are the syscalls that a filter never answers with a notification, even when denied and
// recorded: they stay plain ERRNO rules (unrecorded).
var NeverNotify = []string{"write", "sendmsg"}

// compileRecord says what the sandbox records of refused syscalls and writes (both on by default).
func compileRecord(q *Profile) Record {
	var r Record
	if q.Syscalls.Record == nil || *q.Syscalls.Record {
		// The supervisor hands the notification fd to sbx with sendmsg, on the thread that has just
		// loaded the filter: a notification then would wait for an answer from sbx, which does not hold
		// the fd yet. runc refuses to notify on write (its init writes the fd's number with it).
		r.Syscalls = slices.DeleteFunc(denyList(q.Syscalls), func(n string) bool { return slices.Contains(NeverNotify, n) })
		if !q.Syscalls.AllowSetID {
			for _, c := range SetIDSyscalls {
				if !slices.Contains(r.Syscalls, c.Name) {
					r.Syscalls = append(r.Syscalls, c.Name) // their refusals with a set-id bit
				}
			}
		}
	}
	r.Writes = q.Filesystem.RecordWrites == nil || *q.Filesystem.RecordWrites
	return r
}
