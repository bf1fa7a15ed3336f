package policy

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExtendsMerge proves the merge rules: scalars override when set, lists append without duplicates,
// shares replace by sandbox path, allow takes names out of the parent's deny, env.set merges by key,
// and a relative extends path is taken from the extending file's directory.
func TestExtendsMerge(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "base/parent.yaml", `version: 1
description: parent
extends: contract
filesystem:
  write: [/data]
  share: [{host: /srv/a, path: /a, mode: ro}]
syscalls:
  deny: [chroot]
network:
  allow: [pypi.org:443]
limits:
  memory: 512MiB
  pids: 100
env:
  set: {A: "1", B: "2"}
`)
	child := writeFile(t, dir, "child.yaml", `version: 1
extends: base/parent.yaml
filesystem:
  write: [/data, /out]
  share: [{host: /srv/b, path: /a, mode: rw}]
syscalls:
  allow: [chroot, ptrace]
network:
  allow: [registry.npmjs.org:443]
limits:
  memory: 1GiB
env:
  set: {B: "3"}
expect:
  left_running: allow
  listeners: ["tcp:8765"]
`)
	p, err := Load(child)
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		Name, Desc, Extends string
		Write               []string
		Share               []ShareConfig
		Deny, Allow         []string
		NetAllow            []string
		Memory              Size
		Pids                int64
		Env                 map[string]string
		Mode                NetworkMode
	}
	var netAllow []string
	for _, r := range p.Network.Allow {
		netAllow = append(netAllow, r.String())
	}
	got := view{p.Name, p.Description, p.Extends, p.Filesystem.Write, p.Filesystem.Share, p.Syscalls.Deny, p.Syscalls.Allow,
		netAllow, *p.Limits.Memory, *p.Limits.Pids, p.Env.Set, p.Network.Mode}
	want := view{
		Name: "child", Write: []string{"/tmp", "/var/tmp", "/data", "/out"},
		Share: []ShareConfig{{Host: "/srv/b", Path: "/a", Mode: ShareRW}},
		Allow: []string{"chroot", "ptrace"}, NetAllow: []string{"pypi.org:443", "registry.npmjs.org:443"},
		Memory: 1 << 30, Pids: 100, Env: map[string]string{"A": "1", "B": "3"}, Mode: ModeContract,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged profile (-want +got):\n%s", diff)
	}
}

func TestOverridesAndEnv(t *testing.T) {
	p, err := Load("default")
	if err != nil {
		t.Fatal(err)
	}
	caller := []string{"PATH=/usr/bin", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "OPENAI_API_KEY=sk-secret",
		"AWS_SECRET_ACCESS_KEY=x", "HOME=/root", "GOFLAGS=-mod=mod", "MYTOKEN=t"}
	plan, err := Compile(p, CompileContext{Cwd: "/work/proj", CallerEnv: caller, Overrides: Overrides{
		Allow: []string{"pypi.org:443", "udp:192.0.2.53:53"}, RW: []string{"out"}, RO: []string{"/srv/data"},
		Env: []string{"GOFLAGS", "FOO=bar"}, Timeout: 30 * time.Second, Memory: "256M", Pids: 32,
	}})
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := []string{"FOO=bar", "GOFLAGS=-mod=mod", "HOME=/tmp", "LANG=C.UTF-8", "LC_ALL=C", "PATH=/usr/bin", "SHELL=/bin/sh", "TERM=xterm"}
	if diff := cmp.Diff(wantEnv, plan.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if plan.Network.Mode != NetContract || len(plan.Network.Allow) != 2 || !slices.Contains(plan.Network.DNS.Allow, "pypi.org") {
		t.Errorf("network %+v", plan.Network)
	}
	if !slices.Contains(plan.Filesystem.Write, "/work/proj/out") || !slices.Contains(plan.Filesystem.Shares, Share{Host: "/srv/data", Sandbox: "/srv/data"}) {
		t.Errorf("filesystem %+v", plan.Filesystem)
	}
	if plan.Timeout != 30*time.Second || plan.Limits.MemoryBytes != 256<<20 || plan.Limits.Pids != 32 {
		t.Errorf("limits %+v timeout %v", plan.Limits, plan.Timeout)
	}
	if !plan.Filesystem.WriteCwd || plan.Expect.LeftRunning || !plan.Expect.DeniedIsViolation {
		t.Errorf("defaults lost: %+v %+v", plan.Filesystem, plan.Expect)
	}

	bad := []struct {
		name string
		o    Overrides
		want string
	}{
		{"bad allow", Overrides{Allow: []string{"example.com"}}, `--allow "example.com": destination "example.com" has no port`},
		{"bad memory", Overrides{Memory: "lots"}, `--memory "lots"`},
		{"bad env name hides value", Overrides{Env: []string{"1X=supersecret"}}, `-e "1X" is not a variable name`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(p, CompileContext{Cwd: "/w", Overrides: tt.o})
			if err == nil || err.Error() != tt.want && !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "supersecret") {
				t.Error("error echoes an env value")
			}
		})
	}
}

