package observe

// Bounds of what an observation keeps, so that sbx's memory on the host and the size of its report do not
// grow with what the command does. Each list cut at its bound says so in the entry or the report
// (a truncated flag and the total).
const (
	// MaxArgvBytes and MaxArgs bound the command line kept per process and per exec.
	MaxArgvBytes = 4 << 10
	MaxArgs      = 128
	// MaxFDs bounds the fds listed per process (the lowest numbers); sockets past it still name their
	// owner.
	MaxFDs = 256
	// MaxExecs bounds the execs a run lists (the first ones).
	MaxExecs = 1000
	// MaxLeftRunning bounds the processes listed as left running (the lowest sandbox pids).
	MaxLeftRunning = 256
	// MaxSockets bounds each list of sockets a run reports (listening, established).
	MaxSockets = 1000
	// maxExtraSockets bounds the socket inodes past MaxFDs kept per process, to name owners only.
	maxExtraSockets = 4096
	// maxExtraFDReads bounds the fds past MaxFDs whose targets a reader of processes reads, all its
	// processes together (to find the sockets among them; a snapshot has up to GOMAXPROCS readers); the
	// rest are only counted. A readlink each made the
	// observation of 100 processes left with 20,000 fds each take 12 s, the sandbox frozen throughout,
	// and grows with the fds the host lets a process have (a million on many hosts).
	maxExtraFDReads = 1 << 16
)

// capArgv parses a command line read with a limit of MaxArgvBytes (full when the read returned fewer
// bytes) and keeps at most MaxArgs arguments. cut says whether anything was left out; argBytes is the
// size of the whole command line when known (from /proc/PID/stat), else 0.
func capArgv(b []byte, argBytes int) (argv []string, cut bool) {
	cut = len(b) >= MaxArgvBytes || argBytes > len(b)
	argv = parseCmdline(b)
	if len(argv) > MaxArgs {
		argv, cut = argv[:MaxArgs:MaxArgs], true
	}
	return argv, cut
}
