package policy

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestNetfilterSocketsDenied: the default filter allows netlink sockets except NETLINK_NETFILTER ones,
// which would reach nftables.
func TestNetfilterSocketsDenied(t *testing.T) {
	p, err := Load("default")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Compile(p, CompileContext{Cwd: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range plan.Seccomp.Syscalls {
		if len(r.Names) == 1 && r.Names[0] == "socket" && len(r.Args) > 0 && r.Args[0].Value == unix.AF_NETLINK {
			found = true
			want := []specs.LinuxSeccompArg{{Index: 0, Value: unix.AF_NETLINK, Op: specs.OpEqualTo},
				{Index: 2, Value: unix.NETLINK_NETFILTER, Op: specs.OpNotEqual}}
			if diff := cmp.Diff(want, r.Args); diff != "" {
				t.Errorf("netlink socket rule (-want +got):\n%s", diff)
			}
		}
	}
	if !found {
		t.Error("no rule for netlink sockets")
	}
}

// checkSeccompPlan proves the compiled filter denies the built-in list with EPERM, keeps Landlock
// allowed, and never names a syscall under two actions.
func checkSeccompPlan(t *testing.T, sc *specs.LinuxSeccomp) {
	t.Helper()
	actions := map[string][]specs.LinuxSeccompAction{}
	setid := map[string]int{}
	for _, r := range sc.Syscalls {
		if len(r.Args) > 0 { // split on arguments: each condition has its action
			if r.Action == specs.ActErrno && isSetIDSyscall(r.Names[0]) && *r.ErrnoRet == 1 {
				setid[r.Names[0]]++
			}
			continue
		}
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
	// A set-id bit is refused with EPERM in every built-in profile, by a rule per bit.
	for _, c := range SetIDSyscalls {
		if setid[c.Name] != 2 || len(actions[c.Name]) != 0 {
			t.Errorf("%s: %d EPERM rules on the mode and plain actions %v; want 2 and none", c.Name, setid[c.Name], actions[c.Name])
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
