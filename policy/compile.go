package policy

import (
	"cmp"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CompileContext is what Compile needs from the caller besides the profile.
type CompileContext struct {
	Cwd       string   // the caller's working directory (also the command's); resolves relative --rw/--ro
	CallerEnv []string // the caller's environment, KEY=VALUE (os.Environ())
	Overrides Overrides
}

// Defaults applied by Compile to what a profile leaves unset.
const (
	DefaultHome = "/tmp"
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// BaseEnvPass are the variables every run passes from the caller (when set there): where to find
// programs, and how to show text and time (TZ, as LANG: a command's timestamps read as on the host).
var BaseEnvPass = []string{"PATH", "LANG", "LC_*", "TZ", "TERM"}

// Compile turns a resolved profile (from Load) into the Plan sandbox runs, after laying the overrides
// over it. Plan.Hash is the sha256 of the profile with the overrides applied, as Marshal writes it.
func Compile(p *Profile, ctx CompileContext) (*Plan, error) {
	q, err := ctx.Overrides.Apply(p, ctx.Cwd)
	if err != nil {
		return nil, err
	}
	sc, err := compileSeccomp(q.Syscalls)
	if err != nil {
		return nil, err
	}
	plan := &Plan{
		Profile:    q.Name,
		Filesystem: compileFilesystem(q.Filesystem),
		Seccomp:    sc,
		Limits:     compileLimits(q.Limits),
		Network:    compileNetwork(q.Network),
		Expect:     compileExpect(q.Expect),
		Record:     compileRecord(q),
		resolved:   q,
	}
	plan.Filesystem.Caches = compileCaches(q.Filesystem.Toolchains, ctx.CallerEnv, ctx.Cwd)
	plan.Filesystem.KnownCaches = compileCaches(ToolchainsAuto, ctx.CallerEnv, ctx.Cwd)
	plan.Env, plan.Notes = compileEnv(q.Env, ctx.CallerEnv, ctx.Overrides.Env, plan.Filesystem, ctx.Cwd)
	if t := q.Limits.Timeout; t != nil {
		plan.Timeout = time.Duration(*t)
	}
	plan.UID, plan.GID = defaultUser(ctx.CallerEnv)
	if u := q.User; u != nil {
		if u.UID != nil {
			plan.UID, plan.GID = int(*u.UID), int(*u.UID)
		}
		if u.GID != nil {
			plan.GID = int(*u.GID)
		}
	}
	return plan, nil
}

// DefaultUID is the dedicated user a command runs as when the profile names none and sbx was not
// started through sudo: nobody, which owns nothing on the host.
const DefaultUID = 65534

// defaultUser is the invoking user when sbx runs through sudo, otherwise DefaultUID. Root only when the
// profile asks for it: sudo by root itself does not count.
func defaultUser(callerEnv []string) (uid, gid int) {
	uid, gid = DefaultUID, DefaultUID
	if v, err := strconv.Atoi(lookupEnv(callerEnv, "SUDO_UID")); err == nil && v > 0 {
		uid, gid = v, v
		if g, err := strconv.Atoi(lookupEnv(callerEnv, "SUDO_GID")); err == nil && g > 0 {
			gid = g
		}
	}
	return uid, gid
}

func lookupEnv(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

func compileFilesystem(f FilesystemConfig) Filesystem {
	out := Filesystem{
		Read:            slices.Clone(f.Read),
		Write:           slices.Clone(f.Write),
		WriteCwd:        f.WriteCwd == nil || *f.WriteCwd,
		LandlockDegrade: f.Landlock == LandlockDegrade,
		Apply:           cmp.Or(string(f.Apply), string(ApplyNever)),
		Hidden:          slices.Clone(f.Hidden),
	}
	for _, s := range f.Share {
		share := Share{Host: s.Host, Sandbox: s.target(), Writable: s.Mode == ShareRW}
		out.Shares = append(out.Shares, share)
		if share.Writable {
			out.Write = appendNew(out.Write, share.Sandbox)
		} else {
			out.Read = appendNew(out.Read, share.Sandbox)
		}
	}
	return out
}

func appendNew[T comparable](list []T, vs ...T) []T {
	for _, v := range vs {
		if !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	return list
}

func compileLimits(l LimitsConfig) Limits {
	var out Limits
	if l.Memory != nil {
		out.MemoryBytes = int64(*l.Memory)
	}
	if l.Disk != nil {
		out.DiskBytes = int64(*l.Disk)
	}
	if l.Pids != nil {
		out.Pids = *l.Pids
	}
	if l.CPU != nil {
		out.CPUs = *l.CPU
	}
	if l.NoFile != nil {
		out.NoFile = uint64(*l.NoFile)
	}
	out.RequireCgroup = l.Require == RequireCgroup
	return out
}

// compileEnv builds the command's environment: the caller's variables matching BaseEnvPass, env.pass
// or a -e NAME flag; HOME=/tmp; then env.set and -e NAME=VALUE, later ones winning. Everything else in
// the caller's environment is scrubbed. PATH falls back to DefaultPath; PATH and SHELL then follow what
// the sandbox shows (visibleEnv), which notes returns. The result is sorted.
func compileEnv(e EnvConfig, caller, flags []string, fs Filesystem, cwd string) (out, notes []string) {
	flagPass, flagSet, _ := splitEnvFlags(flags) // Apply has checked them
	patterns := slices.Concat(BaseEnvPass, e.Pass, flagPass)
	env := map[string]string{}
	for _, kv := range caller {
		name, value, ok := strings.Cut(kv, "=")
		if ok && name != "" && matchesAny(patterns, name) {
			env[name] = value
		}
	}
	env["HOME"] = DefaultHome
	for _, set := range []map[string]string{e.Set, flagSet} {
		for k, v := range set {
			env[k] = v
		}
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = DefaultPath
	}
	_, shellSet := env["SHELL"]
	notes = visibleEnv(env, fs, cwd, lookupEnv(caller, "SHELL"), shellSet)
	out = make([]string, 0, len(env))
	for _, k := range sortedKeys(env) {
		out = append(out, k+"="+env[k])
	}
	return out, notes
}

func matchesAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// compileNetwork fills protocols: allow and except entries without one are tcp; deny entries without
// one cover tcp and udp. The host names of allow entries are added to the DNS filter's allow list.
func compileNetwork(n NetworkConfig) Network {
	out := Network{
		Mode:        string(n.Mode),
		DNS:         DNS{Upstream: n.DNS.Upstream},
		Ingress:     slices.Clone(n.Ingress),
		UplinkNetNS: n.UplinkNetNS,
	}
	if out.Mode == "" {
		out.Mode = NetNone
	}
	for _, r := range n.Allow {
		out.Allow = appendNew(out.Allow, r.orProto("tcp"))
	}
	for _, r := range n.Except {
		out.Except = appendNew(out.Except, r.orProto("tcp"))
	}
	for _, r := range n.Deny {
		if r.Proto != "" {
			out.Deny = appendNew(out.Deny, r)
			continue
		}
		out.Deny = appendNew(out.Deny, r.orProto("tcp"), r.orProto("udp"))
	}
	for _, name := range n.DNS.Allow {
		out.DNS.Allow = appendNew(out.DNS.Allow, strings.TrimSuffix(strings.ToLower(name), "."))
	}
	for _, r := range out.Allow {
		if r.Host != "" {
			out.DNS.Allow = appendNew(out.DNS.Allow, r.Host)
		}
	}
	return out
}

func compileExpect(e ExpectConfig) Expect {
	out := Expect{
		LeftRunning:           e.LeftRunning == PermAllow,
		Listeners:             slices.Clone(e.Listeners),
		DeniedIsViolation:     e.NetworkDenied != ReactIgnore,
		DNSRefusedIsViolation: e.DNSRefused != ReactIgnore,
		PersistenceAllowed:    e.Persistence == PermAllow,
		CredentialsAllowed:    e.Credentials == PermAllow,
	}
	if e.Writes != nil {
		out.Writes = append([]string{}, e.Writes...)
	}
	if e.Execs != nil {
		out.Execs = append([]string{}, e.Execs...)
	}
	return out
}
