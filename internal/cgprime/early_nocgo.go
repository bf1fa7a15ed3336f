//go:build !cgo

package cgprime

// startedEarly: without cgo there is no constructor; the package init writes.
func startedEarly() bool { return false }

func earlyPath() string { return "" }

// ServiceSeen: without cgo a cold run's early work is started whether or not sbx exec hands its run
// to a service.
func ServiceSeen() bool { return false }

func climbsC(path string) bool { return climbs(path) }

// PrivateMounts: without cgo there is no constructor, and no mount namespace of sbx's own.
func PrivateMounts() bool { return false }

// CallerTimerSlack: without cgo sbx keeps its caller's timer slack, and so does the command.
func CallerTimerSlack() uint64 { return 0 }

// ClosedStdio: without cgo Go's runtime opens /dev/null on a closed stdio before sbx can tell, and the
// command gets /dev/null there.
func ClosedStdio() [3]bool { return [3]bool{} }

// CallerNoFile: without cgo there is no constructor to read the caller's soft limit of open files
// before Go's runtime raised it.
func CallerNoFile() (soft uint64, ok bool) { return 0, false }

// fastExitSetup: without cgo there is no fast client.
func fastExitSetup() int { return 0 }

const cgoBuilt = false
