package seccomp

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

type flagName struct {
	bit  uint64
	name string
}

var cloneNewFlags = []flagName{
	{unix.CLONE_NEWUSER, "CLONE_NEWUSER"}, {unix.CLONE_NEWNS, "CLONE_NEWNS"}, {unix.CLONE_NEWPID, "CLONE_NEWPID"},
	{unix.CLONE_NEWNET, "CLONE_NEWNET"}, {unix.CLONE_NEWUTS, "CLONE_NEWUTS"}, {unix.CLONE_NEWIPC, "CLONE_NEWIPC"},
	{unix.CLONE_NEWCGROUP, "CLONE_NEWCGROUP"}, {unix.CLONE_NEWTIME, "CLONE_NEWTIME"},
	{unix.CLONE_FILES, "CLONE_FILES"}, {unix.CLONE_FS, "CLONE_FS"}, {unix.CLONE_SYSVSEM, "CLONE_SYSVSEM"},
}

var mountFlags = []flagName{
	{unix.MS_BIND, "MS_BIND"}, {unix.MS_REMOUNT, "MS_REMOUNT"}, {unix.MS_RDONLY, "MS_RDONLY"}, {unix.MS_MOVE, "MS_MOVE"},
	{unix.MS_REC, "MS_REC"}, {unix.MS_PRIVATE, "MS_PRIVATE"}, {unix.MS_SHARED, "MS_SHARED"}, {unix.MS_SLAVE, "MS_SLAVE"},
	{unix.MS_NOSUID, "MS_NOSUID"}, {unix.MS_NODEV, "MS_NODEV"}, {unix.MS_NOEXEC, "MS_NOEXEC"},
}

var ptraceRequests = map[uint64]string{
	unix.PTRACE_TRACEME: "PTRACE_TRACEME", unix.PTRACE_PEEKDATA: "PTRACE_PEEKDATA", unix.PTRACE_POKEDATA: "PTRACE_POKEDATA",
	unix.PTRACE_ATTACH: "PTRACE_ATTACH", unix.PTRACE_SEIZE: "PTRACE_SEIZE", unix.PTRACE_GETREGS: "PTRACE_GETREGS",
	unix.PTRACE_SETREGS: "PTRACE_SETREGS", unix.PTRACE_CONT: "PTRACE_CONT", unix.PTRACE_DETACH: "PTRACE_DETACH",
	unix.PTRACE_PEEKTEXT: "PTRACE_PEEKTEXT", unix.PTRACE_POKETEXT: "PTRACE_POKETEXT", unix.PTRACE_INTERRUPT: "PTRACE_INTERRUPT",
}

var bpfCommands = []string{"BPF_MAP_CREATE", "BPF_MAP_LOOKUP_ELEM", "BPF_MAP_UPDATE_ELEM", "BPF_MAP_DELETE_ELEM",
	"BPF_MAP_GET_NEXT_KEY", "BPF_PROG_LOAD", "BPF_OBJ_PIN", "BPF_OBJ_GET", "BPF_PROG_ATTACH", "BPF_PROG_DETACH"}

// decodeArgs renders the arguments of a deny-list syscall that say what was tried: the namespaces of
// unshare and setns, the target and type of mount, the request and pid of ptrace, the command of bpf.
// Strings are read from the process while it waits for the answer; what cannot be read is left out.
func decodeArgs(name string, req *seccompNotif) string {
	a := req.Args
	pid := int(req.Pid)
	switch name {
	case "unshare":
		return flagsString(a[0], cloneNewFlags)
	case "setns":
		if a[1] == 0 {
			return fmt.Sprintf("fd %d, any namespace", int32(a[0]))
		}
		return fmt.Sprintf("fd %d, %s", int32(a[0]), flagsString(a[1], cloneNewFlags))
	case "mount":
		src, _ := readString(pid, a[0], 256)
		dst, _ := readString(pid, a[1], 256)
		fstype, _ := readString(pid, a[2], 64)
		return strings.TrimSpace(fmt.Sprintf("%q on %q type %q %s", src, dst, fstype, flagsString(a[3], mountFlags)))
	case "umount2":
		dst, _ := readString(pid, a[0], 256)
		return fmt.Sprintf("%q", dst)
	case "ptrace":
		req, ok := ptraceRequests[a[0]]
		if !ok {
			req = fmt.Sprintf("request %d", a[0])
		}
		return fmt.Sprintf("%s pid %d", req, int32(a[1]))
	case "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd":
		return fmt.Sprintf("pid %d", int32(a[0]))
	case "bpf":
		if a[0] < uint64(len(bpfCommands)) {
			return bpfCommands[a[0]]
		}
		return fmt.Sprintf("cmd %d", a[0])
	case "keyctl":
		return fmt.Sprintf("op %d", a[0])
	case "perf_event_open":
		return fmt.Sprintf("pid %d cpu %d", int32(a[1]), int32(a[2]))
	case "finit_module":
		return fmt.Sprintf("fd %d", int32(a[0]))
	case "delete_module", "fsopen", "swapon", "swapoff", "acct":
		s, _ := readString(pid, a[0], 256)
		return fmt.Sprintf("%q", s)
	case "open_tree":
		s, _ := readString(pid, a[1], 256)
		return fmt.Sprintf("%q", s)
	}
	return ""
}

func flagsString(v uint64, names []flagName) string {
	var out []string
	for _, f := range names {
		if v&f.bit != 0 {
			out = append(out, f.name)
			v &^= f.bit
		}
	}
	if v != 0 {
		out = append(out, fmt.Sprintf("0x%x", v))
	}
	return strings.Join(out, "|")
}

// readString reads a NUL-terminated string of at most max bytes from the process's memory.
func readString(pid int, addr uint64, max int) (string, bool) {
	if addr == 0 {
		return "", false
	}
	buf := make([]byte, max)
	// Read up to the end of the page first: the next one may be unmapped.
	first := min(max, 4096-int(addr%4096))
	n, err := unix.ProcessVMReadv(pid, []unix.Iovec{{Base: &buf[0], Len: uint64(first)}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: first}}, 0)
	if err != nil || n <= 0 {
		return "", false
	}
	if i := strings.IndexByte(string(buf[:n]), 0); i >= 0 {
		return string(buf[:i]), true
	}
	if first < max {
		m, err := unix.ProcessVMReadv(pid, []unix.Iovec{{Base: &buf[first], Len: uint64(max - first)}},
			[]unix.RemoteIovec{{Base: uintptr(addr) + uintptr(first), Len: max - first}}, 0)
		if err == nil && m > 0 {
			n = first + m
		}
	}
	s := string(buf[:n])
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i], true
	}
	return s, false
}
