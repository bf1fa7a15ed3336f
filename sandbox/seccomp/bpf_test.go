package seccomp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	runcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
)

// roleLoadSeccomp is the test binary's role that runs loadSeccomp (TestMain).
const roleLoadSeccomp = "__test_load_seccomp"

// loadSeccomp loads the filter of the seccomp config in the file args[0] as libcontainer's init does
// (runc's InitSeccomp), prints the thread's id and waits for stdin to close.
func loadSeccomp(args []string) int {
	runtime.LockOSThread()
	raw, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Println(err)
		return 1
	}
	var sc specs.LinuxSeccomp
	if err := json.Unmarshal(raw, &sc); err != nil {
		fmt.Println(err)
		return 1
	}
	config, err := specconv.SetupSeccomp(&sc)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Println(err)
		return 1
	}
	if _, err := runcseccomp.InitSeccomp(config); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println(unix.Gettid())
	os.Stdin.Read(make([]byte, 1))
	return 0
}

// TestSeccompMatchesLibcontainer: the program sbx compiles for every built-in profile (as Filter gives
// it, with the notified syscalls and the log flag) is the one runc's InitSeccomp loads, byte for byte
// (read back from a process with PTRACE_SECCOMP_GET_FILTER), with the same listener flag.
func TestSeccompMatchesLibcontainer(t *testing.T) {
	testutil.RequireRoot(t, "PTRACE_SECCOMP_GET_FILTER needs CAP_SYS_ADMIN")
	for _, name := range policy.Builtins() {
		t.Run(name, func(t *testing.T) {
			plan := builtinPlan(t, name)
			sc := Filter(plan.Seccomp, plan.Record, plan.Seccomp != nil)
			if sc == nil {
				t.Skip("no filter")
			}
			got, err := compileSeccomp(sc)
			if err != nil {
				t.Fatal(err)
			}
			want := loadedByRunc(t, sc)
			if !bytes.Equal(got.Filter, want) {
				t.Fatalf("sbx compiled %d instructions, runc loaded %d, and they differ", len(got.Filter)/8, len(want)/8)
			}
			notifies := strings.Contains(string(mustJSON(t, sc)), string(specs.ActNotify))
			if hasListener := got.Flags&unix.SECCOMP_FILTER_FLAG_NEW_LISTENER != 0; hasListener != notifies {
				t.Fatalf("flags %#x: listener %v, want %v", got.Flags, hasListener, notifies)
			}
			if got.Flags&unix.SECCOMP_FILTER_FLAG_LOG == 0 {
				t.Fatalf("flags %#x without SECCOMP_FILTER_FLAG_LOG", got.Flags)
			}
		})
	}
}

// builtinPlan is the plan of a built-in profile, compiled for a working directory of /work.
func builtinPlan(t *testing.T, name string) *policy.Plan {
	t.Helper()
	p, err := policy.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return planOf(t, p)
}

// planOf is profile p's plan, compiled for a working directory of /work.
func planOf(t *testing.T, p *policy.Profile) *policy.Plan {
	t.Helper()
	plan, err := policy.Compile(p, policy.CompileContext{Cwd: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadedByRunc is the program runc's InitSeccomp loads for sc, in a child process.
func loadedByRunc(t *testing.T, sc *specs.LinuxSeccomp) []byte {
	file := filepath.Join(t.TempDir(), "seccomp.json")
	if err := os.WriteFile(file, mustJSON(t, sc), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/proc/self/exe", roleLoadSeccomp, file)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	line, _ := bufio.NewReader(out).ReadString('\n')
	tid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("child: %q", line)
	}
	// The tracer is a thread: stay on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(tid); err != nil {
		t.Fatalf("PTRACE_SEIZE: %v", err)
	}
	defer unix.PtraceDetach(tid)
	if err := unix.PtraceInterrupt(tid); err != nil {
		t.Fatalf("PTRACE_INTERRUPT: %v", err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
		t.Fatalf("wait: %v", err)
	}
	const ptraceSeccompGetFilter = 0x420c
	n, _, errno := unix.Syscall6(unix.SYS_PTRACE, ptraceSeccompGetFilter, uintptr(tid), 0, 0, 0, 0)
	if errno != 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %v", errno)
	}
	prog := make([]unix.SockFilter, n)
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, ptraceSeccompGetFilter, uintptr(tid), 0, uintptr(unsafe.Pointer(&prog[0])), 0, 0); errno != 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %v", errno)
	}
	return bytes.Clone(unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), len(prog)*8))
}

