package observe

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"github.com/sbx-dev/sbx/report"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Names of the sources of denials, as the report spells them.
const (
	SourceSeccompNotify = report.SourceSeccompNotify
	SourceWriteNotify   = report.SourceWriteNotify
	SourceAudit         = report.SourceAudit
)

// ErrAuditUnavailable is matched (errors.Is) by the reasons a DenialsCollector cannot report denials.
var ErrAuditUnavailable = errors.New("kernel denials unavailable")

// Audit record types (include/uapi/linux/audit.h).
const (
	auditTrustedApp     = 1121 // AUDIT_TRUSTED_APP: free text from userspace; sbx's end-of-run marker
	auditSeccomp        = unix.AUDIT_SECCOMP
	auditSyscall        = unix.AUDIT_SYSCALL
	auditLandlockAccess = unix.AUDIT_LANDLOCK_ACCESS
	auditLandlockDomain = unix.AUDIT_LANDLOCK_DOMAIN
	auditStatusEnabled  = 4 // offset of "enabled" in struct audit_status
)

// Bounds on what a collector keeps, whatever the host or the command floods audit with.
const (
	maxDenialKeys = 4096
	syncTimeout   = 250 * time.Millisecond
)

// DenialsCollector listens to the kernel's audit records from StartDenials until Stop, in memory, on a
// goroutine of its own. It reads the audit multicast group (AUDIT_NLGRP_READLOG, which needs
// CAP_AUDIT_READ in the initial user namespace and a socket in the initial network namespace) beside
// auditd, without configuring audit: when audit is off, the kernel logs no denials and the collector
// says so. What it reports depends on the sandbox asking for the records: a seccomp filter with
// SECCOMP_FILTER_FLAG_LOG, and Landlock domains with logging after exec (LOG_NEW_EXEC_ON).
type DenialsCollector struct {
	reason  error  // why nothing can be reported; nil when records are read
	partial string // what is missing although records are read
	fd      int
	wake    [2]int
	done    chan struct{}
	token   string // text of the end-of-run marker
	synced  chan struct{}
	once    sync.Once
	stopped sync.Once
	// checked carries checkLogging's answer (see awaitCheck).
	checked   chan checkResult
	checkOnce sync.Once

	mu       sync.Mutex
	seccomp  map[seccompKey]int
	access   []landlockRecord       // in arrival order, until their pid is known
	syscalls map[uint64]procOfEvent // serial -> process, for serials of access records
	domains  map[string]int         // Landlock domain id -> host pid of the process that created it
	lost     int
}

type seccompKey struct {
	pid           int
	exe           string
	syscall, arch uint64
	code          uint64
}

type landlockRecord struct {
	serial       uint64
	domain       string
	access, path string
	pid          int // from the record itself, when the kernel puts it there
	exe          string
}

type procOfEvent struct {
	pid int
	exe string
}

// StartDenials starts listening. It never fails: a collector that cannot report anything says why
// in what Stop returns. What the kernel logs (audit on, seccomp's logged actions, Landlock's ABI) is
// asked beside the listening, which is all the command must wait for: asking audit for its status
// costs a kernel thread's start per question, on the path of every run.
func StartDenials() *DenialsCollector {
	c := &DenialsCollector{fd: -1, seccomp: map[seccompKey]int{}, syscalls: map[uint64]procOfEvent{},
		domains: map[string]int{}, checked: make(chan checkResult, 1)}
	go func() {
		partial, err := checkLogging()
		c.checked <- checkResult{partial, err}
	}()
	if err := c.listen(); err != nil {
		c.reason = err
		if c.fd >= 0 {
			unix.Close(c.fd)
			c.fd = -1
		}
	}
	return c
}

// checkResult is what checkLogging found.
type checkResult struct {
	partial string
	err     error
}

// checkLogging says what the kernel logs: an error when it logs no denial sbx could read, else what
// part it does not log ("" all of it).
func checkLogging() (partial string, err error) {
	enabled, err := auditEnabled()
	if err != nil {
		return "", fmt.Errorf("%w: reading the audit status: %v", ErrAuditUnavailable, err)
	}
	if !enabled {
		return "", fmt.Errorf("%w: kernel audit is off, so the kernel logs no seccomp or Landlock denials "+
			"(auditctl -e 1 turns it on; sbx leaves that host setting alone)", ErrAuditUnavailable)
	}
	var missing []string
	if !seccompLogsErrno() {
		missing = append(missing, "seccomp denials need errno in /proc/sys/kernel/seccomp/actions_logged")
	}
	if abi, _ := llsys.LandlockGetABIVersion(); abi < 7 {
		missing = append(missing, fmt.Sprintf("landlock denials need landlock ABI 7, this kernel has %d", abi))
	}
	if len(missing) == 2 {
		return "", fmt.Errorf("%w: %s", ErrAuditUnavailable, strings.Join(missing, "; "))
	}
	return strings.Join(missing, "; "), nil
}

