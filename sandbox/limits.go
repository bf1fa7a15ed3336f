package sandbox

// What the sandbox's limits stopped: the cgroup's counters and the writable layer's free space.

import (
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/sandbox/cgroup"
	"github.com/sbx-dev/sbx/sandbox/rootfs"
)

// cgroupPaths is the run's cgroup in each hierarchy it was made in, by controller ("" for cgroup v2's
// single tree), as the cgroup manager of its Create has them; nil when unknown (no cgroups: rootless
// without delegation).
// Looking them up instead (cgroup.Dirs: a listing of /sys/fs/cgroup and a lookup in every hierarchy)
// waits for sysfs's lock whenever other runs' loop devices and network namespaces add or remove their
// entries there.
func (s *Sandbox) cgroupPaths() map[string]string {
	if s.cgroups == nil {
		return nil
	}
	m, _ := s.cgroups.Manager()
	if m == nil {
		return nil
	}
	return m.GetPaths()
}

// LimitHits counts what the sandbox's limits stopped: processes the OOM killer killed, forks the pids
// limit refused, and whether the writable layer (limits.disk) is full.
type LimitHits struct {
	OOMKills int
	PidsMax  int
	Disk     DiskUse
}

// DiskUse is how full the writable layer is. Full means a write past it fails with ENOSPC ("No space
// left on device"), which the command's own error does not say is sbx's limit, not the host's disk.
type DiskUse struct {
	Full       bool
	Size, Free int64 // bytes: limits.disk, and what is left of it
	NoInodes   bool  // full for want of inodes (many small files), not of blocks
}

// diskFullMargin: a layer with less than 1/diskFullMargin of its size free counts as full. A write
// that hit the limit left the little that no block of its size fitted in; a file removed after its
// failed write (a linker's output) gives its space back, and the layer shows no sign of it then.
const diskFullMargin = 100

// LimitHits reads the cgroup's counters (cgroup v1 and v2 alike) and the writable layer's free space.
// Read it before Destroy.
func (s *Sandbox) LimitHits() LimitHits {
	var h LimitHits
	if paths := s.cgroupPaths(); paths != nil {
		// The hierarchies the run's cgroups were made in: v1's memory and pids, or v2's one tree.
		if dir, ok := paths["memory"]; ok {
			h.OOMKills += cgroup.Counter(filepath.Join(dir, "memory.oom_control"), "oom_kill")
		}
		if dir, ok := paths["pids"]; ok {
			h.PidsMax += cgroup.Counter(filepath.Join(dir, "pids.events"), "max")
		}
		if dir, ok := paths[""]; ok {
			h.OOMKills += cgroup.Counter(filepath.Join(dir, "memory.events"), "oom_kill")
			h.PidsMax += cgroup.Counter(filepath.Join(dir, "pids.events"), "max")
		}
	} else {
		for _, dir := range cgroup.Dirs(s.ID) {
			// v1: memory.oom_control; v2: memory.events; both: pids.events.
			h.OOMKills += cgroup.Counter(filepath.Join(dir, "memory.oom_control"), "oom_kill")
			h.OOMKills += cgroup.Counter(filepath.Join(dir, "memory.events"), "oom_kill")
			h.PidsMax += cgroup.Counter(filepath.Join(dir, "pids.events"), "max")
		}
	}
	if s.rootfs != nil && !Rootless() {
		// Without root the layer lies on the host's disk and the limit is per file (RLIMIT_FSIZE,
		// whose SIGXFSZ the command's shell reports as "File size limit exceeded").
		h.Disk = layerUse(s.rootfs.Layer(), rootfs.LayerSize(s.cfg.Plan.Limits.DiskBytes))
	}
	return h
}

// layerUse reads the use of the writable layer of size bytes (limits.disk) mounted at dir (sbx's own
// run directory).
func layerUse(dir string, size int64) DiskUse {
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil || fs.Blocks == 0 {
		return DiskUse{}
	}
	u := DiskUse{Size: size, Free: int64(fs.Bavail) * fs.Bsize, NoInodes: fs.Files > 0 && fs.Ffree == 0}
	u.Full = u.NoInodes || u.Free < int64(fs.Blocks)*fs.Bsize/diskFullMargin
	return u
}
