// Package report holds the sbx.report/v1 document: the stable JSON contract that tools read after a run.
//
// Field names are a contract: fields may be added, never removed or renamed. The package is plain data
// with no behaviour beyond construction helpers; observe fills the observations, policy.Compare adds the
// verdict and violations, and cmd/sbx renders it.
package report

import "github.com/sbx-dev/sbx/observe"

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
)

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
	Processes    Processes   `json:"processes"`
	Sockets      Sockets     `json:"sockets"`
	Network      Network     `json:"network"`
	Files        Files       `json:"files"`
	Timings      Timings     `json:"timings_ms"`
	// Denials are the syscalls and accesses the kernel (seccomp, Landlock) reported refusing.
	Denials observe.Denials `json:"denials"`
	// Notes say what sbx could not observe in this run ("exec events unavailable: ..."), so that an
	// empty list is never mistaken for "nothing happened".
	Notes []string `json:"notes"`
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
	Execs       []observe.Exec    `json:"execs"`
	LeftRunning []observe.Process `json:"left_running"`
}

// Sockets lists the sandbox's sockets at the after snapshot.
type Sockets struct {
	Listening   []observe.Socket `json:"listening"`
	Established []observe.Socket `json:"established"`
}

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

// Denied is one destination the contract refused, with how many packets tried it.
type Denied struct {
	Proto   string `json:"proto"`
	Address string `json:"address"`
	Port    int    `json:"port"`
	Count   int    `json:"count"`
}

// DNSQuery is one query the sandbox sent to sbx's DNS filter.
type DNSQuery struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Allowed bool   `json:"allowed"`
}

// Files lists paths, as seen inside the sandbox, that the run changed.
type Files struct {
	Created  []string `json:"created"`
	Modified []string `json:"modified"`
	Deleted  []string `json:"deleted"`
	// Details has one entry per path above, with its kind and size.
	Details []observe.FileChange `json:"details"`
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
		Schema:     Schema,
		Profile:    profile,
		Command:    command,
		Verdict:    VerdictPass,
		Violations: []Violation{},
		Processes:  Processes{Execs: []observe.Exec{}, LeftRunning: []observe.Process{}},
		Sockets:    Sockets{Listening: []observe.Socket{}, Established: []observe.Socket{}},
		Network:    Network{Mode: NetworkNone, Denied: []Denied{}, DNS: []DNSQuery{}},
		Files:      Files{Created: []string{}, Modified: []string{}, Deleted: []string{}, Details: []observe.FileChange{}},
		Limits:     Limits{Enforced: []Enforced{}},
		Notes:      []string{},
		Denials: observe.Denials{Reason: "not collected", Seccomp: []observe.SeccompDenial{},
			Landlock: []observe.LandlockDenial{}},
	}
}
