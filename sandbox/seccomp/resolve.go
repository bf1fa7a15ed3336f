package seccomp

// Where a recorded write lands: the path argument read from the notifying task's memory and resolved
// the way the kernel will resolve it for that task, or, where sbx cannot do that exactly, said so.
//
// The kernel's walk starts at the task's root or at a directory it holds (its cwd, a dirfd: the
// notifying thread's own, which a thread made without CLONE_FS or CLONE_FILES does not share), follows
// up to 40 links in all (magic links of /proc included), resolves /proc/self to the thread group's
// leader and /proc/thread-self to the thread, and under openat2's RESOLVE_IN_ROOT or RESOLVE_BENEATH
// treats the dirfd as the root. sbx walks the same way, one component at a time, through handles it
// opens O_PATH (nothing that could block is opened, no link is followed by the kernel but a magic link
// of /proc, which sbx opens to land where the kernel lands). What it cannot read (an address its read
// of the process cannot reach: memfd_secret, a short read), a walk past its bounds (steps, bytes, time)
// or past the kernel's 40 links, and whatever the walk meets that it does not know how to follow exactly
// are unresolved: recorded with what is known, and the run is incomplete. Never a silent skip.

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Bounds of one path's resolution. The kernel follows at most 40 links (MAXSYMLINKS); the steps, bytes
// and time bound sbx's own work per notification, whatever the command builds: a walk past them is
// unresolved, not judged.
const (
	maxKernelLinks   = 40
	maxResolveSteps  = 1024                   // path components walked, over every link's target (a real path has tens)
	maxResolveBytes  = 1 << 18                // bytes read from the process's memory and from links
	maxResolveTime   = 100 * time.Millisecond // wall time: a loaded or emulated host is slower, the steps bound the work
	kernelPathMax    = unix.PathMax           // a path argument of PATH_MAX bytes or more is ENAMETOOLONG
	procSuperMagic   = 0x9fa0
	procRootIno      = 1
	openHowSize      = 24 // struct open_how: flags, mode, resolve
	resolveInRootish = unix.RESOLVE_IN_ROOT | unix.RESOLVE_BENEATH
)

// outcome says what the resolution of one path argument found.
type outcome int

const (
	landed     outcome = iota // path is where the write lands
	spelled                   // the kernel fails the walk on the way (a missing directory): judged as spelled
	noWrite                   // the kernel fails before naming anything (NULL, empty or too long, a bad dirfd)
	unresolved                // sbx could not resolve it as the kernel does: why says why
)

// resolution is where one path argument of a write lands.
type resolution struct {
	outcome outcome
	path    string // as the sandbox sees it; for unresolved, as far as sbx got (the bytes read so far)
	dir     string // the directory a relative path started from (the dirfd's or the cwd's target)
	why     string // for unresolved
}

// notifTask is the notifying task: a thread, whose thread group and ids in the sandbox's pid namespace
// /proc/self and /proc/thread-self name.
type notifTask struct {
	tid, tgid     int // host ids
	nsTid, nsTgid int // in the sandbox's pid namespace
	root          *rootHandle
}

// rootHandle is the listener's handle on the sandbox's root, opened at the first notification: every
// task of the sandbox has that root while the filter refuses chroot (pivot_root, mount and setns are
// refused too, by Landlock and the deny list). nil or not fixed: each walk opens its task's root.
type rootHandle struct {
	fixed bool // the handle may be used (opened, or not yet); false once opening failed or it closed
	fd    int  // 0 until opened
	name  string
}

// get returns the handle and its name, opening it from task tid's root at first.
func (h *rootHandle) get(tid int) (int, string, bool) {
	if h == nil || !h.fixed {
		return -1, "", false
	}
	if h.fd == 0 {
		fd, name, err := openDirLink("/proc/" + strconv.Itoa(tid) + "/root")
		if err != nil {
			h.fixed = false // each walk opens its task's root, as without a handle
			return -1, "", false
		}
		h.fd, h.name = fd, name
	}
	return h.fd, h.name, true
}