// listen joins the audit log group and starts reading it.
func (c *DenialsCollector) listen() error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return fmt.Errorf("%w: opening an audit socket: %v", ErrAuditUnavailable, err)
	}
	c.fd = fd
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (unix.AUDIT_NLGRP_READLOG - 1)}
	if err := unix.Bind(fd, sa); err != nil {
		return fmt.Errorf("%w: joining the audit log group (needs CAP_AUDIT_READ in the host's namespaces): %v",
			ErrAuditUnavailable, err)
	}
	if err := unix.Pipe2(c.wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("%w: %v", ErrAuditUnavailable, err)
	}
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	c.token = "sbx-denials-end=" + hex.EncodeToString(tok[:])
	c.done, c.synced = make(chan struct{}), make(chan struct{})
	go c.read()
	return nil
}

// awaitCheck takes checkLogging's answer, once: a kernel that logs nothing sbx can read is the reason,
// before any failure to listen (as when it was asked first).
func (c *DenialsCollector) awaitCheck() {
	c.checkOnce.Do(func() {
		r := <-c.checked
		c.mu.Lock()
		c.partial = r.partial
		c.mu.Unlock()
		if r.err == nil {
			return
		}
		if c.reason == nil {
			c.stopped.Do(c.quit) // listening for records audit does not send: no end marker comes back either
		}
		c.reason = r.err
	})
}

// auditEnabled asks the kernel for its audit status (AUDIT_GET), which any process may read.
func auditEnabled() (bool, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(time.Second))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := unix.Sendto(fd, auditMsg(unix.AUDIT_GET, 0, nil), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return false, err
	}
	buf := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return false, err
		}
		var status []byte
		var replyErr error
		eachAuditMsg(buf[:n], func(typ uint16, data []byte) {
			switch {
			case typ == unix.AUDIT_GET:
				status = data
			case typ == unix.NLMSG_ERROR && len(data) >= 4:
				if e := int32(binary.NativeEndian.Uint32(data)); e != 0 {
					replyErr = unix.Errno(-e)
				}
			}
		})
		switch {
		case replyErr != nil:
			return false, replyErr
		case status != nil && len(status) < auditStatusEnabled+4:
			return false, errors.New("short audit status")
		case status != nil:
			return binary.NativeEndian.Uint32(status[auditStatusEnabled:]) != 0, nil
		}
	}
}

// eachAuditMsg calls fn with each netlink message in b. Audit's lengths are not padded to 4 bytes,
// which syscall.ParseNetlinkMessage refuses.
func eachAuditMsg(b []byte, fn func(typ uint16, data []byte)) {
	for len(b) >= unix.NLMSG_HDRLEN {
		l := min(int(binary.NativeEndian.Uint32(b)), len(b))
		if l < unix.NLMSG_HDRLEN {
			return
		}
		fn(binary.NativeEndian.Uint16(b[4:]), b[unix.NLMSG_HDRLEN:l])
		b = b[min((l+3)&^3, len(b)):]
	}
}

func auditMsg(typ uint16, flags uint16, data []byte) []byte {
	b := make([]byte, unix.NLMSG_HDRLEN+len(data))
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], unix.NLM_F_REQUEST|flags)
	copy(b[unix.NLMSG_HDRLEN:], data)
	return b
}

// seccompLogsErrno reports whether the kernel logs SECCOMP_RET_ERRNO of filters that ask for it, which
// is how sbx's filter refuses syscalls. The sysctl is the host's: sbx reads it and changes nothing.
func seccompLogsErrno() bool {
	b, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_logged")
	return err == nil && slices.Contains(strings.Fields(string(b)), "errno")
}

func (c *DenialsCollector) read() {
	defer close(c.done)
	buf := make([]byte, 1<<16)
	fds := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}, {Fd: int32(c.wake[0]), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			c.mu.Lock()
			c.lost++ // what comes after is not read
			c.mu.Unlock()
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		for {
			n, _, err := unix.Recvfrom(c.fd, buf, unix.MSG_DONTWAIT)
			if errors.Is(err, unix.ENOBUFS) {
				c.mu.Lock()
				c.lost++
				c.mu.Unlock()
				continue
			}
			if err != nil {
				break
			}
			eachAuditMsg(buf[:n], c.handle)
		}
	}
}

