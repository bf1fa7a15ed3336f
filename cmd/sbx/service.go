package main

// The sbx service's wire protocol, shared by `sbx serve` (serve.go) and the CLI that hands it a run
// (service_client.go).
//
// One connection is one run. Over a Unix stream socket whose peer both sides check to be of their own
// uid, the frames are a 4-byte big-endian length and a JSON object:
//
//	CLI → service  request  (with the command's stdin, stdout and stderr as SCM_RIGHTS)
//	service → CLI  verdict on taking it: ready, or why not (the CLI then runs cold)
//	CLI → service  go: only then does the service start anything
//	CLI → service  signals the CLI received, any number, until it has the result
//	service → CLI  the result: the report rendered as the CLI asked, its status, or sbx's error and hint
//
// The CLI compiles the plan and writes the report itself, so that everything it reads (the profile
// file, relative paths, its environment) and prints is as in a cold run; the service only carries
// out runner.Run, in a sandbox from its warm pool when it holds one. A CLI that gave up waiting for
// "ready" never sends "go", so a run is never carried out twice.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	goio "io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/cgprime"
	"github.com/sbx-dev/sbx/internal/selfexe"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/runner"
)

// serviceProto is the protocol's version; a service of another one is not used.
const serviceProto = 1

// serviceEnv names the socket of the sbx service (default: serviceSocket()); "off" makes every run
// cold.
const serviceEnv = "SBX_SERVICE"

// maxServiceFrame bounds a frame: a request holds the plan, the command's arguments and environment
// (the kernel's limit on those is 2 MiB), a result the report (bounded by the runner).
const maxServiceFrame = 16 << 20

// serviceEnvKeys are the variables that change how sbx builds or runs a sandbox, read from sbx's own
// environment: a service whose values differ from the CLI's would build another sandbox than a cold
// run, so the CLI runs cold then.
// (The caller's home, which sbx reads from HOME and SUDO_USER for its decoys, is the request's own.)
var serviceEnvKeys = []string{"SBX_LIBCONTAINER", "SBX_TRACE", "XDG_RUNTIME_DIR", "XDG_STATE_HOME"}

// serviceRequest is the run the CLI hands over: runner.Options but for its stdio (passed as
// descriptors) and signals (frames of their own).
type serviceRequest struct {
	Proto     int               `json:"proto"`
	Build     string            `json:"build"`
	Env       map[string]string `json:"env"` // serviceEnvKeys as the CLI has them ("" = unset)
	Limits    callerLimits      `json:"limits"`
	View      callerView        `json:"view"`
	Plan      *policy.Plan      `json:"plan"`
	Args      []string          `json:"args"`
	Cwd       string            `json:"cwd"`
	Closed    [3]bool           `json:"closed"`
	StateRoot string            `json:"state_root"`
	Changes   string            `json:"changes"`
	// CallerHome is the CLI's caller's home (sandbox.CallerHome: the sudo user's, or $HOME), where
	// decoys go.
	CallerHome string `json:"caller_home"`
	// How the report is rendered: as the CLI's flags and stderr say (renderReport).
	Quiet  bool   `json:"quiet"`
	Color  bool   `json:"color"`
	JSON   bool   `json:"json"`
	Format string `json:"format"`
}

// serviceReply is what the service sends: first Ready or Fallback, at the end Done.
type serviceReply struct {
	Ready    bool       `json:"ready,omitempty"`
	Fallback string     `json:"fallback,omitempty"` // why the service does not take the run
	Done     bool       `json:"done,omitempty"`
	Status   *runStatus `json:"status,omitempty"` // the command ran (also with Err)
	Rendered rendered   `json:"rendered"`         // its report as the CLI writes it
	Err      string     `json:"error,omitempty"`
	Hint     string     `json:"hint,omitempty"`
	Warm     bool       `json:"warm,omitempty"` // the run had a sandbox from the pool
}

// runStatus is what the CLI's exit status is made of (execStatus): the report's fields, the rest of
// the report being what the service rendered.
type runStatus struct {
	ExitCode int    `json:"exit_code"`
	TimedOut bool   `json:"timed_out"`
	Verdict  string `json:"verdict"`
}

// serviceMsg is what the CLI sends after its request: Go once, then Signal for each signal.
type serviceMsg struct {
	Go     bool `json:"go,omitempty"`
	Signal int  `json:"signal,omitempty"`
}

// serviceSocket is where the caller's service listens: root's in /run, another user's in its runtime
// directory (systemd's %t).
func serviceSocket() string {
	if p := os.Getenv(serviceEnv); p != "" {
		return p
	}
	if os.Geteuid() == 0 {
		return "/run/sbx.sock"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		return filepath.Join(d, "sbx.sock")
	}
	return filepath.Join("/run/user", strconv.Itoa(os.Geteuid()), "sbx.sock")
}