// close closes the handle: the sandbox's file systems are unmounted once nothing holds them.
func (h *rootHandle) close() {
	if h == nil {
		return
	}
	if h.fd > 0 {
		unix.Close(h.fd)
	}
	h.fixed, h.fd = false, 0
}

// chrootRefused says whether filter sc refuses chroot whatever its arguments (no rule and no default
// that could let it through).
func chrootRefused(sc *specs.LinuxSeccomp) bool {
	refusal := func(a specs.LinuxSeccompAction) bool {
		return a == specs.ActErrno || a == specs.ActKill || a == specs.ActKillProcess || a == specs.ActKillThread || a == specs.ActTrap
	}
	if sc == nil || !refusal(sc.DefaultAction) {
		return false
	}
	for _, r := range sc.Syscalls {
		if slices.Contains(r.Names, "chroot") && !refusal(r.Action) {
			return false
		}
	}
	return true
}

// taskOf reads a task's ids from its status file.
func taskOf(tid int) notifTask {
	t := notifTask{tid: tid, tgid: tid}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return t
	}
	last := func(v string) int {
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0
		}
		n, _ := strconv.Atoi(f[len(f)-1])
		return n
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			t.tgid, _ = strconv.Atoi(strings.TrimSpace(v))
		} else if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			t.nsTid = last(v)
		} else if v, ok := strings.CutPrefix(line, "NStgid:"); ok {
			t.nsTgid = last(v)
		}
	}
	return t
}

// budget is what one notification may still spend.
type budget struct {
	steps, bytes int
	deadline     time.Time
}

func newBudget() *budget {
	return &budget{steps: maxResolveSteps, bytes: maxResolveBytes, deadline: time.Now().Add(maxResolveTime)}
}

// spend takes n bytes and a step; false past a bound.
func (b *budget) spend(bytes int) bool {
	b.steps--
	b.bytes -= bytes
	return b.steps >= 0 && b.bytes >= 0 && (b.steps%64 != 0 || time.Now().Before(b.deadline))
}

// unresolvedError is a walk sbx stopped: past a bound, or at what it cannot follow as the kernel does.
type unresolvedError struct{ why string }

func (e *unresolvedError) Error() string { return e.why }

func unresolvable(format string, a ...any) error { return &unresolvedError{fmt.Sprintf(format, a...)} }

// errKernelFails says the kernel fails the walk on the way, before any write (ENOENT, ENOTDIR).
var errKernelFails = errors.New("the kernel fails the walk")

// resolveArg reads the path argument at addr of the notifying task and resolves it: relative to the
// dirfd argument dirArg (-1: none) or the thread's cwd, or, with inRoot, below that directory as root.
func (t notifTask) resolveArg(req *seccompNotif, addr uint64, dirArg int, inRoot, follow bool, b *budget) resolution {
	if addr == 0 {
		return resolution{outcome: noWrite} // EFAULT
	}
	p, err := readPathArg(t.tid, addr)
	b.spend(len(p))
	if err != nil {
		return resolution{outcome: unresolved, path: p, why: fmt.Sprintf("reading the path from the process's memory: %v after %d bytes", err, len(p))}
	}
	return t.resolvePath(req, p, dirArg, inRoot, follow, b)
}

// resolvePath resolves the path p, read from the task's memory, as resolveArg does.
func (t notifTask) resolvePath(req *seccompNotif, p string, dirArg int, inRoot, follow bool, b *budget) resolution {
	if p == "" || len(p) >= kernelPathMax {
		return resolution{outcome: noWrite} // ENOENT, ENAMETOOLONG
	}
	proc := "/proc/" + strconv.Itoa(t.tid)
	startLink := proc + "/cwd"
	if dirArg >= 0 && int32(req.Args[dirArg]) != unix.AT_FDCWD {
		startLink = proc + "/fd/" + strconv.Itoa(int(int32(req.Args[dirArg])))
	}
	if r, ok := t.quickResolve(proc, startLink, startLink == proc+"/cwd", p, inRoot, follow); ok {
		return r
	}
	w := &walker{task: t, b: b, follow: follow}
	defer w.close()
	if inRoot || !path.IsAbs(p) {
		fd, name, err := openDirLink(startLink)
		if err != nil {
			return resolution{outcome: noWrite} // EBADF, ENOTDIR: the thread has no such directory
		}
		w.dfd, w.cur = fd, name
	}
	rfd, rname, err := openDirLink(proc + "/root")
	if err != nil {
		if w.dfd > 0 {
			unix.Close(w.dfd)
		}
		return resolution{outcome: unresolved, path: p, why: fmt.Sprintf("opening the task's root: %v", err)}
	}
	w.root, w.rootName = rfd, rname
	if inRoot {
		// The dirfd is the root: absolute paths and links start there, ".." stops there.
		w.root, w.rootName = w.dfd, w.cur
		w.dfd = -1
		unix.Close(rfd)
		w.inRoot = true
	}
	res := w.walk(p)
	if !path.IsAbs(p) || inRoot {
		res.dir = w.startName
	}
	return res
}

