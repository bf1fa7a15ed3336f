package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
)

// Prep makes a run's cgroups (a directory in every hierarchy, no process in them, no limits)
// while the overlays are built. libcontainer's Apply then finds them there and only moves its init in:
// making them is 0.7-0.8 ms of mkdirs (ten v1 hierarchies here) that Apply would otherwise spend
// between starting the init and letting it go on. libcontainer sets the limits itself, as before, and
// removes the cgroups on Destroy; a Create that fails before libcontainer has the container removes
// them here, and gc removes them after a crash (the run dir exists first).
//
// Without root, the run's cgroup is a child of the one systemd delegates to the caller (deleg.go),
// recorded in the run dir before it is made (gc finds it there); without delegation there is none.
type Prep struct {
	done chan struct{}
	m    cgroups.Manager
	err  error // without root: the cgroup could not be made, and the run fails
}

// Start makes the cgroups of run id on a goroutine of its own; without root, its cgroup below
// the delegated one d, recorded in runDir; nil without root and Delegation, where the sandbox gets no
// cgroup.
func Start(id string, d *Delegation, runDir string) *Prep {
	if host.Rootless() {
		if d == nil {
			return nil
		}
		return startDelegated(d.RunDir(id), runDir)
	}
	p := &Prep{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		// The path libcontainer computes from the spec's cgroupsPath (Name), with no limits: Apply only
		// makes directories (and copies cpuset's cpus and mems from the parent); pid -1 moves nobody.
		m, err := NewManager(&cgroups.Cgroup{Path: "/" + Name(id), Resources: &cgroups.Resources{}})
		if err != nil {
			return
		}
		p.m = m
		// Best effort: what is missing, libcontainer's Apply makes as without this step.
		_ = m.Apply(-1)
	}()
	return p
}

// startDelegated makes dir, a run's cgroup below the delegated one, after recording it in runDir.
// Only the directory: the cgroups library's Apply would also walk up from /sys/fs/cgroup and try to
// enable controllers in every parent, systemd's own user@UID.service among them.
func startDelegated(dir, runDir string) *Prep {
	p := &Prep{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		if err := recordCgroup(runDir, dir); err != nil {
			p.err = fmt.Errorf("recording the sandbox's cgroup: %w", err)
			return
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			p.err = fmt.Errorf("making the sandbox's cgroup: %w", err)
			return
		}
		p.m, p.err = manager.NewWithPaths(&cgroups.Cgroup{Rootless: true, Resources: &cgroups.Resources{}}, map[string]string{"": dir})
		if p.err != nil {
			os.Remove(dir)
			p.m = nil
		}
	}()
	return p
}

// Wait waits until the cgroups are made (or failed to be).
func (p *Prep) Wait() {
	if p != nil {
		<-p.done
	}
}

// Manager is the cgroup manager of the cgroups made here once they are (nil when they could not be),
// and, without root, why the run's cgroup could not be made. nil for a nil p.
func (p *Prep) Manager() (cgroups.Manager, error) {
	if p == nil {
		return nil, nil
	}
	<-p.done
	return p.m, p.err
}

// Remove removes the cgroups made here, for a Create that failed before libcontainer took them over.
func (p *Prep) Remove() {
	if p == nil {
		return
	}
	<-p.done
	if p.m != nil {
		_ = p.m.Destroy()
	}
}

// sandboxControllers are the cgroup v1 hierarchies a sandbox's cgroups are made in, the controllers sbx
// uses: memory, pids and cpu for the profile's limits, devices for the device rules, freezer to stop
// everything at once. Every other hierarchy (cpuset, cpuacct, blkio, name=systemd, a hybrid host's
// unified one) leaves the sandbox where sbx is. Each one joined costs a mkdir and an rmdir, and moving the
// supervisor in takes the kernel's cgroup_threadgroup_rwsem for writing once per hierarchy, which holds
// up every fork and exit on the host and waits out an RCU grace period when the lock was idle: 20 runs
// started at once finished 6% sooner with these five of the ten this kind of host has. A command in
// a cgroup namespace sees / in every hierarchy either way. (libcontainer's fallback start joins all.)
var sandboxControllers = map[string]bool{"memory": true, "pids": true, "cpu": true, "devices": true, "freezer": true}