// handle takes one audit record. Records of one event share a serial: a Landlock denial is an
// ACCESS record, a DOMAIN record the first time its domain denies something, and a SYSCALL record
// with the process when the kernel audits the syscall.
func (c *DenialsCollector) handle(typ uint16, data []byte) {
	serial, f := parseAuditRecord(data)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch typ {
	case auditTrustedApp:
		if bytes.Contains(data, []byte(c.token)) {
			c.once.Do(func() { close(c.synced) })
		}
	case auditSeccomp:
		k := seccompKey{pid: atoi(f["pid"]), exe: f["exe"], syscall: hexOrDec(f["syscall"], 10),
			arch: hexOrDec(f["arch"], 16), code: hexOrDec(f["code"], 16)}
		if _, ok := c.seccomp[k]; !ok && len(c.seccomp) >= maxDenialKeys {
			c.lost++
			return
		}
		c.seccomp[k]++
	case auditLandlockAccess:
		if len(c.access) >= maxDenialKeys*4 {
			c.lost++
			return
		}
		path := f["path"]
		if path == "" {
			path = f["name"]
		}
		c.access = append(c.access, landlockRecord{serial: serial, domain: f["domain"], access: f["blockers"],
			path: path, pid: atoi(f["pid"]), exe: f["exe"]})
	case auditLandlockDomain:
		if f["status"] == "allocated" {
			c.domains[f["domain"]] = atoi(f["pid"])
		}
	case auditSyscall:
		if n := len(c.access); n > 0 && c.access[n-1].serial == serial {
			c.syscalls[serial] = procOfEvent{pid: atoi(f["pid"]), exe: f["exe"]}
		}
	}
}

// DenialsScope says which processes are the sandbox's.
type DenialsScope struct {
	// HostPids are the host pids of the sandbox's processes: its init and every process seen in it.
	HostPids []int
	// SandboxPid maps a host pid to the pid inside the sandbox, where known.
	SandboxPid map[int]int
}

// ScopeOf gathers the sandbox's processes from what a run observed: the init's host pid, the process
// tree of the exec events (forks that never exec'd included), the execs and the processes left running.
func ScopeOf(initHostPid int, ev *Events, execs []report.Exec, left []report.Process) DenialsScope {
	s := DenialsScope{HostPids: []int{initHostPid}, SandboxPid: map[int]int{initHostPid: 1}}
	if ev != nil {
		s.HostPids = append(s.HostPids, ev.tree(initHostPid)...)
	}
	for _, x := range execs {
		s.HostPids = append(s.HostPids, x.HostPid)
		if x.Pid != 0 {
			s.SandboxPid[x.HostPid] = x.Pid
		}
	}
	for _, p := range left {
		s.HostPids = append(s.HostPids, p.HostPid)
		s.SandboxPid[p.HostPid] = p.Pid
	}
	slices.Sort(s.HostPids)
	s.HostPids = slices.Compact(s.HostPids)
	return s
}

// tree returns the host pids of root's descendants by the recorded fork events, once Stop has ended
// the recording.
func (e *Events) tree(root int) []int {
	select {
	case <-e.done:
	default:
		return nil // still recording: the log is the reader's
	}
	in := map[int]bool{root: true}
	var out []int
	for _, ev := range e.log {
		if ev.what == procEventFork && in[ev.parent] && !in[ev.pid] {
			in[ev.pid] = true
			out = append(out, ev.pid)
		}
	}
	return out
}

// Stop waits until the kernel has delivered every record queued before it (by sending a marker
// through audit and waiting for it to come back, at most 250 ms), ends the collection and returns the
// denials of the processes in scope. The marker is an AUDIT_TRUSTED_APP record, so a host that runs
// auditd keeps one "sbx-denials-end=..." line per run in its log.
func (c *DenialsCollector) Stop(scope DenialsScope) report.Denials {
	d := report.Denials{Seccomp: []report.SeccompDenial{}, Landlock: []report.LandlockDenial{}, Writes: []report.WriteDenial{}}
	c.awaitCheck()
	if c.reason != nil {
		d.Reason = strings.TrimPrefix(c.reason.Error(), ErrAuditUnavailable.Error()+": ")
		d.Sources = []report.DenialSource{{Name: SourceAudit, Covers: auditCovers, Reason: d.Reason}}
		return d
	}
	c.stopped.Do(c.stop)
	d = c.collect(scope)
	d.Writes = []report.WriteDenial{}
	d.Sources = []report.DenialSource{{Name: SourceAudit, Recorded: true, Covers: auditCovers, Reason: d.Reason}}
	return d
}

const auditCovers = "syscalls the seccomp filter refused, accesses Landlock refused"

