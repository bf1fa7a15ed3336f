package observe

// Process is one process of the sandbox as a snapshot saw it.
type Process struct {
	Pid      int      `json:"pid"`      // pid inside the sandbox's pid namespace
	PPid     int      `json:"ppid"`     // parent pid inside the sandbox (0: parent outside the sandbox)
	HostPid  int      `json:"host_pid"` // pid in the host's pid namespace
	Exe      string   `json:"exe"`      // real executable, as seen inside the sandbox
	Comm     string   `json:"comm"`     // the name the process gave itself
	Argv     []string `json:"argv"`
	UID      int      `json:"uid"`
	Start    uint64   `json:"start_ticks"` // start time in clock ticks since boot; with Pid, identifies a process
	Orphaned bool     `json:"orphaned"`    // its parent exited and it was reparented to the sandbox's init
	Deleted  bool     `json:"exe_deleted"` // its executable was deleted after it started
	FDs      []FD     `json:"fds"`
}

// FD is one open file descriptor and what it points at.
type FD struct {
	FD     int    `json:"fd"`
	Target string `json:"target"`           // readlink of /proc/PID/fd/N, e.g. "/tmp/log", "socket:[123]", "pipe:[9]"
	Kind   string `json:"kind"`             // file, socket, pipe, memfd, anon, dev
	Socket string `json:"socket,omitempty"` // for sockets: "tcp 127.0.0.1:8080 LISTEN" and the like
}

// Socket is one socket of the sandbox's network namespace.
type Socket struct {
	Proto   string `json:"proto"`   // tcp tcp6 udp udp6 unix
	Address string `json:"address"` // local address; for unix the path, "@name" for abstract
	Port    int    `json:"port"`
	Remote  string `json:"remote,omitempty"` // remote address:port for connected sockets
	State   string `json:"state,omitempty"`
	Inode   uint32 `json:"inode"`
	Pid     int    `json:"pid"` // sandbox pid of the owner, 0 when unknown
	Exe     string `json:"exe"`
}

// Exec is one execve seen during the run.
type Exec struct {
	Pid        int      `json:"pid"`
	PPid       int      `json:"ppid"`
	Exe        string   `json:"exe"`
	Argv       []string `json:"argv"`
	Incomplete bool     `json:"incomplete,omitempty"` // the process exited before it could be read
}