// TestSeccompCache: a compiled program is kept in the state root, read back whole, and passed over when
// the file is not sbx's whole file.
func TestSeccompCache(t *testing.T) {
	plan := builtinPlan(t, "default")
	sc := Filter(plan.Seccomp, plan.Record, true)
	root := t.TempDir()
	want, err := Program(root, sc)
	if err != nil {
		t.Fatal(err)
	}
	main, _ := splitQuiet(sc)
	key := seccompKey(main)
	file := filepath.Join(root, "cache", "seccomp-"+key+".bpf")
	got := readSeccompFile(file, key)
	if got == nil || !bytes.Equal(got.Filter, want.Filter) || got.Flags != want.Flags {
		t.Fatalf("read back %+v", got)
	}
	// Another listener path is the same filter.
	other := *main
	other.ListenerPath = "/elsewhere"
	if seccompKey(&other) != key {
		t.Fatal("the listener path changed the key")
	}
	raw, _ := os.ReadFile(file)
	for name, mangle := range map[string]func(){
		"flipped": func() { b := bytes.Clone(raw); b[len(b)-3] ^= 1; os.WriteFile(file, b, 0o600) },
		"flags changed": func() {
			b := bytes.Clone(raw)
			b[8] ^= unix.SECCOMP_FILTER_FLAG_NEW_LISTENER
			os.WriteFile(file, b, 0o600)
		},
		"another key's file": func() {
			osc := *main
			errno := uint(unix.EXDEV) // another default errno: another program
			osc.DefaultErrnoRet = &errno
			k2 := seccompKey(&osc)
			p2, err := Program(root, &osc)
			if err != nil {
				t.Fatal(err)
			}
			other, _ := os.ReadFile(filepath.Join(root, "cache", "seccomp-"+k2+".bpf"))
			if len(other) == 0 || bytes.Equal(p2.Filter, want.Filter) {
				t.Fatal("no other program")
			}
			os.WriteFile(file, other, 0o600) // renamed into this key's place
		},
		"short": func() { os.WriteFile(file, raw[:len(raw)-4], 0o600) },
		"fifo":  func() { unix.Mkfifo(file, 0o600) }, // opened without blocking, refused by its type
		"huge": func() {
			f, _ := os.OpenFile(file, os.O_CREATE|os.O_WRONLY, 0o600)
			f.Write(raw)
			f.Truncate(1 << 30) // sparse: never read
			f.Close()
		},
		"group-writable": func() {
			os.WriteFile(file, raw, 0o600)
			os.Chmod(file, 0o620)
		},
		"symlink": func() {
			os.Remove(file)
			os.WriteFile(file+".real", raw, 0o600)
			os.Symlink(file+".real", file)
		},
	} {
		os.Remove(file)
		mangle()
		if got := readSeccompFile(file, key); got != nil {
			t.Errorf("%s: read back a program", name)
		}
		os.Remove(file + ".real")
	}
}

// TestSeccompKeyBuild: the cache key is of this build of sbx (its Go build ID, as `go tool buildid`
// reads it): a file that another build wrote, whose compile steps or flags may differ, is never read.
func TestSeccompKeyBuild(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "buildid", exe).Output()
	if err != nil {
		t.Skipf("go tool buildid: %v", err)
	}
	if got, want := exeBuildID(), strings.TrimSpace(string(out)); got == "" || got != want {
		t.Fatalf("build ID %q, want %q", got, want)
	}
	if seccompKeyOf("a") == seccompKeyOf("b") {
		t.Fatal("the key does not depend on the build")
	}
	if !strings.Contains(seccompKeyBase(), exeBuildID()) {
		t.Fatalf("key base %q lacks the build ID", seccompKeyBase())
	}
}

