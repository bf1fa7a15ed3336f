// Package policy owns sbx profiles: the YAML schema, decoding with file:line:column errors, validation,
// inheritance through extends, the compilation of a profile into a Plan for the sandbox package, and
// Compare, which turns the observations of a run into a verdict.
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
