package policy

import (
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/report"
)

func TestPersistenceMechanism(t *testing.T) {
	hooks := func() []byte { return []byte("[core]\n\thooksPath = /tmp/h\n") }
	plain := func() []byte { return []byte("[core]\n\tbare = false\n") }
	text := func(s string) func() []byte { return func() []byte { return []byte(s) } }
	for _, c := range []struct {
		path    string
		content func() []byte
		want    string
	}{
		{"/etc/cron.d/x", nil, MechCron},
		{"/etc/crontab", nil, MechCron},
		{"/etc/cron.daily/job", nil, MechCron},
		{"/var/spool/cron/crontabs/root", nil, MechCron},
		{"/var/spool/cron/atjobs/a0001", nil, MechAt},
		{"/var/spool/at/a0001", nil, MechAt},
		{"/etc/systemd/system/evil.service", nil, MechSystemd},
		{"/etc/systemd/system/evil.timer", nil, MechSystemd},
		{"/tmp/.config/systemd/user/evil.timer", nil, MechSystemd},
		{"/tmp/.bashrc", nil, MechShellStartup},
		{"/home/u/.profile", nil, MechShellStartup},
		{"/tmp/.bash_profile", nil, MechShellStartup},
		{"/tmp/.zshrc", nil, MechShellStartup},
		{"/tmp/.zprofile", nil, MechShellStartup},
		{"/etc/profile", nil, MechShellStartup},
		{"/etc/profile.d/x.sh", nil, MechShellStartup},
		{"/etc/bash.bashrc", nil, MechShellStartup},
		{"/etc/environment", nil, MechShellStartup},
		{"/tmp/.ssh/authorized_keys", nil, MechSSHKeys},
		{"/root/.ssh/authorized_keys2", nil, MechSSHKeys},
		{"/tmp/.ssh/config", nil, MechSSHConfig},
		{"/tmp/.ssh/rc", nil, MechSSHConfig},
		{"/tmp/.ssh/environment", nil, MechSSHConfig},
		{"/etc/ssh/sshrc", nil, MechSSHConfig},
		{"/tmp/.ssh/known_hosts", nil, ""},
		{"/tmp/.ssh/id_ed25519", nil, ""},
		{"/etc/ssh/sshd_config.d/x.conf", nil, MechSSHConfig},
		{"/etc/ld.so.preload", nil, MechPreload},
		{"/etc/ld.so.conf.d/x.conf", nil, MechLinkerConfig},
		{"/etc/sudoers", nil, MechSudoers},
		{"/etc/sudoers.d/x", nil, MechSudoers},
		{"/etc/rc.local", nil, MechRCLocal},
		{"/etc/init.d/evil", nil, MechInitScript},
		{"/etc/udev/rules.d/99-x.rules", nil, MechUdev},
		{"/work/repo/.git/hooks/pre-commit", nil, MechGitHook},
		{"/work/repo/.git/hooks/pre-commit.sample", nil, ""},
		{"/work/repo/.git/config", hooks, MechGitHooksPath},
		{"/work/repo/.git/config", plain, ""},
		{"/work/repo/.git/config", nil, ""},
		{"/usr/lib/python3/dist-packages/evil.pth", nil, MechPythonPth}, // refused: content unknown
		{"/tmp/.local/lib/python3.11/site-packages/x.pth", nil, MechPythonPth},
		{"/tmp/v/lib/python3.11/site-packages/x.pth", text("import os; os.system('curl x|sh')\n"), MechPythonPth},
		{"/tmp/v/lib/python3.11/site-packages/x.pth", text("/opt/lib\n# import nothing\n"), ""},
		{"/tmp/v/lib/python3.11/site-packages/distutils-precedence.pth", text("import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'; enabled and __import__('_distutils_hack').add_shim(); \n"), ""},
		{"/tmp/v/lib/python3.11/site-packages/distutils-precedence.pth", text("import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = True; __import__('evil')\n"), MechPythonPth},
		{"/tmp/.local/lib/python3.11/site-packages/sitecustomize.py", nil, MechPythonSite},
		{"/usr/lib/python3.11/usercustomize.py", nil, MechPythonSite},
		{"/work/repo/.envrc", nil, MechEnvrc},
		// not persistence
		{"/tmp/a/b/c.txt", nil, ""},
		{"/etc/cron", nil, MechCron}, // /etc/cron* is a prefix: cron.hourly, crontab, cron.allow
		{"/etc/systemd/system", nil, ""},
		{"/tmp/.ssh", nil, ""},
		{"/tmp/x.pth", nil, ""},
		{"/work/bashrc", nil, ""},
		{"/etc/passwd", nil, ""},
		{"/etc/cron.d/../passwd", nil, ""},
	} {
		if got := PersistenceMechanism(c.path, c.content); got != c.want {
			t.Errorf("PersistenceMechanism(%q) = %q, want %q", c.path, got, c.want)
		}
	}
}

