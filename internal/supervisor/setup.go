package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// Setup is the sandbox that the supervisor builds around itself when sbx starts it directly in fresh
// namespaces (a user, mount, pid, ipc and uts namespace, and a network namespace of its own or the
// contract's) rather than through libcontainer's init: the root file system and the process's
// attributes. sbx sends it first ([Conn.SendSetup]); the supervisor is then still in a copy of the
// host's mount tree, root in its user namespace with every capability there, and nothing else runs
// in the sandbox.
//
// Every mount point is opened inside the root (openat2 RESOLVE_IN_ROOT, never a magic link) and mounted
// onto by its handle (move_mount): a link in the tree cannot move a mount out of the root, and a path
// swapped after the lookup cannot redirect it.
type Setup struct {
	Rootfs   string            `json:"rootfs"`   // host path of the sandbox's root
	Mounts   []Mount           `json:"mounts"`   // in order
	Devices  []string          `json:"devices"`  // device nodes bound from the host's (a user namespace makes none)
	Masked   []string          `json:"masked"`   // covered: files by /dev/null, directories by an empty read-only tmpfs
	ReadOnly []string          `json:"readonly"` // made read-only in place
	Hostname string            `json:"hostname"` // of the sandbox's uts namespace
	Sysctl   map[string]string `json:"sysctl"`   // written below /proc/sys (the sandbox's own network namespace's)
	Rlimits  []Rlimit          `json:"rlimits"`
	Umask    int               `json:"umask"`
	Cwd      string            `json:"cwd"` // the command's working directory, made when missing
	Console  bool              `json:"console"`
	Loopback bool              `json:"loopback"` // bring up lo: the network namespace is the sandbox's own
	// NetRecord is the descriptor of a socket on which the supervisor, once lo is up, sends sbx the
	// netlink sockets that record the command's network attempts in mode none (one rtnetlink, two
	// nfnetlink: made here, by the namespaces' root, they keep that right in sbx's hands); 0 for none.
	NetRecord int `json:"net_record,omitempty"`
	// Caps are the capabilities the supervisor keeps once the sandbox is built (CAP_SETUID and CAP_SETGID
	// when the command's user is not root, to hand it over); the command gets none.
	Caps []int `json:"caps"`
	// OpenSources: sbx has no root (a rootless run), so it could not clone the binds' sources
	// (open_tree needs CAP_SYS_ADMIN over the mount namespace): the supervisor, root of its own user
	// and mount namespaces, opens each bind without a descriptor by its host path (see openSources).
	OpenSources bool `json:"open_sources,omitempty"`
	// SessionKeyring is the name of the new session keyring the command starts in (libcontainer's:
	// _ses.ID), "" for none.
	SessionKeyring string `json:"session_keyring,omitempty"`
	// RootFD is the supervisor's descriptor of a detached copy of Rootfs (its whole tree) that sbx made
	// before the copies of the binds' sources; 0 for none (the supervisor binds Rootfs itself).
	RootFD int `json:"root_fd,omitempty"`
	// Guard is what no writable bind the supervisor opens itself (OpenSources) may reach: sbx's state
	// root, which sbx checked the shares against by path before the start (see [Guard]).
	Guard *Guard `json:"guard,omitempty"`
}

// Mount is one mount of the sandbox. Type "bind" binds Source, a host path; other types make a new file
// system of that type, Data its options.
type Mount struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	Type        string `json:"type"`
	Flags       int    `json:"flags"` // MS_* as mount(2) takes them
	Data        string `json:"data"`
	Propagation []int  `json:"propagation,omitempty"`
	// FD is the supervisor's descriptor of a bind's source, a detached copy of it that sbx made with the
	// host's rights (open_tree); 0 for none.
	FD int `json:"fd,omitempty"`
	// RecSet and RecClr are MOUNT_ATTR_* set and cleared on the whole tree of a bind (rro, rnosuid, ...).
	RecSet uint64 `json:"rec_set,omitempty"`
	RecClr uint64 `json:"rec_clr,omitempty"`
	// Optional: a source (a bind's, an overlay's lower layer) that is gone by the time the supervisor
	// mounts it is no error: the mount is left out, and its mount point with it. For a rootless sandbox's
	// top-level directories, which sbx lists from the host's / before the supervisor runs.
	Optional bool `json:"optional,omitempty"`
	// Own: the source is sbx's own, in the run's directory (the stand-in working directory), not a
	// share: it is not checked against Setup.Guard, the state root it lies in.
	Own bool `json:"own,omitempty"`
	// NoLinks: the source is opened without following any link (a share, whose path sbx resolved into
	// one without links): a link planted on the way after that resolution fails the bind (ELOOP) rather
	// than mounting where it leads.
	NoLinks bool `json:"no_links,omitempty"`
	gone    bool // an optional bind whose source openSources did not find
}

// Rlimit is one resource limit of the sandbox's processes.
type Rlimit struct {
	Type int    `json:"type"`
	Soft uint64 `json:"soft"`
	Hard uint64 `json:"hard"`
}

// buildHint goes with a failure to build the sandbox: what the caller chose (a share) is the usual
// cause; a version mismatch of sbx and sbx-init would fail on the protocol, not here.
const buildHint = "a path shared into the sandbox (filesystem.share, --ro, --rw) must exist on the host and be of the same kind, file or directory, as what the sandbox has at that path; otherwise run 'sbx gc' and try again"

