// Package report holds the sbx.report/v1 document: the stable JSON contract that tools read after a run.
//
// Field names are a contract: fields may be added, never removed or renamed. The package is plain data
// with no behaviour beyond construction helpers; observe fills the observations, policy.Compare adds the
// verdict and violations, and cmd/sbx renders it. It imports nothing else of sbx and builds without cgo,
// so that tools reading reports can use it alone.
package report

import (
	"slices"
)

// Schema is the value of the schema field of every report.
const Schema = "sbx.report/v1"

// Verdicts.
const (
	VerdictPass      = "pass"
	VerdictViolation = "violation"
)

// Rule names a violation can carry.
const (
	RuleLeftRunning = "processes.left_running"
	RuleExec        = "processes.exec"
	RuleListening   = "sockets.listening"
	RuleDenied      = "network.denied"
	RuleDNS         = "network.dns"
	RuleFilesWrite  = "files.write"
	// RuleIncomplete: part of the observation failed (see Incomplete and Notes); a run sbx could not
	// fully observe does not pass.
	RuleIncomplete = "observe.incomplete"
	// RuleTimeout: the run's timeout fired and sbx killed the sandbox. A timed-out run is never a pass:
	// what it would have done next is unknown. (The exit status is still 124, not the violation's.)
	RuleTimeout = "timeout"
	// RulePersistence: a file change or a refused write that would make something run later (cron,
	// shell start-up files, authorized_keys, ...), unless expect.persistence is allow.
	RulePersistence = "persistence"
	// RuleCredentials: the command read a decoy credential (or sent or left one's value), unless
	// expect.credentials is allow.
	RuleCredentials = "credentials"
)

// MaxViolations bounds the violations a report lists (ViolationsTotal counts them all).
const MaxViolations = 1000

// Report is one run of one command in one sandbox.
type Report struct {
	Schema       string      `json:"schema"`
	Profile      string      `json:"profile"`
	Command      []string    `json:"command"`
	ExitCode     int         `json:"exit_code"`
	TimedOut     bool        `json:"timed_out"`
	OOMKilled    bool        `json:"oom_killed"`     // the memory limit was hit and the OOM killer killed a process
	PidsLimitHit bool        `json:"pids_limit_hit"` // the pids limit refused a fork
	Limits       Limits      `json:"limits"`
	Verdict      string      `json:"verdict"`
	Violations   []Violation `json:"violations"`
	// ViolationsTotal counts every violation; Violations keeps the first MaxViolations.
	ViolationsTotal int       `json:"violations_total"`
	Processes       Processes `json:"processes"`
	Sockets         Sockets   `json:"sockets"`
	Network         Network   `json:"network"`
	Files           Files     `json:"files"`
	// Apply says what of the working directory's changes reached the host's working directory.
	Apply Apply `json:"apply"`
	// Persistence lists the file changes and refused writes that plant a persistence mechanism.
	Persistence []Persistence `json:"persistence"`
	// Credentials lists the command's access to decoy secrets: the places where secrets live (an SSH
	// key, cloud credentials, a registry token, ...), where the sandbox shows decoys, and decoy values
	// found in what it sent or left.
	Credentials []Credential `json:"credentials"`
	Timings     Timings      `json:"timings_ms"`
	// Denials are the syscalls and accesses the kernel (seccomp, Landlock) reported refusing.
	Denials Denials `json:"denials"`
	// Notes say what sbx could not observe in this run ("exec events unavailable: ..."), so that an
	// empty list is never mistaken for "nothing happened".
	Notes []string `json:"notes"`
	// Incomplete names each part of the observation that failed ("process snapshot", "exec events",
	// ...). Each has a note saying why, and policy.Compare turns each into a violation observe.incomplete.
	Incomplete []string `json:"incomplete"`
}

// MarkIncomplete records that part of the observation failed with err: a note, and an entry in
// Incomplete.
func (r *Report) MarkIncomplete(part string, err error) {
	r.Notes = append(r.Notes, part+": "+err.Error())
	if !slices.Contains(r.Incomplete, part) {
		r.Incomplete = append(r.Incomplete, part)
	}
}

