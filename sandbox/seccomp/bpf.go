package seccomp

// The command's seccomp filter is compiled on the host, once per profile, and loaded by the supervisor.
//
// libcontainer compiles a container's filter with libseccomp in the init of every run: 2.5-4 ms of
// each cold start here, the largest single step of the init. sbx instead compiles it with runc's own
// code (linked by name below, so that the program is the one libcontainer would load: the same rules,
// the same -ENOSYS stub for syscalls newer than the profile, the same flags), keeps the program in the
// state root's cache, keyed by a hash of the filter's configuration and of everything else its bytes
// depend on, and hands it to the supervisor with prep. The supervisor loads it on the thread it starts
// the command from, after Landlock, and sends the notification fd back with ready
// (internal/supervisor). The supervisor's other threads run unfiltered: they run only its own code.
//
// TestSeccompMatchesLibcontainer checks, byte for byte, that the program equals the one runc's
// InitSeccomp loads for the same configuration.

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/supervisor"
)

// compileSeccomp compiles sc as runc's InitSeccomp would, into the program and flags it would load.
func compileSeccomp(sc *specs.LinuxSeccomp) (*supervisor.Seccomp, error) {
	config, err := specconv.SetupSeccomp(sc)
	if err != nil {
		return nil, err
	}
	if config == nil {
		return nil, nil
	}
	return compileConfig(config)
}

// seccompCache holds the programs this process compiled or read, by key: a long-running sbx (mcp, the
// pool) compiles each profile's filter once.
var seccompCache sync.Map

// maxSeccompCacheFiles bounds the files of the state root's cache: past it, they are all removed.
const maxSeccompCacheFiles = 64

// seccompFileMagic starts a cache file, followed by the flags (8 bytes, little-endian), the checksum
// (seccompSum) and the program.
const seccompFileMagic = "sbxbpf2\n"

// Program is the compiled filter of sc, from this process's cache, the state root's, or compiled
// now (and then cached in both). A cache that cannot be read or written is passed over: it only saves
// time.
//
// The answers that are no refusal (quietAnswers) go to a second program without flags (the
// supervisor loads both): the main one allows their syscalls.
func Program(stateRoot string, sc *specs.LinuxSeccomp) (*supervisor.Seccomp, error) {
	main, quiet := splitQuiet(sc)
	p, err := program(stateRoot, main)
	if err != nil || p == nil || quiet == nil {
		return p, err
	}
	q, err := program(stateRoot, quiet)
	if err != nil {
		return nil, fmt.Errorf("the quiet filter: %w", err)
	}
	return &supervisor.Seccomp{Filter: p.Filter, Flags: p.Flags, Quiet: q.Filter}, nil
}

// quietAnswers are the errnos that answer a syscall for compatibility rather than refuse it: sbx's
// EXDEV for copy_file_range (policy: cp and Go's io.Copy then read and write) and Docker's ENOSYS for
// clone3 (libc and Go then use clone). The report never counts them, and a filter with
// SECCOMP_FILTER_FLAG_LOG would log each one, through audit or, with audit off, to the host's kernel
// log: about 40 µs of the calling task (cp of 30,000 files took 4.1 s instead of 2.8).
var quietAnswers = map[string]unix.Errno{"copy_file_range": unix.EXDEV, "clone3": unix.ENOSYS}