// TestExtendsMergeZero: a field the extending profile sets to its zero value (false, 0, none) replaces
// the parent's: a profile extending default could not lift its pids or memory limit (0 = none), make the
// working directory read-only (write_cwd: false) or turn recording off; the parent's value stayed.
func TestExtendsMergeZero(t *testing.T) {
	dir := t.TempDir()
	child := writeFile(t, dir, "child.yaml", `version: 1
extends: default
filesystem:
  write_cwd: false
  record_writes: false
syscalls:
  record: false
limits:
  memory: 0
  pids: 0
  cpu: 0
  timeout: none
`)
	p, err := Load(child)
	if err != nil {
		t.Fatal(err)
	}
	got := []any{*p.Filesystem.WriteCwd, *p.Filesystem.RecordWrites, *p.Syscalls.Record, *p.Limits.Memory,
		*p.Limits.Pids, *p.Limits.CPU, *p.Limits.Timeout}
	want := []any{false, false, false, Size(0), int64(0), float64(0), Duration(0)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged profile's zero fields (-want +got):\n%s", diff)
	}
}

// TestLoadNotRegular: a profile path, or an extends, that names a FIFO or a device is refused at once
// (ErrInvalid), never opened in a way that blocks: a FIFO planted in place of a project's profile would
// otherwise hold sbx in open(2) for good.
func TestLoadNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	extends := writeFile(t, dir, "extends.yaml", "version: 1\nextends: ./fifo.yaml\n")
	for _, path := range []string{fifo, extends, "/dev/zero"} {
		done := make(chan error, 1)
		go func() { _, err := Load(path); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("Load(%s) = %v, want ErrInvalid: not a regular file", path, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Load(%s) blocks", path) // the goroutine stays in open(2); the test binary ends
		}
	}
}

// TestLoadIn: a relative profile file and the relative file it extends are taken in the directory
// given, not the process's; the profile's name and its errors give the path as it was given.
func TestLoadIn(t *testing.T) {
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "p"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(base, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("p/parent.yaml", "version: 1\nextends: strict\nlimits:\n  pids: 77\n")
	write("p/child.yaml", "version: 1\nextends: parent.yaml\n")
	p, err := LoadIn(base, "p/child.yaml")
	if err != nil {
		t.Fatalf("LoadIn: %v", err)
	}
	if p.Limits.Pids == nil || *p.Limits.Pids != 77 || p.File() != "p/child.yaml" {
		t.Errorf("pids %v, file %q: want 77 from the parent, p/child.yaml", p.Limits.Pids, p.File())
	}
	want := []string{filepath.Join(base, "p/parent.yaml"), filepath.Join(base, "p/child.yaml")}
	if got := p.Files(); !slices.Equal(got, want) {
		t.Errorf("Files() = %q, want %q", got, want)
	}
	// The process's directory is not where the file is looked for.
	if _, err := Load("p/child.yaml"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load in the process's directory: %v, want not found", err)
	}
	if _, err := LoadIn(base, "p/none.yaml"); err == nil || !strings.Contains(err.Error(), "p/none.yaml") {
		t.Errorf("a missing file: %v, want an error naming p/none.yaml", err)
	}
}
