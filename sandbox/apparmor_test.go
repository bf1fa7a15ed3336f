package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// fakeAppArmor is a host whose files are files (a missing one: ENOENT) and whose euid is euid.
func fakeAppArmor(euid int, files map[string]string) apparmorHost {
	return apparmorHost{
		euid: func() int { return euid },
		readFile: func(name string) ([]byte, error) {
			if s, ok := files[name]; ok {
				return []byte(s), nil
			}
			return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ENOENT}
		},
	}
}

// TestUsernsRestriction: the restriction applies to a caller without root, with the sysctl at 1 and
// the label "unconfined"; a profile's label (its mode in parentheses, "unconfined" among them) is not
// the unconfined label. The old label file serves where AppArmor's own is missing.
func TestUsernsRestriction(t *testing.T) {
	tests := []struct {
		name    string
		euid    int
		files   map[string]string
		want    bool
		wantWhy string // a part of the detail; "" for none
	}{
		{"unconfined", 1000, map[string]string{restrictSysctl: "1\n", labelFile: "unconfined"}, true, "install-apparmor"},
		{"unconfined newline", 1000, map[string]string{restrictSysctl: "1\n", labelFile: "unconfined\n"}, true, "sbx runs unconfined"},
		{"old label file", 1000, map[string]string{restrictSysctl: "1", labelFileOld: "unconfined\n"}, true, "sbx runs unconfined"},
		{"own label first", 1000, map[string]string{restrictSysctl: "1", labelFile: "sbx (unconfined)\n", labelFileOld: "unconfined\n"}, false, "profile sbx (unconfined)"},
		{"sbx's profile", 1000, map[string]string{restrictSysctl: "1\n", labelFile: "sbx (unconfined)\n"}, false, "profile sbx (unconfined)"},
		{"snap", 1000, map[string]string{restrictSysctl: "1\n", labelFile: "snap.x (enforce)\n"}, false, "profile snap.x (enforce)"},
		{"label unreadable", 1000, map[string]string{restrictSysctl: "1\n"}, false, "cannot be read"},
		{"sysctl 0", 1000, map[string]string{restrictSysctl: "0\n", labelFile: "unconfined\n"}, false, ""},
		{"sysctl 2", 1000, map[string]string{restrictSysctl: "2\n", labelFile: "unconfined\n"}, false, ""},
		{"sysctl garbage", 1000, map[string]string{restrictSysctl: "yes\n", labelFile: "unconfined\n"}, false, ""},
		{"no sysctl", 1000, map[string]string{labelFile: "unconfined\n"}, false, ""},
		{"root", 0, map[string]string{restrictSysctl: "1\n", labelFile: "unconfined\n"}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := fakeAppArmor(tt.euid, tt.files).restriction()
			if got != tt.want || (tt.wantWhy == "") != (why == "") || !strings.Contains(why, tt.wantWhy) {
				t.Errorf("restriction() = %v, %q; want %v, one with %q", got, why, tt.want, tt.wantWhy)
			}
		})
	}
}

// TestFeaturesUsernsRestricted: `sbx version` says no for user namespaces where the restriction
// applies to the caller, with the fix in the detail; with sbx's profile, yes, naming the profile.
func TestFeaturesUsernsRestricted(t *testing.T) {
	saved := hostAppArmor
	defer func() { hostAppArmor = saved }()
	row := func() Feature {
		for _, f := range Features() {
			if f.Name == "userns" {
				return f
			}
		}
		t.Fatal("no userns row")
		return Feature{}
	}
	hostAppArmor = fakeAppArmor(1000, map[string]string{restrictSysctl: "1\n", labelFile: "unconfined\n"})
	if f := row(); f.Available || !strings.Contains(f.Detail, "sudo make install-apparmor") || !strings.Contains(f.Detail, "as root") {
		t.Errorf("restricted: %+v, want no with the fix", f)
	}
	hostAppArmor = fakeAppArmor(1000, map[string]string{restrictSysctl: "1\n", labelFile: "sbx (unconfined)\n"})
	if f := row(); !f.Available || !strings.Contains(f.Detail, "profile sbx (unconfined)") {
		t.Errorf("under sbx's profile: %+v, want yes naming the profile", f)
	}
}

