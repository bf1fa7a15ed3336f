package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// Plan is a validated profile compiled into plain data: what sandbox needs to build the run and what
// Compare needs to judge it. It holds no YAML and makes no syscalls.
type Plan struct {
	Profile    string // the profile's name
	Filesystem Filesystem
	Seccomp    *specs.LinuxSeccomp // nil: no seccomp filter (only when the profile says base: none and lists nothing)
	Limits     Limits
	Env        []string // the command's environment, KEY=VALUE, already scrubbed and resolved
	Network    Network
	Expect     Expect
	Record     Record
	Timeout    time.Duration // 0: none
	UID, GID   int           // user the command runs as inside the sandbox
	Notes      []string      // what compiling changed that the report should say (a PATH entry left out)

	resolved *Profile // the profile with the overrides applied, for Hash
}

// Hash is the sha256 of the profile the plan was compiled from, with the overrides applied, as Marshal
// writes it (what sbx profile show prints), in hex; "" for a plan not made by Compile. It is worked out
// when asked: a run does not need it, and marshalling the profile was a tenth of Compile's time.
func (p *Plan) Hash() string {
	if p.resolved == nil {
		return ""
	}
	text, err := p.resolved.Marshal()
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(text)
	return hex.EncodeToString(sum[:])
}

// Filesystem is the file-system side of the sandbox.
type Filesystem struct {
	// Landlock rules the supervisor applies before it starts the command. Paths are as seen inside the sandbox; a path that
	// does not exist there is skipped.
	Read  []string // read and execute
	Write []string // read, write, create, remove (includes Read rights)
	// WriteCwd adds the working directory to Write.
	WriteCwd bool
	// LandlockDegrade lets the run go on without Landlock when the kernel or the filter cannot apply it.
	// False (the default) fails closed.
	LandlockDegrade bool
	Hidden          []string // paths replaced by an empty directory or /dev/null
	Shares          []Share  // host paths bind-mounted in
	// Caches are the toolchain caches of the caller's shown at their own paths, read-only below a
	// writable layer thrown away with the sandbox (filesystem.toolchains); those missing on the host
	// are left out by the sandbox.
	Caches []Cache
	// KnownCaches are every toolchain's caches, shown or not, for the report's hint when a command
	// that fails ran a toolchain whose cache the sandbox does not show.
	KnownCaches []Cache
	// Apply is what the working directory's changes do on the host: report.ApplyNever, ApplyOnPass or
	// ApplyAlways.
	Apply string
}

// Share is a host path visible inside the sandbox.
type Share struct {
	Host     string
	Sandbox  string
	Writable bool
}

// Limits are resource limits of the sandbox's cgroup and rlimits.
type Limits struct {
	MemoryBytes int64   // 0: none
	Pids        int64   // 0: none
	CPUs        float64 // 0: none; 1.5 = one and a half cores
	NoFile      uint64  // RLIMIT_NOFILE; 0: inherit
	DiskBytes   int64   // size of the overlay's writable layer; 0: sbx's default
	// RequireCgroup refuses a sandbox whose limits cannot be cgroup limits (limits.require: cgroup).
	RequireCgroup bool
}

// Network modes.
const (
	NetNone     = "none"
	NetContract = "contract"
)

// Network is the network contract.
type Network struct {
	Mode        string    // NetNone or NetContract
	Allow       []NetRule // egress allowed (addresses or host names)
	Deny        []NetRule // extra denies on top of the built-in always-deny ranges
	Except      []NetRule // exact exceptions to the always-deny ranges, named on purpose by the profile
	DNS         DNS
	Ingress     []Listener // inbound ports open to the uplink side (tcp or udp; port 0 = any); nil = none
	UplinkNetNS string     // name or path of the namespace the veth peer goes into; "" = the host's
}

// NetRule is one destination as written: exactly one of Host, CIDR is set. An IP is a /32 or /128 CIDR.
// What it lets through is its Dest; Compile fills in Proto.
type NetRule struct {
	Host  string // DNS name or *.suffix, resolved through the DNS filter
	CIDR  string // "203.0.113.7/32", "2001:db8::/64"
	Proto string // "tcp" or "udp"; "": tcp and udp (in a profile's allow and except lists: tcp)
	Port  int    // 0: any port
	// PortEnd makes Port..PortEnd a range; 0 means a single port.
	PortEnd int
}

// DNS is the DNS filter's configuration.
type DNS struct {
	Upstream string   // resolver the filter forwards to, "ip:port"; "" = the host's first nameserver
	Allow    []string // names (and "*.suffix" wildcards) that resolve; the Host entries of Allow are added
}

// Expect is what the command may do and leave behind. Anything else is a violation.
type Expect struct {
	LeftRunning           bool       // processes may stay alive after the command exits
	Listeners             []Listener // listeners allowed at the after snapshot
	DeniedIsViolation     bool       // denied network attempts are violations
	DNSRefusedIsViolation bool       // refused DNS queries are violations
	Writes                []string   // globs of sandbox paths writes may land in; nil = anywhere Landlock allows
	Execs                 []string   // globs of executables that may be run; nil = any
	PersistenceAllowed    bool       // persistence findings are listed but are no violations
	CredentialsAllowed    bool       // accesses to decoy secrets are listed but are no violations
}

// Record is what sbx records of what the sandbox refused, by its own means (kernel audit is usually
// off): the sandbox turns these into seccomp user notifications that sbx answers.
type Record struct {
	// Syscalls are the deny-list syscalls to record; each is still refused with the profile's errno.
	// Empty: the deny list stays a plain errno rule.
	Syscalls []string
	// Writes records opens for writing (and mkdir, mknod, rename, link, symlink) whose path lies
	// outside the Landlock write paths; they are let through to the kernel, which refuses them.
	Writes bool
}

// Listener is an allowed listener, "tcp:8080"; Port 0 means any port; Proto "unix" with Port 0 is "unix:*".
type Listener struct {
	Proto string // tcp udp unix (tcp also matches tcp6, udp matches udp6)
	Port  int
}
