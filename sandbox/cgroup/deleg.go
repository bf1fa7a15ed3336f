package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sbx-dev/sbx/sandbox/internal/host"
	"golang.org/x/sys/unix"
)

// Without root, a sandbox gets a cgroup of its own where systemd delegates one to the caller, as podman
// and crun do with their cgroupfs drivers. On a systemd host with cgroup v2, a user's processes live
// below user@UID.service, whose cgroup tree belongs to the user; a unit the user's manager runs with
// Delegate=yes (`systemd-run --user --scope -p Delegate=yes`, user@1000.service/app.slice/run-*.scope)
// is the caller's to divide: a directory it owns, with memory and pids (often cpu) in its
// cgroup.controllers. Each run then gets a child of it, sbx-ID, with memory.max, pids.max and cpu.max
// from the plan, the freezer and the task lists, as root's runs have theirs below /sys/fs/cgroup: the
// rest of sbx's cgroup code (the freezer, LimitHits, Destroy, gc) works on it as on root's.
//
// A unit without Delegate=yes (a terminal's scope, a plain `systemd-run --user --scope`) is owned by
// the user all the same, but not given to it: systemd stops such a unit when an OOM kill happens below
// it, and may rewrite its controllers (unitDelegated). There sbx keeps to rlimits, and sbx version
// says why.
//
// Controllers are handed to children through the parent's cgroup.subtree_control, and cgroup v2 lets
// a cgroup enable them only while it holds no process ("no internal processes"). The caller's cgroup
// holds sbx itself, and in a shell's scope the shell too: the first run moves every process in it into
// a child, leaf (delegLeaf), and then enables the controllers (podman moves them into "init"). Later
// runs find the controllers enabled, and sbx itself in the leaf: the delegated cgroup is the leaf's
// parent then. Nothing is ever taken out of the leaf, and the controllers stay enabled.
//
// Detection only reads (a statfs, /proc/self/cgroup, three files of the cgroup, an xattr and the
// scope's transient unit file: about twenty syscalls, no D-Bus); the move and the enabling are
// writes, made once per delegated cgroup.

// delegLeaf is the child of the delegated cgroup that its processes are moved into, so that the
// controllers can be enabled for the runs' cgroups beside it. Not a run's name (those are sbx-ID), so
// gc never takes it for one.
const delegLeaf = "leaf"

// LimitControllers are the controllers the runs' limits need, in the order they are enabled.
var LimitControllers = []string{"memory", "pids", "cpu"}

// maxDelegRounds bounds how often the processes are moved and the controllers enabled again when a
// process appears in the delegated cgroup meanwhile (a fork of one not yet moved, another sbx's run).
const maxDelegRounds = 16

// cgroupFS is where detection looks: the cgroup v2 mount, the caller's /proc/self/cgroup, the caller's
// uid, and the writes the preparation makes. Tests lay out a fake tree in a temp dir.
type cgroupFS struct {
	root   string                  // the unified hierarchy's mount point: /sys/fs/cgroup
	fsType func(path string) int64 // statfs's f_type
	self   func() ([]byte, error)  // /proc/self/cgroup
	uid    int                     // the caller's euid
	stat   func(path string, st *unix.Stat_t) error
	// getxattr reads an xattr of a cgroup; transient is the caller's systemd user manager's dir of
	// transient unit files (/run/user/UID/systemd/transient).
	getxattr  func(path, name string) (string, error)
	transient string
	// unitDirs are the user manager's unit directories, highest priority first (userUnitDirs).
	unitDirs []string
	write    func(path string, data []byte) error // a write to an existing cgroup file
	mkdir    func(path string) error
}

// hostCgroupFS is the host's.
func hostCgroupFS() cgroupFS {
	return cgroupFS{root: Root, uid: os.Geteuid(),
		fsType: func(path string) int64 {
			var st unix.Statfs_t
			if unix.Statfs(path, &st) != nil {
				return 0
			}
			return st.Type
		},
		self: func() ([]byte, error) { return os.ReadFile("/proc/self/cgroup") },
		stat: unix.Stat,
		getxattr: func(path, name string) (string, error) {
			buf := make([]byte, 64)
			n, err := unix.Getxattr(path, name, buf)
			if err != nil {
				return "", err
			}
			return string(buf[:n]), nil
		},
		transient: fmt.Sprintf("/run/user/%d/systemd/transient", os.Geteuid()),
		unitDirs:  userUnitDirs(),
		write:     writeCgroupFile,
		mkdir:     func(path string) error { return os.Mkdir(path, 0o755) },
	}
}

