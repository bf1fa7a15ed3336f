package rootfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The writable layer of a sandbox holds every overlay's upper and work directories. It is a file
// system of its own with the profile's disk size, so that filling it is ENOSPC and nothing more:
//
//   - As root: an ext4 file system in an unnamed file (O_TMPFILE) on the host's disk, attached to a
//     loop device that detaches itself when the layer is unmounted (LO_FLAGS_AUTOCLEAR) and writes
//     to the file with direct I/O once mounted. The layer's pages are ordinary page cache, cached
//     once: written back and reclaimed under memory pressure, so files do not count against the
//     memory limit. Nothing of it has a name on the host; a crash leaves only the
//     mount, which gc removes, and the kernel frees the rest.
//   - Without loop devices (a rootless run, a host without /dev/loop-control): a tmpfs. It bounds the
//     size too, but its pages are memory charged to the sandbox's cgroup: the run's notes say so.
//
// Making a file system per run costs a mkfs; instead, one empty file system per size is made once and
// kept in LayerDir as a template, and each run copies its few hundred KiB of data (the rest is holes).

// LayerDir is where disk-backed writable layers live (unnamed) and their templates are kept. It must be
// on a disk file system: a layer file on a tmpfs would be memory again.
var LayerDir = "/var/lib/sbx/layers"

// layerTemplateVersion names the mkfs options below: a change of options makes new templates.
const layerTemplateVersion = "v5"

// mkfsArgs make an ext4 of 4 KiB blocks (the loop device's block size, whatever the size) with a journal
// of 4 MiB (see layerJournal), without the blocks reserved for growing it online (resize_inode: 127
// blocks of a 1 GiB layer, three quarters of what every run copies and its loop device's attach writes
// to the host's disk; a layer never grows), with small directories and files inside their inode
// (inline_data: every run makes a dozen directories on its layer, the overlays' upper and work
// directories and the hidden paths' opaque ones, and each took a block from the allocator; 20 runs at
// once 5% shorter), without reserved blocks (the command gets the whole size), with one inode per 8 KiB
// (many small files, as in node_modules) of 256 bytes (room for the overlay's xattrs), and with lazily
// initialized inode tables and journal (its blocks stay holes of the template, which no run copies).
func mkfsArgs(size int64) []string {
	journal := "-O ^has_journal,^resize_inode,inline_data"
	if layerJournal(size) {
		journal = "-O ^resize_inode,inline_data -J size=4"
	}
	return append([]string{"-q", "-F", "-t", "ext4", "-b", "4096", "-m", "0", "-i", "8192", "-I", "256",
		"-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1"}, strings.Fields(journal)...)
}

// layerJournal says whether a layer of size gets a journal: every one of 32 MiB or more. Not to recover
// anything (a layer is thrown away): without a journal, ext4's inode allocator skips every inode freed
// in the last 30 seconds whose inode table block is still dirty, reading that block for each, so that
// creating n files after deleting n takes time in n² (100,000 small files: 60 s against 4 s). A journal
// of 4 MiB (its smallest, 1,024 blocks) costs the layer that much room and each run nothing measurable
// (make bench: BenchmarkWritableLayer, BenchmarkLayerRecreate). A smaller layer holds too few inodes
// for the scan to matter (4,096 in 32 MiB), and a journal would take an eighth of it or more.
func layerJournal(size int64) bool { return size >= 32<<20 }

// layerMkfsArgs and layerMountOpts are mkfsArgs and mountOpts; the benchmarks put others in their place.
var layerMkfsArgs, layerMountOpts = mkfsArgs, mountOpts

// layerMountOpts are the layer's ext4 options. noinit_itable: the kernel would otherwise zero the inode
// tables in the background, megabytes of writes per run for a file system that lives seconds.
// nobarrier: nothing on it is ever recovered, so neither a journal commit nor the unmount need flush the
// host's disk (measured: 1.6 against 2.7 ms for a small layer). data=writeback: a commit does not wait
// for the data of the files it names to be written first, which only a recovery would need (and which
// a layer without a journal refuses).
func mountOpts(size int64) string {
	if layerJournal(size) {
		return "noinit_itable,nobarrier,data=writeback"
	}
	return "noinit_itable,nobarrier"
}

// ErrNoDiskLayer is matched by errors of a disk-backed layer that cannot be made here.
var ErrNoDiskLayer = errors.New("no disk-backed writable layer")

