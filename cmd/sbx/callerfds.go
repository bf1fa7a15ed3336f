package main

import (
	"fmt"
	goio "io"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"
)

// callerFDArg matches an argument (or an option's value after '=') that names a descriptor by path,
// as a shell's process substitution, <(cmd), passes one: /dev/fd/N or /proc/self/fd/N.
var callerFDArg = regexp.MustCompile(`(?:^|=)/(?:dev|proc/self)/fd/([0-9]+)$`)

// warnCallerFDs warns about each argument of the command that names a descriptor above 2 which sbx's
// caller let it inherit. Only stdin, stdout and stderr pass into the sandbox (a descriptor the caller
// leaks, a directory or a socket, is a way out), so where the host hands the command the caller's pipe,
// the sandbox has no such file, and the command's error would not say why. sbx's own descriptors are
// close-on-exec; inherited ones are not.
func warnCallerFDs(w goio.Writer, args []string) {
	for _, a := range args {
		m := callerFDArg.FindStringSubmatch(a)
		if m == nil {
			continue
		}
		fd, err := strconv.Atoi(m[1])
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		fmt.Fprintf(w, "sbx: warning: %s is descriptor %d of sbx's caller, which does not pass into the sandbox (only stdin, stdout and stderr do)\n", a, fd)
		fmt.Fprintf(w, "sbx: hint: pipe it to the command's stdin, or write it to a file in the working directory\n")
	}
}