// writeCgroupFile writes data to a cgroup interface file in one write(2): the kernel reads each write
// as one request (a pid, a list of controllers) and answers it with the write's error.
func writeCgroupFile(path string, data []byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, data); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// Delegation is the cgroup systemd delegates to the caller, as detection found it.
type Delegation struct {
	dir         string   // the delegated cgroup: /sys/fs/cgroup/user.slice/.../run-x.scope
	controllers []string // those of LimitControllers in its cgroup.controllers
	enabled     bool     // they are in its cgroup.subtree_control already
}

// Has says whether the delegated cgroup has controller c (nil: no delegation).
func (d *Delegation) Has(c string) bool { return d != nil && slices.Contains(d.controllers, c) }

// Dir is the delegated cgroup's directory.
func (d *Delegation) Dir() string { return d.dir }

// Controllers are those of LimitControllers the delegated cgroup has.
func (d *Delegation) Controllers() []string { return d.controllers }

// RunDir is the cgroup of run id below it.
func (d *Delegation) RunDir(id string) string { return filepath.Join(d.dir, Name(id)) }

// detect finds the cgroup delegated to the caller, or says why there is none. It only reads.
func (fs cgroupFS) detect() (*Delegation, string) {
	switch fs.fsType(fs.root) {
	case unix.CGROUP2_SUPER_MAGIC:
	case unix.TMPFS_MAGIC:
		if fs.fsType(filepath.Join(fs.root, "unified")) == unix.CGROUP2_SUPER_MAGIC {
			return nil, "cgroup v1 hybrid, whose v2 tree (" + filepath.Join(fs.root, "unified") + ") has no controllers to delegate"
		}
		return nil, "cgroup v1"
	default:
		return nil, "no cgroup v2 at " + fs.root
	}
	data, err := fs.self()
	if err != nil {
		return nil, fmt.Sprintf("reading /proc/self/cgroup: %v", err)
	}
	rel, ok := unifiedPath(data)
	if !ok || !filepath.IsAbs(rel) {
		return nil, "no cgroup v2 line in /proc/self/cgroup"
	}
	rel = filepath.Clean(rel)
	if rel == "/" {
		return nil, "sbx runs in the root cgroup"
	}
	dir := filepath.Join(fs.root, rel)
	if filepath.Base(dir) == delegLeaf && fs.ownedDir(filepath.Dir(dir)) == "" {
		// An earlier run moved sbx's caller into the leaf of the delegated cgroup.
		dir = filepath.Dir(dir)
	}
	if why := fs.ownedDir(dir); why != "" {
		return nil, "not delegated: " + why
	}
	if why := fs.unitDelegated(dir); why != "" {
		return nil, "not delegated: " + why
	}
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Sprintf("not delegated: %v", err)
	}
	on, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return nil, fmt.Sprintf("not delegated: %v", err)
	}
	d := &Delegation{dir: dir, enabled: true}
	for _, c := range LimitControllers {
		if slices.Contains(strings.Fields(string(avail)), c) {
			d.controllers = append(d.controllers, c)
			d.enabled = d.enabled && slices.Contains(strings.Fields(string(on)), c)
		}
	}
	return d, ""
}

// unifiedPath is the cgroup v2 path of a /proc/PID/cgroup content (its "0::" line).
func unifiedPath(data []byte) (string, bool) {
	for line := range strings.Lines(string(data)) {
		if p, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "0::"); ok {
			return p, true
		}
	}
	return "", false
}

// ownedDir says why the cgroup dir is not the caller's to use ("" when it is): the directory, its
// cgroup.procs and its cgroup.subtree_control must belong to the caller and be writable by it, as
// systemd leaves them in a delegated unit.
func (fs cgroupFS) ownedDir(dir string) string {
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cgroup.subtree_control")} {
		var st unix.Stat_t
		if err := fs.stat(p, &st); err != nil {
			return fmt.Sprintf("%s: %v", p, err)
		}
		if int(st.Uid) != fs.uid {
			owner := "uid " + strconv.Itoa(int(st.Uid))
			if st.Uid == 0 {
				owner = "root"
			}
			return fmt.Sprintf("%s is owned by %s", p, owner)
		}
		if st.Mode&unix.S_IWUSR == 0 {
			return p + " is not writable by its owner"
		}
	}
	return ""
}