// mountLayer mounts the writable layer at dir: on disk when it can (the device from prepared, or one
// attached now when prepared is nil), else a tmpfs. note, for the report, says what the command should
// know: that files count as memory (a tmpfs), or that the host's disk has less room than the layer's
// size (the layer's blocks are taken from it as the command writes, and when it runs out first, writes
// fail with I/O errors instead of ENOSPC).
//
// prepared nil attaches a device now, and drops its claim once the layer is mounted (a caller that
// keeps no LayerPrep to unclaim after the unmount).
func mountLayer(dir string, size int64, prepared *LayerPrep) (note string, err error) {
	if prepared == nil {
		prepared = prepareLayer(size)
		defer prepared.Unclaim()
	}
	derr := prepared.mount(dir)
	if derr == nil {
		var fs unix.Statfs_t
		if unix.Statfs(LayerDir, &fs) == nil && int64(fs.Bavail)*fs.Bsize < size {
			return fmt.Sprintf("the host's disk has %d MiB free for a writable layer of %d MiB", int64(fs.Bavail)*fs.Bsize>>20, size>>20), nil
		}
		return "", nil
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		return "", fmt.Errorf("mounting the writable layer: %w (on disk: %w)", err, derr)
	}
	return fmt.Sprintf("the writable layer is a tmpfs (%v): files written count against the memory limit", derr), nil
}

// LayerSize is the size of a writable layer for the profile's disk limit (0: DefaultDiskBytes).
func LayerSize(diskBytes int64) int64 {
	if diskBytes <= 0 {
		return DefaultDiskBytes
	}
	return diskBytes
}

// A LayerPrep is a disk layer's loop device, attached to a fresh copy of the template before the run
// dir it is mounted in exists: the copy and the attach are most of a layer's 2 ms, and Create starts
// them first (StartLayer), beside its other steps.
type LayerPrep struct {
	done  chan struct{}
	size  int64
	dev   *os.File      // the loop device; nil after mount or release
	claim *os.File      // holds the device's claim (attachLoop) until unclaim, after the layer's unmount
	dio   chan struct{} // closed once the mounted device is switched to direct I/O (directIO)
	err   error
}

// StartLayer attaches the disk layer of size on a goroutine of its own; mount or release it.
func StartLayer(size int64) *LayerPrep {
	p := &LayerPrep{done: make(chan struct{}), size: size}
	go func() {
		defer close(p.done)
		p.dev, p.claim, p.err = attachDiskLayer(size)
	}()
	return p
}

// prepareLayer attaches the disk layer of size now.
func prepareLayer(size int64) *LayerPrep {
	p := &LayerPrep{done: make(chan struct{}), size: size}
	p.dev, p.claim, p.err = attachDiskLayer(size)
	close(p.done)
	return p
}

// mount waits for the device and mounts it at dir.
func (p *LayerPrep) mount(dir string) error {
	<-p.done
	if p.err != nil {
		return p.err
	}
	dev := p.dev
	p.dev = nil
	if err := unix.Mount(dev.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, layerMountOpts(p.size)); err != nil {
		dev.Close() // autoclear: without a mount, this frees the device
		return fmt.Errorf("%w: mounting %s: %w", ErrNoDiskLayer, dev.Name(), err)
	}
	p.dio = make(chan struct{})
	go directIO(dev, p.dio)
	return os.Chmod(dir, 0o700)
}

// directIO switches the mounted layer's loop device to direct I/O and closes it (with autoclear, the
// mount keeps the device): the backing file's pages then never enter the page cache, where the loop
// device's writes charge them to the sandbox's memory cgroup beside the layer's own (cgroup v2 charges
// loop I/O to the writer's cgroup): 160 MiB written under a 64 MiB limit was an OOM kill on Linux 6.12,
// and is written in a quarter of the time with direct I/O. Switched once the layer is mounted, not at
// attach: the mount's metadata reads still come from the cached copy of the template, and the switch
// (a flush of the backing file, a freeze of the device's queue: milliseconds) is off the run's path.
// Where the backing file system refuses direct I/O, the device stays buffered, as before.
func directIO(dev *os.File, done chan struct{}) {
	defer close(done)
	_ = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_DIRECT_IO, 1)
	dev.Close()
}

// Release frees a device that was never mounted; it is safe after mount and on nil.
func (p *LayerPrep) Release() {
	if p == nil {
		return
	}
	<-p.done
	if p.dev != nil {
		p.dev.Close() // autoclear: the kernel detaches an unmounted device at its last close
		p.dev = nil
	}
}

// Unclaim drops the device's claim, once the layer is unmounted (or was never mounted, after release):
// other runs may take its index again. It is safe twice and on nil.
func (p *LayerPrep) Unclaim() {
	if p == nil {
		return
	}
	<-p.done
	if p.dio != nil {
		<-p.dio
	}
	if p.claim != nil {
		p.claim.Close()
		p.claim = nil
	}
}

