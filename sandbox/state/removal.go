package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// overlayWorkDirs are the directories an overlay leaves with mode 0 in its work dir: its own work
// dir, and with the volatile option (package rootfs's rootless overlays) the marker dirs below it.
// Parents first.
var overlayWorkDirs = []string{"work", "work/incompat", "work/incompat/volatile"}

// openWorkDirs gives the caller back the dirs overlay leaves with mode 0 in a rootless run dir
// (overlayWorkDirs), each reached below the run dir's handle without following a link, so that one
// pass of os.RemoveAll removes the run dir (a marker left unopened fails that pass, and removeAll
// then walks the run dir a second time to open every directory).
func openWorkDirs(dir string) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(root)
	var patterns []string
	for _, w := range overlayWorkDirs {
		patterns = append(patterns, "layer/work/*/"+w, "layer/work-cwd/"+w, "layer/work-cache-*/"+w)
	}
	for _, pattern := range patterns {
		matches, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, m := range matches {
			if rel, err := filepath.Rel(dir, m); err == nil {
				openUp(root, rel, 0o700)
			}
		}
	}
}

// openForRemoval gives the caller back every directory below dir (u+rwx), so that an ordinary user can
// remove the run dir whatever modes the command left on the directories it made. Like OpenUnreadable,
// every directory is reached below dir's handle without following a link, and changed through its own.
func openForRemoval(dir string) {
	openBelow(dir, 0o700, true)
}

// maxOpenDirs bounds how many directories OpenUnreadable looks at.
const maxOpenDirs = 1 << 17

// OpenUnreadable adds read and search permission for their owner (the caller, without root) to the
// directories below upper that lack it, so that observation can walk what the command wrote. The
// command may still run and swap names for links: every directory is opened below upper's handle
// without following any link, and changed through its handle. Modes are not in the report.
func OpenUnreadable(upper string) {
	openBelow(upper, 0o500, false)
}

// openBelow walks the directories below top through a handle of it (openat2 RESOLVE_IN_ROOT, no link
// followed, no other file system), adding perm for their owner: to every directory (always), or to
// those it cannot open. It looks at maxOpenDirs directories at most.
func openBelow(top string, perm uint32, always bool) {
	root, err := unix.Open(top, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(root)
	budget := maxOpenDirs
	openDirsBelow(root, ".", &budget, perm, always)
}

func openDirsBelow(root int, rel string, budget *int, perm uint32, always bool) {
	if *budget <= 0 {
		return
	}
	*budget--
	if always {
		openUp(root, rel, perm)
	}
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV}
	fd, err := unix.Openat2(root, rel, how)
	if errors.Is(err, unix.EACCES) && !always && openUp(root, rel, perm) {
		fd, err = unix.Openat2(root, rel, how)
	}
	if err != nil {
		return
	}
	dir := os.NewFile(uintptr(fd), rel)
	entries, _ := dir.ReadDir(-1)
	dir.Close()
	for _, e := range entries {
		if e.IsDir() {
			openDirsBelow(root, filepath.Join(rel, e.Name()), budget, perm, always)
		}
	}
}

// openUp adds perm for its owner to the directory rel below root, reached without following links,
// when it lacks any of it and belongs to the caller.
func openUp(root int, rel string, perm uint32) bool {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV}
	fd, err := unix.Openat2(root, rel, how)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || int(st.Uid) != os.Geteuid() {
		return false
	}
	if st.Mode&perm == perm {
		return true
	}
	// An O_PATH handle cannot be fchmod'ed; its /proc/self/fd link names exactly that directory.
	return unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), st.Mode&0o7777|perm) == nil
}

// initFile names, in a rootless run's dir, its supervisor's host pid and pid namespace: without a
// cgroup, nothing else tells gc which processes were the run's, should its supervisor outlive a dead
// sbx (its parent-death signal kills it with sbx; this is the second line).
const initFile = "init"

// maxInitFile bounds what gc reads of initFile.
const maxInitFile = 256

// RecordInit writes initFile for the supervisor pid, sbx's child, not reaped yet: the pid is its.
func RecordInit(runDir string, pid int) error {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return fmt.Errorf("reading the supervisor's pid namespace: %w", err)
	}
	if err := os.WriteFile(filepath.Join(runDir, initFile), []byte(fmt.Sprintf("%d %s\n", pid, ns)), 0o600); err != nil {
		return fmt.Errorf("recording the supervisor's pid: %w", err)
	}
	return nil
}

// killRecordedInit kills, for gc, the supervisor a dead run recorded in its dir (and with it its whole
// pid namespace), if it is still there: the process with that pid whose pid namespace is the recorded
// one, signalled through a pidfd opened before the check, so that a reused pid is never hit. It waits
// up to a second for it to be gone.
func killRecordedInit(runDir string) {
	f, err := os.Open(filepath.Join(runDir, initFile))
	if err != nil {
		return
	}
	data := make([]byte, maxInitFile)
	n, _ := f.Read(data)
	f.Close()
	var pid int
	var ns string
	if _, err := fmt.Sscanf(string(data[:n]), "%d %s", &pid, &ns); err != nil || pid <= 1 {
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || got != ns {
		return
	}
	if unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) != nil {
		return
	}
	// The pidfd reads as readable once the process has exited.
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 1000)
}
