// The child of sbx_vspawn shares sbx's memory (CLONE_VM) and runs on a stack of its own while the thread
// that started it waits (CLONE_VFORK) until it has executed. It touches only the struct, the strings and
// the stack it was given, and makes raw system calls: never a libc function that locks, allocates or
// changes ids (glibc's setuid would signal every thread of sbx, whose memory this is). syscall(3) sets
// errno in the waiting thread's TLS, which that thread never reads. Its file table, signal handlers and
// credentials are its own (no CLONE_FILES, CLONE_SIGHAND or CLONE_THREAD).
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <fcntl.h>

#include "vspawn.h"

// The kernel's struct sigaction (x86-64 and arm64 alike): a handler, flags, a restorer and 64 bits.
struct ksigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	unsigned long mask;
};

#define TRY(call)                   \
	do {                            \
		if ((long)(call) == -1) {   \
			err = errno;            \
			goto fail;              \
		}                           \
	} while (0)

static int child(void *arg) {
	struct sbx_vspawn *s = arg;
	int err = 0, errfd = s->err_w;
	char b;

	// The parent's ends, which this copy of the file table holds too: with them open here, the
	// mapper's closing of sync_w would never reach the read below.
	if (s->sync_r >= 0) {
		syscall(SYS_close, s->ready_r);
		syscall(SYS_close, s->sync_w);
	}

	// Caught signals back to their default, in this copy of the handlers: sbx's (the Go runtime's)
	// must not run here. Ignored ones stay ignored, as across an exec. Every signal is blocked until
	// just before the exec.
	for (int sig = 1; sig <= 64; sig++) {
		struct ksigaction old, dfl = {0};
		if (syscall(SYS_rt_sigaction, sig, NULL, &old, 8) != 0)
			continue;
		if (old.handler == (void *)SIG_DFL || old.handler == (void *)SIG_IGN)
			continue;
		syscall(SYS_rt_sigaction, sig, &dfl, NULL, 8);
	}

	// The id maps: the parent's mapper writes them once this says it runs.
	if (s->sync_r >= 0) {
		TRY(syscall(SYS_write, s->ready_w, "r", 1));
		long n = syscall(SYS_read, s->sync_r, &b, 1);
		if (n != 1) {
			err = n < 0 ? errno : EPERM;
			goto fail;
		}
	}
	if (s->setsid)
		TRY(syscall(SYS_setsid));
	if (s->set_creds) {
		if (s->drop_groups)
			TRY(syscall(SYS_setgroups, 0, NULL));
		TRY(syscall(SYS_setgid, s->gid));
		TRY(syscall(SYS_setuid, s->uid));
	}
	if (s->dir)
		TRY(syscall(SYS_chdir, s->dir));
	if (s->pdeathsig) {
		TRY(syscall(SYS_prctl, PR_SET_PDEATHSIG, s->pdeathsig, 0, 0, 0));
		// A parent that died before the signal was set sends none: the child has a new parent by now
		// (init, a subreaper), and would go on, orphaned. It ends itself as the signal would have, as
		// Go's own start does.
		if (syscall(SYS_getppid) != s->ppid)
			syscall(SYS_kill, syscall(SYS_getpid), s->pdeathsig);
	}

	// The fds into place as Go's own start does: first every fd that a lower slot would overwrite moves
	// above all of them, then each goes down onto its slot, without close-on-exec.
	int next = s->nfds;
	for (int i = 0; i < s->nfds; i++)
		if (s->fds[i] >= next)
			next = s->fds[i] + 1;
	if (errfd >= next)
		next = errfd + 1;
	if (errfd < s->nfds) {
		TRY(errfd = syscall(SYS_fcntl, errfd, F_DUPFD_CLOEXEC, next));
		next = errfd + 1;
	}
	int *fds = s->fds; // the caller's copy, which it never reads again
	for (int i = 0; i < s->nfds; i++) {
		if (fds[i] >= 0 && fds[i] < i) {
			TRY(fds[i] = syscall(SYS_fcntl, fds[i], F_DUPFD_CLOEXEC, next));
			next = fds[i] + 1;
		}
	}
	for (int i = 0; i < s->nfds; i++) {
		if (fds[i] < 0) {
			syscall(SYS_close, i);
		} else if (fds[i] == i) {
			TRY(syscall(SYS_fcntl, i, F_SETFD, 0));
		} else {
			TRY(syscall(SYS_dup3, fds[i], i, 0));
		}
	}

	if (s->ptrace)
		TRY(syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0));
	TRY(syscall(SYS_rt_sigprocmask, SIG_SETMASK, &s->mask, NULL, 8));
	syscall(SYS_execve, s->path, s->argv, s->envp);
	err = errno;
fail:
	syscall(SYS_write, errfd, &err, sizeof err);
	syscall(SYS_exit, 253);
	return 0;
}

// sbx_vspawn starts the child with every signal blocked on the calling thread (the child starts with
// that mask and gives the caller's back before its exec) and returns its pid, or -errno. It returns once
// the child has executed or failed.
pid_t sbx_vspawn(struct sbx_vspawn *s, void *stack, unsigned long stack_size) {
	unsigned long all = ~0UL, old = 0;
	if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, 8) != 0)
		return -errno;
	s->mask = old;
	s->ppid = (pid_t)syscall(SYS_getpid);
	int flags = (int)s->flags | CLONE_VM | CLONE_VFORK | CLONE_PARENT_SETTID | SIGCHLD;
	pid_t pid = clone(child, (char *)stack + stack_size, flags, s, &s->tid);
	int e = errno;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, 8);
	return pid < 0 ? -e : pid;
}
