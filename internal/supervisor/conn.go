package supervisor

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The control protocol between sbx and the supervisor, over a socket pair (the supervisor's end is its
// fd 3). Every message is one line; both sides use [Conn], so the lines are written and parsed here only.
//
//	sbx (sandbox.Create, Start, Running.Wait)        supervisor (Main, pid 1 of the sandbox)
//	  |                                                  | starts, the sandbox built around it, or:
//	  |-- setup ---------------------------------------->| started directly (SetupEnv set), in
//	  |-- {Setup as JSON} ------------------------------>|   bare namespaces: builds the sandbox
//	  |<-------------------------------------- nobuild --|   and, if it could not, says why instead
//	  |<--------------------------- {"reason":...} ------|   of ready, and exits
//	  |-- prep ----------------------------------------->|
//	  |-- {Prepare as JSON} ---------------------------->| builds the Landlock ruleset and a thread
//	  |                                                  |   restricted by it, which loads the filter
//	  |<---------------------------------- ready N ------| N = 1: the filter's notification fd rides
//	  |                                                  |   along (SCM_RIGHTS); 0: none. Then waits
//	  |-- go ------------------------------------------->|
//	  |-- {Config as JSON} ----------------------------->| starts the command from that thread
//	  |<------------------------ pid PID DIAGFD PIDFD --| started (PID inside the sandbox)
//	  |<------------------------- fail CODE DIAGFD -1 --|   or not: 126 and 127 with the reason on the
//	  |<---------------- {"reason":...,"hint":...} -----|   command's stderr, 125 with this line after it
//	  |                                                  | reaps every orphan
//	  |<---------------------------- exit WAITSTATUS ----| the command ended
//
// sbx reads ready before it sends go: nothing the filter notifies can run before sbx holds the fd.
// DIAGFD is the fd of the supervisor's sock_diag socket in its own process, -1 for none; PIDFD the fd of
// the command's pidfd there, -1 for none (sbx copies it with pidfd_getfd: its host pid, from the copy's
// fdinfo, without a search of the sandbox's processes). sbx signals the
// command itself, from outside, through a pidfd: nothing else crosses the socket.

// Messages of the control protocol.
const (
	msgSetup   = "setup"
	msgNoBuild = "nobuild" // as long as "ready N", which sbx reads in its place
	msgPrep    = "prep"
	msgReady   = "ready"
	msgGo      = "go"
	msgPid     = "pid"
	msgFail    = "fail"
	msgExit    = "exit"
	msgFormat  = "%s %d %d %d\n" // pid and fail
)

// ErrProtocol is matched (errors.Is) by a message the other side should not have sent.
var ErrProtocol = errors.New("unexpected control message")

// Started is the supervisor's answer to go: the command's pid, or the status a shell would give when it
// could not be started.
type Started struct {
	Pid    int // inside the sandbox's pid namespace; 0 when the command could not be started
	Code   int // 125, 126 or 127 when Pid is 0
	DiagFD int // the supervisor's sock_diag socket, in its own process; -1 for none
	PidFD  int // the command's pidfd, in the supervisor's process; -1 for none
	// Why the supervisor could not prepare the command (Code 125: Landlock or the filter could not be
	// applied, a bad configuration), and what to do: sbx says it as its own error. Empty otherwise (126
	// and 127 are the command's, said on its stderr as a shell would).
	Reason, Hint string
}

// maxReason bounds the reason and the hint of a fail message, each.
const maxReason = 4096

// maxFailLine bounds the JSON line that carries them: JSON spells "<", ">", "&" and control characters
// in six bytes each, so two fields cut at maxReason may take six times as much, plus the keys.
const maxFailLine = 2*6*maxReason + 64

type failReason struct {
	Reason string `json:"reason"`
	Hint   string `json:"hint"`
}

// Conn is one end of the control socket.
type Conn struct {
	f  *os.File
	in *bufio.Reader
	mu sync.Mutex // writes
}

// NewConn speaks the control protocol over f, which it then owns.
func NewConn(f *os.File) *Conn { return &Conn{f: f, in: bufio.NewReader(f)} }

// Close closes the socket.
func (c *Conn) Close() error { return c.f.Close() }

// SendSetup sends the sandbox a directly started supervisor builds (sbx's side), before anything else.
func (c *Conn) SendSetup(s Setup) error { return c.sendJSON(msgSetup, s) }

// ReadSetup waits for setup (the supervisor's side).
func (c *Conn) ReadSetup() (*Setup, error) {
	raw, err := c.readJSON(msgSetup)
	if err != nil {
		return nil, err
	}
	var s Setup
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("%w: bad setup: %v", ErrProtocol, err)
	}
	return &s, nil
}