// quickResolve resolves p in one call where the kernel's walk meets no link: openat2 with
// RESOLVE_NO_SYMLINKS, which refuses every link, magic links and /proc/self included. Without a link
// and without "..", the path's components are directories of their spelled names (/proc/self and
// /proc/thread-self, which the walk rewrites, are left to it), so that the write lands at the start's
// name joined with p: the walk's own answer for such a path, in a few syscalls instead of three per
// component. With the listener's handle on the sandbox's root, an absolute p is resolved from it, and
// a relative p from the cwd by the cwd's name (a path the kernel made, of directories only) below it:
// one readlink, one openat2 and one close (an open for writing in a tree of many files cost sbx about
// 110 µs of CPU with the walk). A missing component (ENOENT) or a file in the way (ENOTDIR) is judged
// as spelled, as the walk judges it (both are judged by where they are spelled). Anything else (a
// link, "..", RESOLVE_IN_ROOT, a cwd whose name is not a path below the root, an error of another
// kind) is left to the walk: ok false.
func (t notifTask) quickResolve(proc, startLink string, fromCwd bool, p string, inRoot, follow bool) (resolution, bool) {
	if inRoot || hasComponent(p, "..", "self", "thread-self") {
		return resolution{}, false // the walk rewrites /proc/self and /proc/thread-self, also as the last
	}
	abs := path.IsAbs(p)
	var dfd int
	var name, rel string
	if rfd, rname, ok := t.root.get(t.tid); ok && (abs || fromCwd) {
		dfd, name, rel = rfd, rname, strings.TrimLeft(p, "/")
		if !abs {
			// The cwd by its name: the kernel's path of it in the task's root (" (deleted)" once it is
			// removed, where no file can be made), which the walk below the root retraces.
			var buf [unix.PathMax]byte
			n, err := unix.Readlink(startLink, buf[:])
			cwd := string(buf[:max(n, 0)])
			below, ok := strings.CutPrefix(cwd, strings.TrimSuffix(rname, "/")+"/")
			if err != nil || n >= len(buf) || strings.HasSuffix(cwd, " (deleted)") || !ok && cwd != rname {
				return resolution{}, false
			}
			name, rel = cwd, path.Join(below, p)
		}
	} else {
		if abs {
			startLink = proc + "/root"
		}
		fd, n, err := openDirLink(startLink)
		if err != nil {
			return resolution{}, false
		}
		defer unix.Close(fd)
		dfd, name, rel = fd, n, strings.TrimLeft(p, "/")
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS}
	if !follow {
		how.Flags |= unix.O_NOFOLLOW // the last component's link itself is the target
	}
	r := resolution{outcome: landed, path: path.Clean(join(name, strings.TrimLeft(p, "/")))}
	if !abs {
		r.dir = name
	}
	fd, err := unix.Openat2(dfd, cmp.Or(rel, "."), &how)
	switch {
	case err == nil:
		unix.Close(fd)
		return r, true
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		r.outcome = spelled
		return r, true
	}
	return resolution{}, false
}

// hasComponent says whether p has one of names as a component.
func hasComponent(p string, names ...string) bool {
	for c := range strings.SplitSeq(p, "/") {
		if slices.Contains(names, c) {
			return true
		}
	}
	return false
}

