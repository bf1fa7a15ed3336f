package policy

// Profile is one profile as written in YAML. A Profile returned by Load is resolved (extends merged in)
// and valid. Unset scalars are nil pointers or empty strings, so that extends can tell "not said" from
// "said zero"; the defaults are applied by Compile and documented on each field.
type Profile struct {
	Version     int              `yaml:"version" doc:"schema version; must be 1"`
	Name        string           `yaml:"name,omitempty" doc:"profile name; defaults to the file name without .yaml"`
	Description string           `yaml:"description,omitempty" doc:"one line saying what the profile is for"`
	Extends     string           `yaml:"extends,omitempty" doc:"built-in profile name or path (relative to this file) to inherit from"`
	Filesystem  FilesystemConfig `yaml:"filesystem,omitempty" doc:"Landlock rules, hidden paths and host paths shared in"`
	Syscalls    SyscallsConfig   `yaml:"syscalls,omitempty" doc:"seccomp filter"`
	Network     NetworkConfig    `yaml:"network,omitempty" doc:"network contract"`
	Limits      LimitsConfig     `yaml:"limits,omitempty" doc:"resource limits"`
	Env         EnvConfig        `yaml:"env,omitempty" doc:"environment passed to the command; everything else is scrubbed"`
	Expect      ExpectConfig     `yaml:"expect,omitempty" doc:"what the command may do and leave behind; anything else is a violation"`
	User        *UserConfig      `yaml:"user,omitempty" doc:"user the command runs as inside the sandbox"`

	file string // where the profile came from, for errors
	base string // the directory a relative file (and its extends) is taken in: "" the current one
	// sources are the files read to make a resolved profile: its own and those it extends, built-ins
	// left out (see Files).
	sources []string
	pos     map[string]Pos // field path ("network.allow", "network.allow[2]") → where it was written
}

// FilesystemConfig is the file-system section.
type FilesystemConfig struct {
	Read     []string      `yaml:"read,omitempty" doc:"absolute paths the command may read and execute (Landlock)"`
	Write    []string      `yaml:"write,omitempty" doc:"absolute paths the command may read, write, create and remove in (Landlock)"`
	WriteCwd *bool         `yaml:"write_cwd,omitempty" doc:"the working directory is writable; default true"`
	Hidden   []string      `yaml:"hidden,omitempty" doc:"absolute paths replaced by an empty directory or an empty file"`
	Share    []ShareConfig `yaml:"share,omitempty" doc:"host paths bind-mounted into the sandbox"`
	Landlock LandlockMode  `yaml:"landlock,omitempty" doc:"required (default: fail when Landlock cannot be applied) or degrade (run without it)"`
	// Toolchains: see Cache.
	Toolchains Toolchains `yaml:"toolchains,omitempty" doc:"auto, none (default) or a list of go, npm, pip, cargo, maven: the caller's caches of those toolchains shown at their own paths, read-only below a throwaway writable layer, with the tools' variables pointing at them"`
	Apply      ApplyMode  `yaml:"apply,omitempty" doc:"what the working directory's changes do on the host: never (default: discarded at teardown), on-pass (applied when the verdict is pass) or always (applied whatever the verdict; persistence findings are withheld)"`
	// RecordWrites: see Plan.Record.Writes.
	RecordWrites *bool `yaml:"record_writes,omitempty" doc:"record each open for writing, mkdir, mknod, rename, link or symlink outside the write paths (refused by Landlock) in the report's denials; default true"`
}

// ShareConfig is one host path made visible inside the sandbox.
type ShareConfig struct {
	Host string    `yaml:"host" doc:"absolute host path"`
	Path string    `yaml:"path,omitempty" doc:"absolute path inside the sandbox; default: the host path"`
	Mode ShareMode `yaml:"mode,omitempty" doc:"ro (default) or rw; rw also adds the path to Landlock write"`
}

// SyscallsConfig is the seccomp section.
type SyscallsConfig struct {
	Base  SyscallBase `yaml:"base,omitempty" doc:"docker-default (default) or none (allow everything not denied)"`
	Deny  []string    `yaml:"deny,omitempty" doc:"syscalls that fail with errno, on top of sbx's built-in deny list"`
	Allow []string    `yaml:"allow,omitempty" doc:"syscalls allowed even when the base or the built-in deny list refuses them"`
	Errno string      `yaml:"errno,omitempty" doc:"errno name denied syscalls return; default EPERM"`
	// AllowSetID: see SetIDSyscalls.
	AllowSetID bool `yaml:"allow_setid,omitempty" doc:"let chmod and its kin set the set-user-ID and set-group-ID bits; by default they fail with EPERM (recorded)"`
	// Record: see Plan.Record.Syscalls.
	Record *bool `yaml:"record,omitempty" doc:"record each refused deny-list syscall with its arguments (seccomp user notification) in the report's denials; default true"`
}