// unitDelegated says why the caller's cgroup dir, which the caller owns, is not delegated to it all
// the same ("" when it is): it is (or lies below) a systemd unit that is not Delegate=yes. Below the
// user's user@UID.service every cgroup belongs to the user, since systemd delegates that service to the
// user's own service manager; but that manager still runs each of its units. A unit without Delegate=
// has OOMPolicy=stop: an OOM kill in a run's cgroup below it counts in the unit's memory.events
// (cgroup v2's events are hierarchical), and systemd stops the unit, killing the caller with it (the
// terminal's shell of a desktop's scope; seen with systemd 252: "Failed with result 'oom-kill'").
// systemd may also rewrite its cgroup.subtree_control, taking the runs' controllers back.
//
// Delegation shows in the unit's cgroup as the xattr user.delegate=1 (set by the system manager, and
// by user managers of later systemd releases); systemd 252's user manager sets none, but writes every
// scope it starts to its transient unit dir, Delegate= included, and reads a service from its unit
// file and drop-ins (sbx serve's user unit is Delegate=yes). A cgroup below no unit (the root of a
// container's cgroup namespace) is nobody else's.
func (fs cgroupFS) unitDelegated(dir string) string {
	rel := strings.TrimPrefix(dir, fs.root)
	unit, unitDir := "", ""
	for d := rel; d != "/" && d != "." && d != ""; d = filepath.Dir(d) {
		if name := filepath.Base(d); strings.HasSuffix(name, ".scope") || strings.HasSuffix(name, ".service") {
			unit, unitDir = name, filepath.Join(fs.root, d)
			break
		}
	}
	if unit == "" {
		return ""
	}
	if v, err := fs.getxattr(unitDir, "user.delegate"); err == nil && strings.TrimSpace(v) == "1" {
		return ""
	}
	fix := "run sbx in a unit with Delegate=yes (systemd-run --user --scope -p Delegate=yes ...)"
	why := fmt.Sprintf("%s is in the systemd unit %s, which is not Delegate=yes: an OOM kill in a run would stop the unit (OOMPolicy=stop), the caller with it; %s", dir, unit, fix)
	if !strings.Contains(rel, fmt.Sprintf("/user@%d.service/", fs.uid)) {
		return why
	}
	if strings.HasSuffix(unit, ".service") {
		if !transientDelegates(fs.unitFile(unit)) {
			return why
		}
		return ""
	}
	data, err := os.ReadFile(filepath.Join(fs.transient, unit))
	if err != nil {
		return fmt.Sprintf("%s is in the systemd unit %s, whose Delegate= setting cannot be read (%v); %s", dir, unit, err, fix)
	}
	if !transientDelegates(data) {
		return why
	}
	return ""
}

// unitFile is what the user manager reads for the service unit: its unit file (the first of
// fs.unitDirs that holds it, or of a template's, name@.service) and then its drop-ins (NAME.d/*.conf
// of every unit directory, in the order of their file names; of two of one name, the higher
// directory's), as one text; a unit with no file reads as empty.
func (fs cgroupFS) unitFile(name string) []byte {
	names := []string{name}
	if at := strings.Index(name, "@"); at > 0 {
		names = append(names, name[:at+1]+".service") // sbx@x.service is read from sbx@.service
	}
	var out []byte
	found := false
	for _, n := range names {
		for _, d := range fs.unitDirs {
			if data, err := readUnitFile(filepath.Join(d, n)); err == nil {
				out, found = append(out, data...), true
				break
			}
		}
		if found {
			break
		}
	}
	dropins := map[string]string{} // file name -> path, the highest directory's
	for _, n := range names {
		for _, d := range fs.unitDirs {
			files, _ := filepath.Glob(filepath.Join(d, n+".d", "*.conf"))
			for _, f := range files {
				if _, ok := dropins[filepath.Base(f)]; !ok {
					dropins[filepath.Base(f)] = f
				}
			}
		}
	}
	for _, base := range slices.Sorted(maps.Keys(dropins)) {
		if data, err := readUnitFile(dropins[base]); err == nil {
			out = append(append(out, '\n'), data...)
		}
	}
	return out
}

// readUnitFile reads a unit file, a regular file (links followed: systemd links units into place) of at
// most 1 MiB, without blocking.
func readUnitFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// userUnitDirs are the directories a user's systemd manager reads units from, highest priority first
// (systemd.unit(5), "User Unit Search Path"), for this process's user.
func userUnitDirs() []string {
	home, _ := os.UserHomeDir()
	config := os.Getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(config) && home != "" {
		config = filepath.Join(home, ".config")
	}
	run := fmt.Sprintf("/run/user/%d", os.Geteuid())
	var dirs []string
	if config != "" {
		dirs = append(dirs, filepath.Join(config, "systemd", "user.control"))
	}
	dirs = append(dirs, filepath.Join(run, "systemd", "user.control"), filepath.Join(run, "systemd", "transient"),
		filepath.Join(run, "systemd", "generator.early"))
	if config != "" {
		dirs = append(dirs, filepath.Join(config, "systemd", "user"))
	}
	dirs = append(dirs, "/etc/xdg/systemd/user", "/etc/systemd/user", filepath.Join(run, "systemd", "user"), "/run/systemd/user",
		filepath.Join(run, "systemd", "generator"))
	if home != "" {
		dirs = append(dirs, filepath.Join(home, ".local", "share", "systemd", "user"))
	}
	return append(dirs, "/usr/local/share/systemd/user", "/usr/share/systemd/user", "/usr/local/lib/systemd/user",
		"/usr/lib/systemd/user", filepath.Join(run, "systemd", "generator.late"))
}