// buildID names this build of sbx: its version and the identity of its binary's file (binaryID). A
// service of another build is not used.
func buildID() string {
	id := binaryID()
	if id == "" {
		return ""
	}
	return buildVersion() + " " + id
}

// binaryID is the identity of sbx's binary file (selfexe.Path: also from the sealed copy a service
// runs from), which an install or a rebuild replaces; "" when unknown. The fast client names its build
// so (fastclient.c stats /proc/self/exe): it cannot ask Go for the version.
func binaryID() string {
	self, err := selfexe.Path()
	if err != nil {
		return ""
	}
	var st unix.Stat_t
	if err := unix.Stat(self, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d:%d:%d.%d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
}

// callerLimits are what the command inherits from the sbx that runs it, as its caller started it
// (package sandbox takes them from its own process: cgprime): a service whose own differ would give
// the command other limits than a cold run does, so the CLI runs cold then.
type callerLimits struct {
	NoFile     uint64 `json:"nofile"` // the caller's soft limit (cgprime.CallerNoFile), else 0
	NoFileMax  uint64 `json:"nofile_max"`
	Memlock    uint64 `json:"memlock"`
	MemlockMax uint64 `json:"memlock_max"`
	TimerSlack uint64 `json:"timer_slack"`
}

// ownCallerLimits are this process's callerLimits.
func ownCallerLimits() callerLimits {
	var l callerLimits
	if soft, ok := cgprime.CallerNoFile(); ok {
		l.NoFile = soft
	}
	var r unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &r) == nil {
		l.NoFileMax = r.Max
	}
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &r) == nil {
		l.Memlock, l.MemlockMax = r.Cur, r.Max
	}
	l.TimerSlack = cgprime.CallerTimerSlack()
	if l.TimerSlack == 0 {
		if v, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err == nil {
			l.TimerSlack = uint64(v)
		}
	}
	return l
}

// callerView is what the CLI sees of the host that the run is built from, beside the plan: its umask
// (the command inherits sbx's), the namespaces it runs in (a cold run's uplink is sbx's own network
// namespace: a CLI in a namespace of its own, `ip netns exec NAME sbx exec`, must not get the
// service's), and the files the sandbox shows at fixed places (runner.HostPaths), by identity: a
// service in a mount namespace of its own does not see a mount made on a host whose root is not
// shared after it started. The service serves only a CLI whose view is its own.
type callerView struct {
	Umask int               `json:"umask"`
	NS    map[string]string `json:"ns"`
	Paths []string          `json:"paths"`
	IDs   []runner.FileID   `json:"ids"` // of Paths
}

// viewNamespaces are the namespaces a run inherits from its sbx or builds on.
var viewNamespaces = []string{"net", "pid", "user", "ipc", "uts", "cgroup", "time"}

// ownView is callerView as this process sees it, of the files at paths (the service looks at the
// CLI's list, once it has checked it is the run's).
func ownView(paths []string) callerView {
	v := callerView{Umask: umask(), NS: make(map[string]string, len(viewNamespaces)), Paths: paths, IDs: runner.Identities(paths)}
	for _, ns := range viewNamespaces {
		v.NS[ns], _ = os.Readlink("/proc/self/ns/" + ns)
	}
	return v
}

// differs says how view w (the service's) differs from v (the CLI's), "" when it does not.
func (v callerView) differs(w callerView) string {
	if v.Umask != w.Umask {
		return fmt.Sprintf("the service's umask is %04o, this sbx's %04o", w.Umask, v.Umask)
	}
	for _, ns := range viewNamespaces {
		if v.NS[ns] != w.NS[ns] {
			return fmt.Sprintf("this sbx runs in another %s namespace than the service", ns)
		}
	}
	if !slices.Equal(v.Paths, w.Paths) || len(v.IDs) != len(v.Paths) {
		return "the request is incomplete"
	}
	for i := range v.IDs {
		if v.IDs[i] != w.IDs[i] {
			return fmt.Sprintf("the service sees another %s than this sbx (a mount made since it started?): restart it", v.Paths[i])
		}
	}
	return ""
}

// umask is the process's file mode creation mask, read from /proc (setting it to read it would race
// the process's other threads).
func umask() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 8, 32); err == nil {
				return int(n)
			}
		}
	}
	return -1
}

// allUTF8 says whether every string in v (exported fields, slices, maps, pointers) is valid UTF-8,
// which JSON carries unchanged; an argument, path or variable of other bytes makes the run cold.
func allUTF8(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		return utf8.ValidString(v.String())
	case reflect.Pointer, reflect.Interface:
		return v.IsNil() || allUTF8(v.Elem())
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if !allUTF8(v.Index(i)) {
				return false
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if !allUTF8(it.Key()) || !allUTF8(it.Value()) {
				return false
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && !allUTF8(v.Field(i)) {
				return false
			}
		}
	}
	return true
}

