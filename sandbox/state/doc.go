// Package state owns sbx's state root on the host: where it lies for the caller (DefaultRootFor), the
// state directory of each run, made, locked and removed (Run, Claim), what runs must not share of it
// (CheckShares, ReachesRoot, Guard), and the garbage collection of what runs whose sbx died left behind
// (GC): their processes, cgroups, container state, mounts, network and run dirs.
//
// A run dir's lock is held for as long as the sbx that owns the run lives: the kernel drops it when that
// process dies, which is how GC tells a dead run. GC reaches down into the packages that made what a
// run leaves (rootfs, cgroup, netcontract) to remove it; package sandbox claims the run dir when it
// creates a sandbox and releases it at teardown.
package state