// splitQuiet moves sc's quiet answers (an unconditional errno rule of quietAnswers, the only rule of
// its syscall) to a filter of their own that allows everything else and asks for no log, and allows
// their syscalls in what is left of sc. quiet is nil when sc has none.
func splitQuiet(sc *specs.LinuxSeccomp) (main, quiet *specs.LinuxSeccomp) {
	rules := map[string]int{}
	for _, r := range sc.Syscalls {
		for _, n := range r.Names {
			rules[n]++
		}
	}
	isQuiet := func(r specs.LinuxSyscall, n string) bool {
		e, ok := quietAnswers[n]
		return ok && rules[n] == 1 && r.Action == specs.ActErrno && len(r.Args) == 0 && r.ErrnoRet != nil && *r.ErrnoRet == uint(e)
	}
	out := *sc
	out.Syscalls = nil
	var q []specs.LinuxSyscall
	var allowed []string
	for _, r := range sc.Syscalls {
		keep := slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool {
			if !isQuiet(r, n) {
				return false
			}
			q = append(q, specs.LinuxSyscall{Names: []string{n}, Action: specs.ActErrno, ErrnoRet: r.ErrnoRet})
			allowed = append(allowed, n)
			return true
		})
		if len(keep) > 0 {
			r.Names = keep
			out.Syscalls = append(out.Syscalls, r)
		}
	}
	if len(q) == 0 {
		return sc, nil
	}
	slices.Sort(allowed)
	out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: allowed, Action: specs.ActAllow})
	return &out, &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Architectures: sc.Architectures, Syscalls: q}
}

// program is Program for one filter.
func program(stateRoot string, sc *specs.LinuxSeccomp) (*supervisor.Seccomp, error) {
	key := seccompKey(sc)
	if p, ok := seccompCache.Load(key); ok {
		return p.(*supervisor.Seccomp), nil
	}
	// Without a build ID a file of another build could not be told from one of this build's: then the
	// state root's cache is not used.
	dir, file := filepath.Join(stateRoot, "cache"), ""
	if exeBuildID() != "" {
		file = filepath.Join(dir, "seccomp-"+key+".bpf")
		if p := readSeccompFile(file, key); p != nil {
			seccompCache.Store(key, p)
			return p, nil
		}
	}
	p, err := compileSeccomp(sc)
	if err != nil || p == nil {
		return p, err
	}
	seccompCache.Store(key, p)
	if file != "" {
		writeSeccompFile(dir, file, key, p)
	}
	return p, nil
}

var seccompKeyBase = sync.OnceValue(func() string { return seccompKeyOf(exeBuildID()) })

// seccompKeyOf is what a program's bytes depend on besides its configuration: this build of sbx (its
// Go build ID: sbx's own compile steps and flags change with it, and a file written by another build
// is never read), runc's and libseccomp-golang's code, libseccomp's syscall tables, what the kernel
// supports (the API level), the architecture.
func seccompKeyOf(buildID string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sbx %s;", buildID)
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/opencontainers/runc" || m.Path == "github.com/seccomp/libseccomp-golang" {
				fmt.Fprintf(&b, "%s@%s %s;", m.Path, m.Version, m.Sum)
			}
		}
	}
	maj, mnr, mic := libseccomp.GetLibraryVersion()
	api, _ := libseccomp.GetAPI()
	fmt.Fprintf(&b, "libseccomp %d.%d.%d api %d %s", maj, mnr, mic, api, runtime.GOARCH)
	return b.String()
}

// exeBuildID is the Go build ID of the running executable (its ELF note .note.go.buildid), "" when it
// cannot be read: then the state root's cache is not used.
var exeBuildID = sync.OnceValue(readBuildID)

func readBuildID() string {
	f, err := elf.Open("/proc/self/exe")
	if err != nil {
		return ""
	}
	defer f.Close()
	sec := f.Section(".note.go.buildid")
	if sec == nil || sec.Size > 4096 {
		return ""
	}
	note, err := sec.Data()
	// namesz, descsz, type (4 bytes each), the name "Go\x00\x00", then the ID.
	if err != nil || len(note) < 16 || string(note[12:16]) != "Go\x00\x00" {
		return ""
	}
	n := int(f.ByteOrder.Uint32(note[4:8]))
	if n == 0 || 16+n > len(note) {
		return ""
	}
	return string(note[16 : 16+n])
}

// seccompKey is the cache key of sc: a hash of its configuration (without the listener's path, which
// the supervisor's handover does not use) and of seccompKeyBase.
func seccompKey(sc *specs.LinuxSeccomp) string {
	h := sha256.New()
	io.WriteString(h, seccompKeyBase())
	h.Write([]byte{0})
	h.Write(seccompConfigBytes(sc))
	return hex.EncodeToString(h.Sum(nil))
}

