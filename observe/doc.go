// Package observe gives read-only views of a running sandbox: its processes with their open fds, its
// sockets, and the difference between two snapshots.
//
// What it finds it writes into the types of package report (report.Process, report.Socket,
// report.Exec, report.FileChange, report.Denials, ...), which own the report's format.
//
// It changes nothing in the sandbox: it reads /proc and asks netlink sock_diag inside the sandbox's
// network namespace. It writes in two places only, both on the host: [Copier] copies the changed files
// out (`sbx exec --changes DIR`), and the denials collector sends an end-of-run marker record to the
// kernel's audit log. It only walks the sandbox's own processes (given by pid), never the whole host, so its cost does not
// grow with the host.
//
// # What it offers
//
//   - [Snapshot]: the sandbox's processes (sandbox pid and ppid, exe, comm, argv, uid, start, orphaned,
//     deleted executable, open fds with what each socket is) and its listening and established sockets,
//     mapped to their owners through the socket inodes in the processes' fds.
//   - [LeftRunning]: what is new in an after snapshot and still alive. A process whose main thread exited
//     while another runs on (a zombie in /proc) is alive: it is read through a live thread. Given the
//     sandbox's threads (SnapshotOptions.HostTasks, from its cgroup), the snapshot also reads every process
//     they belong to. Take it of a frozen sandbox, so that nothing forks or exits during the walk.
//   - [StartEvents] and [Events.Stop]: every exec between the snapshots, from the kernel's process-events
//     connector, filtered to the sandbox's fork tree: in the kernel, by an eBPF socket filter that
//     learns the tree from its forks and ends a process with its last thread (events_bpf.go), and again
//     by the reader; without eBPF, by the reader only, from every process's events on the host.
//   - [Changes], [ChangesSince] and [Copier]: files created, modified and deleted, from the overlay's
//     upper layer, read by fd without following links and within bounds; copied out for review
//     through root handles (package internal/safefs) that no link can leave.
//   - [StartShareWatch] and [ShareWatch.Stop]: what the sandbox's processes created, modified and
//     deleted below writable shares (the host's directories bound in), from fanotify events of a
//     filesystem mark, sorted by the process's pid namespace or the exec stream's fork tree
//     ([Events.InTree]); root only (sharewatch.go says how and where it stops).
//   - [StartDenials] and [DenialsCollector.Stop]: what the kernel's audit records say the sandbox was
//     refused; [MergeDenials] lays them under what sbx recorded itself (package sandbox's seccomp
//     notification listener), without duplicates.
//
// # Limits
//
//   - What it keeps is bounded (bounds.go): argv per process and exec, fds per process, execs, left
//     running processes, sockets; each cut list says so. Events of processes outside the tracked tree are
//     not recorded.
//   - A process that exits within microseconds of its exec may be gone before its exe and argv are read.
//     Its exec is then kept, marked Incomplete, with what was left (comm while it is a zombie, else only
//     its pids and time). Measured here: about 0.3% of /bin/true runs.
//   - Process events reach only sockets in the host's network namespace (and, before Linux 6.6, only
//     root's); StartEvents returns [ErrHostNetNS] when called from elsewhere. If sbx itself runs inside a container with its own network
//     namespace, no event arrives at all.
//   - The TCP socket dump walks the kernel's established-socket hash, which all network namespaces share
//     unless net.ipv4.tcp_child_ehash_entries gave the sandbox's its own: about 0.2 ms whatever the
//     namespace holds. MPTCP sockets are not dumped (that would load a kernel module); their TCP subflows
//     show without an owner.
//   - File changes are those of the overlay's upper layer: writes through other mounts (shared host paths)
//     are [ShareWatch]'s, for root only, and the old contents of a directory replaced as a whole (opaque) are not listed as
//     deleted. Each list keeps its first [DefaultMaxEntries] (with totals); trees nested deeper than 256
//     levels are not read (a Problem says so).
package observe