// MergeDenials merges what sbx recorded itself (own: seccomp-notify and write-notify; its Available
// says whether either recorded) with the kernel's audit records. An audit record that one of sbx's
// records already holds is dropped: seccomp refusals that went through user notification (action
// user_notif, or the same process and syscall), and Landlock refusals of a write sbx recorded (the same
// process and path, or its parent directory, which Landlock names for a refused create).
func MergeDenials(own, audit report.Denials) report.Denials {
	out := report.Denials{Available: own.Available || audit.Available, Lost: own.Lost + audit.Lost, Seccomp: slices.Clone(own.Seccomp),
		Landlock: []report.LandlockDenial{}, Writes: slices.Clone(own.Writes),
		Sources: slices.Concat(own.Sources, audit.Sources), Recorder: own.Recorder}
	type call struct {
		pid  int
		name string
	}
	notified := map[call]bool{}
	for _, s := range own.Seccomp {
		notified[call{s.HostPid, s.Syscall}] = true
	}
	for _, s := range audit.Seccomp {
		if s.Action == "user_notif" || notified[call{s.HostPid, s.Syscall}] {
			continue
		}
		out.Seccomp = append(out.Seccomp, s)
	}
	written := map[call]bool{}
	for _, w := range own.Writes {
		written[call{w.HostPid, w.Path}] = true
		written[call{w.HostPid, path.Dir(w.Path)}] = true
	}
	for _, l := range audit.Landlock {
		if len(own.Writes) > 0 && written[call{l.HostPid, l.Path}] {
			continue
		}
		out.Landlock = append(out.Landlock, l)
	}
	var reasons []string
	for _, s := range out.Sources {
		if s.Reason != "" && (!out.Available || s.Recorded) {
			reasons = append(reasons, s.Reason)
		}
	}
	if !out.Available {
		out.Reason = audit.Reason
	} else if len(reasons) > 0 {
		out.Reason = strings.Join(reasons, "; ")
	}
	if out.Seccomp == nil {
		out.Seccomp = []report.SeccompDenial{}
	}
	if out.Writes == nil {
		out.Writes = []report.WriteDenial{}
	}
	if out.Sources == nil {
		out.Sources = []report.DenialSource{}
	}
	return out
}

