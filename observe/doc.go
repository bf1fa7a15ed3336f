// Package observe gives read-only views of a running sandbox: its processes with their open fds, its
// sockets, and the difference between two snapshots.
//
// It changes nothing: it reads /proc and asks netlink sock_diag inside the sandbox's network namespace.
// It only walks the sandbox's own processes (given by pid), never the whole host, so its cost does not
// grow with the host.
package observe
