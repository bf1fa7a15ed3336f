package report

import "time"

// The observations a report carries: observe fills them, policy judges them. Bounds named here (MaxArgs,
// MaxFDs, ...) are observe's.

// Process is one process of the sandbox as a snapshot saw it.
type Process struct {
	Pid      int       `json:"pid"`      // pid inside the sandbox's pid namespace
	PPid     int       `json:"ppid"`     // parent pid inside the sandbox (0: parent outside the sandbox)
	HostPid  int       `json:"host_pid"` // pid in the host's pid namespace
	Exe      string    `json:"exe"`      // real executable, as seen inside the sandbox
	Comm     string    `json:"comm"`     // the name the process gave itself
	Argv     []string  `json:"argv"`
	UID      int       `json:"uid"`
	Start    uint64    `json:"start_ticks"` // start time in clock ticks since boot; with Pid, identifies a process
	Started  time.Time `json:"started"`     // wall-clock start time, derived from Start (for the process's age)
	State    string    `json:"state"`       // the state letter of /proc/PID/stat: R S D Z T ... (D in a frozen sandbox)
	Orphaned bool      `json:"orphaned"`    // its parent exited and it was reparented to the sandbox's init
	Deleted  bool      `json:"exe_deleted"` // its executable was deleted after it started
	// LeaderExited marks a process whose main thread exited while another thread runs on: /proc shows
	// it as a zombie, but it is alive (its exe, argv and fds are read through a live thread).
	LeaderExited bool `json:"leader_exited,omitempty"`
	// ArgvTruncated says that Argv holds only the first observe.MaxArgs arguments or observe.MaxArgvBytes bytes;
	// ArgvBytes is then the size of the whole command line, when known.
	ArgvTruncated bool `json:"argv_truncated,omitempty"`
	ArgvBytes     int  `json:"argv_bytes,omitempty"`
	FDs           []FD `json:"fds"`
	// FDsTotal is how many fds the process had open; FDs lists the lowest observe.MaxFDs of them.
	FDsTotal     int  `json:"fds_total"`
	FDsTruncated bool `json:"fds_truncated,omitempty"`
}

// FD is one open file descriptor and what it points at.
type FD struct {
	FD     int    `json:"fd"`
	Target string `json:"target"`           // readlink of /proc/PID/fd/N, e.g. "/tmp/log", "socket:[123]", "pipe:[9]"
	Kind   string `json:"kind"`             // file, socket, pipe, memfd, anon, dev
	Socket string `json:"socket,omitempty"` // for sockets: "tcp 127.0.0.1:8080 LISTEN" and the like
	// Deleted marks a file that was unlinked while open. Target then holds its old path, without the
	// kernel's " (deleted)" suffix.
	Deleted bool `json:"deleted,omitempty"`
}

// Socket is one socket of the sandbox's network namespace.
type Socket struct {
	Proto   string `json:"proto"`   // tcp tcp6 udp udp6 unix
	Address string `json:"address"` // local address; for unix the path, "@name" for abstract
	Port    int    `json:"port"`
	Remote  string `json:"remote,omitempty"` // remote address:port for connected sockets
	State   string `json:"state,omitempty"`  // LISTEN, ESTABLISHED, UNCONN (unconnected), ...
	Type    string `json:"type,omitempty"`   // for unix: stream, dgram, seqpacket
	Inode   uint32 `json:"inode"`
	Pid     int    `json:"pid"` // sandbox pid of the owner, 0 when unknown
	Exe     string `json:"exe"`
}

// Exec is one execve seen during the run.
type Exec struct {
	Pid        int       `json:"pid"`
	PPid       int       `json:"ppid"`
	Exe        string    `json:"exe"`
	Argv       []string  `json:"argv"`
	Incomplete bool      `json:"incomplete,omitempty"` // the process exited before it could be read
	HostPid    int       `json:"host_pid"`             // pid in the host's pid namespace
	Comm       string    `json:"comm,omitempty"`       // the process's name at exec time, when it could be read
	Time       time.Time `json:"time"`                 // when the kernel reported the exec
	// ArgvTruncated says that Argv holds only the first observe.MaxArgs arguments or observe.MaxArgvBytes bytes;
	// ArgvBytes is then the size of the whole command line, when known.
	ArgvTruncated bool `json:"argv_truncated,omitempty"`
	ArgvBytes     int  `json:"argv_bytes,omitempty"`
}

// FileChange is one path the sandbox created, modified or deleted, as seen inside the sandbox.
type FileChange struct {
	Path string `json:"path"` // absolute path inside the sandbox; invalid UTF-8 is replaced in JSON
	// PathB64 is the path's bytes in standard base64, set only when Path is not valid UTF-8 (JSON
	// would replace the invalid bytes, losing the real name).
	PathB64 string    `json:"path_b64,omitempty"`
	Size    int64     `json:"size"`   // bytes; 0 for directories; for a deletion, the size of the hidden file
	Kind    string    `json:"kind"`   // file, dir, symlink, other (fifo, socket, device)
	Change  string    `json:"change"` // created, modified or deleted
	ModTime time.Time `json:"-"`      // mtime in the upper layer; tells a rewritten file from an untouched one
	// CTime, Mode and Metacopy tell what size and mtime cannot: the command can restore an mtime, not a
	// ctime; a metacopy file's data is still the lower layer's.
	CTime    time.Time `json:"-"`
	Mode     uint32    `json:"-"`
	Metacopy bool      `json:"-"`
}

