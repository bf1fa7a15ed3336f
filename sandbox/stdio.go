package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The command reopens its stdio by name more often than one would think: echo x > /dev/stderr, tee
// /dev/stdout, open('/dev/stdout', 'w'), /proc/self/fd/N. The kernel lets it only when its uid may open
// the file behind the fd: a pipe belongs to its creator with mode 0600, so root's pipes (sbx run by a CI
// job, an agent host, the MCP server, libcontainer's own copy pipes) are closed to the command, and so is
// a file it may not write. Such stdio is replaced by pipes that belong to the command's user and that sbx
// relays, with splice where both ends allow it; stdout and stderr that are one file on the caller's side
// share one pipe, so that their order holds.

// The command's stdio reach it as the supervisor's extra files 4-6, not as libcontainer's stdio: its
// init changes the owner of its stdio to its own user (fixStdioPermissions), which would take the relay
// pipes from the command, and chown a caller's file or terminal to the sandbox's root.

// relays are the pipes sbx relays between the caller's stdio and the command's.
type relays struct {
	child []*os.File     // the command's ends, closed in sbx once the sandbox holds them
	out   sync.WaitGroup // output relays; done when every writer inside has closed its end
	in    []*os.File     // sbx's write ends of input relays, closed at teardown
	ttys  []ttyState     // the caller's terminals passed to the command, set back at teardown
}

// ttyState is a caller's terminal passed to the command and the modes it had then. A descriptor open
// for writing only still takes the ioctls that change a terminal (the kernel asks for none of the
// file's modes; the job-control check applies only to the caller's own controlling terminal, which the
// sandbox's session is not): the command could turn off echo (stty -echo: the user's shell then shows
// no more typing after sbx ends) or make the terminal exclusive (TIOCEXCL: no program of the user's may
// open it again, sudo's and ssh's prompts fail), stop its output (TCXONC) or change its line
// discipline (TIOCSETD N_NULL: the terminal then drops everything). Its window size is left alone: the user may have resized the window meanwhile.
type ttyState struct {
	f     *os.File // the caller's descriptor (sbx's, kept until teardown)
	tio   *unix.Termios
	excl  int
	ldisc int // its line discipline (N_TTY): N_NULL would swallow everything the user types and sees
}

// saveTTY keeps f's modes for restoreTTYs; nothing when it has none to keep.
func (r *relays) saveTTY(f *os.File) {
	tio, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		return
	}
	excl, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGEXCL)
	if err != nil {
		return
	}
	ldisc, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGETD)
	if err != nil {
		return
	}
	r.ttys = append(r.ttys, ttyState{f: f, tio: tio, excl: excl, ldisc: ldisc})
}

// restoreTTYs sets the caller's terminals back to the modes they had before the command ran, where
// they changed: the command's processes are all gone by then. SIGTTOU is ignored meanwhile: an sbx in
// the background of the caller's shell would be stopped by its own change.
func (r *relays) restoreTTYs() {
	if len(r.ttys) == 0 {
		return
	}
	signal.Ignore(unix.SIGTTOU)
	defer signal.Reset(unix.SIGTTOU)
	for _, t := range r.ttys {
		fd := int(t.f.Fd())
		if now, err := unix.IoctlGetInt(fd, unix.TIOCGETD); err == nil && now != t.ldisc {
			unix.IoctlSetPointerInt(fd, unix.TIOCSETD, t.ldisc)
		}
		if now, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil && *now != *t.tio {
			unix.IoctlSetTermios(fd, unix.TCSETS, t.tio)
		}
		if now, err := unix.IoctlGetInt(fd, unix.TIOCGEXCL); err == nil && now != 0 && t.excl == 0 {
			unix.IoctlSetInt(fd, unix.TIOCNXCL, 0)
		}
		// Output the command stopped (TCXONC TCOOFF, as Ctrl-S does) would hang the user's shell on its
		// next write; the kernel does not say whether it is stopped, and restarting it is harmless.
		unix.IoctlSetInt(fd, unix.TCXONC, unix.TCOON)
	}
	r.ttys = nil
}