// NewManager is libcontainer's cgroup manager for c, with only sandboxControllers on cgroup v1.
func NewManager(c *cgroups.Cgroup) (cgroups.Manager, error) {
	if cgroups.IsCgroup2UnifiedMode() {
		return manager.New(c)
	}
	if paths := v1Paths(c.Path); paths != nil {
		return manager.NewWithPaths(c, paths)
	}
	m, err := manager.New(c)
	if err != nil {
		return m, err
	}
	paths := map[string]string{}
	for name, path := range m.GetPaths() {
		if sandboxControllers[name] {
			paths[name] = path
		}
	}
	rememberV1Paths(c.Path, paths)
	return manager.NewWithPaths(c, paths)
}

// v1Bases are the directories of the sandboxControllers' hierarchies, where an absolute cgroup path
// starts (libcontainer's /sys/fs/cgroup/cpu,cpuacct for cpu): read from the process's mountinfo
// (mountinfoV1Bases) or, where that cannot tell, learnt from the first manager sbx makes. libcontainer
// finds them by reading mountinfo once per hierarchy (0.3 ms of every manager; a run makes two, a warm
// pool two per sandbox) and by looking at each hierarchy's root in /sys/fs/cgroup (an lstat, an lstat of
// its parent and a statfs for each of the host's hierarchies). Those lookups wait for the cgroup file
// systems' lock, which every other run's mkdir and rmdir of its cgroups takes: when 20 runs started at
// once, they were the most common wait of all.
var v1Bases struct {
	sync.Mutex
	dirs map[string]string
	read bool // mountinfoV1Bases was tried
}

// v1Paths is the paths of the cgroup at absolute path p in every sandboxControllers hierarchy, from
// v1Bases; nil when they are not known.
func v1Paths(p string) map[string]string {
	v1Bases.Lock()
	defer v1Bases.Unlock()
	if !v1Bases.read {
		v1Bases.read = true
		if v1Bases.dirs == nil {
			v1Bases.dirs = mountinfoV1Bases()
		}
	}
	if v1Bases.dirs == nil || !filepath.IsAbs(p) {
		return nil
	}
	paths := make(map[string]string, len(v1Bases.dirs))
	for name, dir := range v1Bases.dirs {
		paths[name] = filepath.Join(dir, p)
	}
	return paths
}

// mountinfoV1Bases reads v1Bases from /proc/self/mountinfo: the mount point of the cgroup v1 hierarchy
// of each of the sandboxControllers, which is libcontainer's base too (the cgroup root, /sys/fs/cgroup,
// and the mount point's name, a link such as cpu -> cpu,cpuacct resolved). nil when a controller has no
// hierarchy directly below /sys/fs/cgroup, or two: libcontainer then finds them its own way.
func mountinfoV1Bases() map[string]string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	dirs := map[string]string{}
	for line := range strings.Lines(string(data)) {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || g[0] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(g[2], ",") {
			if !sandboxControllers[opt] {
				continue
			}
			if _, dup := dirs[opt]; dup || filepath.Dir(f[4]) != Root || strings.Contains(f[4], "\\") {
				return nil // mounted twice, elsewhere, or with an escaped name
			}
			dirs[opt] = f[4]
		}
	}
	if len(dirs) != len(sandboxControllers) {
		return nil
	}
	return dirs
}

// rememberV1Paths learns v1Bases from the paths libcontainer gave the cgroup at absolute path p.
func rememberV1Paths(p string, paths map[string]string) {
	if !filepath.IsAbs(p) || filepath.Clean(p) == "/" || len(paths) == 0 {
		return
	}
	dirs := make(map[string]string, len(paths))
	for name, path := range paths {
		dir, ok := strings.CutSuffix(path, filepath.Clean(p))
		if !ok || !filepath.IsAbs(dir) {
			return
		}
		dirs[name] = dir
	}
	v1Bases.Lock()
	v1Bases.dirs = dirs
	v1Bases.Unlock()
}
