// Package rootfs owns what a sandbox sees as its files, as the host holds them in the run dir: the
// overlays of the host's root file system and of the working directory (FS, rootfs.go), their writable
// layer (a size-limited ext4 on a loop device, made from a template: layer.go), the hiding of paths by
// whiteouts and opaque directories, the idmapped lower layers that show a working tree as the
// command's own (idmap.go), the decoys planted below hidden homes (decoys.go), the toolchain caches'
// overlays (caches.go), and without root the top-level layout of / that the supervisor mounts inside
// the sandbox's user namespace (rootless.go).
//
// It builds and removes files and mounts on the host and knows nothing of the container: package
// sandbox decides what to show (the plan's hidden paths, shares and caches), starts the container on
// FS's root, and calls Unmount at teardown and in gc.
package rootfs