// TestComparePersistence: files created and writes refused that plant persistence are violations
// naming mechanism and path, unless expect.persistence is allow, which still lists them.
func TestComparePersistence(t *testing.T) {
	mk := func() *report.Report {
		r := report.New("default", []string{"sh"})
		r.Files.Created = []string{"/tmp/.ssh", "/tmp/.ssh/authorized_keys", "/tmp/notes.txt"}
		r.Files.Modified = []string{"/tmp/.bashrc"}
		r.Files.Details = []report.FileChange{{Path: "/tmp/.ssh", Change: "created", Kind: "dir"}}
		r.Denials.Writes = []report.WriteDenial{{Path: "/etc/cron.d/x", Syscall: "openat"}, {Path: "/etc/passwd", Syscall: "openat"},
			{Path: "/tmp/.bashrc", Syscall: "openat"}} // landed after all: listed once, as modified
		return r
	}
	want := []report.Persistence{
		{Mechanism: MechSSHKeys, Path: "/tmp/.ssh/authorized_keys", Change: ChangeCreated},
		{Mechanism: MechShellStartup, Path: "/tmp/.bashrc", Change: ChangeModified},
		{Mechanism: MechCron, Path: "/etc/cron.d/x", Change: ChangeRefused},
	}
	r := mk()
	FindPersistence(r, nil)
	Compare(Expect{}, r)
	if r.Verdict != report.VerdictViolation || len(r.Violations) != 3 {
		t.Fatalf("deny: verdict %s, violations %v", r.Verdict, r.Violations)
	}
	for i, v := range r.Violations {
		if v.Rule != report.RulePersistence {
			t.Errorf("violation %d rule %q", i, v.Rule)
		}
	}
	if got := r.Violations[2].Message; got != "cron: /etc/cron.d/x write refused, tried" {
		t.Errorf("message %q", got)
	}
	checkPersistence(t, r.Persistence, want)
	r = mk()
	FindPersistence(r, nil)
	Compare(Expect{PersistenceAllowed: true}, r)
	if r.Verdict != report.VerdictPass {
		t.Fatalf("allow: verdict %s, violations %v", r.Verdict, r.Violations)
	}
	checkPersistence(t, r.Persistence, want)
}

func checkPersistence(t *testing.T, got, want []report.Persistence) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("persistence %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("persistence[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

// TestGitConfigRuns: every kind of git configuration that makes git run a program is a finding, read as
// git reads it; settings that run nothing are not.
func TestGitConfigRuns(t *testing.T) {
	for _, c := range []struct {
		conf string
		want bool
	}{
		{"[core]\n\tfsmonitor = \"touch /tmp/pwned\"\n", true},
		{"[CORE]\n\tFSMonitor=x\n", true},
		{"[core] sshCommand = ssh -o ProxyCommand=x\n", true},
		{"[core]\n\thooksPath = /tmp/h\n", true},
		{"[include]\n\tpath = ../evil.cfg\n", true},
		{"[includeIf \"gitdir:/\"]\n\tpath = x\n", true},
		{"[alias]\n\tst = !sh -c 'curl x|sh'\n", true},
		{"[alias]\n\tst = status -s\n", false},
		{"[filter \"lfs\"]\n\tsmudge = evil %f\n", true},
		{"[diff \"bin\"]\n\ttextconv = evil\n", true},
		{"[diff.bin]\n\ttextconv = evil\n", true},
		{"[merge \"m\"]\n\tdriver = evil %A\n", true},
		{"[credential]\n\thelper = !evil\n", true},
		{"[credential \"https://x\"]\n\thelper = evil\n", true},
		{"[gpg]\n\tprogram = evil\n", true},
		{"[pager]\n\tlog = evil\n", true},
		{"[protocol \"ext\"]\n\tallow = always\n", true},
		{"[protocol \"https\"]\n\tallow = always\n", false},
		{"[core]\n\tpager\\\n = evil\n", true}, // a continued line
		{"[user]\n\tname = A\n\temail = a@b\n[core]\n\tautocrlf = input\n\tbare = false\n[remote \"origin\"]\n\turl = https://x\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n", false},
		{"# [core] fsmonitor = x\n; pager = y\n", false},
		{"[core\n", true},
		{strings.Repeat("# filler\n", maxGitConfigRead/9+1), true},
	} {
		if got := gitConfigRuns([]byte(c.conf)); got != c.want {
			t.Errorf("gitConfigRuns(%.60q) = %v, want %v", c.conf, got, c.want)
		}
	}
	for p, want := range map[string]string{
		"/work/repo/.git/config": MechGitConfig, "/home/u/.gitconfig": MechGitConfig,
		"/home/u/.config/git/config": MechGitConfig, "/home/u/.bash_aliases": MechShellStartup,
		"/home/u/.config/autostart/x.desktop": MechAutostart, "/home/u/.config/environment.d/10-x.conf": MechSessionEnv,
		"/home/u/.local/bin/git": MechUserBin, "/home/u/.vimrc": MechEditor, "/home/u/.config/nvim/init.lua": MechEditor,
		"/home/u/.tmux.conf": MechTerminal, "/home/u/.inputrc": MechTerminal, "/home/u/.xsession": MechXSession,
		"/work/.npmrc": MechPackageTool, "/home/u/.cargo/config.toml": MechPackageTool,
	} {
		if got := PersistenceMechanism(p, func() []byte { return []byte("[core]\nfsmonitor = x\n") }); got != want {
			t.Errorf("PersistenceMechanism(%q) = %q, want %q", p, got, want)
		}
	}
}