// transientDelegates says whether a transient unit file of systemd's sets Delegate= to yes or to a list
// of controllers.
func transientDelegates(data []byte) bool {
	on := false
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Delegate="); ok {
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "", "no", "false", "off", "0":
				on = false
			default: // yes, true, on, 1, or the controllers delegated
				on = true
			}
		}
	}
	return on
}

// prepare enables the delegated cgroup's controllers for its children: every process in it moves into
// its leaf first, since cgroup v2 refuses controllers to a cgroup that holds processes (EBUSY). A
// process that appears meanwhile (forked by one not yet moved, or by another sbx doing the same) makes
// it move and enable again, maxDelegRounds times at most. Concurrent runs are safe: the leaf may exist
// (EEXIST), a process moved twice stays in the leaf, and enabling what is enabled changes nothing.
func (fs cgroupFS) prepare(d *Delegation) error {
	if d.enabled || len(d.controllers) == 0 {
		return nil
	}
	leaf := filepath.Join(d.dir, delegLeaf)
	if err := fs.mkdir(leaf); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("making %s: %w", leaf, err)
	}
	enable := []byte("+" + strings.Join(d.controllers, " +"))
	for range maxDelegRounds {
		if err := fs.moveProcs(d.dir, leaf); err != nil {
			return err
		}
		err := fs.write(filepath.Join(d.dir, "cgroup.subtree_control"), enable)
		if err == nil {
			d.enabled = true
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("enabling %s for the runs' cgroups: %w", enable, err)
		}
	}
	return fmt.Errorf("enabling %s for the runs' cgroups: processes kept appearing in %s (%d rounds)", enable, d.dir, maxDelegRounds)
}

// moveProcs moves every process in dir into leaf. A process that exited meanwhile is passed over.
func (fs cgroupFS) moveProcs(dir, leaf string) error {
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, f := range bytes.Fields(procs) {
		err := fs.write(filepath.Join(leaf, "cgroup.procs"), f)
		if err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("moving process %s into %s: %w", f, leaf, err)
		}
	}
	return nil
}

// Detect finds the cgroup systemd delegates to the caller, or says why there is none. It only reads.
func Detect() (*Delegation, string) { return hostCgroupFS().detect() }

// Prepare makes d usable for the runs' cgroups: its processes moved into delegLeaf and the controllers
// enabled for its children (once per delegated cgroup; later runs find it done).
func Prepare(d *Delegation) error { return hostCgroupFS().prepare(d) }

// DelegationRow is sbx version's cgroup row without root (callerCgroup).
func DelegationRow() (bool, string) {
	d, why := hostCgroupFS().detect()
	if d == nil {
		return false, why + ": rlimits stand in (the report's limits.enforced)"
	}
	row := fmt.Sprintf("delegated by systemd: %s (%s)", d.dir, strings.Join(d.controllers, " "))
	if len(d.controllers) == 0 {
		row = fmt.Sprintf("delegated by systemd: %s (no memory, pids nor cpu controller: rlimits stand in for the limits)", d.dir)
	} else if missing := slices.DeleteFunc(slices.Clone(LimitControllers), d.Has); len(missing) > 0 {
		row += fmt.Sprintf("; no %s controller there: not limited", strings.Join(missing, " nor "))
	}
	return true, row
}

// recordCgroupFile names, in a rootless run's dir, the run's cgroup below the delegated one: gc finds
// it there after a crash, whichever cgroup the run's sbx was started in.
const recordCgroupFile = "cgroup"

// recordCgroup writes recordCgroupFile.
func recordCgroup(runDir, dir string) error {
	return os.WriteFile(filepath.Join(runDir, recordCgroupFile), []byte(dir+"\n"), 0o600)
}

// Recorded is the cgroup a dead rootless run recorded, "" when none is recorded or what is
// recorded is not a run's cgroup the caller owns (sbx-ID below /sys/fs/cgroup).
func Recorded(runDir, id string) string {
	f, err := os.Open(filepath.Join(runDir, recordCgroupFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, 4096)
	n, _ := f.Read(buf)
	dir := strings.TrimSpace(string(buf[:n]))
	if dir == "" || filepath.Clean(dir) != dir || !host.Within(dir, Root) || filepath.Base(dir) != Name(id) {
		return ""
	}
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() {
		return ""
	}
	return dir
}