// serviceEnvValues are serviceEnvKeys' values in this process.
func serviceEnvValues() map[string]string {
	m := make(map[string]string, len(serviceEnvKeys))
	for _, k := range serviceEnvKeys {
		m[k] = os.Getenv(k)
	}
	return m
}

// soPeerPidfd is SO_PEERPIDFD (Linux 6.5): a pidfd of the process at the other end, as it connected.
const soPeerPidfd = 77

// ownPeer says why the process at the other end of c is not of this process's uid, in its user and
// pid namespaces ("" when it is, with its pid). A process in a sandbox has a user namespace of its own but may have
// the caller's uid on the host (without root), and may reach the socket through a share, or a profile
// that does not hide it: it must neither hand the service a run (whose plan it writes: a share of the
// whole home) nor pose as the service (and forge a verdict). The peer is named by a pidfd where the
// kernel gives one, checked alive once its namespaces were read, so that its pid was not reused
// meanwhile; else by the pid SO_PEERCRED gives (0 for a peer in a pid namespace this one cannot see).
func ownPeer(c *net.UnixConn) (pid int, why string) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err.Error()
	}
	var cred *unix.Ucred
	var cerr error
	pidfd := -1
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, soPeerPidfd); err == nil {
			pidfd = v
		}
	}); err != nil {
		return 0, err.Error()
	}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	if cerr != nil {
		return 0, cerr.Error()
	}
	if int(cred.Uid) != os.Geteuid() {
		return 0, fmt.Sprintf("it is uid %d's", cred.Uid)
	}
	if cred.Pid <= 0 {
		return 0, "its process is not one this sbx can see"
	}
	for _, ns := range []string{"user", "pid"} {
		own, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return 0, err.Error()
		}
		if its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", cred.Pid, ns)); err != nil || its != own {
			return 0, "it runs in another " + ns + " namespace (a sandbox's?)"
		}
	}
	if pidfd >= 0 && unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
		return 0, "its process ended"
	}
	return int(cred.Pid), ""
}

// writeFrame sends v as one frame, with fds (if any) as SCM_RIGHTS on its first byte.
func writeFrame(c *net.UnixConn, v any, fds ...int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeBody(c, b, fds...)
}

// writeBody sends b as one frame, with fds as writeFrame.
func writeBody(c *net.UnixConn, b []byte, fds ...int) error {
	if len(b) > maxServiceFrame {
		return fmt.Errorf("a frame of %d bytes exceeds the bound of %d", len(b), maxServiceFrame)
	}
	msg := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	msg = append(msg, b...)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(msg, oob, nil)
	if err != nil {
		return err
	}
	if oobn != len(oob) {
		return errors.New("the descriptors were not sent")
	}
	if n < len(msg) {
		_, err = c.Write(msg[n:])
	}
	return err
}

// errFrameFDs: a frame came with descriptors where none were expected, or not as many as expected.
var errFrameFDs = errors.New("unexpected descriptors in a frame")

// readFrame reads one frame into v. With nfds > 0 it expects exactly that many descriptors on the
// frame and returns them (close-on-exec); any received otherwise are closed and the frame refused.
func readFrame(c *net.UnixConn, v any, nfds int) ([]*os.File, error) {
	body, files, err := readFrameBody(c, nfds, maxServiceFrame)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, v); err != nil {
		for _, f := range files {
			f.Close()
		}
		return nil, err
	}
	return files, nil
}

// readFrameBody reads one frame of at most max bytes, with nfds descriptors as readFrame.
func readFrameBody(c *net.UnixConn, nfds, max int) ([]byte, []*os.File, error) {
	var hdr [4]byte
	oob := make([]byte, unix.CmsgSpace(4*(nfds+1)))
	n, oobn, flags, _, err := c.ReadMsgUnix(hdr[:], oob)
	if err != nil {
		return nil, nil, err
	}
	if n == 0 {
		return nil, nil, goio.EOF
	}
	fds, ferr := parseRights(oob[:oobn])
	files := make([]*os.File, 0, len(fds))
	for _, fd := range fds {
		unix.CloseOnExec(fd)
		files = append(files, os.NewFile(uintptr(fd), "passed"))
	}
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	if ferr != nil || flags&unix.MSG_CTRUNC != 0 || len(files) != nfds {
		closeAll()
		return nil, nil, errFrameFDs
	}
	if n < len(hdr) {
		if _, err := goio.ReadFull(c, hdr[n:]); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > uint32(max) {
		closeAll()
		return nil, nil, fmt.Errorf("a frame of %d bytes exceeds the bound of %d", size, max)
	}
	body := make([]byte, size)
	if _, err := goio.ReadFull(c, body); err != nil {
		closeAll()
		return nil, nil, err
	}
	return body, files, nil
}

// parseRights returns the descriptors of the SCM_RIGHTS messages in oob.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}