// roHint goes with a mount point that had to be made in a read-only part of the sandbox: without root, a
// top-level directory with mounts below it on the host is a read-only bind of it (a user namespace locks
// those mounts, and overlay refuses such a lower layer), where no missing mount point can be made.
const roHint = "a share onto a path the host lacks needs a writable place for its mount point; without root, a top-level directory with mounts below it on the host (see findmnt) is read-only in the sandbox: share onto a path elsewhere, or onto one the host has"

// SetupEnv is the environment variable that makes the supervisor read a [Setup] first; its value is
// the descriptor of the supervisor's binary and the last descriptor sbx passed ("7 10"). It is not an
// argument: the command sees pid 1's command line (/proc/1/cmdline), and that stays the one
// libcontainer's init gives it. The command's environment is its own (Command.Env), never the
// supervisor's.
const SetupEnv = "SBX_SUPERVISOR_SETUP"

// consoleFD is where a direct start passes the socket the terminal's master side goes back on.
const consoleFD = 4

// build builds the sandbox of s, in this order, as runc's init does: the mounts and /dev in the root,
// the move into it (pivot_root), the sysctls, read-only and masked paths, the host name, the terminal,
// then the process's limits, umask and working directory. The capabilities go later (commandThread).
func build(s *Setup) error {
	if s.Loopback {
		if err := LoopbackUp(); err != nil {
			return fmt.Errorf("bringing up the loopback interface: %w", err)
		}
	}
	if s.NetRecord > 0 {
		if err := sendNetRecord(s.NetRecord); err != nil {
			return fmt.Errorf("handing sbx the network record's sockets: %w", err)
		}
	}
	// Nothing mounted here may reach the host's mount namespace.
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making / a slave: %w", err)
	}
	if err := bindRoot(s); err != nil {
		return stepFailed("binding the root", false, err)
	}
	root, err := unix.Open(s.Rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the root: %w", err)
	}
	defer unix.Close(root)
	// Where the root is, for each mount point's check (sameTree): read once, not per mount.
	rootPath, err := os.Readlink(procFD(root))
	if err != nil {
		return fmt.Errorf("locating the root: %w", err)
	}
	if s.OpenSources {
		if err := openSources(s.Mounts, s.Guard); err != nil {
			return err
		}
	}
	for _, m := range s.Mounts {
		err := errSourceGone
		if !m.gone {
			err = mountIn(root, rootPath, m)
		}
		if m.Optional && (errors.Is(err, errSourceGone) || errors.Is(err, unix.ENOENT)) {
			leaveOut(root, m.Destination)
			continue
		}
		if err != nil {
			return stepFailed("mounting "+m.Destination, m.NoLinks, err)
		}
	}
	if err := setupDev(root, s.Devices); err != nil {
		return stepFailed("making /dev", false, err)
	}
	if err := pivotRoot(root); err != nil {
		return stepFailed("moving into the root", false, err)
	}
	for k, v := range s.Sysctl {
		if err := writeSysctl(k, v); err != nil {
			return stepFailed("sysctl", false, err)
		}
	}
	for _, p := range s.ReadOnly {
		if err := readOnly(p); err != nil {
			return stepFailed("making "+p+" read-only", false, err)
		}
	}
	if err := mask(s.Masked); err != nil {
		return err
	}
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			return fmt.Errorf("setting the host name: %w", err)
		}
	}
	if s.Console {
		if err := setupConsole(); err != nil {
			return stepFailed("making the terminal", false, err)
		}
	}
	for _, r := range s.Rlimits {
		// syscall's Setrlimit, which the runtime's own bookkeeping of RLIMIT_NOFILE follows.
		if err := syscall.Setrlimit(r.Type, &syscall.Rlimit{Cur: r.Soft, Max: r.Hard}); err != nil {
			return fmt.Errorf("setting rlimit %d: %w", r.Type, err)
		}
	}
	unix.Umask(s.Umask)
	if s.Cwd != "" {
		if err := os.MkdirAll(s.Cwd, 0o755); err != nil {
			return fmt.Errorf("making the working directory: %w", err)
		}
		if err := unix.Chdir(s.Cwd); err != nil {
			return fmt.Errorf("entering the working directory: %w", err)
		}
	}
	if unix.Gettid() == unix.Getpid() {
		// pid 1's bounding set as the command sees it (/proc/1/status: the main thread's, which runs
		// this, its goroutine locked to it) is the capabilities the supervisor keeps, as after
		// libcontainer's init. The other threads keep theirs: a bounding set only bounds what an exec
		// gains, and the supervisor execs nothing but the command, from a thread whose set is empty
		// (commandThread). (Dropping it on every thread through psx took 40 all-thread calls, 3 ms of
		// every run.)
		if err := dropBounding(s.Caps...); err != nil {
			return err
		}
	}
	// Undumpable: no process of the sandbox may read the supervisor's memory or its /proc files.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	return nil
}