// readPathArg reads a NUL-terminated path from the task's memory, at most PATH_MAX bytes: what it read
// so far, and an error when a read failed or came back short before the NUL (an address sbx's read
// cannot reach, such as a memfd_secret mapping, which the kernel itself reads).
func readPathArg(pid int, addr uint64) (string, error) {
	buf := make([]byte, kernelPathMax)
	got := 0
	for got < len(buf) {
		// One page at a time: the next may be unmapped (for the kernel too, if the NUL is not before).
		n := min(len(buf)-got, 4096-int((addr+uint64(got))%4096))
		m, err := unix.ProcessVMReadv(pid, []unix.Iovec{{Base: &buf[got], Len: uint64(n)}},
			[]unix.RemoteIovec{{Base: uintptr(addr) + uintptr(got), Len: n}}, 0)
		if m > 0 {
			if i := strings.IndexByte(string(buf[got:got+m]), 0); i >= 0 {
				return string(buf[:got+i]), nil
			}
			got += m
		}
		if err != nil {
			return string(buf[:got]), err
		}
		if m < n {
			return string(buf[:got]), fmt.Errorf("a short read (%d of %d bytes)", m, n)
		}
	}
	return string(buf), nil // no NUL within PATH_MAX: ENAMETOOLONG
}

// sockaddrUnSize is sizeof(struct sockaddr_un): sun_family and a 108-byte sun_path.
const sockaddrUnSize = 110

// readUnixPath reads bind's socket address (addr, addrlen) from the task's memory: the path of an
// AF_UNIX address that names a file, "" for anything that names none (another family, an abstract
// or automatic name, a length the kernel refuses), and an error when the read failed.
func readUnixPath(pid int, addr, addrlen uint64) (string, error) {
	n := int(int32(addrlen))
	if addr == 0 || n <= 2 || n > sockaddrUnSize {
		return "", nil // EFAULT, EINVAL, or autobind (the family alone)
	}
	buf := make([]byte, n)
	m, err := unix.ProcessVMReadv(pid, []unix.Iovec{{Base: &buf[0], Len: uint64(n)}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: n}}, 0)
	if err == nil && m != n {
		err = fmt.Errorf("a short read (%d of %d bytes)", m, n)
	}
	if err != nil {
		return "", err
	}
	if binary.NativeEndian.Uint16(buf) != unix.AF_UNIX || buf[2] == 0 {
		return "", nil
	}
	p := buf[2:]
	if i := bytes.IndexByte(p, 0); i >= 0 {
		p = p[:i]
	}
	return string(p), nil
}

// readOpenHow reads the flags and resolve fields of openat2's struct open_how.
func readOpenHow(pid int, addr, size uint64) (flags, resolve uint64, err error) {
	var how [3]uint64
	if addr == 0 || size < openHowSize {
		return 0, 0, fmt.Errorf("no open_how (size %d)", size)
	}
	n, err := unix.ProcessVMReadv(pid, []unix.Iovec{{Base: (*byte)(unsafe.Pointer(&how[0])), Len: openHowSize}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: openHowSize}}, 0)
	if err == nil && n != openHowSize {
		err = fmt.Errorf("a short read (%d of %d bytes)", n, openHowSize)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading openat2's open_how: %w", err)
	}
	return how[0], how[2], nil
}

// openDirLink opens what a magic link of /proc leads to (the kernel's own jump), O_PATH, and reads its
// name: a directory, else an error.
func openDirLink(link string) (int, string, error) {
	fd, err := unix.Open(link, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", err
	}
	name, err := os.Readlink(link)
	if err != nil || !path.IsAbs(name) {
		unix.Close(fd)
		return -1, "", unix.ENOTDIR
	}
	return fd, name, nil
}

// walker is one path's walk: dfd the directory reached, named cur as the sandbox sees it.
type walker struct {
	task      notifTask
	b         *budget
	follow    bool // the last component's link is followed
	inRoot    bool
	root      int
	rootName  string
	dfd       int
	cur       string
	startName string
	links     int
}

func (w *walker) close() {
	if w.dfd > 0 && w.dfd != w.root {
		unix.Close(w.dfd)
	}
	if w.root > 0 {
		unix.Close(w.root)
	}
}

