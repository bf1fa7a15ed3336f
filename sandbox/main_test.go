package sandbox

import (
	"os"
	"runtime"
	"testing"
)

func init() { runtime.LockOSThread() }

func TestMain(m *testing.M) {
	if Reexec() {
		return
	}
	os.Exit(m.Run())
}