// bindRoot puts a copy of the root's tree over Rootfs: sbx's copy when there is one, else a bind.
//
// The kernel lists a mount namespace's mounts (/proc/self/mountinfo, /proc/mounts) in the order they
// were made, and sbx copies the binds' sources before the supervisor runs. The root is copied by sbx
// too, before them, so that the listing starts with the root and every mount comes after the one it is
// on, as in libcontainer's sandbox: tools that read the first line as the root, or build the tree in
// one pass, see what they expect. Like every copy, it is a slave before it is attached (bindTree), and
// its top is private, as libcontainer makes the mount the root is on before it binds it: nothing the
// host mounts on its copy (a shared state root's) comes in, nothing goes out.
func bindRoot(s *Setup) error {
	if s.RootFD < 3 {
		return unix.Mount(s.Rootfs, s.Rootfs, "", unix.MS_BIND|unix.MS_REC, "")
	}
	defer unix.Close(s.RootFD)
	if err := unix.MountSetattr(s.RootFD, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Propagation: unix.MS_SLAVE}); err != nil {
		return fmt.Errorf("making the copy a slave: %w", err)
	}
	if err := unix.MountSetattr(s.RootFD, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Propagation: unix.MS_PRIVATE}); err != nil {
		return fmt.Errorf("making the copy private: %w", err)
	}
	return unix.MoveMount(s.RootFD, "", unix.AT_FDCWD, s.Rootfs, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// commandThread is what the thread the command starts from does first in a sandbox the supervisor
// built (see [starter]), while it still has every capability: it enters a cgroup namespace of its own
// (rooted where sbx has moved the supervisor by then, so that the command sees its cgroup as /) and a
// session keyring of its own, empties its bounding and ambient sets, and then leaves every thread of
// the supervisor with caps alone, under creds when not nil.
func commandThread(s *Setup, creds *Creds) error {
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("unshare(CLONE_NEWCGROUP): %w", err)
	}
	if err := joinSessionKeyring(s.SessionKeyring); err != nil {
		return err
	}
	if err := dropBounding(); err != nil {
		return err
	}
	return dropCaps(s.Caps, creds)
}

// handoverCaps are the capabilities the supervisor keeps to start the command under the command's ids.
var handoverCaps = []int{unix.CAP_SETUID, unix.CAP_SETGID}

// fallbackThread is what the thread the command starts from does first in a sandbox libcontainer's
// init built, when the supervisor is to take creds: sbx then had libcontainer leave it root with
// CAP_SETUID, CAP_SETGID and CAP_SETPCAP (sandbox.initProcess). The thread empties its bounding set
// (the command, even as root, gains no capability at its exec), and every thread of the supervisor
// takes creds with CAP_SETUID and CAP_SETGID alone. Without creds nothing changes: libcontainer gave
// the supervisor what it keeps.
func fallbackThread(creds *Creds) error {
	if creds == nil {
		return nil
	}
	if err := dropBounding(); err != nil {
		return err
	}
	return dropCaps(handoverCaps, creds)
}

// joinSessionKeyring puts the calling thread (and so the command) in a new session keyring called
// name, searchable by others as libcontainer's init makes it (its user namespace's root owns it, and
// the command's user is another). Credentials, keyrings among them, survive clone(CLONE_NEWUSER):
// without this the command would hold sbx's caller's session keyring (a login's, with its keys) and
// possess every key in it wherever the profile lets it call keyctl. A kernel without keyrings (ENOSYS)
// has nothing to inherit either.
func joinSessionKeyring(name string) error {
	if name == "" {
		return nil
	}
	id, err := unix.KeyctlJoinSessionKeyring(name)
	if errors.Is(err, unix.ENOSYS) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("joining a new session keyring: %w", err)
	}
	desc, err := unix.KeyctlString(unix.KEYCTL_DESCRIBE, id)
	if err != nil {
		return fmt.Errorf("describing the session keyring: %w", err)
	}
	// type;uid;gid;perm;description
	f := strings.SplitN(desc, ";", 5)
	if len(f) < 5 {
		return fmt.Errorf("describing the session keyring: %q", desc)
	}
	perm, err := strconv.ParseUint(f[3], 16, 32)
	if err != nil {
		return fmt.Errorf("the session keyring's permissions %q: %w", f[3], err)
	}
	if err := unix.KeyctlSetperm(id, uint32(perm)|keyOtherSearch); err != nil {
		return fmt.Errorf("making the session keyring searchable: %w", err)
	}
	return nil
}

// keyOtherSearch is KEY_OTH_SEARCH.
const keyOtherSearch = 0x08

// resolveFlags are how every path inside the root is looked up: symlinks resolve as if the root were /,
// and a magic link (/proc/self/fd/N, /proc/PID/root) fails.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// openIn opens path inside root as an O_PATH handle.
func openIn(root int, path string, flags uint64) (int, error) {
	return openat2(root, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | flags, Resolve: resolveFlags})
}

// maxEAGAIN bounds openat2's retries; each fails only if something renamed or mounted meanwhile.
const maxEAGAIN = 128

// openat2 is unix.Openat2, again while the kernel answers EAGAIN: a lookup scoped to a root
// (RESOLVE_IN_ROOT) that goes through ".." (a relative link such as /etc/resolv.conf ->
// ../run/systemd/resolve/stub-resolv.conf) fails so whenever anything on the host renamed a file or
// changed a mount during it (openat2(2) asks the caller to retry). Without the retry, a busy host, or
// another sandbox's command renaming in a loop, fails builds at random.
func openat2(dir int, path string, how *unix.OpenHow) (int, error) {
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dir, path, how)
		if !errors.Is(err, unix.EAGAIN) || i == maxEAGAIN {
			return fd, err
		}
	}
}