// stdio returns the command's stdin, stdout and stderr: the caller's where the command may reopen them
// or they are the null device, /dev/null where the caller gave nothing, else relayed pipes of the
// command's user.
func (s *Sandbox) stdio() ([]*os.File, error) {
	cmd, r := s.cfg.Command, &s.relays
	in, err := r.input(cmd.Stdin, s.ids)
	if err != nil {
		return nil, err
	}
	out, err := r.output(cmd.Stdout, s.ids)
	if err != nil {
		return nil, err
	}
	errw := out
	if !sameTarget(cmd.Stdout, cmd.Stderr) {
		if errw, err = r.output(cmd.Stderr, s.ids); err != nil {
			return nil, err
		}
	}
	if note := passedTerminalNote(out, errw); note != "" {
		s.Notes = append(s.Notes, note)
	}
	return []*os.File{in, out, errw}, nil
}

// passedTerminalNote says, for the report, when the command's stdout or stderr is the caller's terminal
// itself: sbx gives the command a terminal of its own only when stdin and stdout both are one, and
// otherwise passes the caller's, for writing only (reopenTerminal), so that isatty holds. Reopening it by
// name then fails (echo x > /dev/stderr: "Permission denied"), where on the host it works, and the
// command's own error does not say why.
func passedTerminalNote(out, errw *os.File) string {
	var names []string
	for _, f := range []struct {
		name string
		f    *os.File
	}{{"stdout", out}, {"stderr", errw}} {
		if isTerminal(f.f) {
			names = append(names, f.name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("%s: the caller's terminal, passed for writing only (stdin is not a terminal too, so the command got none of its own): writing to it works, reopening it by name (/dev/%s, /proc/self/fd/N) fails with EACCES, since the host's terminal lies outside the sandbox's paths; redirect it to a file or a pipe, or give stdin a terminal as well",
		strings.Join(names, " and "), names[0])
}

// The null device passes as it is: the caller's /dev/null (sbx exec ... </dev/null, >/dev/null; a
// closed stdio too, which sbx's start opens /dev/null on and the supervisor closes again in the
// command, Command.Closed), and /dev/null where the caller
// gives nothing (the MCP server's runs without input, a library caller's nil; a warm sandbox's through
// supervisor.Config.NoInput). The command may reopen it by name: the sandbox's /dev/null is a bind of
// the same inode, which its Landlock rule covers. A pipe in its place is not the same to programs: one
// that reads its input from stdin when stdin is a pipe or a file and searches its working directory
// otherwise (ripgrep, ugrep) found nothing, and a check of stdin's type ([ -c /dev/stdin ], fstat)
// told another story than on the host.

// nullFile opens the host's /dev/null for the command's stdio with flags (O_RDONLY, O_WRONLY); sbx's
// copy is closed once the sandbox holds it.
func (r *relays) nullFile(flags int) (*os.File, error) {
	f, err := os.OpenFile(os.DevNull, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("making the command's stdio: %w", err)
	}
	r.child = append(r.child, f)
	return f, nil
}

// pass is what the command gets of a reopenable f: f itself, or, for a terminal, the terminal reopened
// for the one direction flag names (O_RDONLY for stdin, O_WRONLY for an output), whose modes are set
// back at the end (ttyState): the caller's descriptor is open read-write, and the command's stty -echo
// or N_NULL through a stdin passed as it was outlived sbx. false: relay f instead, a terminal that
// cannot be reopened as itself (a pty master, /dev/tty of a caller with no controlling terminal).
func (r *relays) pass(f *os.File, flag int) (*os.File, bool) {
	if !isTerminal(f) {
		return f, true
	}
	t, err := reopenTerminal(f, flag)
	if err != nil {
		return nil, false
	}
	r.child = append(r.child, t)
	r.saveTTY(f)
	return t, true
}

// isNullFile tells whether f is the null device.
func isNullFile(f *os.File) bool {
	var st unix.Stat_t
	return unix.Fstat(int(f.Fd()), &st) == nil && isDevNull(&st)
}

// input gives the command a pipe that sbx fills from r, unless the command may reopen r itself or r is
// the null device (nil: none).
func (r *relays) input(src io.Reader, ids IDMap) (*os.File, error) {
	if src == nil {
		return r.nullFile(os.O_RDONLY)
	}
	if f, ok := src.(*os.File); ok && isNullFile(f) {
		return f, nil
	}
	if f, ok := src.(*os.File); ok && reopenable(f, ids, 0o4) {
		if pass, ok := r.pass(f, unix.O_RDONLY); ok {
			return pass, nil
		}
	}
	pr, pw, err := r.pipe(ids)
	if err != nil {
		return nil, err
	}
	r.child = append(r.child, pr)
	r.in = append(r.in, pw)
	go func() {
		io.Copy(pw, src)
		pw.Close()
	}()
	return pr, nil
}

// output gives the command a pipe that sbx empties into w, unless the command may reopen w itself or w
// is the null device (nil: none).
func (r *relays) output(dst io.Writer, ids IDMap) (*os.File, error) {
	if dst == nil {
		return r.nullFile(os.O_WRONLY)
	}
	if f, ok := dst.(*os.File); ok && isNullFile(f) {
		return f, nil
	}
	if f, ok := dst.(*os.File); ok && reopenable(f, ids, 0o2) {
		if pass, ok := r.pass(f, unix.O_WRONLY); ok {
			return pass, nil
		}
	}
	pr, pw, err := r.pipe(ids)
	if err != nil {
		return nil, err
	}
	r.child = append(r.child, pw)
	r.out.Add(1)
	go func() {
		defer r.out.Done()
		defer pr.Close()
		relay(dst, pr)
	}()
	return pw, nil
}

// isTerminal tells whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// reopenTerminal opens the terminal behind f again, for reading only or writing only (flag O_RDONLY,
// O_WRONLY). The caller's terminal passes to the command as its stdout or stderr when its stdin is no
// terminal (it then gets none of its own), or as its stdin when its stdout is none, and the caller's
// descriptor is usually open read-write (a shell opens its terminal once, for all three): through an
// output's the command could read what the user types while it runs, keystrokes meant for the shell or
// the next program. A new open file description for the one direction the command needs keeps the
// rest from it, and isatty and the window size still hold. Opened without blocking (a terminal's open
// can wait for its carrier), then made blocking as the caller's is.
//
// The open must reach the very terminal behind f, which its name does not always lead to: the name of a
// pty master (/dev/ptmx) opens a new pty pair, where the command's output would go unseen and its writes
// block once the new pair's buffer is full; /dev/tty opens sbx's controlling terminal, another one or
// none (ENXIO under setsid) than the descriptor's. errOtherTerminal then: the device behind both
// (TIOCGDEV, the slave's for a master) must be one.
func reopenTerminal(f *os.File, flag int) (*os.File, error) {
	dev, err := unix.IoctlGetUint32(int(f.Fd()), unix.TIOCGDEV)
	if err != nil {
		return nil, fmt.Errorf("reopening the terminal: TIOCGDEV: %w", err)
	}
	if isPtyMaster(f) {
		return nil, fmt.Errorf("reopening the terminal: %w: a pty master", errOtherTerminal)
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), flag|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopening the terminal: %w", err)
	}
	w := os.NewFile(uintptr(fd), f.Name())
	if !isTerminal(w) {
		w.Close()
		return nil, errors.New("reopening the terminal: it is no terminal any more")
	}
	if got, err := unix.IoctlGetUint32(fd, unix.TIOCGDEV); err != nil || got != dev {
		w.Close()
		return nil, fmt.Errorf("reopening the terminal: %w", errOtherTerminal)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		w.Close()
		return nil, fmt.Errorf("reopening the terminal: %w", err)
	}
	return w, nil
}

// errOtherTerminal is reopenTerminal's error when the name of the caller's terminal leads to another one.
var errOtherTerminal = errors.New("its name opens another terminal")

// isPtyMaster tells whether f is the master side of a pty (its open by name makes a new pair).
func isPtyMaster(f *os.File) bool {
	_, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPTN)
	return err == nil
}

// pipe makes a pipe that belongs to the command's user.
func (r *relays) pipe(ids IDMap) (*os.File, *os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("making the command's stdio: %w", err)
	}
	// Both ends share one inode: its owner is whom the kernel lets reopen it.
	if err := pr.Chown(ids.HostUID, ids.HostGID); err != nil {
		pr.Close()
		pw.Close()
		return nil, nil, fmt.Errorf("making the command's stdio: %w", err)
	}
	return pr, pw, nil
}