// TestUsernsRefusal: a refusal of the rootless start becomes ErrUsernsRestricted where the restriction
// applies (any EPERM or EACCES, the supervisor's words too) or, wherever AppArmor is enabled, where the
// namespace's maps were refused (the effect); other errors, root's, and a mount refused where the
// restriction does not apply stay as they are.
func TestUsernsRefusal(t *testing.T) {
	restricted := map[string]string{restrictSysctl: "1\n", labelFile: "unconfined\n", apparmorEnabled: "Y\n"}
	enabled := map[string]string{restrictSysctl: "0\n", labelFile: "unconfined\n", apparmorEnabled: "Y\n"}
	profiled := map[string]string{restrictSysctl: "1\n", labelFile: "sbx (unconfined)\n", apparmorEnabled: "Y\n"}
	none := map[string]string{}
	// As vspawn reports its map writes, and os/exec its start.
	uidMap := fmt.Errorf("starting the sandbox's supervisor: %w", fmt.Errorf("vspawn: writing the id maps: %w",
		&fs.PathError{Op: "open", Path: "/proc/4242/uid_map", Err: syscall.EPERM}))
	setgroups := fmt.Errorf("vspawn: writing the id maps: %w", &fs.PathError{Op: "open", Path: "/proc/4242/setgroups", Err: syscall.EACCES})
	forkExec := fmt.Errorf("starting the sandbox's supervisor: %w", &fs.PathError{Op: "fork/exec", Path: "/proc/self/fd/9", Err: syscall.EPERM})
	forkExecAccess := &fs.PathError{Op: "fork/exec", Path: "/proc/self/fd/9", Err: syscall.EACCES}
	uidMapGone := fmt.Errorf("vspawn: writing the id maps: %w", &fs.PathError{Op: "open", Path: "/proc/4242/uid_map", Err: syscall.ENOENT})
	otherFile := &fs.PathError{Op: "open", Path: "/etc/uid_map", Err: syscall.EPERM}
	mount := &SupervisorError{Reason: "building the sandbox: making / a slave: permission denied", Hint: "a security module"}
	loopback := &SupervisorError{Reason: "building the sandbox: bringing up the loopback interface: operation not permitted"}
	share := &SupervisorError{Reason: "building the sandbox: mounting /work: no such file or directory"}
	tests := []struct {
		name  string
		euid  int
		files map[string]string
		err   error
		want  bool // ErrUsernsRestricted
	}{
		{"uid_map, restricted", 1000, restricted, uidMap, true},
		{"uid_map, effect", 1000, enabled, uidMap, true},
		{"uid_map, no AppArmor", 1000, none, uidMap, false},
		{"uid_map, as root", 0, restricted, uidMap, false},
		{"setgroups EACCES, effect", 1000, enabled, setgroups, true},
		{"fork/exec EPERM, effect", 1000, enabled, forkExec, true},
		{"fork/exec EACCES, effect", 1000, enabled, forkExecAccess, false},
		{"fork/exec EACCES, restricted", 1000, restricted, forkExecAccess, true},
		{"uid_map ENOENT", 1000, restricted, uidMapGone, false},
		{"EPERM elsewhere, effect", 1000, enabled, otherFile, false},
		{"mount, restricted", 1000, restricted, mount, true},
		{"loopback, restricted", 1000, restricted, loopback, true},
		{"mount, not restricted", 1000, enabled, mount, false},
		{"mount, sbx's profile", 1000, profiled, mount, false},
		{"share, restricted", 1000, restricted, share, false},
		{"plain, restricted", 1000, restricted, errors.New("sending the supervisor its setup: broken pipe"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fakeAppArmor(tt.euid, tt.files).refusal(tt.err)
			if errors.Is(got, ErrUsernsRestricted) != tt.want {
				t.Fatalf("refusal(%v) = %v; ErrUsernsRestricted: %v, want %v", tt.err, got, !tt.want, tt.want)
			}
			if !tt.want {
				if got != tt.err {
					t.Errorf("refusal(%v) = %v, want the error as it was", tt.err, got)
				}
				return
			}
			// One line that names the cause and keeps what failed; a setup failure (125), whose
			// hint is the CLI's for ErrUsernsRestricted, not the supervisor's.
			msg := got.Error()
			if !errors.Is(got, ErrSetup) || strings.Contains(msg, "\n") || !strings.Contains(msg, "AppArmor") {
				t.Errorf("refusal(%v) = %q: want one line naming AppArmor, matching ErrSetup", tt.err, msg)
			}
			var se *SupervisorError
			if errors.As(got, &se) {
				t.Errorf("refusal(%v) still carries the supervisor's error, and with it its hint %q", tt.err, se.Hint)
			}
			var want string
			if errors.As(tt.err, &se) {
				want = se.Reason
			} else {
				want = tt.err.Error()
			}
			if !strings.HasSuffix(msg, ": "+want) {
				t.Errorf("refusal(%v) = %q, want it to end with what failed", tt.err, msg)
			}
			if tt.files[restrictSysctl] == "1\n" && !strings.HasPrefix(msg, ErrUsernsRestricted.Error()) {
				t.Errorf("refusal(%v) = %q, want ErrUsernsRestricted's words first", tt.err, msg)
			}
			if again := fakeAppArmor(tt.euid, tt.files).refusal(got); again != got {
				t.Errorf("refusal of its own result wrapped it again: %v", again)
			}
		})
	}
}

