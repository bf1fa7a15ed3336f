// Package sandbox owns the life of one run's sandbox: [Create] builds it from a compiled policy.Plan,
// [Sandbox.Start] lets the command go, [Sandbox.Destroy] tears everything down. It owns the container
// itself (namespaces, the OCI spec and libcontainer's config, the start of the supervisor init, stdio,
// the warm pool's deferred start), its reading of its own processes and limits, and the table of kernel
// features; the supervisor init (pid 1: it builds the sandbox's mounts, applies Landlock, starts the
// command and reaps orphans) is package internal/supervisor. It decides what each part of a sandbox is
// and when it is made, and leaves the making to the packages below it:
//
//	sandbox/state        the state root, each run's state directory, and gc of dead runs' leftovers
//	sandbox/rootfs       the sandbox's files: the overlays, their writable layer, hiding, idmapped
//	                     lower layers, decoys, the toolchain caches, the rootless layout of /
//	sandbox/cgroup       the run's cgroups, systemd's delegation without root, their counters
//	sandbox/seccomp      the filter's compilation and the listener of its notifications
//	sandbox/netcontract  the network: namespace, uplink, the nftables contract, the DNS filter
//
// Each of them reaches down only (state uses rootfs, cgroup and netcontract to remove what a dead run
// left); none imports sandbox. sandbox/internal/host holds the few facts they all read (Rootless,
// Within).
//
// # Starting a sandbox
//
// The sandbox's OCI spec (spec.go) goes through libcontainer's specconv into a libcontainer config,
// which says everything the sandbox is: namespaces, mounts, devices, masked and read-only paths,
// sysctls, rlimits, cgroup limits and device rules. sbx then starts the supervisor itself, directly
// in fresh namespaces (direct.go), and sends it the config's part that is built inside (a
// supervisor.Setup); the cgroups and their limits are set by the cgroups library from the host before
// the supervisor joins them. That is one process start per run instead of libcontainer's init (a
// re-execution of the whole sbx binary, three nsexec stages) that then executes the supervisor: about
// 12 ms less per cold run. libcontainer's init still builds a sandbox when SBX_LIBCONTAINER=1 asks
// for it, and for a config the supervisor does not build.
//
// It also records what the sandbox refuses, without kernel audit: the seccomp filter notifies a
// listener of sbx's (package seccomp) of the deny list's syscalls and of writes by path, and
// [Sandbox.Denials] returns what it recorded.
//
// It reads no YAML: it takes a compiled policy.Plan. It reads the sandbox only as far as it needs to run
// it: the cgroup's process and thread lists and counters (Pids, Tasks, OnlyInit, LimitHits, Settle) and
// a few /proc files (a pid's status and stat, to map pids and to see that the sandbox is quiet). What the
// command did and left behind is package observe's to read, through the pids and paths exposed here.
//
// [Features] is the one table of what sbx needs from the kernel and host (user namespaces, Landlock's
// ABI, seccomp, the cgroup layout, idmapped mounts, pasta), each row qualified for this caller, root or
// not (features.go); `sbx version` prints it.
//
// # Re-execution
//
// The sbx binary is re-executed in these roles: libcontainer's "init" (namespace setup, only on
// libcontainer's path), the supervisor
// (pid 1 of the sandbox when no sbx-init lies next to sbx; it speaks with sbx over the control socket,
// supervisor.Conn), the network contract's helper (netcontract.HelperRole), and roles a program
// registers to run sbx itself inside a sandbox ([RegisterRole], [SelfCommand]: the network probe).
// Every binary that creates sandboxes, test binaries included, must call [Reexec] at the very start of
// main or TestMain, and lock the main OS thread in an init function (a libcontainer
// goroutine can otherwise leave the main thread in the container's mount namespace).
//
// # User namespace
//
// Every sandbox has a user namespace of its own (see userns.go): its root is the supervisor, an
// unprivileged uid on the host; the command keeps its uid. As root, the working tree is shown to the
// command as its own through an idmapped lower layer of an overlay of its own (package rootfs), and
// stdio the command could not reopen is relayed through pipes of its user (stdio.go). Without root
// (rootless.go) the caller is the namespace's root, the mounts are made inside it, and there is a
// cgroup only where systemd delegates one (package cgroup).
//
// # Layout on the host
//
//	/run/sbx/runs/ID/        state of one run: owner file (pid of sbx), lock
//	/run/sbx/runs/ID/layer   a size-limited tmpfs holding the overlay's upper and work dirs
//	/run/sbx/runs/ID/lower   a read-only, non-recursive bind of the host's /: the root's lower layer
//	/run/sbx/runs/ID/rootfs  the overlay: lower = lower, upper = layer/upper
//	/run/sbx/runs/ID/cwd     when the working directory is on another file system, or shown to the
//	                         command through an idmapping: its own overlay (lower = lower-cwd, a bind
//	                         of the directory, idmapped then; upper = layer/upper-cwd)
//	/run/sbx/runs/ID/seccomp.sock  where runc sends the seccomp notification fd to sbx
//	/run/sbx/lc/ID           libcontainer's own state (on libcontainer's path only)
//	cgroup /sbx-ID           in every hierarchy
//
// The run dir belongs to the sandbox's root (host uid), which reaches rootfs by path. Without root the
// state root is $XDG_RUNTIME_DIR/sbx or ~/.local/state/sbx; a run dir holds rootfs (the top level of
// the host's /), layer/upper/NAME and layer/work/NAME (one overlay per top-level directory, mounted
// inside the sandbox) and empty (the lower layer of hidden top-level directories).
//
// A run whose sbx died leaves these behind; state.GC removes them, and [Create] calls it cheaply first.
package sandbox
