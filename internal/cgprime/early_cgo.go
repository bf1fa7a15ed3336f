//go:build cgo

package cgprime

// extern int sbx_cgprime_started;
// extern char sbx_cgprime_path[4352];
import "C"

// startedEarly says whether early.c's constructor started the write before the runtime did.
func startedEarly() bool { return C.sbx_cgprime_started != 0 }

// earlyPath is the file early.c's thread found, "" until it has.
func earlyPath() string { return C.GoString(&C.sbx_cgprime_path[0]) }