// TestUsernsRefusalHost: on this host (no AppArmor here; as root in CI), nothing is taken for the
// restriction, and `sbx version`'s userns row says so.
func TestUsernsRefusalHost(t *testing.T) {
	if ok, why := hostAppArmor.restriction(); ok {
		t.Skipf("AppArmor's restriction applies to this caller: %s", why)
	}
	err := &fs.PathError{Op: "open", Path: "/proc/1/uid_map", Err: syscall.EPERM}
	if got := usernsRefusal(err); errors.Is(got, ErrUsernsRestricted) && !hostAppArmor.enabled() {
		t.Errorf("without AppArmor, %v became %v", err, got)
	}
	for _, f := range Features() {
		if f.Name == "userns" && strings.Contains(f.Detail, "install-apparmor") {
			t.Errorf("userns row %+v names the AppArmor fix on a host where the restriction does not apply", f)
		}
	}
}

// TestAppArmorProfile parses contrib/apparmor/sbx, as make install-apparmor installs it, with
// apparmor_parser (package apparmor) without loading it (-Q: --skip-kernel-load, -K: --skip-cache).
// Its ABI 4.0 and userns rule need apparmor 4.0 or newer (Ubuntu 24.04's, Debian 13's); with an older
// parser (Debian 12's 3.0) the rest of the profile is parsed, under ABI 3.0 and without the userns
// rules, and the test says so.
func TestAppArmorProfile(t *testing.T) {
	parser, err := exec.LookPath("apparmor_parser")
	if err != nil {
		t.Skip("needs apparmor_parser (apt-get install apparmor; make deps installs it)")
	}
	raw, err := os.ReadFile("../contrib/apparmor/sbx")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, want := range []string{"abi <abi/4.0>,", "include <tunables/global>", "@{PREFIX}=/usr/local\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("the profile lacks %q", want)
		}
	}
	for _, bin := range []string{"sbx", "sbx-mcp", "sbx-init"} {
		re := regexp.MustCompile(`(?m)^profile ` + regexp.QuoteMeta(bin) + ` @\{PREFIX\}/bin/` + regexp.QuoteMeta(bin) +
			` flags=\(unconfined\) \{\n  userns,\n(?:  .*\n|\n)*?  include if exists <local/sbx>\n\}$`)
		if !re.MatchString(text) {
			t.Errorf("the profile has no unconfined profile for @{PREFIX}/bin/%s granting userns and including <local/sbx>", bin)
		}
	}
	// As make install-apparmor PREFIX=/opt/sbx writes it.
	text = regexp.MustCompile(`(?m)^@\{PREFIX\}=.*$`).ReplaceAllString(text, "@{PREFIX}=/opt/sbx")
	if _, err := os.Stat("/etc/apparmor.d/abi/4.0"); err != nil {
		t.Logf("this apparmor_parser predates ABI 4.0 (%v): parsing the profile under ABI 3.0, without its userns rules; the whole profile needs apparmor 4.0+ (Ubuntu 24.04, Debian 13)", err)
		text = strings.Replace(text, "abi <abi/4.0>,", "abi <abi/3.0>,", 1)
		text = strings.ReplaceAll(text, "\n  userns,\n", "\n")
	}
	file := filepath.Join(t.TempDir(), "sbx")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(parser, "-Q", "-K", file).CombinedOutput()
	if err != nil {
		t.Fatalf("apparmor_parser -Q -K: %v\n%s", err, out)
	}
	// The three profiles (-N lists their names).
	out, err = exec.Command(parser, "-N", file).Output()
	if err != nil {
		t.Fatalf("apparmor_parser -N: %v", err)
	}
	got := strings.Fields(string(out))
	slices.Sort(got)
	if strings.Join(got, " ") != "sbx sbx-init sbx-mcp" {
		t.Errorf("profiles %q, want sbx, sbx-init and sbx-mcp", got)
	}
}
