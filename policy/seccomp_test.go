package policy

import (
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