// attachDiskLayer attaches a fresh copy of the template for size to a loop device, and returns the
// device and the claim that keeps other runs off its index (attachLoop), both open.
func attachDiskLayer(size int64) (dev, claim *os.File, err error) {
	if os.Geteuid() != 0 {
		return nil, nil, fmt.Errorf("%w: loop devices need root", ErrNoDiskLayer)
	}
	img, err := newLayerImage(size)
	if err != nil {
		return nil, nil, err
	}
	defer img.Close() // the loop device holds the file
	return attachLoop(img)
}

// newLayerImage is an unnamed file in LayerDir holding an empty ext4 of size bytes.
func newLayerImage(size int64) (*os.File, error) {
	tmpl, err := layerTemplate(size)
	if err != nil {
		return nil, err
	}
	defer tmpl.Close()
	img, err := openTmpfile(LayerDir)
	if err != nil {
		return nil, err
	}
	if err := copySparse(img, tmpl, size); err != nil {
		img.Close()
		return nil, fmt.Errorf("%w: copying the layer template: %w", ErrNoDiskLayer, err)
	}
	return img, nil
}

// layerTemplate opens (making it first when missing) the empty ext4 of size bytes in LayerDir. It is
// made unnamed and linked in whole, so that a crash never leaves half of one.
func layerTemplate(size int64) (*os.File, error) {
	name := filepath.Join(LayerDir, "ext4-"+layerTemplateVersion+"-"+strconv.FormatInt(size, 10)+".img")
	if f, err := os.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW, 0); err == nil {
		return f, nil
	}
	if err := os.MkdirAll(LayerDir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDiskLayer, err)
	}
	removeOldTemplates()
	f, err := openTmpfile(LayerDir)
	if err != nil {
		return nil, err
	}
	if err := mkfs(f, size); err != nil {
		f.Close()
		return nil, err
	}
	// Another run may have linked its template first: either is as good.
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		f.Close()
		return nil, fmt.Errorf("%w: keeping the layer template: %w", ErrNoDiskLayer, err)
	}
	return f, nil
}

// removeOldTemplates removes the templates an older sbx made with other mkfs options.
func removeOldTemplates() {
	old, _ := filepath.Glob(filepath.Join(LayerDir, "ext4-*.img"))
	for _, f := range old {
		if !strings.HasPrefix(filepath.Base(f), "ext4-"+layerTemplateVersion+"-") {
			os.Remove(f)
		}
	}
}

func openTmpfile(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir, os.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: creating a file in %s: %w", ErrNoDiskLayer, dir, err)
	}
	return f, nil
}

// mkfs makes an empty ext4 of size bytes in f.
func mkfs(f *os.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("%w: %w", ErrNoDiskLayer, err)
	}
	cmd := exec.Command("mkfs.ext4", append(layerMkfsArgs(size), "/dev/fd/3")...)
	cmd.Env = []string{"PATH=/usr/sbin:/sbin:/usr/bin:/bin"}
	cmd.ExtraFiles = []*os.File{f}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: mkfs.ext4: %w: %s", ErrNoDiskLayer, err, out)
	}
	return nil
}

// copySparse copies src's data extents into dst and gives dst src's size: holes stay holes.
func copySparse(dst, src *os.File, size int64) error {
	if err := dst.Truncate(size); err != nil {
		return err
	}
	sfd, dfd := int(src.Fd()), int(dst.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only holes from off on
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(sfd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		for in, out := data, data; in < hole; {
			n, err := unix.CopyFileRange(sfd, &in, dfd, &out, int(hole-in), 0)
			if err != nil {
				return err
			}
			if n == 0 {
				return io.ErrUnexpectedEOF
			}
		}
		off = hole
	}
	return nil
}

// attachLoop attaches img to a free loop device that detaches itself when its last user goes, and
// returns the device, open, and the claim on its index (claim), which the caller holds until the device
// is unmounted.
//
// Runs started at once must not all take the device LOOP_CTL_GET_FREE names: it names the same one to
// every caller until one of them has opened it, and the others then queue on that device's open mutex
// behind the winner's LOOP_CONFIGURE, fail with EBUSY and start over, so that n runs open a device
// about n²/2 times one after another (measured, 20 runs at once: 60 ms per run waiting in
// blkdev_open). Each sbx first claims the index with an open file description lock on that byte of
// /dev/loop-control (claimLoop) and, when another sbx holds it, moves on to the next index instead.
// A run keeps its claim until its layer is unmounted, so that a device that sbx's runs use is always
// claimed: the indices past the free one are told apart by their claims alone, without a look at each
// device's sysfs entry (a lookup that waits for sysfs's lock while any other run's loop device or ext4
// adds or removes its entries there: 20 runs at once waited on it 7 ms each). A device bound by anyone
// else (losetup, a crashed run's) answers LOOP_CONFIGURE with EBUSY, and the search moves on. Locks go
// with the description: whatever happens to this process, the kernel drops them.
func attachLoop(img *os.File) (dev, claim *os.File, err error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNoDiskLayer, err)
	}
	defer func() {
		if err != nil {
			ctl.Close() // drops the claims
		}
	}()
	cfg := unix.LoopConfig{Fd: uint32(img.Fd()), Size: 4096}
	// Buffered while the layer is mounted: the mount's metadata reads come from the template copy's
	// cached pages (with direct I/O from the start, setup measured 30% slower); mount switches it to
	// direct I/O after (directIO).
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
	n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: finding a free loop device: %w", ErrNoDiskLayer, err)
	}
	for range maxLoopTries {
		if !claimLoop(ctl, n) {
			n++ // another sbx's
			continue
		}
		dev, err := openLoop(ctl, n)
		if err != nil {
			return nil, nil, err
		}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, ctl, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, nil, fmt.Errorf("%w: configuring loop%d: %w", ErrNoDiskLayer, n, err)
		}
		// Bound by someone else: the next free one, unless that is one this sbx holds already.
		unclaimLoop(ctl, n)
		free, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: finding a free loop device: %w", ErrNoDiskLayer, err)
		}
		n = max(free, n+1)
	}
	return nil, nil, fmt.Errorf("%w: no free loop device", ErrNoDiskLayer)
}

