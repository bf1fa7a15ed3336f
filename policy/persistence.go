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

// persistenceTable is the one table of persistence mechanisms sbx names (documented in the README,
// section "Persistence"). First match wins, so more specific rows come first.
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
		base: []string{".bashrc", ".profile", ".bash_profile", ".bash_login", ".bash_logout", ".zshrc", ".zprofile",
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