// SendSetupFailed says, in place of ready, why the sandbox could not be built (the supervisor's side).
func (c *Conn) SendSetupFailed(err error) error {
	b, jerr := json.Marshal(failReason{Reason: truncate("building the sandbox: " + err.Error()), Hint: buildHintFor(err)})
	if jerr != nil {
		return jerr
	}
	return c.write(msgNoBuild + "\n" + string(b) + "\n")
}

// BuildError is the reason a directly started supervisor gave for not building the sandbox, and what
// to do about it.
type BuildError struct{ Reason, Hint string }

func (e *BuildError) Error() string { return e.Reason }

// SendPrepare sends what the supervisor prepares before the command is known (sbx's side): right after
// the sandbox starts, so that the preparation runs while sbx goes on (or a warm pool waits).
func (c *Conn) SendPrepare(p Prepare) error { return c.sendJSON(msgPrep, p) }

// ReadPrepare waits for prep and returns the preparation as sent, still JSON (the supervisor's side).
func (c *Conn) ReadPrepare() ([]byte, error) { return c.readJSON(msgPrep) }

// SendGo lets the supervisor start the command with cfg (sbx's side).
func (c *Conn) SendGo(cfg Config) error { return c.sendJSON(msgGo, cfg) }

// ReadGo waits for go and returns the configuration as sent, still JSON (the supervisor's side): a
// configuration it cannot decode is reported to the command's stderr, not on the socket.
func (c *Conn) ReadGo() ([]byte, error) { return c.readJSON(msgGo) }

// sendJSON sends msg and v as a JSON line.
func (c *Conn) sendJSON(msg string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding the supervisor's %s message: %w", msg, err)
	}
	return c.write(msg + "\n" + string(b) + "\n")
}

// readJSON waits for msg and returns the JSON line that follows it.
func (c *Conn) readJSON(msg string) ([]byte, error) {
	line, err := c.in.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if line != msg+"\n" {
		return nil, fmt.Errorf("%w: %q, want %s", ErrProtocol, line, msg)
	}
	return c.in.ReadBytes('\n')
}

// Ready is a ready message built ahead of the seccomp filter it hands over (see [Conn.NewReady]).
type Ready struct {
	sock     int
	hdr      unix.Msghdr
	iov      unix.Iovec
	zero     []byte // "ready 0\n"
	one      []byte // "ready 1\n"
	oob      []byte // SCM_RIGHTS with one fd, patched in by Send
	fdOffset int    // of the fd in oob: the cmsg data
}

// NewReady builds a ready message, to be sent with [Ready.Send] from the thread that has just loaded
// the command's seccomp filter. Every later syscall of that thread may notify (the profile's deny
// list, writes by path), and a notification waits for sbx's answer, so sbx must hold the notification
// fd before that thread makes any other syscall: Send makes one raw sendmsg, allocates nothing and never
// enters the scheduler (a Go channel send, for one, may wake a thread with futex).
func (c *Conn) NewReady() (*Ready, error) {
	raw, err := c.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	m := &Ready{sock: -1, zero: []byte(msgReady + " 0\n"), one: []byte(msgReady + " 1\n"), oob: unix.UnixRights(0)}
	if err := raw.Control(func(fd uintptr) { m.sock = int(fd) }); err != nil {
		return nil, err
	}
	m.fdOffset = unix.CmsgLen(0)
	return m, nil
}

// Send sends ready, with fd when fd >= 0 (the caller still owns fd). Nothing else may be written on the
// connection meanwhile: the supervisor writes nothing before ready.
func (m *Ready) Send(fd int) error {
	m.iov.Base, m.hdr.Iov, m.hdr.Control = &m.zero[0], &m.iov, nil
	m.iov.SetLen(len(m.zero))
	m.hdr.SetIovlen(1)
	m.hdr.SetControllen(0)
	if fd >= 0 {
		binary.NativeEndian.PutUint32(m.oob[m.fdOffset:], uint32(fd))
		m.iov.Base, m.hdr.Control = &m.one[0], &m.oob[0]
		m.hdr.SetControllen(len(m.oob))
	}
	for {
		n, _, errno := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(m.sock), uintptr(unsafe.Pointer(&m.hdr)), unix.MSG_NOSIGNAL)
		switch {
		case errno == unix.EINTR:
			continue
		case errno != 0:
			return fmt.Errorf("sending ready: %w", errno)
		case int(n) != len(m.zero):
			return fmt.Errorf("sending ready: %d of %d bytes sent", n, len(m.zero))
		}
		runtime.KeepAlive(m)
		return nil
	}
}

