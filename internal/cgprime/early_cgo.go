//go:build cgo

package cgprime

// extern int sbx_cgprime_started;
// extern int sbx_private_mounts;
// extern int sbx_service_seen;
// extern unsigned long sbx_timer_slack;
// extern unsigned long long sbx_nofile_soft;
// extern int sbx_nofile_known;
// extern int sbx_closed_stdio;
// #include <stdlib.h>
// #include "fastclient.h"
// extern char sbx_cgprime_path[4352];
// extern int sbx_cgprime_climbs(const char *rel);
import "C"

import "unsafe"

// startedEarly says whether early.c's constructor started the write before the runtime did.
func startedEarly() bool { return C.sbx_cgprime_started != 0 }

// PrivateMounts says whether the process runs in a mount namespace of its own (see the package's doc).
func PrivateMounts() bool { return C.sbx_private_mounts != 0 }

// ServiceSeen says whether root's sbx exec found a socket of its sbx service as it started, and so
// started none of a cold run's early work (the cgroup write, the mount namespace, idmapns's child).
func ServiceSeen() bool { return C.sbx_service_seen != 0 }

// earlyPath is the file early.c's thread found, "" until it has.
func earlyPath() string { return C.GoString(&C.sbx_cgprime_path[0]) }

// ClosedStdio says which of fds 0, 1 and 2 were closed when sbx started (sbx exec -- cmd <&-): the
// constructor opened /dev/null on them, so that none of sbx's own files takes their numbers, and the
// command gets them closed, as it would on the host.
func ClosedStdio() [3]bool {
	m := C.sbx_closed_stdio
	return [3]bool{m&1 != 0, m&2 != 0, m&4 != 0}
}

// climbsC is early.c's test of a path, for the tests to hold it to climbs.
func climbsC(path string) bool {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	return C.sbx_cgprime_climbs(p) != 0
}

// CallerTimerSlack is the timer slack (ns) of the thread that started sbx, which the constructor
// replaced with a coarser one for every thread of sbx (see early.c); 0 when it did not.
func CallerTimerSlack() uint64 { return uint64(C.sbx_timer_slack) }

// CallerNoFile is the soft limit of open files sbx's caller started sbx exec, probe or mcp with, which
// Go's runtime raised for sbx's own process; ok is false when the constructor did not read it.
func CallerNoFile() (soft uint64, ok bool) {
	return uint64(C.sbx_nofile_soft), C.sbx_nofile_known != 0
}

// fastExitSetup is the status the fast client exits with when sbx failed (fastclient.h), for the tests
// to hold it to sbx's.
func fastExitSetup() int { return C.SBX_EXIT_SETUP }

const cgoBuilt = true
