package policy

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/opencontainers/runtime-spec/specs-go"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestGoldenErrors proves that each bad profile in testdata/errors fails Load with the exact one-line
// error (file:line:col: msg) and hint stored next to it in NAME.golden.
func TestGoldenErrors(t *testing.T) {
	files, _ := filepath.Glob("testdata/errors/*.yaml")
	if len(files) == 0 {
		t.Fatal("no test profiles")
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			_, err := Load(file)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			got := err.Error() + "\nhint: " + Hint(err) + "\n"
			if strings.Contains(got, "secret-value") {
				t.Errorf("error echoes an env value: %s", got)
			}
			golden := strings.TrimSuffix(file, ".yaml") + ".golden"
			if *update {
				os.WriteFile(golden, []byte(got), 0o644)
			}
			want, _ := os.ReadFile(golden)
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMisspelledTopLevelKey is the acceptance test: the error names the key and its line.
func TestMisspelledTopLevelKey(t *testing.T) {
	_, err := Parse("myprofile.yaml", []byte("version: 1\nname: x\nnetwrok:\n  mode: none\n"))
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *Error", err)
	}
	if pe.Error() != `myprofile.yaml:3:1: unknown field "netwrok"` || pe.Hint != `did you mean "network"?` {
		t.Errorf("got %q hint %q", pe.Error(), pe.Hint)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Error("unknown field does not match ErrInvalid")
	}
}

func TestErrorKinds(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("a.yaml", "version: 1\nextends: b.yaml\n")
	write("b.yaml", "version: 1\nextends: ./a.yaml\n")
	write("self.yaml", "version: 1\nextends: self.yaml\n")
	tests := []struct {
		name    string
		load    string
		want    error
		wantMsg string
	}{
		{"missing builtin", "nosuch", ErrNotFound, `no built-in profile "nosuch"`},
		{"missing file", filepath.Join(dir, "nosuch.yaml"), ErrNotFound, "no such file"},
		{"cycle of two", filepath.Join(dir, "a.yaml"), ErrCycle, "extends cycle: " + filepath.Join(dir, "a.yaml") + " → " + filepath.Join(dir, "b.yaml") + " → " + filepath.Join(dir, "a.yaml")},
		{"self cycle", filepath.Join(dir, "self.yaml"), ErrCycle, "extends cycle"},
		{"syntax", "testdata/errors/yaml-syntax.yaml", ErrSyntax, "did not find expected"},
		{"binary", "testdata/errors/binary.yaml", ErrSyntax, "not a text file"},
		{"directory", dir + "/", nil, "cannot read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.load)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want Is %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %q, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
	if !errors.Is(ErrCycle, ErrInvalid) || !errors.Is(ErrSyntax, ErrInvalid) {
		t.Error("ErrCycle and ErrSyntax must match ErrInvalid")
	}
}

func TestBuiltinsLoadCompileAndRoundTrip(t *testing.T) {
	names := Builtins()
	for _, want := range []string{"contract", "default", "node-build", "python-build", "strict"} {
		if !slices.Contains(names, want) {
			t.Errorf("built-in %q missing from %v", want, names)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			p, err := Load(name)
			if err != nil {
				t.Fatal(err)
			}
			if p.Name != name || p.Description == "" {
				t.Errorf("name %q description %q", p.Name, p.Description)
			}
			text, err := p.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse("show", text)
			if err != nil {
				t.Fatalf("marshalled profile does not parse: %v\n%s", err, text)
			}
			if err := back.Validate(); err != nil {
				t.Fatal(err)
			}
			again, _ := back.Marshal()
			if diff := cmp.Diff(string(text), string(again)); diff != "" {
				t.Errorf("round trip changed the profile:\n%s", diff)
			}
			plan, err := Compile(p, CompileContext{Cwd: "/work", CallerEnv: []string{"PATH=/bin"}})
			if err != nil {
				t.Fatal(err)
			}
			if plan.Profile != name || len(plan.Hash) != 64 || plan.Seccomp == nil {
				t.Errorf("plan profile %q hash %q seccomp %v", plan.Profile, plan.Hash, plan.Seccomp != nil)
			}
			checkSeccompPlan(t, plan.Seccomp)
		})
	}
}

// checkSeccompPlan proves the compiled filter denies the built-in list with EPERM, keeps Landlock
// allowed, and never names a syscall under two actions.
func checkSeccompPlan(t *testing.T, sc *specs.LinuxSeccomp) {
	t.Helper()
	actions := map[string][]specs.LinuxSeccompAction{}
	for _, r := range sc.Syscalls {
		for _, n := range r.Names {
			if !slices.Contains(actions[n], r.Action) {
				actions[n] = append(actions[n], r.Action)
			}
		}
		if r.Action == specs.ActErrno && slices.Contains(r.Names, "unshare") && *r.ErrnoRet != 1 {
			t.Errorf("deny errno = %d, want EPERM", *r.ErrnoRet)
		}
	}
	for n, a := range actions {
		if len(a) > 1 {
			t.Errorf("syscall %s has actions %v", n, a)
		}
	}
	for _, n := range BuiltinDeny {
		if got := actions[n]; len(got) > 0 && got[0] != specs.ActErrno {
			t.Errorf("%s: action %v, want errno", n, got)
		}
	}
	for _, n := range []string{"unshare", "mount", "ptrace", "bpf", "keyctl"} {
		if !slices.Equal(actions[n], []specs.LinuxSeccompAction{specs.ActErrno}) {
			t.Errorf("%s: actions %v, want errno", n, actions[n])
		}
	}
	for _, n := range landlockSyscalls {
		if !slices.Equal(actions[n], []specs.LinuxSeccompAction{specs.ActAllow}) {
			t.Errorf("%s: actions %v, want allow", n, actions[n])
		}
	}
	if !slices.Equal(actions["clone3"], []specs.LinuxSeccompAction{specs.ActErrno}) {
		t.Errorf("clone3 should stay ENOSYS from docker default, got %v", actions["clone3"])
	}
	if !slices.Equal(actions["read"], []specs.LinuxSeccompAction{specs.ActAllow}) {
		t.Errorf("read: %v", actions["read"])
	}
}

func TestSeccompAllowAndBase(t *testing.T) {
	tests := []struct {
		name      string
		sc        SyscallsConfig
		wantNil   bool
		allowed   []string
		denied    []string
		wantErrno uint
	}{
		{name: "allow takes ptrace out of the deny list", sc: SyscallsConfig{Allow: []string{"ptrace"}}, allowed: []string{"ptrace"}, denied: []string{"mount"}, wantErrno: 1},
		{name: "extra deny with EACCES", sc: SyscallsConfig{Deny: []string{"chmod"}, Errno: "EACCES"}, denied: []string{"chmod", "mount"}, wantErrno: 13},
		{name: "base none keeps the built-in deny", sc: SyscallsConfig{Base: BaseNone}, denied: []string{"unshare"}, wantErrno: 1},
		{name: "base none allowing everything is no filter", sc: SyscallsConfig{Base: BaseNone, Allow: BuiltinDeny}, wantNil: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := compileSeccomp(tt.sc)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantNil != (sc == nil) {
				t.Fatalf("filter nil = %v, want %v", sc == nil, tt.wantNil)
			}
			if sc == nil {
				return
			}
			for _, r := range sc.Syscalls {
				for _, n := range tt.allowed {
					if slices.Contains(r.Names, n) && r.Action != specs.ActAllow {
						t.Errorf("%s has action %s", n, r.Action)
					}
				}
				for _, n := range tt.denied {
					if slices.Contains(r.Names, n) && (r.Action != specs.ActErrno || *r.ErrnoRet != tt.wantErrno) {
						t.Errorf("%s has action %s", n, r.Action)
					}
				}
			}
		})
	}
}