// maxLoopTries bounds the indices attachLoop tries: more than the runs that start at once.
const maxLoopTries = 256

// claimLoop takes, without waiting, this sbx's claim on loop device n: a write lock on byte n of
// /dev/loop-control, held by the open file description ctl. It says whether the claim is taken.
func claimLoop(ctl *os.File, n int) bool { return setClaim(ctl, n, unix.F_WRLCK) }

// unclaimLoop drops this sbx's claim on loop device n.
func unclaimLoop(ctl *os.File, n int) { setClaim(ctl, n, unix.F_UNLCK) }

func setClaim(ctl *os.File, n int, typ int16) bool {
	lk := unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: int64(n), Len: 1}
	return unix.FcntlFlock(ctl.Fd(), unix.F_OFD_SETLK, &lk) == nil
}

// openLoop opens loop device n, creating it when it does not exist yet (LOOP_CTL_GET_FREE creates only
// the one it names).
func openLoop(ctl *os.File, n int) (*os.File, error) {
	name := "/dev/loop" + strconv.Itoa(n)
	dev, err := os.OpenFile(name, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, ctl.Fd(), unix.LOOP_CTL_ADD, uintptr(n)); errno != 0 && errno != unix.EEXIST {
			return nil, fmt.Errorf("%w: adding loop%d: %w", ErrNoDiskLayer, n, errno)
		}
		dev, err = os.OpenFile(name, os.O_RDWR|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDiskLayer, err)
	}
	return dev, nil
}

// loopMajor is the block major number of loop devices.
const loopMajor = 7

// discardAbove is how much of a layer in use makes discardLayer shut it down rather than let the unmount
// write it back. An empty 1 GiB layer uses about 1 MiB for its metadata.
const discardAbove = 16 << 20

// ext4ShutdownNoLogFlush is EXT4_IOC_SHUTDOWN's flag for "stop now, write nothing more".
const (
	ext4IocShutdown        = 0x8004587d // _IOR('X', 125, __u32)
	ext4ShutdownNoLogFlush = 2
)

// discardLayer shuts a disk-backed layer at dir down before it is unmounted when the command wrote much
// to it (discardAbove): its contents are thrown away, and without this the unmount would write them back
// for a file that is already deleted. A layer with less on it is unmounted as it is: the shutdown logs
// an alert line on the kernel's console, which on a serial console costs more than writing back a few
// blocks into the page cache. It acts only on an ext4 on a loop device mounted at dir (a different
// device from dir's parent): never on the host's own file system below an unmounted dir.
func discardLayer(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st, parent unix.Stat_t
	var fs unix.Statfs_t
	if unix.Fstat(fd, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil || unix.Fstatfs(fd, &fs) != nil {
		return
	}
	if unix.Major(st.Dev) != loopMajor || st.Dev == parent.Dev || fs.Type != unix.EXT4_SUPER_MAGIC {
		return
	}
	if used := int64(fs.Blocks-fs.Bfree) * fs.Bsize; used < discardAbove {
		return
	}
	flag := uint32(ext4ShutdownNoLogFlush)
	unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ext4IocShutdown, uintptr(unsafe.Pointer(&flag)))
}