// Limits says how each limit of the profile was enforced in this run.
type Limits struct {
	Enforced []Enforced `json:"enforced"`
}

// Enforced is one limit and what held it: "cgroup", "tmpfs size", "RLIMIT_FSIZE per file",
// "RLIMIT_NPROC per uid", "sbx timer", or "none" where nothing could.
type Enforced struct {
	Limit string `json:"limit"` // memory, pids, cpu, disk, nofile, timeout
	By    string `json:"by"`
}

// Violation is one broken expectation.
type Violation struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// Processes is what ran and what stayed.
type Processes struct {
	Execs       []Exec    `json:"execs"`
	LeftRunning []Process `json:"left_running"`
	// ExecsTotal counts every exec seen; Execs keeps the first observe.MaxExecs (ExecsTruncated).
	ExecsTotal     int  `json:"execs_total"`
	ExecsTruncated bool `json:"execs_truncated"`
	// LeftRunningTotal counts every process left running; LeftRunning keeps the first
	// observe.MaxLeftRunning by pid (LeftRunningTruncated).
	LeftRunningTotal     int  `json:"left_running_total"`
	LeftRunningTruncated bool `json:"left_running_truncated"`
}

// Sockets lists the sandbox's sockets at the after snapshot.
type Sockets struct {
	Listening   []Socket `json:"listening"`
	Established []Socket `json:"established"`
	// ListeningTotal and EstablishedTotal count every socket; each list keeps the first
	// observe.MaxSockets (Truncated).
	ListeningTotal   int  `json:"listening_total"`
	EstablishedTotal int  `json:"established_total"`
	Truncated        bool `json:"truncated"`
}

// DirectionIn is Denied.Direction of an inbound attempt.
const DirectionIn = "in"

// Network modes.
const (
	NetworkNone     = "none"
	NetworkContract = "contract"
)

// Network is what the network contract saw.
type Network struct {
	Mode   string     `json:"mode"`
	Denied []Denied   `json:"denied"`
	DNS    []DNSQuery `json:"dns"`
}

// Denied is one destination the contract refused, with how many packets tried it. Proto "any" with a
// range as Address and port 0 counts attempts on an always-deny range that the per-destination record,
// once full, could not itemize.
type Denied struct {
	Proto   string `json:"proto"`
	Address string `json:"address"`
	Port    int    `json:"port"`
	Count   int    `json:"count"`
	// Direction "in" marks an attempt from the uplink side to reach the sandbox (Address is the sender,
	// Port the sandbox's port), refused because network.ingress does not open it. Not the command's
	// doing: it is recorded, not judged. Empty means outbound.
	Direction string `json:"direction,omitempty"`
}

// DNSQuery is one query the sandbox sent to sbx's DNS filter. Name is as the client sent it, in DNS
// presentation format (a dot inside a label and bytes outside printable ASCII escaped).
type DNSQuery struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Allowed bool   `json:"allowed"`
	// Reason says why a query was refused when the name alone does not (a malformed message, an opcode
	// other than QUERY, a CNAME to a name not allowed, ...).
	Reason string `json:"reason,omitempty"`
	// Count is set on entries past the log's first entries, which are counted per name instead of
	// listed one by one; 0 means once.
	Count int `json:"count,omitempty"`
}

// Files lists paths, as seen inside the sandbox, that the run changed.
type Files struct {
	Created  []string `json:"created"`
	Modified []string `json:"modified"`
	Deleted  []string `json:"deleted"`
	// Details has one entry per path above, with its kind and size (and path_b64 when the path is not
	// valid UTF-8).
	Details []FileChange `json:"details"`
	// Total counts every change found; each list above keeps only its first entries (10,000 by
	// default), and Truncated says that one was cut.
	Total     Totals `json:"total"`
	Truncated bool   `json:"truncated"`
}