// mkdirIn opens directory path inside root, making what is missing of it (mode 0755). A link on the
// way whose target is missing is followed, inside the root, and the target made, as runc's init does
// (a host's /etc/resolv.conf may point into a /run that the sandbox hides).
func mkdirIn(root int, path string) (int, error) { return mkdirLinks(root, path, 0) }

// maxLinks is how many links a lookup may follow, as the kernel's own limit.
const maxLinks = 40

func mkdirLinks(root int, path string, links int) (int, error) {
	path = filepath.Clean("/" + path)
	fd, err := openIn(root, path, unix.O_DIRECTORY)
	if !errors.Is(err, unix.ENOENT) || path == "/" {
		return fd, err
	}
	dir, name := filepath.Split(path)
	parent, err := mkdirLinks(root, dir, links)
	if err != nil {
		return -1, err
	}
	defer unix.Close(parent)
	if err := unix.Mkdirat(parent, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, err
	}
	fd, err = unix.Openat(parent, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.ELOOP) {
		return fd, err
	}
	buf := make([]byte, unix.PathMax)
	n, lerr := unix.Readlinkat(parent, name, buf)
	if lerr != nil {
		return -1, err // not a link: a file in the way
	}
	if links >= maxLinks {
		return -1, unix.ELOOP
	}
	target := string(buf[:n])
	if !filepath.IsAbs(target) {
		target = filepath.Join(dir, target)
	}
	return mkdirLinks(root, target, links+1)
}

// fileIn opens file path inside root, making it (empty, mode 0644) and its directories when missing.
func fileIn(root int, path string) (int, error) {
	fd, err := openIn(root, path, 0)
	if !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	dir, name := filepath.Split(filepath.Clean("/" + path))
	parent, err := mkdirIn(root, dir)
	if err != nil {
		return -1, err
	}
	defer unix.Close(parent)
	// O_EXCL|O_NOFOLLOW: a dangling link in its place is refused, not followed.
	f, err := unix.Openat(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_RDONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return -1, err
	}
	unix.Close(f)
	return unix.Openat(parent, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// mountIn makes mount m at its destination inside root, which is at rootPath.
func mountIn(root int, rootPath string, m Mount) error {
	dst := filepath.Clean("/" + m.Destination)
	if dst == "/" {
		return errors.New("a mount onto the root")
	}
	if (dst == "/proc") != (m.Type == "proc") || strings.HasPrefix(dst, "/proc/") {
		return errors.New("a mount inside /proc, or proc elsewhere")
	}
	var target int
	var err error
	switch {
	case m.Type == "proc" || m.Type == "sysfs":
		// On an ordinary directory, reached without any link on the way.
		target, err = openat2(root, dst, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS})
		if errors.Is(err, unix.ENOENT) {
			target, err = mkdirIn(root, dst)
		}
	case m.Type == "bind" && !isDirFD(m.FD):
		// A file, or a source the supervisor was not given (bindTree says so). Onto a directory:
		// move_mount's EINVAL would not say why.
		if target, err = fileIn(root, dst); err == nil && isDirFD(target) {
			unix.Close(target)
			err = errors.New("a file onto a directory")
		}
	default:
		target, err = mkdirIn(root, dst)
	}
	if err != nil {
		return fmt.Errorf("opening the mount point: %w", err)
	}
	defer unix.Close(target)
	if err := sameTree(rootPath, target, dst); err != nil {
		return err
	}
	var mnt int
	if m.Type == "bind" {
		mnt, err = bindTree(m)
	} else {
		mnt, err = newFS(m)
	}
	if err != nil {
		return err
	}
	defer unix.Close(mnt)
	if err := moveOnto(mnt, target); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	for _, p := range m.Propagation {
		if err := unix.Mount("", procFD(mnt), "", uintptr(p), ""); err != nil {
			return fmt.Errorf("propagation: %w", err)
		}
	}
	return nil
}

// ownTrees are where the sandbox's own file systems are (proc, sysfs, its /dev); sbx refuses a share
// onto them by its path.
var ownTrees = []string{"/proc", "/sys", "/dev"}

// treeOf is the one of ownTrees that path lies in, "" for none.
func treeOf(path string) string {
	for _, t := range ownTrees {
		if path == t || strings.HasPrefix(path, t+"/") {
			return t
		}
	}
	return ""
}

// sameTree refuses a mount point (target, opened inside the root at rootPath for dst) that a link on
// the way led into one of ownTrees from outside, or out of one: a share (--rw DIR where DIR is a link
// to /proc, or a link a command planted in a shared directory) would otherwise cover the sandbox's
// /proc with the host's, which lists every process of the host and its command line, or its /dev or
// /sys. runc's init refuses a mount into /proc the same way, by where it resolves.
func sameTree(rootPath string, target int, dst string) error {
	at, err := os.Readlink(procFD(target))
	if err != nil {
		return fmt.Errorf("locating the mount point: %w", err)
	}
	rel := strings.TrimPrefix(at, rootPath)
	if rel == at || rel != "" && rel[0] != '/' {
		return fmt.Errorf("the mount point %s is outside the root (%s)", dst, at)
	}
	if rel == "" {
		rel = "/"
	}
	if treeOf(dst) != treeOf(rel) {
		return fmt.Errorf("the mount point %s leads through a link to %s: %w", dst, rel, ErrOwnTree)
	}
	return nil
}

// ErrOwnTree is matched by the error about a mount point that a link led into, or out of, the
// sandbox's own /proc, /sys or /dev.
var ErrOwnTree = errors.New("a mount may not cross into or out of the sandbox's own /proc, /sys or /dev")

// isDirFD says whether fd is a directory: a bind's source by the descriptor sbx opened with the host
// root's rights, not by its host path, which the supervisor (unprivileged on the host) may not reach
// (below /root) and which may have changed since.
func isDirFD(fd int) bool {
	var st unix.Stat_t
	return fd > 0 && unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// moveOnto attaches the detached mount src onto the mount point target (both descriptors).
func moveOnto(src, target int) error {
	return unix.MoveMount(src, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// cloneOnto attaches a copy of path below dir (dir itself when path is "") onto the mount point target:
// a bind without following the paths again.
func cloneOnto(dir int, path string, target int) error {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	if path == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	src, err := unix.OpenTree(dir, path, flags)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(src)
	return moveOnto(src, target)
}

// procFD names fd through /proc/self/fd, for mount(2) calls that take a path.
func procFD(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }

// mountAttrs are the MS_* flags that have a MOUNT_ATTR_* of the same meaning.
var mountAttrs = []struct {
	ms   int
	attr uint64
}{
	{unix.MS_RDONLY, unix.MOUNT_ATTR_RDONLY}, {unix.MS_NOSUID, unix.MOUNT_ATTR_NOSUID},
	{unix.MS_NODEV, unix.MOUNT_ATTR_NODEV}, {unix.MS_NOEXEC, unix.MOUNT_ATTR_NOEXEC},
	{unix.MS_NOATIME, unix.MOUNT_ATTR_NOATIME}, {unix.MS_STRICTATIME, unix.MOUNT_ATTR_STRICTATIME},
	{unix.MS_NODIRATIME, unix.MOUNT_ATTR_NODIRATIME},
}

func attrsOf(flags int) uint64 {
	var a uint64
	for _, f := range mountAttrs {
		if flags&f.ms != 0 {
			a |= f.attr
		}
	}
	return a
}

// bindTree is a detached copy of m's source (its whole tree with MS_REC) with m's flags set on its top
// and m's recursive attributes on all of it. Flags are only ever added: what the source has (and a
// user namespace locks) stays.
//
// Every mount of the copy is made a slave first, before it is attached anywhere. sbx made the copy on
// the host, and a copy of a shared mount (a systemd host's /, a share below /run/netns) is a peer of
// the host's: a mount made below it in the sandbox (a nested share, sbx's /etc/hosts over a shared
// /etc) would appear on the host and stay there after the run. As a slave it still sees what the host
// mounts there later, as libcontainer's copies do (master:N in mountinfo, not shared:N).
func bindTree(m Mount) (int, error) {
	if m.FD < 3 {
		return -1, fmt.Errorf("no source for the bind of %s", m.Source)
	}
	fd := m.FD
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Propagation: unix.MS_SLAVE}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("making the copy of %s a slave: %w", m.Source, err)
	}
	if set := attrsOf(m.Flags) &^ (unix.MOUNT_ATTR_STRICTATIME | unix.MOUNT_ATTR_NOATIME | unix.MOUNT_ATTR_NODIRATIME); set != 0 {
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: set}); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("mount_setattr %s: %w", m.Source, err)
		}
	}
	if m.RecSet != 0 || m.RecClr != 0 {
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: m.RecSet, Attr_clr: m.RecClr}); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("mount_setattr (recursive) %s: %w", m.Source, err)
		}
	}
	return fd, nil
}

