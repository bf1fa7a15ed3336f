package rootfs

import (
	"errors"
	"fmt"
	"os"

	"github.com/sbx-dev/sbx/internal/idmapns"
	"golang.org/x/sys/unix"
)

// ErrNoIDMap is matched by errors about a kernel or file system that cannot give an idmapped mount
// (kernel 5.12+, overlayfs over idmapped layers 5.19+).
var ErrNoIDMap = errors.New("idmapped mounts not supported")

// IDMapping shows the files of one owner as another's: on-disk uid and gid From appear, through the
// mount, as host ids To. Other owners appear as nobody and keep their files to themselves.
type IDMapping struct {
	FromUID, FromGID int
	ToUID, ToGID     int
}

// bindIDMapped mounts a read-only, non-recursive bind of the directory src (an O_PATH handle, opened
// without following links) at dst through the idmapping, in O(1): no file is chowned, the disk keeps
// its owners.
func bindIDMapped(src *os.File, dst string, m IDMapping) error {
	ns, err := IDMapUserns(m)
	if err != nil {
		return err
	}
	defer ns.Close()
	return bindInUserns(src, dst, ns)
}

// bindInUserns is bindIDMapped through the idmapping's user namespace ns, made already: several binds
// of one mapping (the toolchain caches') share one.
func bindInUserns(src *os.File, dst string, ns *os.File) error {
	fd, err := unix.OpenTree(int(src.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return noIDMap("open_tree", src.Name(), err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return noIDMap("mount_setattr", src.Name(), err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting the idmapped %s: %w", src.Name(), err)
	}
	return nil
}

// noIDMap classifies a failure of the new mount API: a kernel or file system without idmapped mounts
// answers ENOSYS, EINVAL or EPERM.
func noIDMap(op, path string, err error) error {
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%w: %s %s: %w", ErrNoIDMap, op, path, err)
	}
	return fmt.Errorf("%s %s: %w", op, path, err)
}

// IDMapUserns returns a user namespace (its nsfs file) whose maps say m (see package idmapns).
func IDMapUserns(m IDMapping) (*os.File, error) {
	ns, err := idmapns.New(idmapns.Mapping(m))
	if errors.Is(err, idmapns.ErrStart) {
		return nil, fmt.Errorf("%w: %w", ErrNoIDMap, err)
	}
	return ns, err
}
