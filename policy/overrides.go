package policy

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Overrides are the command-line flags that change a profile for one run. Zero values keep the
// profile's setting.
type Overrides struct {
	Allow   []string      // --allow DEST (see ParseDest); any entry switches network.mode to contract
	RW      []string      // --rw PATH: share the host path read-write at the same path, add it to Landlock write
	RO      []string      // --ro PATH: share the host path read-only at the same path
	Env     []string      // -e NAME passes NAME from the caller's environment; -e NAME=VALUE sets it
	Timeout time.Duration // --timeout: > 0 replaces limits.timeout
	Memory  string        // --memory SIZE: replaces limits.memory ("0" removes the limit)
	Disk    string        // --disk SIZE: replaces limits.disk
	Pids    int64         // --pids: > 0 replaces limits.pids
	CPUs    float64       // --cpus: > 0 replaces limits.cpu
	// UplinkNetNS (--uplink-netns) replaces network.uplink_netns; DNSUpstream (--dns-upstream) replaces
	// network.dns.upstream. Both are for tests and dedicated egress namespaces.
	UplinkNetNS string
	DNSUpstream string
	// ApplyMode (--apply, --apply=MODE) replaces filesystem.apply.
	ApplyMode string
	// Toolchains (--toolchains auto|none|NAME,...) replaces filesystem.toolchains.
	Toolchains string
}

// flagError is an *Error about a command-line value; it has no file position.
func flagError(hint, format string, args ...any) *Error {
	return &Error{Msg: fmt.Sprintf(format, args...), Hint: hint, Err: ErrInvalid}
}

// Apply returns a copy of the resolved profile p with the overrides laid over it, validated. Relative
// --rw and --ro paths are taken from cwd. Environment values are not put into the profile (Compile
// handles -e), so that they appear neither in sbx profile show nor in Plan.Hash.
func (o Overrides) Apply(p *Profile, cwd string) (*Profile, error) {
	q := merge(&Profile{}, p)
	if err := o.applyNetwork(q); err != nil {
		return nil, err
	}
	if err := o.applyShares(q, cwd); err != nil {
		return nil, err
	}
	if err := o.applyLimits(q); err != nil {
		return nil, err
	}
	if o.ApplyMode != "" {
		if err := checkEnum(o.ApplyMode, ApplyMode("").Values()); err != nil {
			return nil, flagError("--apply takes never, on-pass (the default of --apply) or always", "--apply=%s: unknown mode", o.ApplyMode)
		}
		q.Filesystem.Apply = ApplyMode(o.ApplyMode)
	}
	if o.Toolchains != "" {
		t, err := ParseToolchains(o.Toolchains)
		if err != nil {
			return nil, flagError(err.(*valueError).hint, "--toolchains %s: %s", o.Toolchains, err)
		}
		q.Filesystem.Toolchains = t
	}
	if _, _, err := splitEnvFlags(o.Env); err != nil {
		return nil, err
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	return q, nil
}

func (o Overrides) applyNetwork(q *Profile) error {
	for _, s := range o.Allow {
		r, err := parseDest(s)
		if err != nil {
			return flagError(err.(*valueError).hint, "--allow %q: %s", s, err)
		}
		q.Network.Mode = ModeContract
		if !containsValueOf(q.Network.Allow, r) {
			q.Network.Allow = append(q.Network.Allow, r)
		}
	}
	if o.UplinkNetNS != "" {
		q.Network.UplinkNetNS = o.UplinkNetNS
	}
	if o.DNSUpstream != "" {
		q.Network.DNS.Upstream = o.DNSUpstream
	}
	return nil
}

func containsValueOf[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func (o Overrides) applyShares(q *Profile, cwd string) error {
	for _, f := range []struct {
		flag  string
		paths []string
		mode  ShareMode
	}{{"--ro", o.RO, ShareRO}, {"--rw", o.RW, ShareRW}} {
		for _, path := range f.paths {
			abs, err := absFrom(cwd, path)
			if err != nil {
				return flagError("give an absolute path", "%s %q: %s", f.flag, path, err)
			}
			share := ShareConfig{Host: abs, Mode: f.mode}
			q.Filesystem.Share = replaceShare(q.Filesystem.Share, share)
		}
	}
	return nil
}

func replaceShare(shares []ShareConfig, s ShareConfig) []ShareConfig {
	for i, old := range shares {
		if old.target() == s.target() {
			shares[i] = s
			return shares
		}
	}
	return append(shares, s)
}

func absFrom(cwd, path string) (string, error) {
	switch {
	case path == "":
		return "", fmt.Errorf("empty path")
	case filepath.IsAbs(path):
		return filepath.Clean(path), nil
	case cwd == "":
		return "", fmt.Errorf("relative path and no working directory")
	}
	return filepath.Join(cwd, path), nil
}

func (o Overrides) applyLimits(q *Profile) error {
	for _, s := range []struct {
		flag, value string
		dst         **Size
	}{{"--memory", o.Memory, &q.Limits.Memory}, {"--disk", o.Disk, &q.Limits.Disk}} {
		if s.value == "" {
			continue
		}
		n, err := ParseSize(s.value)
		if err != nil {
			return flagError(sizeHint, "%s %q: %s", s.flag, s.value, err)
		}
		size := Size(n)
		*s.dst = &size
	}
	if o.Timeout < 0 {
		return flagError(durationHint, "--timeout %s is negative", o.Timeout)
	}
	if o.Timeout > 0 {
		d := Duration(o.Timeout)
		q.Limits.Timeout = &d
	}
	if o.Pids > 0 {
		q.Limits.Pids = &o.Pids
	}
	if o.CPUs > 0 {
		q.Limits.CPU = &o.CPUs
	}
	return nil
}

// splitEnvFlags splits -e values into names to pass and NAME=VALUE pairs to set. Errors name the
// variable, never its value.
func splitEnvFlags(flags []string) (pass []string, set map[string]string, err error) {
	set = map[string]string{}
	for _, f := range flags {
		name, value, hasValue := strings.Cut(f, "=")
		if !envNameRE.MatchString(name) {
			return nil, nil, flagError("write -e NAME to pass a variable or -e NAME=VALUE to set one", "-e %q is not a variable name", name)
		}
		if hasValue {
			set[name] = value
		} else {
			pass = append(pass, name)
		}
	}
	return pass, set, nil
}