// openSources gives every bind of ms that came without a descriptor one: a detached copy of its source
// (its whole tree with MS_REC), looked up by its host path in the supervisor's copy of sbx's mount
// namespace, before anything of the sandbox is mounted. Only for a run without root, where sbx could
// not make the copies: the supervisor's rights on the host are then sbx's own (its uid, no capability
// outside its user namespace), so it reaches what sbx would, and the path resolves as libcontainer's
// init resolves it (links followed, as mount(2) follows them), a writable one checked against g.
func openSources(ms []Mount, g *Guard) error {
	for i, m := range ms {
		if m.Type != "bind" || m.FD != 0 {
			continue
		}
		fd, err := OpenSource(m, g)
		if m.Optional && errors.Is(err, unix.ENOENT) {
			ms[i].gone = true
			continue
		}
		if err != nil {
			return fmt.Errorf("opening %s for %s: %w", m.Source, m.Destination, err)
		}
		ms[i].FD = fd
	}
	return nil
}

// errSourceGone is the source of an optional mount, gone (see Mount.Optional).
var errSourceGone = errors.New("the source is gone")

// leaveOut removes the mount point dst inside root of an optional mount whose source is gone, so that
// the sandbox lacks the entry as the host now does. One that is not an empty directory stays.
func leaveOut(root int, dst string) {
	dir, name := filepath.Split(filepath.Clean("/" + dst))
	if name == "" {
		return
	}
	parent, err := openIn(root, dir, unix.O_DIRECTORY)
	if err != nil {
		return
	}
	defer unix.Close(parent)
	unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
}

