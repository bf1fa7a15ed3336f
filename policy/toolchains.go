package policy

import (
	"cmp"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Toolchains is filesystem.toolchains: "auto" (every toolchain sbx knows), "none", or the names of
// some, joined by commas; "" is unset (none).
type Toolchains string

// Toolchain settings.
const (
	ToolchainsAuto Toolchains = "auto"
	ToolchainsNone Toolchains = "none"
)

// ToolchainNames are the toolchains whose caches filesystem.toolchains can share, in the order their
// caches are mounted.
var ToolchainNames = []string{"go", "npm", "pip", "cargo", "maven"}

// Names are the toolchains t shares, nil for none.
func (t Toolchains) Names() []string {
	switch t {
	case "", ToolchainsNone:
		return nil
	case ToolchainsAuto:
		return slices.Clone(ToolchainNames)
	}
	return strings.Split(string(t), ",")
}

// ParseToolchains reads auto, none or a comma-separated list of toolchain names (--toolchains).
func ParseToolchains(s string) (Toolchains, error) {
	s = strings.TrimSpace(s)
	if s == string(ToolchainsAuto) || s == string(ToolchainsNone) {
		return Toolchains(s), nil
	}
	return toolchainList(strings.Split(s, ","))
}

func toolchainList(names []string) (Toolchains, error) {
	var out []string
	for _, n := range names {
		n = strings.TrimSpace(n)
		if !slices.Contains(ToolchainNames, n) {
			return "", badValue(suggestOr(n, append([]string{"auto", "none"}, ToolchainNames...), "use auto, none or a list of: "+strings.Join(ToolchainNames, ", ")),
				"unknown toolchain %q", n)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return ToolchainsNone, nil
	}
	return Toolchains(strings.Join(out, ",")), nil
}

func (t *Toolchains) unmarshalNode(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		names := make([]string, 0, len(n.Content))
		for _, c := range n.Content {
			s, err := scalarString(c)
			if err != nil {
				return err
			}
			names = append(names, s)
		}
		v, err := toolchainList(names)
		if err != nil {
			return err
		}
		*t = v // an empty list is none
		return nil
	}
	s, err := scalarString(n)
	if err != nil {
		return err
	}
	v, err := ParseToolchains(s)
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// MarshalYAML writes auto and none as they are, a list of names as a list.
func (t Toolchains) MarshalYAML() (any, error) {
	if t == ToolchainsAuto || t == ToolchainsNone {
		return string(t), nil
	}
	return t.Names(), nil
}

// Cache is a directory of the caller's that a toolchain keeps its downloads or build results in,
// which the sandbox shows at the same path (filesystem.toolchains): read-only, below a writable layer
// of the sandbox's own that is thrown away with it. The same path as on the host, so that what the
// caches hold matches: Go's build cache keys compiled packages by their source paths (the module
// cache's), cargo's fingerprints name the registry's sources; the tool is pointed at it by Env, since
// the command's HOME is not the caller's.
type Cache struct {
	Toolchain string // one of ToolchainNames
	What      string // "Go module cache", for the report
	Host      string // absolute, cleaned; the sandbox path too
	// Env is NAME=VALUE that points the tool at the cache, set when the command's environment has no
	// NAME of its own (the profile's env.set, -e); "" for none.
	Env string
	// Named: the toolchain was named (a list, not auto): a cache that is missing gets a note.
	Named bool
}

// compileCaches lists the caches of the toolchains t names, found as each tool finds them without
// running it: its variables in the caller's environment, else its defaults below the caller's HOME.
// Whether each exists is the sandbox's to see. A cache at or below another one listed before it, or
// holding the working directory or lying in it, is left out (the working directory is the command's
// own tree).
func compileCaches(t Toolchains, caller []string, cwd string) []Cache {
	names := t.Names()
	named := t != ToolchainsAuto
	home := absEnv(caller, "HOME")
	under := func(base string, rel ...string) string {
		if base == "" {
			return ""
		}
		return filepath.Join(append([]string{base}, rel...)...)
	}
	cacheHome := cmp.Or(absEnv(caller, "XDG_CACHE_HOME"), under(home, ".cache"))
	var out []Cache
	add := func(tool, what, host, env string) {
		if host == "" || host == "/" {
			return
		}
		for _, c := range out {
			if Within(host, c.Host) || Within(c.Host, host) {
				return
			}
		}
		if cwd != "" && (Within(cwd, host) || Within(host, cwd)) {
			return
		}
		if env != "" {
			env += "=" + host
		}
		out = append(out, Cache{Toolchain: tool, What: what, Host: host, Env: env, Named: named})
	}
	for _, n := range names {
		switch n {
		case "go":
			gopath := ""
			if first, _, _ := strings.Cut(lookupEnv(caller, "GOPATH"), ":"); filepath.IsAbs(first) {
				gopath = filepath.Clean(first)
			}
			add(n, "Go module cache", cmp.Or(absEnv(caller, "GOMODCACHE"), under(gopath, "pkg", "mod"), under(home, "go", "pkg", "mod")), "GOMODCACHE")
			add(n, "Go build cache", cmp.Or(absEnv(caller, "GOCACHE"), under(cacheHome, "go-build")), "GOCACHE")
		case "npm":
			add(n, "npm cache", cmp.Or(absEnv(caller, "npm_config_cache"), absEnv(caller, "NPM_CONFIG_CACHE"), under(home, ".npm")), "npm_config_cache")
		case "pip":
			add(n, "pip cache", cmp.Or(absEnv(caller, "PIP_CACHE_DIR"), under(cacheHome, "pip")), "PIP_CACHE_DIR")
		case "cargo":
			add(n, "cargo home (its credentials hidden)", cmp.Or(absEnv(caller, "CARGO_HOME"), under(home, ".cargo")), "CARGO_HOME")
			add(n, "rustup toolchains", cmp.Or(absEnv(caller, "RUSTUP_HOME"), under(home, ".rustup")), "RUSTUP_HOME")
		case "maven":
			// Maven takes its repository from user.home, which is the sandbox's HOME (its passwd
			// entry): maven.repo.local points it at the caller's.
			host := under(home, ".m2", "repository")
			out0 := len(out)
			add(n, "Maven repository", host, "")
			if len(out) > out0 {
				out[len(out)-1].Env = "MAVEN_OPTS=-Dmaven.repo.local=" + host
			}
		}
	}
	return out
}

// CredentialNames are the files sbx hides at the top of a shared cache (a whiteout in its layer),
// should one be there: registry tokens (cargo's credentials, npm's .npmrc), Maven's settings with
// server passwords, pip's configuration with an index URL's password, netrc and git's stored
// credentials. The caches sbx shares keep none of these (each tool keeps them beside its cache, in
// the home directory, which stays hidden) but for cargo's home.
var CredentialNames = []string{"credentials", "credentials.toml", ".npmrc", "settings.xml", "settings-security.xml", "pip.conf", ".netrc", ".git-credentials", ".pypirc"}

// absEnv is the caller's variable key when it holds an absolute path, cleaned; else "".
func absEnv(env []string, key string) string {
	if v := lookupEnv(env, key); filepath.IsAbs(v) {
		return filepath.Clean(v)
	}
	return ""
}
