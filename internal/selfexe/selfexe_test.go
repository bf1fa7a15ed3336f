package selfexe

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const childEnv = "SELFEXE_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// Seal re-executes this process once; in the copy it returns at once.
		Seal()
		path, err := Path()
		exe, _ := os.Readlink("/proc/self/exe")
		comm, _ := os.ReadFile("/proc/self/comm")
		fmt.Printf("%s\n%v\n%s\n%s", path, err, exe, comm)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSeal runs this test binary through Seal: it must run again from a sealed memfd, still know its
// own file (Path) and be named sbx, not after the memfd's fd.
func TestSeal(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) < 4 {
		t.Fatalf("child said %q", out)
	}
	if lines[0] != self || lines[1] != "<nil>" {
		t.Errorf("Path() in the sealed copy = %q, %s; want %q", lines[0], lines[1], self)
	}
	if !strings.HasPrefix(lines[2], "/memfd:") {
		t.Errorf("the copy runs %q, want a memfd", lines[2])
	}
	if lines[3] != "sbx" {
		t.Errorf("the copy is named %q, want sbx", lines[3])
	}
}

// TestPathUnsealed: outside a sealed copy the variable is ignored, whatever it says.
func TestPathUnsealed(t *testing.T) {
	t.Setenv(env, "/elsewhere/sbx")
	self, _ := os.Executable()
	if p, err := Path(); err != nil || p != self {
		t.Errorf("Path() = %q, %v; want %q", p, err, self)
	}
}

// TestBeside: a binary beside sbx counts only as an executable regular file.
func TestBeside(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "sbx")
	for name, mode := range map[string]os.FileMode{"exe": 0o755, "plain": 0o644} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"exe": true, "plain": false, "adir": false, "missing": false} {
		p, ok := Beside(self, name)
		if ok != want || p != filepath.Join(dir, name) {
			t.Errorf("Beside(%s, %s) = %s, %v; want %v", self, name, p, ok, want)
		}
	}
}