// splitOptions splits mount data at its commas; for overlay, not at a comma escaped with '\', as
// mount(2) splits overlay's data (sbx escapes ',' ':' and '\' in its layers' paths). The escapes stay:
// overlay unescapes its layers' paths itself, given through fsconfig as through mount(2).
func splitOptions(fsType, data string) []string {
	if fsType != "overlay" {
		return strings.Split(data, ",")
	}
	var out []string
	start, escaped := 0, false
	for i := 0; i < len(data); i++ {
		switch {
		case escaped:
			escaped = false
		case data[i] == '\\':
			escaped = true
		case data[i] == ',':
			out = append(out, data[start:i])
			start = i + 1
		}
	}
	return append(out, data[start:])
}

// overlayPathsByFD rewrites an overlay option's value of layers (lowerdir's, split at unescaped ':';
// upperdir's and workdir's, one) so that each layer whose path holds a comma is /proc/self/fd/N of a
// descriptor opened here (O_PATH), which overlay follows as it looks the path up; the caller closes fds
// once the file system is made.
func overlayPathsByFD(v string) (string, []int, error) {
	var layers []string
	var cur strings.Builder
	escaped := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case escaped:
			cur.WriteByte('\\')
			cur.WriteByte(c)
			escaped = false
		case c == '\\':
			escaped = true
		case c == ':':
			layers = append(layers, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	layers = append(layers, cur.String())
	var fds []int
	for i, l := range layers {
		if !strings.Contains(l, ",") {
			continue
		}
		path := overlayUnescaper.Replace(l)
		fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			return "", nil, fmt.Errorf("opening the overlay layer %s: %w", path, err)
		}
		fds = append(fds, fd)
		layers[i] = "/proc/self/fd/" + strconv.Itoa(fd)
	}
	return strings.Join(layers, ":"), fds, nil
}

