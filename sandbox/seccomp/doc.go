// Package seccomp owns the sandbox's seccomp filter on sbx's side: the filter a sandbox loads for a
// plan (Filter: logged, with the syscalls the plan records turned into notifications), its compilation
// into the program the supervisor loads, byte for byte runc's, with its cache in the state root
// (Program, bpf.go), and the listener of its notifications (Listener, notify.go), which records the
// deny list's syscalls with their decoded arguments (args.go) and the writes by path outside the
// write paths, each path resolved as the kernel resolves it for the notifying thread (resolve.go).
//
// It changes no kernel state but the filter's answers, and knows nothing of a sandbox's other parts:
// package sandbox creates the listener, hands it the notification fd the supervisor sends, and stops
// it once every process of the sandbox is dead.
package seccomp