// started closes sbx's copies of the command's ends, so that the relays see EOF when the sandbox's
// writers are gone.
func (r *relays) started() {
	for _, f := range r.child {
		f.Close()
	}
	r.child = nil
}

// close ends the relays: input ones at once, output ones once they have passed on everything (the
// sandbox is dead by then, so every writer has closed its end).
func (r *relays) close() {
	r.started()
	for _, f := range r.in {
		f.Close()
	}
	r.in = nil
	r.out.Wait()
	r.restoreTTYs()
}

// relay copies src into dst until EOF: with splice into a file or pipe, else through a buffer.
func relay(dst io.Writer, src *os.File) {
	if f, ok := dst.(*os.File); ok {
		if err := spliceAll(f, src); !errors.Is(err, unix.EINVAL) {
			return
		}
	}
	io.Copy(dst, src)
}

// spliceAll moves src (a pipe) into dst without copying through user space. EINVAL means dst does not
// take splice (an O_APPEND file, say) and nothing was moved.
func spliceAll(dst, src *os.File) error {
	rc, err := src.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	rerr := rc.Read(func(sfd uintptr) bool {
		for {
			n, err := unix.Splice(int(sfd), nil, int(dst.Fd()), nil, 1<<20, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				if !waitWritable(int(dst.Fd())) {
					return false // src is empty: let the poller wait for it
				}
				continue
			case err != nil:
				serr = err
				return true
			case n == 0:
				return true // EOF: every writer closed its end
			}
		}
	})
	if serr != nil {
		return serr
	}
	return rerr
}

