package sandbox

import (
	"os/exec"
	"testing"
	"time"
)

// TestEndOf: how a child of sbx ended is read from its zombie, before it is reaped: the report's note
// then says how the supervisor died.
func TestEndOf(t *testing.T) {
	for _, tc := range []struct {
		script, want string
	}{
		{"kill -KILL $$", "killed by signal 9 (killed)"},
		{"exit 3", "exited with status 3"},
	} {
		cmd := exec.Command("sh", "-c", tc.script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		got := endOf(cmd.Process.Pid, 5*time.Second)
		cmd.Wait()
		if got != tc.want {
			t.Errorf("endOf(sh -c %q) = %q, want %q", tc.script, got, tc.want)
		}
	}
	if got := endOf(0, 0); got != "" {
		t.Errorf("endOf(0) = %q, want nothing", got)
	}
}
