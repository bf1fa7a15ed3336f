// Package cgroup owns a sandbox's cgroups on the host: their names and directories (Name, Dirs), made
// ahead of the container while the overlays are built (Prep), the priming of the kernel's cgroup lock
// during that time (Primer), the cgroup systemd delegates to a caller without root and its preparation
// (Delegation), and what reads and ends the processes in a run's cgroups (Pids, Counter, Thaw, Kill),
// for the sandbox's limits, its teardown and gc.
//
// It knows nothing of a sandbox's other parts: package sandbox decides when each step runs, and sets
// the limits through libcontainer's cgroup manager (NewManager).
package cgroup