// Totals counts changes per class.
type Totals struct {
	Created  int `json:"created"`
	Modified int `json:"modified"`
	Deleted  int `json:"deleted"`
}

// Denials is what the sandbox refused its processes, from two kinds of source: sbx's own recording
// (seccomp user notification of the deny list, and writes outside the write paths; see
// sandbox/seccomp/notify.go) and the kernel's audit records (syscalls refused by the seccomp filter and
// accesses refused by Landlock), merged without duplicates. Sources says per source what was recorded
// and what could not be. When no source records anything, Available is false and Reason says why, so
// that an empty list is never mistaken for "nothing denied". Reason may also be set when only part is
// reported.
type Denials struct {
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	// Lost counts records dropped (queue overflow, bounds, a failed read): the lists may be incomplete.
	Lost     int              `json:"lost,omitempty"`
	Seccomp  []SeccompDenial  `json:"seccomp"`
	Landlock []LandlockDenial `json:"landlock"`
	// Writes are writes outside the profile's write paths that sbx recorded (refused by Landlock).
	Writes  []WriteDenial  `json:"writes"`
	Sources []DenialSource `json:"sources"`
	// Recorder is the cost of sbx's own recording, when it ran.
	Recorder *RecorderCost `json:"recorder,omitempty"`
}

// Names of the sources of denials (DenialSource.Name, SeccompDenial.Source).
const (
	SourceSeccompNotify = "seccomp-notify" // sbx answers the deny list's syscalls itself
	SourceWriteNotify   = "write-notify"   // sbx sees each write outside the write paths
	SourceAudit         = "audit"          // the kernel's audit records
)

// DenialSource says what one source recorded, or why it could not.
type DenialSource struct {
	Name     string `json:"name"`             // "seccomp-notify", "write-notify" or "audit"
	Recorded bool   `json:"recorded"`         // the source recorded this run
	Covers   string `json:"covers"`           // what it records
	Reason   string `json:"reason,omitempty"` // why it did not record, or what it missed
}

// SeccompDenial is one syscall the filter refused a process, with how many times.
type SeccompDenial struct {
	Pid     int    `json:"pid"`      // pid inside the sandbox, 0 when unknown
	HostPid int    `json:"host_pid"` // pid in the host's pid namespace
	Exe     string `json:"exe"`
	Syscall string `json:"syscall"`        // name, or "#N" when the number is unknown
	Args    string `json:"args,omitempty"` // decoded arguments (seccomp-notify only), e.g. "CLONE_NEWUSER"
	Action  string `json:"action"`         // errno, kill_process, kill_thread, trap, log, ...
	Source  string `json:"source"`         // "seccomp-notify" or "audit"
	Count   int    `json:"count"`
}

// WriteDenial is one write outside the write paths, with how many times: an open for writing, mkdir,
// rename, link, symlink or unlink whose path Landlock refuses.
type WriteDenial struct {
	Pid     int    `json:"pid"`      // pid inside the sandbox, 0 when unknown
	HostPid int    `json:"host_pid"` // pid in the host's pid namespace
	Exe     string `json:"exe"`
	Syscall string `json:"syscall"` // openat, mkdir, renameat2, ...
	Path    string `json:"path"`    // absolute, cleaned, as seen inside the sandbox
	Flags   string `json:"flags,omitempty"`
	Count   int    `json:"count"`
	// Unresolved says why sbx could not resolve the write as the kernel does (an unreadable path, a
	// walk past its bounds or past 40 links, ...): Path is then as far as sbx got (the bytes it could
	// read), and the run is incomplete.
	Unresolved string `json:"unresolved,omitempty"`
	Dir        string `json:"dir,omitempty"` // the directory a relative path starts from (its dirfd's or cwd's target)
}

// RecorderCost is what sbx's own recording of refused attempts cost and what it could not resolve.
type RecorderCost struct {
	Notifications int     `json:"notifications"`  // answered
	CPUMs         float64 `json:"cpu_ms"`         // sbx's CPU time answering them
	WorstUs       int64   `json:"worst_us"`       // wall time of the costliest one
	WorstCPUUs    int64   `json:"worst_cpu_us"`   // CPU time of the costliest one
	Unresolved    int     `json:"unresolved"`     // writes sbx could not resolve as the kernel does (each recorded)
	OverBudget    int     `json:"over_budget"`    // writes answered unread: sbx's CPU was past its budget
	SandboxCPUMs  float64 `json:"sandbox_cpu_ms"` // the sandbox's own CPU time (its cgroup's), which the budget is against
}

// LandlockDenial is one access Landlock refused, with how many times.
type LandlockDenial struct {
	Pid     int    `json:"pid"`      // pid inside the sandbox, 0 when unknown
	HostPid int    `json:"host_pid"` // pid in the host's pid namespace, 0 when audit did not say
	Exe     string `json:"exe"`
	Access  string `json:"access"` // the kernel's blockers, e.g. "fs.write_file", "fs.make_reg"
	Path    string `json:"path"`   // the object, as the kernel names it; may be the parent directory
	Count   int    `json:"count"`
}
