package policy

import (
	"fmt"
	"math"
	"net/netip"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Validate checks every field and the fields against each other. Each error names the field, where it
// was written, and the fix. A Profile returned by Load has passed Validate; call it again after changing
// a profile in code (Overrides.Apply does).
func (p *Profile) Validate() error { return p.validate(false) }

// validate with partial set skips the checks that depend on what a profile may inherit (the network
// mode), so that each file of an extends chain is checked alone, with exact positions, before merging.
func (p *Profile) validate(partial bool) error {
	network := p.validateNetwork
	if partial {
		network = p.validateNetworkEntries
	}
	checks := []func() error{
		p.checkVersion, p.validateFilesystem, p.validateSyscalls, network,
		p.validateLimits, p.validateEnv, p.validateExpect, p.validateUser,
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// invalid builds the *Error for field path.
func (p *Profile) invalid(path, hint, format string, args ...any) error {
	return errAt(p.at(path), ErrInvalid, hint, "%s: %s", path, fmt.Sprintf(format, args...))
}

func (p *Profile) enum(path, value string, values []string) error {
	if err := checkEnum(value, values); err != nil {
		return p.invalid(path, err.(*valueError).hint, "%s", err)
	}
	return nil
}

// checkAbs requires a clean absolute path.
func (p *Profile) checkAbs(path, value, hint string) error {
	switch {
	case value == "":
		return p.invalid(path, "remove the empty entry", "empty path")
	case !filepath.IsAbs(value):
		return p.invalid(path, hint, "%q is a relative path", value)
	case filepath.Clean(value) != value:
		return p.invalid(path, fmt.Sprintf("write %s", filepath.Clean(value)), "%q is not a clean path", value)
	}
	return nil
}

func (p *Profile) checkPaths(field string, paths []string, hint string) error {
	for i, v := range paths {
		if err := p.checkAbs(fmt.Sprintf("%s[%d]", field, i), v, hint); err != nil {
			return err
		}
	}
	return nil
}

func (p *Profile) validateFilesystem() error {
	fs := p.Filesystem
	relHint := "write an absolute path such as /tmp/out; the working directory is covered by write_cwd"
	for _, l := range []struct {
		field string
		paths []string
	}{{"filesystem.read", fs.Read}, {"filesystem.write", fs.Write}, {"filesystem.hidden", fs.Hidden}} {
		if err := p.checkPaths(l.field, l.paths, relHint); err != nil {
			return err
		}
	}
	for i, h := range fs.Hidden {
		if h == "/" {
			return p.invalid(fmt.Sprintf("filesystem.hidden[%d]", i), "hide the directories you mean, such as /home", "cannot hide /")
		}
	}
	if err := p.enum("filesystem.apply", string(fs.Apply), fs.Apply.Values()); err != nil {
		return err
	}
	if err := p.enum("filesystem.landlock", string(fs.Landlock), fs.Landlock.Values()); err != nil {
		return err
	}
	return p.validateShares()
}

func (p *Profile) validateShares() error {
	seen := map[string]int{}
	for i, s := range p.Filesystem.Share {
		field := fmt.Sprintf("filesystem.share[%d]", i)
		if err := p.checkAbs(field+".host", s.Host, "a shared host path must be absolute; on the command line --rw and --ro resolve relative paths"); err != nil {
			return err
		}
		target := s.target()
		if err := p.checkAbs(field+".path", target, "write the path inside the sandbox as an absolute path, or leave it out to use the host path"); err != nil {
			return err
		}
		if target == "/" {
			return p.invalid(field+".path", "share a directory below /", "cannot share onto /")
		}
		if k := kernelDir(target); k != "" {
			return p.invalid(field+".path", "share a path outside /proc, /sys and /dev, or give it another path in the sandbox",
				"cannot share onto %s: the sandbox's own %s is there (a share would show the host's processes, or hide sbx's init)", target, k)
		}
		if err := p.enum(field+".mode", string(s.Mode), s.Mode.Values()); err != nil {
			return err
		}
		if j, dup := seen[target]; dup {
			return p.invalid(field+".path", "share each sandbox path once", "%s is already shared by filesystem.share[%d]", target, j)
		}
		seen[target] = i
	}
	return nil
}

// kernelDirs are the file systems the sandbox mounts for itself: its own /proc (of its pid namespace),
// /sys and /dev (which holds sbx's init). A share onto one of them or below would cover them with the
// host's: --ro /proc showed every host process and its command line, --ro /dev hid the init.
var kernelDirs = []string{"/proc", "/sys", "/dev"}

// kernelDir is the entry of kernelDirs that target is or lies below, "" for none.
func kernelDir(target string) string {
	clean := path.Clean(target)
	for _, k := range kernelDirs {
		if clean == k || strings.HasPrefix(clean, k+"/") {
			return k
		}
	}
	return ""
}

// target is the sandbox path of a share.
func (s ShareConfig) target() string {
	if s.Path == "" {
		return s.Host
	}
	return s.Path
}

func (p *Profile) validateSyscalls() error {
	sc := p.Syscalls
	if err := p.enum("syscalls.base", string(sc.Base), sc.Base.Values()); err != nil {
		return err
	}
	known := knownSyscalls()
	for _, list := range []struct {
		field string
		names []string
	}{{"syscalls.deny", sc.Deny}, {"syscalls.allow", sc.Allow}} {
		for i, name := range list.names {
			if !known[name] {
				hint := suggest(name, sortedKeys(known))
				return p.invalid(fmt.Sprintf("%s[%d]", list.field, i), hint, "unknown syscall %q", name)
			}
		}
	}
	for i, name := range sc.Deny {
		if slices.Contains(sc.Allow, name) {
			return p.invalid(fmt.Sprintf("syscalls.deny[%d]", i), "remove it from one of the two lists", "%q is both denied and allowed", name)
		}
		if slices.Contains(landlockSyscalls, name) {
			return p.invalid(fmt.Sprintf("syscalls.deny[%d]", i), "remove it: Landlock only takes rights away, and tools that sandbox themselves need it", "%q cannot be denied", name)
		}
		if slices.Contains(runtimeSyscalls, name) {
			return p.invalid(fmt.Sprintf("syscalls.deny[%d]", i), "remove it: sbx's supervisor starts the command under the filter, and neither it nor any threaded program runs without futex", "%q cannot be denied", name)
		}
	}
	if sc.Errno != "" {
		if _, ok := errnoByName()[sc.Errno]; !ok {
			return p.invalid("syscalls.errno", suggestOr(sc.Errno, []string{"EPERM", "EACCES", "ENOSYS"}, "use an errno name such as EPERM, EACCES or ENOSYS"), "unknown errno %q", sc.Errno)
		}
	}
	return nil
}

func (p *Profile) validateNetwork() error {
	n := p.Network
	for _, l := range p.netLists() {
		if len(l.rules) > 0 && n.Mode != ModeContract {
			return p.invalid(l.field, "add mode: contract under network", "is given but network.mode is %s", modeName(n.Mode))
		}
	}
	if n.Mode != ModeContract && (n.DNS.Upstream != "" || len(n.DNS.Allow) > 0) {
		return p.invalid("network.dns", "add mode: contract under network; without network there is no DNS", "is given but network.mode is %s", modeName(n.Mode))
	}
	if n.Mode != ModeContract && len(n.Ingress) > 0 {
		return p.invalid("network.ingress", "add mode: contract under network; without network nothing can connect in", "is given but network.mode is %s", modeName(n.Mode))
	}
	return p.validateNetworkEntries()
}

func (p *Profile) netLists() []netList {
	n := p.Network
	return ruleLists(n.Allow, n.Deny, n.Except)
}

// validateNetworkEntries checks each entry alone.
func (p *Profile) validateNetworkEntries() error {
	if err := p.enum("network.mode", string(p.Network.Mode), p.Network.Mode.Values()); err != nil {
		return err
	}
	for _, l := range p.netLists() {
		for i, r := range l.rules {
			if err := checkNetRule(l.field, r); err != nil {
				return p.invalid(fmt.Sprintf("%s[%d]", l.field, i), err.(*valueError).hint, "%s", err)
			}
		}
	}
	for i, l := range p.Network.Ingress {
		if _, err := ParseListener(l.String()); err != nil || l.Port < 0 || l.Proto == "unix" {
			return p.invalid(fmt.Sprintf("network.ingress[%d]", i), "write inbound ports as tcp:8080, udp:5353 or tcp:* (unix sockets are not reachable from the network)", "%q is not a tcp or udp port", l.String())
		}
	}
	return p.validateDNS()
}

func modeName(m NetworkMode) string {
	if m == "" {
		return "none (the default)"
	}
	return string(m)
}

func (p *Profile) validateDNS() error {
	n := p.Network
	if n.DNS.Upstream != "" {
		if _, err := netip.ParseAddrPort(n.DNS.Upstream); err != nil {
			return p.invalid("network.dns.upstream", "write ip:port, such as 192.0.2.53:53 or [2001:db8::53]:53", "%q is not ip:port", n.DNS.Upstream)
		}
	}
	for i, name := range n.DNS.Allow {
		if _, err := ParseName(name); err != nil {
			return p.invalid(fmt.Sprintf("network.dns.allow[%d]", i), "write a name such as pypi.org or *.pythonhosted.org", "%q is not a DNS name", name)
		}
	}
	if ns := n.UplinkNetNS; strings.Contains(ns, "/") && !filepath.IsAbs(ns) {
		return p.invalid("network.uplink_netns", "write a name from /run/netns or an absolute path", "%q is a relative path", ns)
	}
	return nil
}

func (p *Profile) validateLimits() error {
	l := p.Limits
	if l.Memory != nil && *l.Memory != 0 && *l.Memory < 4<<20 {
		return p.invalid("limits.memory", "write at least 4MiB, or 0 for no limit", "%s is too small (sizes are bytes unless they carry a unit)", FormatSize(int64(*l.Memory)))
	}
	for _, s := range []struct {
		field string
		v     *Size
	}{{"limits.memory", l.Memory}, {"limits.disk", l.Disk}} {
		if s.v != nil && *s.v < 0 {
			return p.invalid(s.field, "write a size such as 512MiB, or 0 for the default", "is negative")
		}
	}
	for _, n := range []struct {
		field string
		v     *int64
	}{{"limits.pids", l.Pids}, {"limits.nofile", l.NoFile}} {
		if n.v != nil && *n.v < 0 {
			return p.invalid(n.field, "write a positive number, or 0 for no limit", "%d is negative", *n.v)
		}
	}
	if l.CPU != nil && (*l.CPU < 0 || math.IsNaN(*l.CPU) || math.IsInf(*l.CPU, 0)) {
		return p.invalid("limits.cpu", "write a number of cores such as 1.5, or 0 for no limit", "%v is not a number of cores", *l.CPU)
	}
	if l.Timeout != nil && *l.Timeout < 0 {
		return p.invalid("limits.timeout", "write a duration such as 30s, or none", "is negative")
	}
	return nil
}

var (
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	envGlobRE = regexp.MustCompile(`^[A-Za-z0-9_*?]+$`)
)

func (p *Profile) validateEnv() error {
	for i, pat := range p.Env.Pass {
		field := fmt.Sprintf("env.pass[%d]", i)
		switch {
		case strings.Contains(pat, "="):
			return p.invalid(field, "to set a value use env.set", "pass takes names, not NAME=VALUE")
		case !envGlobRE.MatchString(pat):
			return p.invalid(field, "write a variable name such as GOFLAGS or a glob such as LC_*", "%q is not a variable name", pat)
		case strings.Trim(pat, "*?") == "":
			return p.invalid(field, "name the variables to pass; a bare wildcard would pass every secret", "%q matches every variable", pat)
		}
	}
	for _, name := range sortedKeys(p.Env.Set) {
		if !envNameRE.MatchString(name) {
			return p.invalid("env.set."+name, "variable names are letters, digits and _, not starting with a digit", "%q is not a variable name", name)
		}
	}
	return nil
}

func (p *Profile) validateExpect() error {
	e := p.Expect
	for _, v := range []struct {
		field, value string
		values       []string
	}{
		{"expect.left_running", string(e.LeftRunning), e.LeftRunning.Values()},
		{"expect.network_denied", string(e.NetworkDenied), e.NetworkDenied.Values()},
		{"expect.dns_refused", string(e.DNSRefused), e.DNSRefused.Values()},
		{"expect.persistence", string(e.Persistence), e.Persistence.Values()},
		{"expect.credentials", string(e.Credentials), e.Credentials.Values()},
	} {
		if err := p.enum(v.field, v.value, v.values); err != nil {
			return err
		}
	}
	for i, l := range e.Listeners {
		if _, err := ParseListener(l.String()); err != nil || l.Port < 0 {
			return p.invalid(fmt.Sprintf("expect.listeners[%d]", i), listenerHint, "%q is not a listener", l.String())
		}
	}
	for i, g := range e.Writes {
		if err := checkGlob(g, true); err != nil {
			return p.invalid(fmt.Sprintf("expect.writes[%d]", i), err.(*valueError).hint, "%s", err)
		}
	}
	for i, g := range e.Execs {
		if err := checkGlob(g, false); err != nil {
			return p.invalid(fmt.Sprintf("expect.execs[%d]", i), err.(*valueError).hint, "%s", err)
		}
	}
	return nil
}

func checkGlob(g string, mustBeAbs bool) error {
	if g == "" {
		return badValue("remove the empty entry", "empty glob")
	}
	if mustBeAbs && !strings.HasPrefix(g, "/") {
		return badValue("write an absolute glob such as /tmp/** or /work/out/*.txt", "%q is not absolute", g)
	}
	if _, err := path.Match(strings.ReplaceAll(g, "**", "*"), ""); err != nil {
		return badValue("globs use * ? [abc] and ** (any depth)", "%q is not a valid glob", g)
	}
	return nil
}

func (p *Profile) validateUser() error {
	if p.User == nil {
		return nil
	}
	for _, id := range []struct {
		field string
		v     *int64
	}{{"user.uid", p.User.UID}, {"user.gid", p.User.GID}} {
		if id.v != nil && (*id.v < 0 || *id.v >= math.MaxUint32) {
			return p.invalid(id.field, "ids are 0 to 4294967294", "%d is out of range", *id.v)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
