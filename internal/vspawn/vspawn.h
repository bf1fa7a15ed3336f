#include <signal.h>
#include <sys/types.h>

// sbx_vspawn is one start: what the child does between the clone and the exec (see vspawn.c).
struct sbx_vspawn {
	const char *path;    // what to execute
	char *const *argv;   // NULL-terminated
	char *const *envp;   // NULL-terminated
	const char *dir;     // working directory; NULL: the parent's
	int *fds;            // fds[i] becomes the child's fd i; -1 leaves i closed (the child changes it)
	int nfds;
	unsigned long flags; // namespaces (CLONE_NEW*)
	int setsid;
	int pdeathsig;
	pid_t ppid;          // the caller's pid, to tell whether it died before the parent-death signal was set
	int ptrace;          // PTRACE_TRACEME before the exec: the child stops at it, traced by the caller's thread
	int set_creds;       // set the ids below (after the maps)
	int drop_groups;     // setgroups(0, NULL) first
	unsigned int uid, gid;
	int ready_r, ready_w; // the child says it runs (its pid is in tid); -1 without maps
	int sync_r, sync_w;   // the parent's mapper says the id maps are written; -1: no maps to wait for
	int err_w;            // close-on-exec: the errno of a failed step, or EOF once the exec succeeded
	unsigned long mask;   // the caller's signal mask, given back to the child before its exec
	pid_t tid;            // the child's pid, set by the kernel before the child runs
};

pid_t sbx_vspawn(struct sbx_vspawn *s, void *stack, unsigned long stack_size);
