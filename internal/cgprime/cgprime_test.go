package cgprime

import (
	"os"
	"strconv"
	"testing"
)

func TestStartsNow(t *testing.T) {
	for _, c := range []struct {
		args []string
		euid int
		want bool
	}{
		{[]string{"sbx", "exec", "--", "true"}, 0, true},
		{[]string{"sbx", "probe"}, 0, true},
		{[]string{"sbx", "exec", "--", "true"}, 1000, false}, // no cgroup without root
		{[]string{"sbx", "init"}, 0, false},                  // libcontainer's init, in the sandbox's namespaces
		{[]string{"sbx", "mcp"}, 0, false},
		{[]string{"sbx", "version"}, 0, false},
		{[]string{"sbx"}, 0, false},
	} {
		if got := startsNow(c.args, c.euid); got != c.want {
			t.Errorf("startsNow(%q, %d) = %v, want %v", c.args, c.euid, got, c.want)
		}
	}
}

// TestPrimeMovesNothing: the write names the cgroup the process is in already, in every hierarchy.
func TestPrimeMovesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("writes cgroup.procs: needs root")
	}
	p := Procs()
	if p == "" {
		t.Skip("no unified or pids hierarchy here")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !listed(b, []byte(strconv.Itoa(os.Getpid()))) {
		t.Fatalf("%s does not list this process", p)
	}
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	Prime()
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Errorf("cgroups changed:\n%s\nto\n%s", before, after)
	}
}

func TestListed(t *testing.T) {
	if listed([]byte("1\n12\n123\n"), []byte("2")) {
		t.Error("2 found in 1 12 123")
	}
	if !listed([]byte("1\n12\n123\n"), []byte("12")) {
		t.Error("12 not found")
	}
}
