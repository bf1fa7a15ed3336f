// Package policy owns sbx profiles: the YAML schema, decoding with file:line:column errors, validation,
// inheritance through extends, the compilation of a profile into a Plan for the sandbox package, what a
// network rule means, and Compare, which turns the observations of a run into a verdict.
//
// # Network rules
//
// A NetRule is a destination as written (ParseDest reads "host:port", "cidr:port", "udp:..."); Dest is
// what it means to the network contract: a Name pattern or an address prefix, protocols and a port
// range, with the defaults spelt out (no protocol means tcp and udp in a Plan; no port means every port;
// a bare address is a /32 or /128; an IPv4-mapped range is the IPv4 range it reaches). Name matches DNS
// names label by label without regard to ASCII case, a wildcard only below its suffix and never over a
// cloud metadata name (MetadataNames). Dest.Covers says whether one rule lets through all another does;
// AllowCovers applies it to a profile's allow list (the MCP server's "narrow, never widen"). The ranges
// a sandbox never reaches unless a profile names an exact exception are AlwaysDeny. Package
// sandbox/netcontract enforces exactly this reading and keeps none of its own; exports to other runtimes
// (package export) read it from here too.
//
// # What it does not do
//
// policy makes no system calls that change anything: it reads profile files and the built-in profiles
// embedded in package profiles, and asks moby's seccomp helper for Docker's default filter (which reads
// the kernel release). Applying a Plan is the job of package sandbox; observing a run is observe's.
//
// # Flow
//
//	Load(name or path) ─▶ Parse each file ─▶ Resolve extends ─▶ Validate ─▶ *Profile
//	Compile(profile, CompileContext{Cwd, CallerEnv, Overrides}) ─▶ *Plan
//	Compare(plan.Expect, report) ─▶ report.Verdict, report.Violations
//
// # Errors
//
// Every problem with a profile is an *Error carrying the file, line and column, a one-line message that
// names the field, and a separate Hint. Callers branch with errors.Is on ErrNotFound, ErrInvalid,
// ErrSyntax and ErrCycle. Values of environment variables never appear in errors.
package policy