// TestSeccompConfigBytes: the cache key's encoding covers every field of runtime-spec's seccomp types
// (a field added there fails here until seccompConfigBytes encodes it), and a change of any one field,
// or a name moved from one rule to the next, gives another encoding.
func TestSeccompConfigBytes(t *testing.T) {
	for typ, want := range map[reflect.Type][]string{
		reflect.TypeFor[specs.LinuxSeccomp]():    {"DefaultAction", "DefaultErrnoRet", "Architectures", "Flags", "ListenerPath", "ListenerMetadata", "Syscalls"},
		reflect.TypeFor[specs.LinuxSyscall]():    {"Names", "Action", "ErrnoRet", "Args"},
		reflect.TypeFor[specs.LinuxSeccompArg](): {"Index", "Value", "ValueTwo", "Op"},
	} {
		var got []string
		for f := range typ.Fields() {
			got = append(got, f.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%v has the fields %v; seccompConfigBytes encodes %v", typ, got, want)
		}
	}
	one, two := uint(1), uint(2)
	base := func() *specs.LinuxSeccomp {
		return &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, DefaultErrnoRet: &one,
			Architectures: []specs.Arch{specs.ArchX86_64}, Flags: []specs.LinuxSeccompFlag{"SECCOMP_FILTER_FLAG_LOG"},
			Syscalls: []specs.LinuxSyscall{
				{Names: []string{"read", "write"}, Action: specs.ActAllow},
				{Names: []string{"kill"}, Action: specs.ActErrno, ErrnoRet: &one,
					Args: []specs.LinuxSeccompArg{{Index: 1, Value: 9, ValueTwo: 0, Op: specs.OpEqualTo}}},
			}}
	}
	seen := map[string]string{string(seccompConfigBytes(base())): "base"}
	for name, change := range map[string]func(c *specs.LinuxSeccomp){
		"default action":   func(c *specs.LinuxSeccomp) { c.DefaultAction = specs.ActKill },
		"default errno":    func(c *specs.LinuxSeccomp) { c.DefaultErrnoRet = &two },
		"no default errno": func(c *specs.LinuxSeccomp) { c.DefaultErrnoRet = nil },
		"arch":             func(c *specs.LinuxSeccomp) { c.Architectures = append(c.Architectures, specs.ArchX86) },
		"flag":             func(c *specs.LinuxSeccomp) { c.Flags = nil },
		"name":             func(c *specs.LinuxSeccomp) { c.Syscalls[0].Names[1] = "writev" },
		"name moved": func(c *specs.LinuxSeccomp) {
			c.Syscalls[0].Names = c.Syscalls[0].Names[:1]
			c.Syscalls[1].Names = []string{"write", "kill"}
		},
		"action":    func(c *specs.LinuxSeccomp) { c.Syscalls[0].Action = specs.ActLog },
		"errno":     func(c *specs.LinuxSeccomp) { c.Syscalls[1].ErrnoRet = &two },
		"no errno":  func(c *specs.LinuxSeccomp) { c.Syscalls[1].ErrnoRet = nil },
		"arg index": func(c *specs.LinuxSeccomp) { c.Syscalls[1].Args[0].Index = 2 },
		"arg value": func(c *specs.LinuxSeccomp) { c.Syscalls[1].Args[0].Value = 15 },
		"arg two":   func(c *specs.LinuxSeccomp) { c.Syscalls[1].Args[0].ValueTwo = 1 },
		"arg op":    func(c *specs.LinuxSeccomp) { c.Syscalls[1].Args[0].Op = specs.OpNotEqual },
		"no args":   func(c *specs.LinuxSeccomp) { c.Syscalls[1].Args = nil },
		"rule":      func(c *specs.LinuxSeccomp) { c.Syscalls = c.Syscalls[:1] },
	} {
		c := base()
		change(c)
		b := string(seccompConfigBytes(c))
		if other, ok := seen[b]; ok {
			t.Errorf("%s encodes as %s does", name, other)
		}
		seen[b] = name
	}
	// The listener's path and metadata are not the program's.
	c := base()
	c.ListenerPath, c.ListenerMetadata = "/x", "y"
	if string(seccompConfigBytes(c)) != string(seccompConfigBytes(base())) {
		t.Error("the listener's path changed the encoding")
	}
}

// TestSplitQuiet: the default profile's copy_file_range and clone3 answers move to the quiet filter
// (no flags, everything else allowed), and the main filter allows those two; a profile that lists
// copy_file_range in its deny list keeps it a refusal.
func TestSplitQuiet(t *testing.T) {
	plan := builtinPlan(t, "default")
	sc := Filter(plan.Seccomp, plan.Record, true)
	main, quiet := splitQuiet(sc)
	if quiet == nil || quiet.DefaultAction != specs.ActAllow || len(quiet.Flags) != 0 {
		t.Fatalf("quiet filter %+v", quiet)
	}
	got := map[string]uint{}
	for _, r := range quiet.Syscalls {
		got[r.Names[0]] = *r.ErrnoRet
	}
	if got["copy_file_range"] != uint(unix.EXDEV) || got["clone3"] != uint(unix.ENOSYS) || len(got) != 2 {
		t.Fatalf("quiet answers %v", got)
	}
	for _, r := range main.Syscalls {
		for _, n := range r.Names {
			if (n == "copy_file_range" || n == "clone3") && r.Action != specs.ActAllow {
				t.Fatalf("the main filter answers %s with %s", n, r.Action)
			}
		}
	}
	p, err := Program(t.TempDir(), sc)
	if err != nil || len(p.Quiet) == 0 || p.Flags&unix.SECCOMP_FILTER_FLAG_LOG == 0 {
		t.Fatalf("program %+v, %v", p, err)
	}
	dplan := profilePlan(t, "version: 1\nextends: default\nsyscalls:\n  deny: [copy_file_range]\n")
	_, quiet = splitQuiet(Filter(dplan.Seccomp, dplan.Record, true))
	if quiet == nil || len(quiet.Syscalls) != 1 || quiet.Syscalls[0].Names[0] != "clone3" {
		t.Fatalf("with copy_file_range denied, the quiet filter is %+v", quiet)
	}
}

// profilePlan is the plan of a profile's YAML, compiled for a working directory of /work.
func profilePlan(t *testing.T, yaml string) *policy.Plan {
	t.Helper()
	prof, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return planOf(t, prof)
}