// seccompConfigBytes encodes every field of sc that the program depends on, each string with its
// length, each optional number with whether it is set: two configurations encode alike only when they
// are one. By hand rather than with encoding/json, whose encoders for these types were built anew in
// every sbx process (a tenth of a millisecond of every cold start); TestSeccompConfigBytes fails when
// runtime-spec adds a field that this does not encode.
func seccompConfigBytes(sc *specs.LinuxSeccomp) []byte {
	b := []byte("seccomp-config-1")
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	num := func(n uint64) { b = binary.AppendUvarint(b, n) }
	opt := func(p *uint) {
		if p == nil {
			num(0)
			return
		}
		num(1)
		num(uint64(*p))
	}
	str(string(sc.DefaultAction))
	opt(sc.DefaultErrnoRet)
	num(uint64(len(sc.Architectures)))
	for _, a := range sc.Architectures {
		str(string(a))
	}
	num(uint64(len(sc.Flags)))
	for _, f := range sc.Flags {
		str(string(f))
	}
	num(uint64(len(sc.Syscalls)))
	for _, sys := range sc.Syscalls {
		num(uint64(len(sys.Names)))
		for _, n := range sys.Names {
			str(n)
		}
		str(string(sys.Action))
		opt(sys.ErrnoRet)
		num(uint64(len(sys.Args)))
		for _, a := range sys.Args {
			num(uint64(a.Index))
			num(a.Value)
			num(a.ValueTwo)
			str(string(a.Op))
		}
	}
	return b
}

// readSeccompFile reads a cache file, nil when there is none or it is not one of sbx's whole files: it
// must be a regular file of this user's, writable by nobody else, in a directory of the same kind.
func readSeccompFile(file, key string) *supervisor.Seccomp {
	if !ownDir(filepath.Dir(file)) {
		return nil
	}
	f, err := os.OpenFile(file, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	var st unix.Stat_t
	const head = len(seccompFileMagic) + 8 + sha256.Size
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() ||
		st.Mode&0o022 != 0 || st.Size <= int64(head) || st.Size > int64(head+8*4096) {
		return nil
	}
	b := make([]byte, st.Size)
	if _, err := io.ReadFull(f, b); err != nil || string(b[:len(seccompFileMagic)]) != seccompFileMagic {
		return nil
	}
	p := &supervisor.Seccomp{Filter: b[head:], Flags: uint(binary.LittleEndian.Uint64(b[len(seccompFileMagic):]))}
	if sum := seccompSum(key, p); !bytes.Equal(sum, b[head-sha256.Size:head]) || len(p.Filter)%8 != 0 {
		return nil
	}
	return p
}

// seccompSum is a cache file's checksum: the SHA-256 of its key, the flags and the program, so that
// neither flags changed nor a file renamed to another key's name pass.
func seccompSum(key string, p *supervisor.Seccomp) []byte {
	h := sha256.New()
	io.WriteString(h, key)
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(p.Flags)))
	h.Write(p.Filter)
	return h.Sum(nil)
}

// ownDir says whether dir is a directory of this user's that nobody else may write to.
func ownDir(dir string) bool {
	var st unix.Stat_t
	return unix.Lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && int(st.Uid) == os.Geteuid() && st.Mode&0o022 == 0
}

// writeSeccompFile stores p in the cache, whole or not at all (a temporary file renamed into place).
func writeSeccompFile(dir, file, key string, p *supervisor.Seccomp) {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return
	}
	if !ownDir(dir) {
		return
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) >= maxSeccompCacheFiles {
		for _, e := range entries {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	f, err := os.CreateTemp(dir, ".seccomp-*")
	if err != nil {
		return
	}
	b := binary.LittleEndian.AppendUint64([]byte(seccompFileMagic), uint64(p.Flags))
	b = append(append(b, seccompSum(key, p)...), p.Filter...)
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil && cerr == nil && os.Rename(f.Name(), file) == nil {
		return
	}
	os.Remove(f.Name())
}