// waitWritable tells whether fd can take data now; when it cannot, it waits until it can and says so.
// It returns false when fd is writable already (the EAGAIN came from an empty source).
func waitWritable(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	if n, _ := unix.Poll(fds, 0); n > 0 {
		return false
	}
	unix.Poll(fds, -1)
	return true
}

// reopenable tells whether f may pass to the command as it is (perm 0o4 read, 0o2 write): only what
// the command could open again by name itself. Landlock decides by path, and a host file's path is
// outside every rule of the sandbox: only anonymous pipes of the command's user (pipefs has no path)
// qualify, and terminals (relaying one would hide it from isatty), which pass reopened for the one
// direction the command needs (reopenTerminal). Everything else is relayed: a socket belongs to the
// host's network namespace, whose interfaces and addresses its ioctls list (SIOCGIFCONF), and a stream
// socket given as an output also reads what its peer sends (Node's child_process and systemd give
// their children socket pairs for stdio); any other character device answers its own ioctls and mmap.
func reopenable(f *os.File, ids IDMap, perm uint32) bool {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		return isTerminal(f)
	case unix.S_IFIFO:
		var fs unix.Statfs_t
		if unix.Fstatfs(int(f.Fd()), &fs) != nil || fs.Type != unix.PIPEFS_MAGIC {
			return false
		}
	default:
		return false
	}
	switch {
	case int(st.Uid) == ids.HostUID:
		return st.Mode>>6&perm != 0
	case int(st.Gid) == ids.HostGID:
		return st.Mode>>3&perm != 0
	}
	return st.Mode&perm != 0
}

// isDevNull tells whether st is /dev/null (1:3).
func isDevNull(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && unix.Major(st.Rdev) == 1 && unix.Minor(st.Rdev) == 3
}

// sameTarget tells whether two writers are one: the same value, or files on the same inode.
func sameTarget(a, b io.Writer) bool {
	if a == nil || b == nil {
		return false
	}
	if ta := reflect.TypeOf(a); ta == reflect.TypeOf(b) && ta.Comparable() && a == b {
		return true
	}
	fa, oka := a.(*os.File)
	fb, okb := b.(*os.File)
	if !oka || !okb {
		return false
	}
	var sa, sb unix.Stat_t
	if unix.Fstat(int(fa.Fd()), &sa) != nil || unix.Fstat(int(fb.Fd()), &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}
