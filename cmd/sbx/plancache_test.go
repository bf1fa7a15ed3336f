package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sbx-dev/sbx/policy"
)

// TestPlanCache: a built-in profile's plan is compiled once per profile, directory, environment and
// flags, and any of them changed gets a plan of its own; a profile file is compiled for every run, so
// that a change to it shows in the next one.
func TestPlanCache(t *testing.T) {
	var c planCache
	env := []string{"PATH=/usr/bin:/bin", "HOME=/root"}
	get := func(profile, cwd string, env []string, ov policy.Overrides) *policy.Plan {
		t.Helper()
		p, err := c.compile(cwd, profile, cwd, env, ov)
		if err != nil {
			t.Fatalf("compile %s: %v", profile, err)
		}
		return p
	}
	first := get("default", "/tmp", env, policy.Overrides{})
	if again := get("default", "/tmp", env, policy.Overrides{}); again != first {
		t.Error("the same run compiled again")
	}
	want, err := compilePlan("/tmp", "default", "/tmp", env, policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if first.Hash() != want.Hash() || first.Profile != want.Profile {
		t.Errorf("cached plan %s, compiled %s", first.Hash(), want.Hash())
	}
	for name, p := range map[string]*policy.Plan{
		"profile":  get("strict", "/tmp", env, policy.Overrides{}),
		"cwd":      get("default", "/", env, policy.Overrides{}),
		"env":      get("default", "/tmp", []string{"PATH=/bin", "HOME=/root"}, policy.Overrides{}),
		"override": get("default", "/tmp", env, policy.Overrides{Pids: 7}),
	} {
		if p == first {
			t.Errorf("another %s, the same plan", name)
		}
	}
	if p := get("default", "/tmp", env, policy.Overrides{Pids: 7}); p.Limits.Pids != 7 {
		t.Errorf("--pids 7: plan has %d", p.Limits.Pids)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	write := func(pids string) {
		if err := os.WriteFile(file, []byte("version: 1\nextends: default\nlimits:\n  pids: "+pids+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("11")
	if p := get("./p.yaml", dir, env, policy.Overrides{}); p.Limits.Pids != 11 {
		t.Fatalf("profile file: pids %d, want 11", p.Limits.Pids)
	}
	write("12")
	if p := get("./p.yaml", dir, env, policy.Overrides{}); p.Limits.Pids != 12 {
		t.Errorf("profile file changed: pids %d, want 12 (a file's plan was kept)", p.Limits.Pids)
	}
}
