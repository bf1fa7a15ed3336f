//go:build cgo

package vspawn

// #include <stdlib.h>
// #include "vspawn.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// stackSize is the child's stack: a few frames and the fd table's copy.
const stackSize = 64 << 10

// Start starts cmd (see supported; ErrUnsupported otherwise) and sets cmd.Process. Its files are
// /dev/null as stdin, stdout and stderr, then cmd.ExtraFiles. Its limits are the caller's: unlike
// os/exec, Start gives no child back the limit of open files the process started with (sbx sets its
// own again, which tells os/exec the same). The caller's thread is the child's parent
// (for its parent-death signal) and waits for the child's exec; the caller locks it when that matters.
func Start(cmd *exec.Cmd) error {
	if !supported(cmd) {
		return ErrUnsupported
	}
	sys := cmd.SysProcAttr
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()

	var cs []unsafe.Pointer // C memory, freed on return: the child has executed by then
	defer func() {
		for _, p := range cs {
			C.free(p)
		}
	}()
	cstr := func(s string) *C.char {
		p := C.CString(s)
		cs = append(cs, unsafe.Pointer(p))
		return p
	}
	carray := func(list []string) **C.char {
		p := C.malloc(C.size_t(len(list)+1) * C.size_t(unsafe.Sizeof((*C.char)(nil))))
		cs = append(cs, p)
		a := unsafe.Slice((**C.char)(p), len(list)+1)
		for i, s := range list {
			a[i] = cstr(s)
		}
		a[len(list)] = nil
		return (**C.char)(p)
	}
	files := append([]*os.File{null, null, null}, cmd.ExtraFiles...)
	fdsp := C.malloc(C.size_t(len(files)) * C.size_t(unsafe.Sizeof(C.int(0))))
	cs = append(cs, fdsp)
	fds := unsafe.Slice((*C.int)(fdsp), len(files))
	for i, f := range files {
		fds[i] = -1
		if f != nil {
			fds[i] = C.int(f.Fd())
		}
	}
	sp := (*C.struct_sbx_vspawn)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_sbx_vspawn{}))))
	cs = append(cs, unsafe.Pointer(sp))
	stack := C.malloc(stackSize)
	cs = append(cs, stack)

	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	sp.path, sp.argv, sp.envp = cstr(cmd.Path), carray(cmd.Args), carray(env)
	if cmd.Dir != "" {
		sp.dir = cstr(cmd.Dir)
	}
	sp.fds, sp.nfds = (*C.int)(fdsp), C.int(len(files))
	sp.flags = C.ulong(sys.Cloneflags)
	if sys.Setsid {
		sp.setsid = 1
	}
	sp.pdeathsig = C.int(sys.Pdeathsig)
	if sys.Ptrace {
		sp.ptrace = 1
	}
	if c := sys.Credential; c != nil {
		sp.set_creds, sp.uid, sp.gid = 1, C.uint(c.Uid), C.uint(c.Gid)
		// As Go's start: groups are set unless setgroups is denied in the new namespace.
		if !(sys.GidMappings != nil && !sys.GidMappingsEnableSetgroups) {
			sp.drop_groups = 1
		}
	}

	// Pipes: the child's errno (close-on-exec, so EOF means it executed) and, with id maps, the child's
	// "I run" to the mapper and the mapper's "maps written" to the child.
	ready, sync, errp := [2]int{-1, -1}, [2]int{-1, -1}, [2]int{-1, -1}
	closeAll := func(fds ...*int) {
		for _, fd := range fds {
			if *fd >= 0 {
				unix.Close(*fd)
				*fd = -1
			}
		}
	}
	defer closeAll(&ready[0], &ready[1], &sync[0], &sync[1], &errp[0], &errp[1])
	pipes := []*[2]int{&errp}
	maps := sys.UidMappings != nil || sys.GidMappings != nil
	if maps {
		pipes = append(pipes, &ready, &sync)
	}
	for _, p := range pipes {
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return fmt.Errorf("vspawn: %w", err)
		}
	}
	sp.err_w = C.int(errp[1])
	sp.ready_r, sp.ready_w, sp.sync_r, sp.sync_w = C.int(ready[0]), C.int(ready[1]), C.int(sync[0]), C.int(sync[1])
	mapped := make(chan error, 1)
	if maps {
		readyR, syncW := ready[0], sync[1]
		sync[1] = -1 // the mapper's to close
		go func() {
			err := writeMaps(sp, readyR, syncW, sys)
			unix.Close(syncW) // after an error, the child's read sees EOF and it gives up
			mapped <- err
		}()
	} else {
		mapped <- nil
	}

	syscall.ForkLock.Lock()
	pid := C.sbx_vspawn(sp, stack, stackSize)
	syscall.ForkLock.Unlock()
	// The child has executed or ended: its copies are closed. Ours of its ends go now, so that the
	// mapper sees the end of a child that never said it runs.
	closeAll(&ready[1], &sync[0], &errp[1])
	if pid < 0 {
		<-mapped // its read of ready saw EOF
		return fmt.Errorf("vspawn: clone: %w", syscall.Errno(-pid))
	}
	mapErr := <-mapped
	var code [4]byte
	n, rerr := readFull(errp[0], code[:])
	if n == 0 && rerr == nil && mapErr == nil {
		p, err := os.FindProcess(int(pid))
		if err != nil {
			return err
		}
		cmd.Process = p
		return nil
	}
	var wstatus unix.WaitStatus
	unix.Wait4(int(pid), &wstatus, 0, nil)
	switch {
	case mapErr != nil:
		return fmt.Errorf("vspawn: writing the id maps: %w", mapErr)
	case n == 4:
		return &os.PathError{Op: "vspawn", Path: cmd.Path, Err: syscall.Errno(*(*int32)(unsafe.Pointer(&code[0])))}
	default:
		return fmt.Errorf("vspawn: reading the child's status: %d bytes, %v", n, rerr)
	}
}

// writeMaps waits until the child runs and writes its uid and gid maps, then lets it go on with a byte on
// syncW. On an error it writes nothing: its caller's close of syncW then makes the child fail (EPERM),
// and Start reports this error.
func writeMaps(sp *C.struct_sbx_vspawn, readyR, syncW int, sys *syscall.SysProcAttr) error {
	var b [1]byte
	n, err := unix.Read(readyR, b[:])
	if n != 1 {
		if err == nil {
			err = errors.New("the child ended before it ran")
		}
		return err
	}
	pid := strconv.Itoa(int(sp.tid))
	if err := writeMap("/proc/"+pid+"/uid_map", sys.UidMappings); err != nil {
		return err
	}
	if sys.GidMappings != nil {
		allow := "deny"
		if sys.GidMappingsEnableSetgroups {
			allow = "allow"
		}
		if err := os.WriteFile("/proc/"+pid+"/setgroups", []byte(allow), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := writeMap("/proc/"+pid+"/gid_map", sys.GidMappings); err != nil {
			return err
		}
	}
	_, err = unix.Write(syncW, b[:])
	return err
}

func writeMap(path string, m []syscall.SysProcIDMap) error {
	if m == nil {
		return nil
	}
	var data []byte
	for _, e := range m {
		data = fmt.Appendf(data, "%d %d %d\n", e.ContainerID, e.HostID, e.Size)
	}
	return os.WriteFile(path, data, 0)
}

// readFull reads up to len(b) bytes from fd until EOF.
func readFull(fd int, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Read(fd, b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}