// setDir makes fd (owned) the directory reached, named name.
func (w *walker) setDir(fd int, name string) {
	if w.dfd > 0 && w.dfd != w.root {
		unix.Close(w.dfd)
	}
	w.dfd, w.cur = fd, name
}

// toRoot restarts at the walk's root (an absolute path or link target).
func (w *walker) toRoot() error {
	fd, err := unix.Dup(w.root)
	if err != nil {
		return unresolvable("duplicating the root's handle: %v", err)
	}
	w.setDir(fd, w.rootName)
	return nil
}

func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// walk resolves p component by component. todo holds what is left, reversed (its last element next).
func (w *walker) walk(p string) resolution {
	if w.dfd <= 0 || path.IsAbs(p) {
		if err := w.toRoot(); err != nil {
			return resolution{outcome: unresolved, path: p, why: err.Error()}
		}
	}
	w.startName = w.cur
	todo := reverse(splitPath(p))
	for len(todo) > 0 {
		c := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		last := len(todo) == 0
		if !w.b.spend(len(c)) {
			return resolution{outcome: unresolved, path: join(w.cur, path.Join(append([]string{c}, reverse(todo)...)...)),
				why: fmt.Sprintf("resolving took more than sbx's bound per notification (%d steps, %d bytes, %v)", maxResolveSteps, maxResolveBytes, maxResolveTime)}
		}
		next, err := w.step(c, last)
		if errors.Is(err, errKernelFails) {
			return resolution{outcome: spelled, path: join(w.cur, path.Join(append([]string{c}, reverse(todo)...)...))}
		}
		if err != nil {
			return resolution{outcome: unresolved, path: join(w.cur, path.Join(append([]string{c}, reverse(todo)...)...)), why: err.Error()}
		}
		if next.done {
			return resolution{outcome: landed, path: next.name}
		}
		todo = append(todo, reverse(next.push)...)
	}
	return resolution{outcome: landed, path: w.cur}
}

// stepResult is what one component gives: the write's target (done), or components to walk first.
type stepResult struct {
	done bool
	name string
	push []string
}

