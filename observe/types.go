package observe

import "time"

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
	// ArgvTruncated says that Argv holds only the first MaxArgs arguments or MaxArgvBytes bytes;
	// ArgvBytes is then the size of the whole command line, when known.
	ArgvTruncated bool `json:"argv_truncated,omitempty"`
	ArgvBytes     int  `json:"argv_bytes,omitempty"`
	FDs           []FD `json:"fds"`
	// FDsTotal is how many fds the process had open; FDs lists the lowest MaxFDs of them.
	FDsTotal     int  `json:"fds_total"`
	FDsTruncated bool `json:"fds_truncated,omitempty"`
	// sockets past MaxFDs, kept only to name the owner of a socket.
	extraSockets []uint32
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
	// ArgvTruncated says that Argv holds only the first MaxArgs arguments or MaxArgvBytes bytes;
	// ArgvBytes is then the size of the whole command line, when known.
	ArgvTruncated bool `json:"argv_truncated,omitempty"`
	ArgvBytes     int  `json:"argv_bytes,omitempty"`
}