// overlayUnescaper undoes sbx's escapes of ',' ':' and '\' in an overlay layer's path.
var overlayUnescaper = strings.NewReplacer(`\\`, `\`, `\,`, `,`, `\:`, `:`)

// newFS makes a detached mount of a new file system of m's type with m's options.
func newFS(m Mount) (int, error) {
	fs, err := unix.Fsopen(m.Type, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen %s: %w", m.Type, err)
	}
	defer unix.Close(fs)
	if m.Source != "" {
		if err := unix.FsconfigSetString(fs, "source", m.Source); err != nil {
			return -1, fmt.Errorf("fsconfig %s source: %w", m.Type, err)
		}
	}
	for _, o := range splitOptions(m.Type, m.Data) {
		if o == "" {
			continue
		}
		k, v, hasValue := strings.Cut(o, "=")
		if hasValue {
			err = unix.FsconfigSetString(fs, k, v)
			if errors.Is(err, unix.EINVAL) && m.Type == "overlay" && strings.Contains(v, ",") {
				// A file system without fsconfig parsing of its own (overlay before Linux 6.5) gets its
				// options through the kernel's legacy wrapper, which refuses a value holding a comma
				// ("Legacy: Option contained comma"), escaped or not: its paths go as descriptors.
				var fds []int
				if v, fds, err = overlayPathsByFD(v); err == nil {
					err = unix.FsconfigSetString(fs, k, v)
				}
				// Overlay resolves the paths when the file system is made (FsconfigCreate, below).
				defer func() {
					for _, fd := range fds {
						unix.Close(fd)
					}
				}()
			}
		} else {
			err = unix.FsconfigSetFlag(fs, k)
		}
		if err != nil {
			return -1, fmt.Errorf("fsconfig %s %s: %w", m.Type, o, err)
		}
	}
	if m.Flags&unix.MS_RDONLY != 0 {
		// The file system itself too, as mount(2) with MS_RDONLY makes it.
		if err := unix.FsconfigSetFlag(fs, "ro"); err != nil {
			return -1, fmt.Errorf("fsconfig %s ro: %w", m.Type, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("creating the %s file system: %w", m.Type, err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, int(attrsOf(m.Flags)))
	if err != nil {
		return -1, fmt.Errorf("fsmount %s: %w", m.Type, err)
	}
	return mnt, nil
}

// setupDev binds the device nodes from the host's /dev into the sandbox's and adds the usual links:
// /dev/ptmx to the sandbox's own devpts, /dev/fd and the stdio names to /proc/self/fd.
func setupDev(root int, devices []string) error {
	for _, d := range devices {
		d = filepath.Clean(d)
		if d == "/dev/ptmx" {
			continue
		}
		if err := bindDevice(root, d); err != nil {
			return fmt.Errorf("binding %s: %w", d, err)
		}
	}
	dev, err := mkdirIn(root, "/dev")
	if err != nil {
		return err
	}
	defer unix.Close(dev)
	if err := unix.Unlinkat(dev, "ptmx", 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing /dev/ptmx: %w", err)
	}
	links := [][2]string{{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}}
	if _, err := os.Stat("/proc/kcore"); err == nil {
		links = append(links, [2]string{"/proc/kcore", "core"})
	}
	for _, l := range links {
		if err := unix.Symlinkat(l[0], dev, l[1]); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("linking /dev/%s: %w", l[1], err)
		}
	}
	return nil
}

// bindDevice binds the host's device node path onto an empty file at the same path in the root.
func bindDevice(root int, path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return fmt.Errorf("not a character device on the host")
	}
	target, err := fileIn(root, path)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	return cloneOnto(unix.AT_FDCWD, path, target)
}

// pivotRoot makes root the root of the mount namespace and detaches the host's tree from it, as runc
// does (pivot_root(".", ".") and a detached unmount of the old root, made a slave first so that the
// unmount does not propagate to the host).
func pivotRoot(root int) error {
	old, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(old)
	if err := unix.Fchdir(root); err != nil {
		return fmt.Errorf("entering the root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Fchdir(old); err != nil {
		return err
	}
	if err := unix.Mount("", ".", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making the old root a slave: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %w", err)
	}
	return unix.Chdir("/")
}

// writeSysctl sets key (dotted, net.ipv4....) in the sandbox's namespaces.
func writeSysctl(key, value string) error {
	if strings.Contains(key, "/") || strings.Contains(key, "..") {
		return fmt.Errorf("bad sysctl %q", key)
	}
	p := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{Flags: unix.O_WRONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return fmt.Errorf("setting %s: %w", key, err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(value)); err != nil {
		return fmt.Errorf("setting %s: %w", key, err)
	}
	return nil
}

// readOnly binds path (in the sandbox's root, after the pivot) onto itself read-only; a path the kernel
// lacks is left alone.
func readOnly(path string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return err
	}
	target, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return err
	}
	defer unix.Close(target)
	return moveOnto(fd, target)
}

// mask covers paths (in the sandbox's root, after the pivot): a file with /dev/null, a directory with
// an empty read-only tmpfs. Paths the kernel lacks are left alone.
//
// Each directory gets a tmpfs of its own, made for it: a clone of a detached mount (one tmpfs cloned
// onto each path) is refused with EINVAL by kernels before 6.15, which is every stock distribution
// kernel of today. A new tmpfs of one block and one inode costs about as much as a clone.
func mask(paths []string) error {
	done := map[string]bool{}
	for _, p := range paths {
		p = filepath.Clean(p)
		if done[p] {
			continue
		}
		done[p] = true
		target, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return stepFailed("masking "+p, false, err)
		}
		err = maskOne(target)
		unix.Close(target)
		if err != nil {
			return stepFailed("masking "+p, false, err)
		}
	}
	return nil
}

// maskOne covers the mount point target: a directory with a new empty read-only tmpfs, anything else
// with /dev/null.
func maskOne(target int) error {
	var st unix.Stat_t
	if err := unix.Fstat(target, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return cloneOnto(unix.AT_FDCWD, "/dev/null", target)
	}
	tmpfs, err := newFS(maskFS)
	if err != nil {
		return err
	}
	defer unix.Close(tmpfs)
	if err := moveOnto(tmpfs, target); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// maskFS is the file system that covers a masked directory.
var maskFS = Mount{Type: "tmpfs", Source: "tmpfs", Flags: unix.MS_RDONLY, Data: "nr_blocks=1,nr_inodes=1"}

// setupConsole makes the command's terminal in the sandbox's devpts: its master side goes to sbx on
// the console socket, its slave becomes the supervisor's stdio, controlling terminal and /dev/console.
func setupConsole() error {
	ptmx, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	master := os.NewFile(uintptr(ptmx), "/dev/ptmx")
	defer master.Close()
	if err := unix.IoctlSetPointerInt(ptmx, unix.TIOCSPTLCK, 0); err != nil {
		return fmt.Errorf("unlockpt: %w", err)
	}
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(ptmx), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		return fmt.Errorf("opening the terminal's slave side: %w", errno)
	}
	slave := int(r)
	defer unix.Close(slave)
	if target, err := fileIn(unix.AT_FDCWD, "/dev/console"); err == nil {
		err = cloneOnto(slave, "", target)
		unix.Close(target)
		if err != nil {
			return fmt.Errorf("binding /dev/console: %w", err)
		}
	}
	sock := os.NewFile(consoleFD, "console")
	defer sock.Close()
	name := []byte("/dev/ptmx")
	if err := unix.Sendmsg(consoleFD, name, unix.UnixRights(ptmx), nil, 0); err != nil {
		return fmt.Errorf("sending the terminal: %w", err)
	}
	// The supervisor is its session's leader (sbx starts it with setsid): the slave becomes its
	// controlling terminal, and the command's.
	if err := unix.IoctlSetInt(slave, unix.TIOCSCTTY, 0); err != nil {
		return fmt.Errorf("TIOCSCTTY: %w", err)
	}
	for fd := range 3 {
		if err := unix.Dup3(slave, fd, 0); err != nil {
			return err
		}
	}
	return nil
}

// dropCaps leaves every thread of the supervisor with caps alone (permitted and effective; nothing
// inheritable), and no_new_privs. Credentials are per thread: psx changes them on all at once (the
// runtime's AllThreadsSyscall in sbx-init, which has no cgo; its own signal handshake in sbx). With
// creds, every thread takes them first (takeCreds), and only the calling thread, the command's, which
// alone starts anything, keeps caps; the others keep none.
func dropCaps(caps []int, creds *Creds) error {
	var set uint32
	for _, c := range caps {
		set |= 1 << uint(c)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: set, Permitted: set}}
	if creds == nil {
		if _, _, errno := psx.Syscall6(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0, 0, 0, 0); errno != 0 {
			return fmt.Errorf("dropping capabilities: %w", errno)
		}
	} else {
		if err := takeCreds(creds); err != nil {
			return err
		}
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return fmt.Errorf("dropping capabilities: %w", err)
		}
	}
	if bornNoNewPrivs {
		return nil
	}
	if _, _, errno := psx.Syscall6(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", errno)
	}
	return nil
}

// bornNoNewPrivs says whether the supervisor was started with no_new_privs (sbx's starter threads set
// it before they fork): every thread then has it, as each descends from the first, and the flag is
// never cleared. Read on the main thread before anything of the supervisor's own could set it on one.
var bornNoNewPrivs = func() bool {
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	return err == nil && nnp == 1
}()

// takeCreds gives every thread of the supervisor the ids creds and no supplementary group. The calling
// thread keeps its permitted capabilities across the change (PR_SET_KEEPCAPS, its own and reset after
// it; dropCaps's capset brings the effective ones back); every other thread loses all of them, as a
// change from root to other ids does. Each all-thread call costs about 75 us on an idle machine, and
// about 0.7 ms of CPU when many sandboxes start at once (the caller yields until every thread has been
// scheduled to run its signal handler): setgroups is left out when there is no group to drop (a direct
// start's clone has none), and setresgid when every thread has the group already (a direct start as
// root: see buildAsRootGroup).
func takeCreds(c *Creds) error {
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("taking the supervisor's own ids: prctl(PR_SET_KEEPCAPS): %w", err)
	}
	defer unix.Prctl(unix.PR_SET_KEEPCAPS, 0, 0, 0, 0)
	groups, err := unix.Getgroups()
	dropGroups := err != nil || len(groups) > 0
	if !dropGroups && bornGroup != 0 && bornGroup == c.GID {
		if _, _, errno := psx.Syscall3(unix.SYS_SETRESUID, uintptr(c.UID), uintptr(c.UID), uintptr(c.UID)); errno != 0 {
			return fmt.Errorf("taking the supervisor's own ids: setresuid: %w", errno)
		}
		return nil
	}
	if err := setIDs(psx.Syscall3, c.UID, c.GID, dropGroups); err != nil {
		return fmt.Errorf("taking the supervisor's own ids: %w", err)
	}
	return nil
}

// bornGroup is the group every thread of the supervisor has had since it started, other than 0: set by
// buildAsRootGroup once the main thread has it back. 0: none known, takeCreds changes the group on each.
var bornGroup int

// buildAsRootGroup builds the sandbox (build) with group 0, the namespace root's, on the calling thread,
// the main one, when the supervisor was started with a group of its own. sbx starts it with the group
// it takes for good once the sandbox is built (Prepare.Creds), so that every thread its runtime makes
// has that group from the start and takeCreds need not change it on each (bornGroup). Only this thread
// ever has group 0, for the build: init locks it before the change, and the runtime makes no thread
// from a locked one (its new threads come from the runtime's template thread, made at that lock, so
// that whatever a locked thread changed about itself is never copied). What the build makes (mount
// points, /dev's links) is root's, as before. Each change of group clears the thread's parent-death
// signal: set again (sig) after each; sbx dying in between ends the supervisor's next read of the
// control socket.
func buildAsRootGroup(s *Setup, sig int) error {
	gid := unix.Getgid()
	if gid == 0 {
		return build(s)
	}
	if err := setThreadGroup(0); err != nil {
		return err
	}
	restorePdeathsig(sig)
	err := build(s)
	if gerr := setThreadGroup(gid); gerr != nil {
		return errors.Join(err, gerr)
	}
	restorePdeathsig(sig)
	if err == nil {
		bornGroup = gid
	}
	return err
}

// setThreadGroup gives the calling thread gid as its real, effective and saved group.
func setThreadGroup(gid int) error {
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); errno != 0 {
		return fmt.Errorf("setresgid(%d) on the main thread: %w", gid, errno)
	}
	return nil
}

// setIDs sets uid and gid as real, effective and saved ids, dropping every supplementary group first
// when dropGroups, through call: psx.Syscall3 for every thread of the process, unix.RawSyscall for the
// calling thread alone.
func setIDs(call func(nr, a1, a2, a3 uintptr) (uintptr, uintptr, syscall.Errno), uid, gid int, dropGroups bool) error {
	if dropGroups {
		if _, _, errno := call(unix.SYS_SETGROUPS, 0, 0, 0); errno != 0 {
			return fmt.Errorf("setgroups: %w", errno)
		}
	}
	if _, _, errno := call(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); errno != 0 {
		return fmt.Errorf("setresgid: %w", errno)
	}
	if _, _, errno := call(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); errno != 0 {
		return fmt.Errorf("setresuid: %w", errno)
	}
	return nil
}

// dropBounding empties the calling thread's capability bounding set of all but keep (EINVAL: a
// capability this kernel lacks) and its ambient set. On the command's thread it keeps nothing: the
// command, started from it, can never gain a capability, even as root or through a file's capabilities.
func dropBounding(keep ...int) error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if slices.Contains(keep, c) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("prctl(PR_CAPBSET_DROP, %d): %w", c, err)
		}
	}
	return unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
}

// sendNetRecord makes the network record's netlink sockets in the supervisor's network namespace, sends
// them on the socket at fd and closes it: the command inherits none of them.
func sendNetRecord(fd int) error {
	defer unix.Close(fd)
	var socks [3]int
	for i, proto := range []int{unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER, unix.NETLINK_NETFILTER} {
		s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		defer unix.Close(s)
		socks[i] = s
	}
	return unix.Sendmsg(fd, []byte{0}, unix.UnixRights(socks[:]...), nil, 0)
}

// LoopbackUp brings up lo in the calling thread's network namespace (SIOCSIFFLAGS, as ip link set lo
// up).
func LoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