// step walks one component c from the directory reached.
func (w *walker) step(c string, last bool) (stepResult, error) {
	if c == ".." {
		if w.cur == w.rootName {
			return stepResult{done: last, name: w.cur}, nil // the root's parent is the root
		}
		fd, err := unix.Openat(w.dfd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return stepResult{}, unresolvable("opening the parent of %s: %v", w.cur, err)
		}
		w.setDir(fd, path.Dir(w.cur))
		return stepResult{done: last, name: w.cur}, nil
	}
	if c == "self" || c == "thread-self" {
		if push, ok := w.procSelf(c); ok {
			return w.link(push, "")
		}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(w.dfd, c, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		switch {
		case errors.Is(err, unix.ENOENT) && last:
			return stepResult{done: true, name: join(w.cur, c)}, nil // a new file
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
			return stepResult{}, errKernelFails
		}
		return stepResult{}, unresolvable("looking up %s: %v", join(w.cur, c), err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		if last && !w.follow {
			return stepResult{done: true, name: join(w.cur, c)}, nil
		}
		return w.symlink(c, last)
	case unix.S_IFDIR:
		if last {
			return stepResult{done: true, name: join(w.cur, c)}, nil
		}
		fd, err := unix.Openat(w.dfd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return stepResult{}, unresolvable("opening %s: %v", join(w.cur, c), err)
		}
		w.setDir(fd, join(w.cur, c))
		return stepResult{}, nil
	}
	if last {
		return stepResult{done: true, name: join(w.cur, c)}, nil
	}
	return stepResult{}, errKernelFails // ENOTDIR
}

// procSelf rewrites /proc/self and /proc/thread-self of the sandbox's procfs as the kernel resolves
// them for the notifying task: the thread group's leader, and the thread itself (each with its own fd
// table and cwd when made without CLONE_FILES or CLONE_FS).
func (w *walker) procSelf(c string) ([]string, bool) {
	var fs unix.Statfs_t
	var st unix.Stat_t
	if unix.Fstatfs(w.dfd, &fs) != nil || fs.Type != procSuperMagic || unix.Fstat(w.dfd, &st) != nil || st.Ino != procRootIno {
		return nil, false
	}
	if w.task.nsTgid == 0 || w.task.nsTid == 0 {
		w.task = taskOf(w.task.tid) // read when a walk meets /proc/self: most never do
	}
	if w.task.nsTgid == 0 || w.task.nsTid == 0 {
		return nil, false
	}
	if c == "self" {
		return []string{strconv.Itoa(w.task.nsTgid)}, true
	}
	return []string{strconv.Itoa(w.task.nsTgid), "task", strconv.Itoa(w.task.nsTid)}, true
}

// link counts one link the kernel follows and walks its target next: push, from the root when abs.
func (w *walker) link(push []string, abs string) (stepResult, error) {
	w.links++
	if w.links > maxKernelLinks {
		return stepResult{}, unresolvable("more than %d links (the kernel stops there with ELOOP; sbx does not judge what its count may differ on)", maxKernelLinks)
	}
	if abs != "" {
		if err := w.toRoot(); err != nil {
			return stepResult{}, err
		}
	}
	return stepResult{push: push}, nil
}

// symlink follows the link c: an ordinary link by its target, a magic link of /proc (fd/N, cwd, root,
// exe, ...) to where the kernel's jump lands.
func (w *walker) symlink(c string, last bool) (stepResult, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(w.dfd, c, buf)
	if err != nil {
		return stepResult{}, unresolvable("reading the link %s: %v", join(w.cur, c), err)
	}
	target := string(buf[:n])
	if !w.b.spend(n) {
		return stepResult{}, unresolvable("resolving took more than sbx's bound per notification")
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(w.dfd, &fs); err != nil {
		return stepResult{}, unresolvable("reading the file system of %s: %v", w.cur, err)
	}
	if fs.Type != procSuperMagic || !magicTarget(target) {
		if path.IsAbs(target) {
			return w.link(splitPath(target), target)
		}
		return w.link(splitPath(target), "")
	}
	return w.magic(c, target, last)
}

// magicTarget says whether a link of procfs reading target is a magic link (a jump to an open file,
// named by its path or by its kind) rather than an ordinary link of procfs (self/mounts, 1234/task/5).
func magicTarget(target string) bool {
	return path.IsAbs(target) || strings.Contains(target, ":[") || strings.HasPrefix(target, "anon_inode:")
}

// magic follows a magic link as the kernel does: it opens it (O_PATH: the kernel's jump, nothing is
// opened that could block) and walks on from the directory it lands on, named as the link reads.
func (w *walker) magic(c, target string, last bool) (stepResult, error) {
	if w.inRoot {
		return stepResult{}, unresolvable("a magic link %s under RESOLVE_IN_ROOT or RESOLVE_BENEATH", join(w.cur, c))
	}
	w.links++
	if w.links > maxKernelLinks {
		return stepResult{}, unresolvable("more than %d links (the kernel stops there with ELOOP)", maxKernelLinks)
	}
	fd, err := unix.Openat(w.dfd, c, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return stepResult{}, errKernelFails // the file is gone: the kernel's jump fails too
		}
		return stepResult{}, unresolvable("following the magic link %s: %v", join(w.cur, c), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return stepResult{}, unresolvable("following the magic link %s: %v", join(w.cur, c), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		if !last {
			return stepResult{}, errKernelFails // ENOTDIR
		}
		if !path.IsAbs(target) || strings.HasPrefix(target, "/memfd:") {
			// A pipe, a socket, a memfd: written through the file the process holds open.
			return stepResult{done: true, name: join(w.cur, c)}, nil
		}
		return stepResult{done: true, name: target}, nil
	}
	if !path.IsAbs(target) {
		unix.Close(fd)
		return stepResult{}, unresolvable("the magic link %s leads to a directory without a path (%s)", join(w.cur, c), target)
	}
	w.setDir(fd, path.Clean(target))
	if last {
		return stepResult{done: true, name: w.cur}, nil
	}
	return stepResult{}, nil
}

func reverse(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}