// ReadReady waits for ready (sbx's side) and returns the notification fd that came with it (close-on-
// exec), or -1. It must be the first message sbx reads: the fd comes with the message's bytes, which a
// buffered read would take without it.
func (c *Conn) ReadReady() (int, error) {
	if c.in.Buffered() > 0 {
		return -1, fmt.Errorf("%w: data before ready", ErrProtocol)
	}
	raw, err := c.f.SyscallConn()
	if err != nil {
		return -1, err
	}
	// "ready N\n" comes whole: the supervisor sends nothing else until go, so this reads no further.
	buf, oob := make([]byte, len(msgReady)+3), make([]byte, unix.CmsgSpace(4))
	var n, oobn int
	var rerr error
	if err := raw.Read(func(s uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(s), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	}); err != nil {
		return -1, err
	}
	if rerr != nil {
		return -1, rerr
	}
	fd := -1
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil && len(msgs) == 1 {
			if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil {
				for i, f := range fds {
					if i == 0 {
						fd = f
					} else {
						unix.Close(f)
					}
				}
			}
		}
	}
	if n == 0 {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, io.EOF
	}
	line := string(buf[:n])
	if line == msgNoBuild+"\n" && fd < 0 {
		var r failReason
		if err := c.readLine(maxFailLine, &r); err != nil {
			return -1, err
		}
		return -1, &BuildError{Reason: r.Reason, Hint: r.Hint}
	}
	if (line != msgReady+" 1\n" || fd < 0) && line != msgReady+" 0\n" {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("%w: %q, want ready", ErrProtocol, line)
	}
	if line == msgReady+" 0\n" && fd >= 0 {
		unix.Close(fd)
		fd = -1
	}
	if fd >= 0 && !isNotifyFD(fd) {
		// Served as the listener, any other file would never answer a notification, and the report
		// would say it recorded what it did not see.
		unix.Close(fd)
		return -1, fmt.Errorf("%w: ready with a file that is no seccomp notification fd", ErrProtocol)
	}
	return fd, nil
}

// isNotifyFD says whether fd is a seccomp filter's notification fd (an anonymous inode of that name).
func isNotifyFD(fd int) bool {
	buf := make([]byte, 64)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	return err == nil && string(buf[:n]) == "anon_inode:seccomp notify"
}

// SendStarted answers go (the supervisor's side).
func (c *Conn) SendStarted(s Started) error {
	if s.Pid == 0 {
		msg := fmt.Sprintf(msgFormat, msgFail, s.Code, s.DiagFD, -1)
		if s.Code == ExitSetup {
			b, err := json.Marshal(failReason{truncate(s.Reason), truncate(s.Hint)})
			if err != nil {
				return err
			}
			msg += string(b) + "\n"
		}
		return c.write(msg)
	}
	return c.write(fmt.Sprintf(msgFormat, msgPid, s.Pid, s.DiagFD, s.PidFD))
}

// ReadStarted waits for the answer to go (sbx's side).
func (c *Conn) ReadStarted() (Started, error) {
	line, err := c.in.ReadString('\n')
	if err != nil {
		return Started{}, err
	}
	s := Started{PidFD: -1}
	var n int
	if _, err := fmt.Sscanf(line, msgFail+" %d %d %d", &n, &s.DiagFD, &s.PidFD); err == nil {
		s.Code = n
		if n == ExitSetup {
			var r failReason
			if err := c.readLine(maxFailLine, &r); err != nil {
				return Started{}, err
			}
			s.Reason, s.Hint = r.Reason, r.Hint
		}
		return s, nil
	}
	if _, err := fmt.Sscanf(line, msgPid+" %d %d %d", &n, &s.DiagFD, &s.PidFD); err != nil {
		return Started{}, fmt.Errorf("%w: %q", ErrProtocol, line)
	}
	s.Pid = n
	return s, nil
}

// truncate cuts s to maxReason bytes (on a rune boundary: JSON keeps what it may not encode as it is
// as an escape).
func truncate(s string) string {
	if len(s) <= maxReason {
		return s
	}
	return strings.ToValidUTF8(s[:maxReason], "")
}

// readLine reads one JSON line of at most max bytes into v.
func (c *Conn) readLine(max int, v any) error {
	var line []byte
	for {
		chunk, err := c.in.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return fmt.Errorf("%w: a line over %d bytes", ErrProtocol, max)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return nil
}

// SendExit says how the command ended (the supervisor's side).
func (c *Conn) SendExit(ws unix.WaitStatus) error {
	return c.write(fmt.Sprintf("%s %d\n", msgExit, int(ws)))
}

// ReadExit waits for the command's end (sbx's side).
func (c *Conn) ReadExit() (unix.WaitStatus, error) {
	line, err := c.in.ReadString('\n')
	if err != nil {
		return 0, err
	}
	var raw int
	if _, err := fmt.Sscanf(line, msgExit+" %d", &raw); err != nil {
		return 0, fmt.Errorf("%w: %q", ErrProtocol, line)
	}
	return unix.WaitStatus(raw), nil
}

func (c *Conn) write(msg string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := io.WriteString(c.f, msg)
	return err
}
