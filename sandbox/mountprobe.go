package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/selfexe"
	"github.com/sbx-dev/sbx/internal/supervisor"
	"github.com/sbx-dev/sbx/sandbox/state"
)

// The mount probe decides whether the supervisor builds the sandbox itself (the direct start) by doing
// what that build does: the supervisor's binary, in a user and mount namespace of its own, makes each
// kind of mount a run makes (supervisor.ProbeMain) and says what the kernel answered. A kernel can have
// every call of the new mount API and refuse one use of it (a clone of a detached mount before 6.15),
// so the presence of a syscall says too little. Where a step fails, libcontainer's init builds the
// sandbox, which uses the older mount(2) calls, and `sbx version` names the step.

// probeTimeout bounds the probe: a few milliseconds on hardware, much longer under emulation.
const probeTimeout = 20 * time.Second

// maxProbeOutput bounds what sbx reads of the probe's answer.
const maxProbeOutput = 64 << 10

// MountProbe runs the mount probe with the supervisor binary bin; stateRoot is where a rootless run's
// layers would be (the probe's overlay is made in a directory there, then removed).
func MountProbe(bin, stateRoot string) ([]supervisor.ProbeStep, error) {
	args := []string{initPath, supervisor.ProbeRole}
	if Rootless() {
		if err := os.MkdirAll(stateRoot, 0o700); err != nil {
			return nil, fmt.Errorf("creating the state root: %w", err)
		}
		dir, err := os.MkdirTemp(stateRoot, "probe-")
		if err != nil {
			return nil, fmt.Errorf("making the probe's dir: %w", err)
		}
		defer removeProbeDir(dir)
		args = append(args, dir)
	}
	var out bytes.Buffer
	cmd := &exec.Cmd{Path: bin, Args: args, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/",
		Stdout: &limitedWriter{w: &out, n: maxProbeOutput},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
			GidMappingsEnableSetgroups: false,
			Pdeathsig:                  unix.SIGKILL,
		}}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the mount probe (%s): %w", bin, err)
	}
	timer := time.AfterFunc(probeTimeout, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	if err != nil {
		return nil, fmt.Errorf("the mount probe (%s): %w", bin, err)
	}
	var steps []supervisor.ProbeStep
	if err := json.Unmarshal(out.Bytes(), &steps); err != nil || len(steps) == 0 {
		return nil, fmt.Errorf("the mount probe (%s) answered %q", bin, strings.TrimSpace(out.String()))
	}
	return steps, nil
}

// removeProbeDir removes the probe's dir: overlay leaves its work dir's own work dir (and index) with
// mode 0.
func removeProbeDir(dir string) {
	for _, d := range []string{"work/work", "work-index/work", "work-index/index"} {
		os.Chmod(filepath.Join(dir, d), 0o700)
	}
	os.RemoveAll(dir)
}

// limitedWriter keeps the first n bytes written to it and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	k := min(len(p), l.n)
	l.n -= k
	if k > 0 {
		l.w.Write(p[:k])
	}
	return len(p), nil
}

// ProbeFailure is the first step of steps the direct start needs that failed, "" for none.
func ProbeFailure(steps []supervisor.ProbeStep) string {
	for _, s := range steps {
		if s.Err != "" && !s.Optional {
			return s.Step + ": " + s.Err
		}
	}
	return ""
}

// probeCacheFile, in the state root, holds the last probe's answer with what it was made for: the boot
// (a new kernel or a reboot probes again) and the probe binary (its size and time).
const probeCacheFile = "mount-probe.json"

type probeCache struct {
	Key   string                 `json:"key"`
	Steps []supervisor.ProbeStep `json:"steps"`
}

// directProbe is why the direct start cannot build sandboxes here ("" when it can): the mount probe's
// first failed step, probed once per boot and binary (cached in the state root), and once per process.
func directProbe(stateRoot, bin string) string {
	return probeSteps(stateRoot, bin).why
}

// probeSteps is the mount probe's answer for bin: once per boot and binary (cached in the state root),
// and once per process.
func probeSteps(stateRoot, bin string) probed {
	directProbes.Lock()
	defer directProbes.Unlock()
	key := probeKey(bin)
	if p, ok := directProbes.m[key]; ok {
		return p
	}
	p := cachedProbe(stateRoot, bin, key)
	directProbes.m[key] = p
	return p
}

// probed is an answer of the mount probe: its steps, and why the direct start cannot build ("" when it
// can; the probe's own failure when it gave no steps).
type probed struct {
	steps []supervisor.ProbeStep
	why   string
}

// stepErr is what the probe's step named step answered: "" when it passed, else its error (or that
// it was not probed).
func (p probed) stepErr(step string) string {
	for _, s := range p.steps {
		if s.Step == step {
			return s.Err
		}
	}
	if p.why != "" {
		return p.why
	}
	return "not probed"
}

var directProbes = struct {
	sync.Mutex
	m map[string]probed
}{m: map[string]probed{}}

// probeKey names the boot and the binary bin.
func probeKey(bin string) string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	var st unix.Stat_t
	unix.Stat(bin, &st)
	return fmt.Sprintf("%s %s %s %d %d.%d", strings.TrimSpace(string(boot)), KernelRelease(), bin, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
}

// cachedProbe reads the probe's answer for key from the state root's cache, or probes and writes it.
func cachedProbe(stateRoot, bin, key string) probed {
	path := filepath.Join(stateRoot, probeCacheFile)
	if f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		var c probeCache
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && int(st.Uid) == os.Geteuid() {
			if json.NewDecoder(io.LimitReader(f, maxProbeOutput)).Decode(&c) == nil && c.Key == key && len(c.Steps) > 0 {
				f.Close()
				return probed{c.Steps, ProbeFailure(c.Steps)}
			}
		}
		f.Close()
	}
	steps, err := MountProbe(bin, stateRoot)
	if err != nil {
		return probed{why: err.Error()}
	}
	if b, err := json.Marshal(probeCache{Key: key, Steps: steps}); err == nil {
		writeProbeCache(path, b)
	}
	return probed{steps, ProbeFailure(steps)}
}

// writeProbeCache replaces the cache file through a new file renamed over it.
func writeProbeCache(path string, b []byte) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".mount-probe-")
	if err != nil {
		return
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil && cerr == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
}

// probeMountsFeature is the mounts row of sbx version: the probe, run now (never the cache).
func probeMountsFeature() (bool, string) {
	self, err := selfexe.Path()
	if err != nil {
		return false, fmt.Sprintf("cannot find the sbx binary: %v", err)
	}
	steps, err := MountProbe(initBinary(self), state.DefaultRootFor())
	if err != nil {
		return false, err.Error()
	}
	if why := ProbeFailure(steps); why != "" {
		return false, "refused: " + why + "; libcontainer's init builds the sandboxes instead"
	}
	n := 0
	for _, s := range steps {
		if !s.Optional {
			n++
		}
	}
	return true, fmt.Sprintf("the %d kinds of mount a run makes work (probed)", n)
}

// errProbe is directSetup's error when the mount probe failed.
var errProbe = errors.New("the mount probe failed")
