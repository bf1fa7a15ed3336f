package policy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/profiles"
	"github.com/sbx-dev/sbx/report"
)

func TestParseDest(t *testing.T) {
	tests := []struct {
		in      string
		want    NetRule
		wantErr string
	}{
		{in: "pypi.org:443", want: NetRule{Host: "pypi.org", Proto: "tcp", Port: 443}},
		{in: "udp:dns.example:53", want: NetRule{Host: "dns.example", Proto: "udp", Port: 53}},
		{in: "*.example.com:443", want: NetRule{Host: "*.example.com", Proto: "tcp", Port: 443}},
		{in: "Example.COM.:*", want: NetRule{Host: "example.com", Proto: "tcp"}},
		{in: "203.0.113.7:443", want: NetRule{CIDR: "203.0.113.7/32", Proto: "tcp", Port: 443}},
		{in: "203.0.113.7", want: NetRule{CIDR: "203.0.113.7/32", Proto: "tcp"}},
		{in: "[2001:db8::1]:443", want: NetRule{CIDR: "2001:db8::1/128", Proto: "tcp", Port: 443}},
		{in: "2001:db8::1", want: NetRule{CIDR: "2001:db8::1/128", Proto: "tcp"}},
		{in: "10.0.0.0/8:5432", want: NetRule{CIDR: "10.0.0.0/8", Proto: "tcp", Port: 5432}},
		{in: "[2001:db8::/32]:443", want: NetRule{CIDR: "2001:db8::/32", Proto: "tcp", Port: 443}},
		{in: "host.example:8000-8100", want: NetRule{Host: "host.example", Proto: "tcp", Port: 8000, PortEnd: 8100}},
		{in: "example.com", wantErr: "has no port"},
		{in: "example.com:0", wantErr: "is not a port"},
		{in: "example.com:70000", wantErr: "is not a port"},
		{in: "example.com:9-3", wantErr: "runs backwards"},
		{in: "2001:db8::1:443x", wantErr: "ambiguous"},
		{in: "10.0.0.1/8:22", wantErr: "outside its mask"},
		{in: "bad_host!:80", wantErr: "not a host name"},
		{in: "", wantErr: "empty destination"},
		{in: "[::1", wantErr: "missing ]"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDest(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			back, err := ParseDest(got.String())
			if err != nil || back != got {
				t.Errorf("String() %q does not round trip: %+v %v", got.String(), back, err)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "64MiB", want: 64 << 20}, {in: "64Mi", want: 64 << 20}, {in: "64M", want: 64 << 20},
		{in: "64mb", want: 64 << 20}, {in: "1GiB", want: 1 << 30}, {in: "1G", want: 1 << 30},
		{in: "1.5GiB", want: 3 << 29}, {in: "4096", want: 4096}, {in: "10KiB", want: 10240}, {in: "0", want: 0},
		{in: "lots", bad: true}, {in: "MiB", bad: true}, {in: "1XB", bad: true}, {in: "99999999999T", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, bad %v", tt.in, got, err, tt.want, tt.bad)
		}
		if !tt.bad {
			if back, _ := ParseSize(FormatSize(got)); back != got {
				t.Errorf("FormatSize(%d) = %q does not round trip", got, FormatSize(got))
			}
		}
	}
}

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

func TestCompare(t *testing.T) {
	base := func() *report.Report { return report.New("t", []string{"sh"}) }
	py := report.Process{Pid: 12, Exe: "/usr/bin/python3.11", Argv: []string{"python3", "-m", "http.server", "8765"}}
	tcp := report.Socket{Proto: "tcp", Address: "0.0.0.0", Port: 8765, Pid: 13, Exe: "/usr/bin/python3"}
	tcp6 := report.Socket{Proto: "tcp6", Address: "::", Port: 9000, Pid: 13, Exe: "/usr/bin/python3"}
	tests := []struct {
		name  string
		exp   Expect
		setup func(r *report.Report)
		want  []report.Violation
	}{
		{name: "clean run passes", exp: Expect{DeniedIsViolation: true}, setup: func(r *report.Report) {}},
		{name: "left running and listening", exp: Expect{}, setup: func(r *report.Report) {
			r.Processes.LeftRunning = []report.Process{py}
			r.Sockets.Listening = []report.Socket{tcp}
		}, want: []report.Violation{
			{Rule: report.RuleLeftRunning, Message: "pid 12 (python3 -m http.server 8765) left running"},
			{Rule: report.RuleListening, Message: "tcp listener on 0.0.0.0:8765 owned by python3 (pid 13)"},
		}},
		{name: "allowed listener passes, other port does not", exp: Expect{LeftRunning: true, Listeners: []Listener{{Proto: "tcp", Port: 8765}}}, setup: func(r *report.Report) {
			r.Processes.LeftRunning = []report.Process{py}
			r.Sockets.Listening = []report.Socket{tcp, tcp6}
		}, want: []report.Violation{{Rule: report.RuleListening, Message: "tcp6 listener on [::]:9000 owned by python3 (pid 13)"}}},
		{name: "tcp:* covers tcp6, unix:* covers unix", exp: Expect{Listeners: []Listener{{Proto: "tcp"}, {Proto: "unix"}}}, setup: func(r *report.Report) {
			r.Sockets.Listening = []report.Socket{tcp, tcp6, {Proto: "unix", Address: "/tmp/s"}}
		}},
		{name: "udp listener needs udp", exp: Expect{Listeners: []Listener{{Proto: "tcp"}}}, setup: func(r *report.Report) {
			r.Sockets.Listening = []report.Socket{{Proto: "udp6", Address: "::1", Port: 5353}}
		}, want: []report.Violation{{Rule: report.RuleListening, Message: "udp6 listener on [::1]:5353 owned by an unknown process"}}},
		{name: "denied network and dns", exp: Expect{DeniedIsViolation: true, DNSRefusedIsViolation: true}, setup: func(r *report.Report) {
			r.Network.Denied = []report.Denied{{Proto: "tcp", Address: "169.254.169.254", Port: 80, Count: 3}}
			r.Network.DNS = []report.DNSQuery{{Name: "evil.example", Type: "A"}, {Name: "pypi.org", Type: "A", Allowed: true}, {Name: "evil.example", Type: "A"}}
		}, want: []report.Violation{
			{Rule: report.RuleDenied, Message: "tcp to 169.254.169.254:80 denied (3 attempts)"},
			{Rule: report.RuleDNS, Message: "DNS query for evil.example (A) refused"},
		}},
		{name: "a timed-out run never passes", exp: Expect{LeftRunning: true}, setup: func(r *report.Report) { r.TimedOut = true },
			want: []report.Violation{{Rule: report.RuleTimeout, Message: "the timeout fired before the command finished; sbx killed it and everything it started"}}},
		{name: "denied network ignored", exp: Expect{}, setup: func(r *report.Report) {
			r.Network.Denied = []report.Denied{{Proto: "tcp", Address: "10.0.0.1", Port: 80, Count: 1}}
		}},
		{name: "writes outside globs", exp: Expect{Writes: []string{"/tmp/**", "/work/out"}}, setup: func(r *report.Report) {
			r.Files.Created = []string{"/tmp/a/b/c", "/work/out/x", "/work/src/y"}
			r.Files.Deleted = []string{"/etc/hosts"}
		}, want: []report.Violation{
			{Rule: report.RuleFilesWrite, Message: "/work/src/y created outside expect.writes"},
			{Rule: report.RuleFilesWrite, Message: "/etc/hosts deleted outside expect.writes"},
		}},
		{name: "execs outside allow list", exp: Expect{Execs: []string{"/usr/bin/python3*", "sh"}}, setup: func(r *report.Report) {
			r.Processes.Execs = []report.Exec{{Pid: 2, Exe: "/bin/sh"}, {Pid: 3, Exe: "/usr/bin/python3.11"}, {Pid: 4, Exe: "/usr/bin/curl", Argv: []string{"curl", "-s", "x"}}}
		}, want: []report.Violation{{Rule: report.RuleExec, Message: "pid 4 executed /usr/bin/curl (curl -s x), not in expect.execs"}}},
		{name: "execs past the bound are not vouched for", exp: Expect{Execs: []string{"sh"}}, setup: func(r *report.Report) {
			r.Processes.Execs = []report.Exec{{Pid: 2, Exe: "/bin/sh"}}
			r.Processes.ExecsTotal, r.Processes.ExecsTruncated = 5000, true
		}, want: []report.Violation{{Rule: report.RuleExec, Message: "4999 execs past the first 1 were not checked against expect.execs"}}},
		{name: "an observation that failed never passes, whatever is allowed", exp: Expect{LeftRunning: true}, setup: func(r *report.Report) {
			r.MarkIncomplete("exec events", errors.New("read process events: EIO"))
			r.MarkIncomplete("exec events", errors.New("3 events lost"))
		}, want: []report.Violation{{Rule: report.RuleIncomplete, Message: "exec events could not be observed fully (see notes): the report may miss what the command did"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			tt.setup(r)
			Compare(tt.exp, r)
			want := tt.want
			if want == nil {
				want = []report.Violation{}
			}
			if diff := cmp.Diff(want, r.Violations); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
			wantVerdict := report.VerdictPass
			if len(want) > 0 {
				wantVerdict = report.VerdictViolation
			}
			if r.Verdict != wantVerdict {
				t.Errorf("verdict %q, want %q", r.Verdict, wantVerdict)
			}
		})
	}
}

// TestIssueListenerExample: extends default with left_running allow and tcp:8765 turns the
// background-listener example into a pass, and another port is still a violation.
func TestIssueListenerExample(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "srv.yaml", "version: 1\nextends: default\nexpect:\n  left_running: allow\n  listeners: [\"tcp:8765\"]\n")
	p, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Compile(p, CompileContext{Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	r := report.New("srv", nil)
	r.Processes.LeftRunning = []report.Process{{Pid: 5, Argv: []string{"python3", "-m", "http.server", "8765"}}}
	r.Sockets.Listening = []report.Socket{{Proto: "tcp", Address: "0.0.0.0", Port: 8765, Pid: 5}}
	Compare(plan.Expect, r)
	if r.Verdict != report.VerdictPass || len(r.Sockets.Listening) != 1 {
		t.Fatalf("verdict %s %v", r.Verdict, r.Violations)
	}
	r.Sockets.Listening = append(r.Sockets.Listening, report.Socket{Proto: "tcp", Address: "0.0.0.0", Port: 8766, Pid: 5})
	Compare(plan.Expect, r)
	if r.Verdict != report.VerdictViolation || len(r.Violations) != 1 {
		t.Fatalf("verdict %s %v", r.Verdict, r.Violations)
	}
}

// TestSchemaCoversEveryField walks the profile structs and checks the schema has each field.
func TestSchemaCoversEveryField(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(Schema(), &schema); err != nil {
		t.Fatal(err)
	}
	if schema["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v", schema["$schema"])
	}
	var walk func(typ reflect.Type, node map[string]any, path string)
	walk = func(typ reflect.Type, node map[string]any, path string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
			if items, ok := node["items"].(map[string]any); ok {
				node = items
			}
		}
		if typ.Kind() != reflect.Struct || typ == netRuleType || typ == listenerType {
			return
		}
		props, _ := node["properties"].(map[string]any)
		if node["additionalProperties"] != false {
			t.Errorf("%s: additionalProperties is not false", path)
		}
		for i := range typ.NumField() {
			name := yamlName(typ.Field(i))
			if name == "" {
				continue
			}
			sub, ok := props[name].(map[string]any)
			if !ok {
				t.Errorf("schema lacks %s.%s", path, name)
				continue
			}
			if sub["description"] == nil {
				t.Errorf("%s.%s has no description", path, name)
			}
			walk(typ.Field(i).Type, sub, path+"."+name)
		}
	}
	walk(reflect.TypeFor[Profile](), schema, "profile")
	if !strings.Contains(string(Schema()), `"host"`) {
		t.Error("schema lacks the mapping form of network entries")
	}
}

func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/errors/*.yaml")
	for _, s := range seeds {
		data, _ := os.ReadFile(s)
		f.Add(data)
	}
	for _, name := range profiles.Names() {
		data, _ := os.ReadFile(filepath.Join("..", "profiles", name+".yaml"))
		f.Add(data)
	}
	f.Add([]byte("version: 1\nnetwork: {mode: contract, allow: [{host: a.b, ports: 1-2, proto: udp}], dns: {upstream: '1.1.1.1:53'}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data)
		if err != nil {
			if Hint(err) == "" && err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if p.Validate() != nil {
			return
		}
		text, err := p.Marshal()
		if err != nil {
			t.Fatalf("valid profile does not marshal: %v", err)
		}
		q, err := Parse("fuzz.yaml", text)
		if err != nil {
			t.Fatalf("marshalled profile does not parse: %v\n%s", err, text)
		}
		if err := q.Validate(); err != nil {
			t.Fatalf("marshalled profile does not validate: %v\n%s", err, text)
		}
	})
}

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