// collect filters and counts what was recorded.
func (c *DenialsCollector) collect(scope DenialsScope) report.Denials {
	d := report.Denials{Available: true, Reason: c.partial}
	in := make(map[int]bool, len(scope.HostPids))
	for _, p := range scope.HostPids {
		in[p] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d.Seccomp = c.seccompDenials(in, scope.SandboxPid)
	d.Landlock = c.landlockDenials(in, scope.SandboxPid)
	d.Lost = c.lost
	if c.lost > 0 {
		d.Reason = strings.TrimPrefix(d.Reason+fmt.Sprintf("; %d audit records lost, the lists may be incomplete", c.lost), "; ")
	}
	return d
}

// stop syncs with the kernel's audit queue and ends the reader.
func (c *DenialsCollector) stop() {
	// The kernel overwrites the last byte of a user message with a NUL: send one.
	msg := auditMsg(auditTrustedApp, 0, append([]byte(c.token), 0))
	if err := unix.Sendto(c.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err == nil {
		select {
		case <-c.synced:
		case <-time.After(syncTimeout):
			c.mu.Lock()
			c.partial = strings.TrimPrefix(c.partial+"; the kernel's audit queue did not drain in time", "; ")
			c.mu.Unlock()
		}
	}
	c.quit()
}

// quit ends the reader and closes what it read.
func (c *DenialsCollector) quit() {
	_, _ = unix.Write(c.wake[1], []byte{0})
	<-c.done
	unix.Close(c.fd)
	unix.Close(c.wake[0])
	unix.Close(c.wake[1])
}

// ignoredSeccomp says whether a refusal is the filter's compatibility answer rather than a denial:
// Docker's default answers clone3 with ENOSYS so that libc and Go fall back to clone, on every fork.
// (Audit records carry the action without its errno, so any errno refusal of clone3 is dropped.)
func ignoredSeccomp(name string, code uint64) bool {
	return name == "clone3" && code&0xffff0000 == 0x00050000
}

func (c *DenialsCollector) seccompDenials(in map[int]bool, sandboxPid map[int]int) []report.SeccompDenial {
	out := []report.SeccompDenial{}
	for k, n := range c.seccomp {
		if !in[k.pid] {
			continue
		}
		name := syscallName(k.syscall, k.arch)
		if ignoredSeccomp(name, k.code) {
			continue
		}
		out = append(out, report.SeccompDenial{Pid: sandboxPid[k.pid], HostPid: k.pid, Exe: k.exe, Syscall: name, Source: SourceAudit,
			Action: seccompAction(k.code), Count: n})
	}
	slices.SortFunc(out, func(a, b report.SeccompDenial) int {
		return cmpFirst(a.HostPid-b.HostPid, strings.Compare(a.Syscall, b.Syscall), strings.Compare(a.Action, b.Action))
	})
	return out
}

func (c *DenialsCollector) landlockDenials(in map[int]bool, sandboxPid map[int]int) []report.LandlockDenial {
	type key struct {
		pid               int
		exe, access, path string
	}
	counts := map[key]int{}
	var order []key
	for _, r := range c.access {
		if creator, ok := c.domains[r.domain]; !ok || !in[creator] {
			continue
		}
		k := key{pid: r.pid, exe: r.exe, access: r.access, path: r.path}
		if p, ok := c.syscalls[r.serial]; ok && k.pid == 0 {
			k.pid, k.exe = p.pid, p.exe
		}
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	out := []report.LandlockDenial{}
	for _, k := range order {
		out = append(out, report.LandlockDenial{Pid: sandboxPid[k.pid], HostPid: k.pid, Exe: k.exe, Access: k.access,
			Path: k.path, Count: counts[k]})
	}
	return out
}

func cmpFirst(cs ...int) int {
	for _, c := range cs {
		if c != 0 {
			return c
		}
	}
	return 0
}

// auditArchs maps audit's arch values to libseccomp's.
var auditArchs = map[uint64]libseccomp.ScmpArch{
	unix.AUDIT_ARCH_X86_64: libseccomp.ArchAMD64, unix.AUDIT_ARCH_I386: libseccomp.ArchX86,
	unix.AUDIT_ARCH_AARCH64: libseccomp.ArchARM64, unix.AUDIT_ARCH_ARM: libseccomp.ArchARM,
	unix.AUDIT_ARCH_RISCV64: libseccomp.ArchRISCV64, unix.AUDIT_ARCH_PPC64LE: libseccomp.ArchPPC64LE,
	unix.AUDIT_ARCH_S390X: libseccomp.ArchS390X,
}

func syscallName(nr, arch uint64) string {
	if a, ok := auditArchs[arch]; ok {
		if name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(a); err == nil {
			return name
		}
	}
	return "#" + strconv.FormatUint(nr, 10)
}

// seccompAction names the filter's return value as the seccomp sysctls do.
func seccompAction(code uint64) string {
	switch code & 0xffff0000 {
	case 0x80000000:
		return "kill_process"
	case 0x00000000:
		return "kill_thread"
	case 0x00030000:
		return "trap"
	case 0x00050000:
		return "errno" // audit gives the action only, not which errno the filter returned
	case 0x7fc00000:
		return "user_notif"
	case 0x7ff00000:
		return "trace"
	case 0x7ffc0000:
		return "log"
	}
	return fmt.Sprintf("0x%x", code)
}

// untrusted are the fields the kernel writes with audit_log_untrustedstring: quoted, or hex when the
// value holds a space, a quote or a control character.
var untrusted = map[string]bool{"exe": true, "comm": true, "path": true, "name": true, "cwd": true}

// parseAuditRecord splits "audit(SEC.MS:SERIAL): k=v k="v" ..." into its serial and fields.
func parseAuditRecord(data []byte) (uint64, map[string]string) {
	s := strings.TrimRight(string(data), "\x00\n")
	var serial uint64
	if rest, ok := strings.CutPrefix(s, "audit("); ok {
		if head, tail, ok := strings.Cut(rest, "): "); ok {
			if _, ser, ok := strings.Cut(head, ":"); ok {
				serial, _ = strconv.ParseUint(ser, 10, 64)
			}
			s = tail
		}
	}
	f := map[string]string{}
	for s != "" {
		s = strings.TrimLeft(s, " ")
		k, rest, ok := strings.Cut(s, "=")
		if !ok || strings.Contains(k, " ") {
			break
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				v, s = rest[1:], ""
			} else {
				v, s = rest[1:end+1], rest[end+2:]
			}
		} else {
			v, s, _ = strings.Cut(rest, " ")
			if untrusted[k] && v != "(null)" {
				if b, err := hex.DecodeString(v); err == nil {
					v = string(b)
				}
			}
		}
		if _, dup := f[k]; !dup {
			f[k] = v
		}
	}
	return serial, f
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func hexOrDec(s string, base int) uint64 {
	n, _ := strconv.ParseUint(strings.TrimPrefix(s, "0x"), base, 64)
	return n
}
