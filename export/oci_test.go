package export

import (
	"encoding/json"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// TestOCIVersion: a bundle says the lowest runtime-spec version that has every field it uses.
func TestOCIVersion(t *testing.T) {
	errno := uint(1)
	tests := []struct {
		name string
		spec specs.Spec
		want string
	}{
		{"nothing new", specs.Spec{Linux: &specs.Linux{Seccomp: &specs.LinuxSeccomp{DefaultAction: specs.ActErrno}}}, "1.0.2"},
		{"defaultErrnoRet", specs.Spec{Linux: &specs.Linux{Seccomp: &specs.LinuxSeccomp{DefaultErrnoRet: &errno}}}, "1.1.0"},
		{"kill process", specs.Spec{Linux: &specs.Linux{Seccomp: &specs.LinuxSeccomp{
			Syscalls: []specs.LinuxSyscall{{Names: []string{"ptrace"}, Action: specs.ActKillProcess}}}}}, "1.1.0"},
		{"time namespace", specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.TimeNamespace}}}}, "1.1.0"},
		{"idmap mount", specs.Spec{Mounts: []specs.Mount{{Destination: "/w", Options: []string{"bind", "idmap"}}}}, "1.2.0"},
		{"netDevices", specs.Spec{Linux: &specs.Linux{NetDevices: map[string]specs.LinuxNetDevice{"eth0": {}}}}, "1.3.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ociVersion(&tt.spec); got != tt.want {
				t.Errorf("ociVersion = %s, want %s", got, tt.want)
			}
		})
	}
	if ociFeatures[0].version != specs.Version {
		t.Errorf("the newest row of ociFeatures is %s, runtime-spec is %s: add the fields the new version brought", ociFeatures[0].version, specs.Version)
	}
}

// TestOCI: a bundle of the contract profile drops the seccomp flags and runc's cgroup path, says the
// lowest ociVersion, and its fidelity names what only sbx's runtime does.
func TestOCI(t *testing.T) {
	plan := compile(t, "contract")
	seccomp := *plan.Seccomp
	seccomp.Flags = []specs.LinuxSeccompFlag{specs.LinuxSeccompFlagLog}
	spec := &specs.Spec{Process: &specs.Process{Terminal: true, Args: []string{"true"}}, Annotations: map[string]string{},
		Linux: &specs.Linux{CgroupsPath: "sbx/run", Seccomp: &seccomp}}
	plan.Seccomp = &seccomp
	data, fid, err := OCI(plan, spec, OCIOptions{Command: []string{"true"}, EnvPass: []string{"TOKEN"}})
	if err != nil {
		t.Fatal(err)
	}
	var got specs.Spec
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Linux.CgroupsPath != "" || got.Process.Terminal || len(got.Linux.Seccomp.Flags) != 0 ||
		got.Annotations["org.sbx.command"] != "true" || got.Version != ociVersion(&got) {
		t.Errorf("config: %s", data)
	}
	for feature, want := range map[string]string{"network contract": Partial, "seccomp flags": Partial, "landlock": NotExpressible,
		"hidden paths": NotExpressible, "overlay": NotExpressible, "env.pass": Partial, "observation": NotExpressible} {
		if s := fid.Status(feature); s != want {
			t.Errorf("%s: status %q, want %q", feature, s, want)
		}
	}
	for _, r := range fid {
		if r.Status == Translated || r.Detail == "" {
			t.Errorf("row %+v: only what is not carried, each with its detail", r)
		}
	}
	if _, _, err := OCI(plan, &specs.Spec{}, OCIOptions{}); err == nil {
		t.Error("a runtime config without process and linux sections makes a bundle")
	}
}