// Apply modes: what a run's changes to the working directory do on the host.
const (
	ApplyNever  = "never"   // discarded at teardown
	ApplyOnPass = "on-pass" // applied when the verdict is pass
	ApplyAlways = "always"  // applied whatever the verdict (persistence findings still withheld)
)

// Apply is what became of the working directory's changes: applied to the host's working directory, or
// not, and why.
type Apply struct {
	Mode string `json:"mode"` // ApplyNever, ApplyOnPass or ApplyAlways
	// Applied says whether the changes were applied (some may still be withheld or in conflict);
	// Reason says why not ("the verdict is violation", "mode never", ...).
	Applied bool   `json:"applied"`
	Reason  string `json:"reason,omitempty"`
	// Entries and Bytes count what was written or deleted on the host.
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
	// Withheld are changes not applied, each with why (a set-id bit, a FIFO, a persistence finding);
	// Conflicts are host entries that changed during the run, left as the host has them. The run's
	// copies of those are kept in Kept.
	Withheld  []ApplyEntry `json:"withheld"`
	Conflicts []ApplyEntry `json:"conflicts"`
	Kept      string       `json:"kept,omitempty"`
	// Problems are entries that failed to apply; the host keeps them as they were.
	Problems []string `json:"problems"`
}

// ApplyEntry is one path of the working directory (as seen inside the sandbox) and why it is listed.
type ApplyEntry struct {
	Path    string `json:"path"`
	PathB64 string `json:"path_b64,omitempty"`
	Why     string `json:"why"`
}

// Persistence is one file change or refused write that would make something run later, outside the
// run: a cron entry, a shell start-up file, an authorized key, a git hook, ...
type Persistence struct {
	Mechanism string `json:"mechanism"` // "cron", "shell start-up file", "ssh authorized_keys", ...
	Path      string `json:"path"`      // as seen inside the sandbox
	Change    string `json:"change"`    // created, modified, or refused (a write the sandbox refused)
}

// Credential is one access to a decoy secret.
type Credential struct {
	Mechanism string `json:"mechanism"` // "ssh private key", "cloud credentials", ..., "exfiltration of a decoy value"
	Path      string `json:"path"`      // the decoy, as seen inside the sandbox
	// Access is what the command did: "read", "changed" (written, its mode or times set), "deleted",
	// "refused" (a kernel keyring call), or where its value went ("sent in a DNS question for NAME",
	// "written to PATH").
	Access string `json:"access"`
}

// Timings are the phases of a run in milliseconds.
type Timings struct {
	Setup    float64 `json:"setup"`
	Run      float64 `json:"run"`
	Observe  float64 `json:"observe"`
	Teardown float64 `json:"teardown"`
	Total    float64 `json:"total"`
}

// New returns a report with every list present and empty, so that consumers never see null.
func New(profile string, command []string) *Report {
	return &Report{
		Schema:      Schema,
		Profile:     profile,
		Command:     command,
		Verdict:     VerdictPass,
		Violations:  []Violation{},
		Processes:   Processes{Execs: []Exec{}, LeftRunning: []Process{}},
		Sockets:     Sockets{Listening: []Socket{}, Established: []Socket{}},
		Network:     Network{Mode: NetworkNone, Denied: []Denied{}, DNS: []DNSQuery{}},
		Files:       Files{Created: []string{}, Modified: []string{}, Deleted: []string{}, Details: []FileChange{}},
		Apply:       Apply{Mode: ApplyNever, Reason: "mode never: the working directory's changes are discarded", Withheld: []ApplyEntry{}, Conflicts: []ApplyEntry{}, Problems: []string{}},
		Credentials: []Credential{},
		Notes:       []string{},
		Incomplete:  []string{},
		Persistence: []Persistence{},
		Limits:      Limits{Enforced: []Enforced{}},
		Denials: Denials{Reason: "not collected", Seccomp: []SeccompDenial{},
			Landlock: []LandlockDenial{}, Writes: []WriteDenial{}, Sources: []DenialSource{}},
	}
}
