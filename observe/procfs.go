package observe

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// procReader reads /proc files with raw syscalls and one reusable buffer: the snapshot's cost target
// (1 ms for 20 processes) leaves no room for os.ReadFile's fstat and per-call allocations.
type procReader struct {
	buf        []byte
	link       []byte
	boot       time.Time // wall-clock time of boot, to turn start ticks into a time
	extraReads int       // fd targets read past MaxFDs, bounded by maxExtraFDReads
}

func newProcReader() *procReader {
	return &procReader{buf: make([]byte, 64<<10), link: make([]byte, unix.PathMax), boot: bootTime()}
}

// userHZ is the unit of the start time in /proc/PID/stat. The kernel fixes USER_HZ at 100 for every
// architecture Go supports on Linux, whatever CONFIG_HZ is.
const userHZ = 100

func ticksToDuration(ticks uint64) time.Duration {
	return time.Duration(ticks) * (time.Second / userHZ)
}

// bootTime derives the boot time from CLOCK_BOOTTIME (which, like the start ticks, counts suspend),
// avoiding a read of the large /proc/stat.
func bootTime() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Time{}
	}
	return time.Now().Add(-time.Duration(ts.Nano()))
}

// read returns the content of path in r's buffer; it stays valid until the next call. A short read ends
// it: /proc's stat, status (seq files of one record) and cmdline return all they have up to the size
// asked, so the extra read(2) that would return 0 is saved.
func (r *procReader) read(path string) ([]byte, error) { return r.readLimit(path, len(r.buf)) }

// readLimit is read with at most limit bytes.
func (r *procReader) readLimit(path string, limit int) ([]byte, error) {
	buf := r.buf[:min(limit, len(r.buf))]
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		n += m
		if m == 0 || n < len(buf) {
			break
		}
	}
	return buf[:n], nil
}

// readlink returns the target of a /proc symlink as a string.
func (r *procReader) readlink(path string) (string, error) {
	n, err := unix.Readlink(path, r.link)
	if err != nil {
		return "", err
	}
	return string(r.link[:n]), nil
}

// gone reports whether err means the process disappeared while being read: it is skipped, not an error.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
}

// procStat is what /proc/PID/stat tells about a process.
type procStat struct {
	comm  string
	state byte
	ppid  int
	start uint64
	// argBytes is the size of the command line (arg_end - arg_start), 0 when unknown (zombies, old
	// kernels): how long the argv is, without reading it.
	argBytes int
	// exiting: the kernel flag PF_EXITING (field 9): the thread is past exit() but not yet a zombie.
	exiting bool
}

// pfExiting is the kernel's PF_EXITING task flag.
const pfExiting = 0x4

// parseStat parses /proc/PID/stat. The comm field is set by the process itself (prctl PR_SET_NAME) and
// may hold spaces and parentheses, so it ends at the LAST ")" of the line, never at the first.
func parseStat(b []byte) (procStat, error) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("parse stat: no comm field in %q", b)
	}
	st := procStat{comm: string(b[open+1 : closing])}
	// Fields after comm start at field 3 (state); start time is field 22.
	fields := strings.Fields(string(b[closing+1:]))
	if len(fields) < 20 {
		return procStat{}, fmt.Errorf("parse stat: %d fields after comm, want at least 20", len(fields))
	}
	st.state = fields[0][0]
	var err error
	if st.ppid, err = strconv.Atoi(fields[1]); err != nil {
		return procStat{}, fmt.Errorf("parse stat: ppid: %w", err)
	}
	if flags, err := strconv.ParseUint(fields[6], 10, 64); err == nil {
		st.exiting = flags&pfExiting != 0
	}
	if st.start, err = strconv.ParseUint(fields[19], 10, 64); err != nil {
		return procStat{}, fmt.Errorf("parse stat: start time: %w", err)
	}
	// arg_start and arg_end are fields 48 and 49 (Linux 3.5+).
	if len(fields) > 46 {
		start, err1 := strconv.ParseUint(fields[45], 10, 64)
		end, err2 := strconv.ParseUint(fields[46], 10, 64)
		if err1 == nil && err2 == nil && end > start {
			st.argBytes = int(end - start)
		}
	}
	return st, nil
}

// procStatus is what the snapshot needs from /proc/PID/status.
type procStatus struct {
	tgid  int   // the process a thread belongs to
	nspid []int // pid in each pid namespace, outermost first
	uid   int   // real uid
}

// parseStatus reads the Tgid, NSpid and Uid lines of /proc/PID/status.
func parseStatus(b []byte) (procStatus, error) {
	var st procStatus
	st.uid = -1
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		switch {
		case bytes.HasPrefix(line, []byte("Tgid:")):
			st.tgid, _ = strconv.Atoi(strings.TrimSpace(string(line[5:])))
		case bytes.HasPrefix(line, []byte("Uid:")):
			f := strings.Fields(string(line[4:]))
			if len(f) > 0 {
				st.uid, _ = strconv.Atoi(f[0])
			}
		case bytes.HasPrefix(line, []byte("NSpid:")):
			for _, f := range strings.Fields(string(line[6:])) {
				n, err := strconv.Atoi(f)
				if err != nil {
					return st, fmt.Errorf("parse status: NSpid: %w", err)
				}
				st.nspid = append(st.nspid, n)
			}
			// NSpid comes after Uid: nothing more to read.
			return st, nil
		}
	}
	return st, errors.New("parse status: no NSpid line")
}

// parseCmdline splits /proc/PID/cmdline. Kernel threads and zombies have an empty one; a process that
// rewrote its argv may have lost the NUL separators (setproctitle), which then shows as one argument.
func parseCmdline(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return []string{}
	}
	parts := bytes.Split(b, []byte{0})
	argv := make([]string, len(parts))
	for i, p := range parts {
		argv[i] = string(p)
	}
	return argv
}

// deletedSuffix is what the kernel appends to a path whose file was unlinked while open.
const deletedSuffix = " (deleted)"

// splitDeleted strips the kernel's " (deleted)" marker from a link target.
func splitDeleted(target string) (string, bool) {
	if s, ok := strings.CutSuffix(target, deletedSuffix); ok {
		return s, true
	}
	return target, false
}

// fdKind classifies a /proc/PID/fd link target.
func fdKind(target string) string {
	switch {
	case strings.HasPrefix(target, "socket:["):
		return "socket"
	case strings.HasPrefix(target, "pipe:["):
		return "pipe"
	case strings.HasPrefix(target, "/memfd:"):
		return "memfd"
	case strings.HasPrefix(target, "anon_inode:"):
		return "anon"
	case strings.HasPrefix(target, "/dev/"):
		return "dev"
	default:
		return "file"
	}
}

// socketInode returns the inode of a "socket:[N]" fd target, 0 for anything else.
func socketInode(target string) uint32 {
	s, ok := strings.CutPrefix(target, "socket:[")
	if !ok {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}
