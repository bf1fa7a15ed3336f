package mcpserver

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/policy"
)

// TestPlanCache: a call compiles its plan once per profile content, working directory and overrides:
// the same call finds the same plan, and a changed profile file or another env gets a new one.
func TestPlanCache(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	write := func(pids int) {
		t.Helper()
		y := "version: 1\nname: p\nextends: default\nlimits:\n  pids: " + strconv.Itoa(pids) + "\n"
		if err := os.WriteFile(file, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(100)
	s, err := New(Config{Profiles: []string{file}, Workspaces: []string{dir}, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := s.plan(RunInput{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.plan(RunInput{}, dir); again != first {
		t.Error("the same call compiled its plan again")
	}
	if other, _ := s.plan(RunInput{Env: map[string]string{"A": "1"}}, dir); other == first {
		t.Error("a call with another env got the plan of the first")
	}
	write(200)
	changed, err := s.plan(RunInput{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if changed == first || changed.Limits.Pids != 200 {
		t.Errorf("after the profile file changed: pids %d (the same plan: %v), want a new plan with 200", changed.Limits.Pids, changed == first)
	}
}

// TestBuiltinProfileOnce: a built-in profile is parsed once, and what each call does with it (narrowing
// its network, compiling a plan with overrides) leaves the shared copy as loaded.
func TestBuiltinProfileOnce(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Config{Profiles: []string{"default", "python-build"}, Workspaces: []string{dir}, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := s.profile("python-build")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.profile("python-build"); again != first {
		t.Error("the built-in profile was parsed again")
	}
	for _, in := range []RunInput{
		{Profile: "python-build", Env: map[string]string{"A": "1"}, TimeoutSec: 3},
		{Profile: "python-build", Network: &Network{Mode: "none"}},
		{Profile: "python-build", Network: &Network{Allow: []string{"pypi.org:443"}}},
	} {
		if _, err := s.plan(in, dir); err != nil {
			t.Fatal(err)
		}
	}
	fresh, err := policy.Load("python-build")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, fresh) {
		t.Errorf("the shared built-in profile changed:\n%+v\nwant\n%+v", first, fresh)
	}
}

// TestPlanHugeTimeout: a timeout_sec longer than a time.Duration holds is the longest one, capped by the
// server; the conversion made it negative, and the call was refused with "--timeout -2562047h47m16s is
// negative", a flag and a value the caller never gave.
func TestPlanHugeTimeout(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Config{Profiles: []string{"default"}, Workspaces: []string{dir}, Env: []string{"PATH=/usr/bin:/bin"},
		MaxTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, sec := range []float64{9.3e9, 1e300} {
		p, err := s.plan(RunInput{TimeoutSec: sec}, dir)
		if err != nil {
			t.Errorf("timeout_sec %v: %v", sec, err)
			continue
		}
		if p.Timeout != 10*time.Minute {
			t.Errorf("timeout_sec %v: timeout %v, want the server's cap 10m", sec, p.Timeout)
		}
	}
}