// NetworkConfig is the network section. Entries are DEST strings or mappings (see ParseDest).
type NetworkConfig struct {
	Mode        NetworkMode `yaml:"mode,omitempty" doc:"none (default: loopback only) or contract (egress by allow list)"`
	Allow       []NetRule   `yaml:"allow,omitempty" doc:"destinations the command may reach (contract mode)"`
	Deny        []NetRule   `yaml:"deny,omitempty" doc:"destinations refused on top of the always-denied ranges"`
	Except      []NetRule   `yaml:"except,omitempty" doc:"explicit exceptions to the always-denied ranges (metadata, private, link-local)"`
	DNS         DNSConfig   `yaml:"dns,omitempty" doc:"DNS filter"`
	Ingress     []Listener  `yaml:"ingress,omitempty" doc:"ports of the sandbox reachable from the uplink side, tcp:8080, udp:5353, tcp:*; default none"`
	UplinkNetNS string      `yaml:"uplink_netns,omitempty" doc:"network namespace (name or path) the sandbox's uplink goes into; default: the host's"`
}

// DNSConfig is the DNS filter of contract mode.
type DNSConfig struct {
	Upstream string   `yaml:"upstream,omitempty" doc:"resolver the filter forwards to, ip:port; default: the host's first nameserver"`
	Allow    []string `yaml:"allow,omitempty" doc:"names that resolve, exact or *.suffix; host names of network.allow are added"`
}

// LimitsConfig is the resource-limits section.
type LimitsConfig struct {
	Memory  *Size             `yaml:"memory,omitempty" doc:"memory limit, e.g. 512MiB, 1GiB; 0 = none"`
	Disk    *Size             `yaml:"disk,omitempty" doc:"size of the overlay's writable layer, e.g. 1GiB; 0 = sbx's default"`
	Pids    *int64            `yaml:"pids,omitempty" doc:"maximum number of processes and threads; 0 = none"`
	CPU     *float64          `yaml:"cpu,omitempty" doc:"CPU cores, e.g. 1.5; 0 = none"`
	NoFile  *int64            `yaml:"nofile,omitempty" doc:"open files per process (RLIMIT_NOFILE), at least 64; 0 = inherit"`
	Timeout *Duration         `yaml:"timeout,omitempty" doc:"kill the whole sandbox after this long, e.g. 30s, 5m; 0 or none = no timeout"`
	Require LimitsRequirement `yaml:"require,omitempty" doc:"cgroup: refuse to run where the limits cannot be cgroup limits (sbx without root on a host without a delegated cgroup); unset: rlimits stand in and the report's notes say which limit holds"`
}

// EnvConfig is the environment section. PATH, LANG, LC_* and TERM always pass; HOME is /tmp.
type EnvConfig struct {
	Pass []string          `yaml:"pass,omitempty" doc:"names (or globs such as LC_*) passed from the caller's environment"`
	Set  map[string]string `yaml:"set,omitempty" doc:"variables set to fixed values"`
}

// ExpectConfig is the expectations section: what a run may do and leave behind.
type ExpectConfig struct {
	LeftRunning   Permission `yaml:"left_running,omitempty" doc:"allow or deny (default) processes alive after the command exits"`
	Listeners     []Listener `yaml:"listeners,omitempty" doc:"listeners allowed at the end: tcp:8080, udp:5353, tcp:*, unix:*"`
	NetworkDenied Reaction   `yaml:"network_denied,omitempty" doc:"violation (default) or ignore: what a refused network attempt is"`
	DNSRefused    Reaction   `yaml:"dns_refused,omitempty" doc:"violation (default) or ignore: what a refused DNS query is"`
	Writes        Globs      `yaml:"writes,omitempty" doc:"globs of sandbox paths writes may land in; unset = anywhere Landlock allows"`
	Execs         Globs      `yaml:"execs,omitempty" doc:"globs of executables that may run; unset = any"`
	Credentials   Permission `yaml:"credentials,omitempty" doc:"allow or deny (default) reading the decoy secrets the sandbox shows where secrets live (SSH keys, cloud and registry tokens, ...), or sending or leaving their values (listed either way)"`
	Persistence   Permission `yaml:"persistence,omitempty" doc:"allow or deny (default) persistence: cron, shell start-up files, authorized_keys, git hooks, ... written or tried (listed either way)"`
}

// UserConfig is the user the command runs as.
type UserConfig struct {
	UID *int64 `yaml:"uid,omitempty" doc:"user id inside the sandbox; default: the invoking user under sudo, else 65534 (nobody); 0 runs as root"`
	GID *int64 `yaml:"gid,omitempty" doc:"group id inside the sandbox; default: the uid"`
}

// Globs is a list of path globs where nil (not set) and empty (nothing matches) differ.
type Globs []string

// IsZero makes yaml's omitempty drop only an unset list, keeping an explicit [].
func (g Globs) IsZero() bool { return g == nil }

// File returns the file the profile was read from ("builtin:NAME" for built-ins, "" if built in code).
func (p *Profile) File() string { return p.file }

// at returns where path was written, falling back from "a.b[3]" to "a.b" to "a" to the file itself.
func (p *Profile) at(path string) Pos {
	for path != "" {
		if pos, ok := p.pos[path]; ok {
			return pos
		}
		path = parentPath(path)
	}
	return Pos{File: p.file}
}

func parentPath(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '.' || path[i] == '[' {
			return path[:i]
		}
	}
	return ""
}
