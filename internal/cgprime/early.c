// The same write as Prime, from a constructor that runs before Go's runtime starts: 0.3 ms after the
// process starts instead of 2.5 ms (the runtime and the package inits of a 17 MB binary). See the
// package's doc. The write, and the lookup of the file, run on a thread of their own with every signal
// blocked; the thread ends after its write, which waits for the grace period. Only for argv[1] "exec" or
// "probe" and euid 0, the same test as StartsNow. Before it, the constructor sets the timer slack and
// makes the private mount namespace (see the package's doc).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <stdlib.h>
#include <unistd.h>

#include "fastclient.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef CGROUP_SUPER_MAGIC
#define CGROUP_SUPER_MAGIC 0x27e0eb
#endif

int sbx_cgprime_started;
int sbx_private_mounts; // the process has a mount namespace of its own (see sbx_cgprime)
int sbx_service_seen;   // sbx exec found its caller's sbx service (see the constructor)
char sbx_cgprime_path[4352]; // the file written, once found (for the tests)

// oncgroupfs says whether fd is on a cgroup file system (v1 or v2).
static int oncgroupfs(int fd)
{
	struct statfs st;
	return fstatfs(fd, &st) == 0 && (st.f_type == CGROUP2_SUPER_MAGIC || st.f_type == CGROUP_SUPER_MAGIC);
}

// readall reads up to size-1 bytes of path into buf, NUL-terminated; -1 on error.
static ssize_t readall(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return -1;
	size_t n = 0;
	while (n < size - 1) {
		ssize_t r = read(fd, buf + n, size - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += r;
	}
	close(fd);
	buf[n] = '\0';
	return n;
}

// listed says whether the cgroup.procs file at path lists pid (a whole line); the file is read in
// chunks, a number cut at a chunk's end carried over.
static int listed(const char *path, const char *pid)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return 0;
	if (!oncgroupfs(fd)) {
		close(fd);
		return 0;
	}
	char buf[4096 + 32], line[32];
	size_t have = 0, plen = strlen(pid);
	int found = 0;
	for (;;) {
		ssize_t r = read(fd, buf, 4096);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		for (ssize_t i = 0; i < r && !found; i++) {
			if (buf[i] == '\n') {
				found = have == plen && memcmp(line, pid, plen) == 0;
				have = 0;
			} else if (have < sizeof(line)) {
				line[have++] = buf[i];
			}
		}
		if (found)
			break;
	}
	close(fd);
	return found;
}

// sbx_cgprime_climbs says whether rel has a ".." component: in a cgroup namespace, a cgroup outside the
// namespace's root shows as /../name, which joined to the mount point leaves the cgroup file system.
int sbx_cgprime_climbs(const char *rel)
{
	for (const char *p = rel; (p = strstr(p, "..")) != NULL; p += 2)
		if ((p == rel || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
			return 1;
	return 0;
}

// candidate writes dir/rel/cgroup.procs into out when pid is listed there.
static int candidate(char *out, size_t size, const char *dir, const char *rel, const char *pid)
{
	size_t len = strlen(rel);
	int n = snprintf(out, size, "%s%s%scgroup.procs", dir, rel, len && rel[len - 1] == '/' ? "" : "/");
	if (n < 0 || (size_t)n >= size || sbx_cgprime_climbs(rel))
		return 0;
	return listed(out, pid);
}

static void *kick(void *unused)
{
	(void)unused;
	char own[4096], pid[16], path[sizeof(sbx_cgprime_path)];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	if (readall("/proc/self/cgroup", own, sizeof(own)) <= 0)
		return NULL;
	const char *unified = NULL, *pids = NULL;
	for (char *line = own, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		// hierarchy-ID:controller-list:path
		char *c = strchr(line, ':');
		char *p = c ? strchr(c + 1, ':') : NULL;
		if (!p)
			continue;
		*p++ = '\0';
		c++;
		if (*c == '\0') {
			unified = p;
			continue;
		}
		char *save = NULL;
		for (char *tok = strtok_r(c, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			if (strcmp(tok, "pids") == 0)
				pids = p;
	}
	int found = 0;
	if (unified) {
		struct statfs st;
		int v2 = statfs("/sys/fs/cgroup", &st) == 0 && st.f_type == CGROUP2_SUPER_MAGIC;
		found = candidate(path, sizeof(path), v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/unified", unified, pid);
	}
	if (!found && pids)
		found = candidate(path, sizeof(path), "/sys/fs/cgroup/pids", pids, pid);
	if (!found)
		return NULL;
	memcpy(sbx_cgprime_path, path, sizeof(path));
	int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd >= 0 && oncgroupfs(fd)) {
		ssize_t unused_n = write(fd, pid, strlen(pid));
		(void)unused_n;
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

// sbx_timer_slack is the timer slack (ns) of the thread that started sbx, before the constructor
// raised it; 0 when it did not.
unsigned long sbx_timer_slack;

// sbx_nofile_soft is the soft limit of open files sbx's caller started it with, before Go's runtime
// raised it to the hard limit (the os package does, since Go 1.19, and gives it back only to the
// processes os/exec starts); sbx_nofile_known says it was read. The command gets it (sandbox's rlimits),
// as it would on the host.
unsigned long long sbx_nofile_soft;
int sbx_nofile_known;

// SBX_SLACK_NS is the timer slack of every thread of sbx exec and sbx probe. Go's runtime has a
// monitor thread (sysmon) that sleeps 20 us at a time, for a millisecond or more, whenever the process
// enters a syscall after being idle, which an sbx run does all the time. On a busy machine each of
// those wake-ups is a context switch, and with 20 runs at once they cost a fifth of the runs' time.
// With this slack the kernel wakes the thread with the next timer it fires anyway, within 2 ms. Threads
// inherit it from the thread that creates them, so it is set before the runtime starts any. Not for
// sbx mcp: a server with many goroutines makes the scheduler's short sleeps (3 us, when one P steals
// another's next goroutine) common, and each could last the whole slack. The command gets its caller's
// value back (see the supervisor's starter).
#define SBX_SLACK_NS 2000000UL

// builds says whether the subcommand cmd builds sandboxes.
static int builds(const char *cmd)
{
	return strcmp(cmd, "exec") == 0 || strcmp(cmd, "probe") == 0 || strcmp(cmd, "mcp") == 0 ||
	       strcmp(cmd, "serve") == 0;
}

// fast_path is the socket of the caller's sbx service as the CLI's serviceSocket names it: $SBX_SERVICE,
// else root's /run/sbx.sock, another user's sbx.sock in $XDG_RUNTIME_DIR or /run/user/UID; NULL for
// SBX_SERVICE=off.
static const char *fast_path(char *buf, size_t size)
{
	const char *p = getenv("SBX_SERVICE");
	if (p && strcmp(p, "off") == 0)
		return NULL;
	if (p && *p)
		return p;
	if (geteuid() == 0)
		return "/run/sbx.sock";
	const char *x = getenv("XDG_RUNTIME_DIR");
	int n = x && x[0] == '/' ? snprintf(buf, size, "%s%ssbx.sock", x, x[strlen(x) - 1] == '/' ? "" : "/")
				 : snprintf(buf, size, "/run/user/%u/sbx.sock", (unsigned)geteuid());
	return n > 0 && (size_t)n < size ? buf : NULL;
}

// sbx_closed_stdio has bit N set when fd N (0, 1, 2) was closed when sbx started: the command gets it
// closed too (see stdfds).
int sbx_closed_stdio;

// stdfds opens /dev/null on each of fds 0, 1 and 2 that is closed, as Go's runtime means to (checkfds)
// but cannot here: it looks later, while kick may hold such a number for a file of its own, which it
// closes after. The number was then free for whatever sbx opened next (the supervisor's control
// socket, the seccomp listener), and os.Stdin, os.Stdout or os.Stderr named that: with its stdin
// closed (sbx exec ... <&-), sbx passed its own end of a socket to the command as stdin.
static void stdfds(void)
{
	for (int fd = 0; fd < 3; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		sbx_closed_stdio |= 1 << fd;
		// The lowest free number, fd itself: the ones below it are open by now.
		if (open("/dev/null", O_RDWR) < 0)
			return;
	}
}

__attribute__((constructor)) static void sbx_cgprime(int argc, char **argv)
{
	stdfds();
	if (argc < 2 || !argv || !argv[1] || !builds(argv[1]))
		return;
	int server = strcmp(argv[1], "mcp") == 0 || strcmp(argv[1], "serve") == 0;
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
		sbx_nofile_soft = nofile.rlim_cur;
		sbx_nofile_known = 1;
	}
	int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	if (!server && slack > 0 && prctl(PR_SET_TIMERSLACK, SBX_SLACK_NS, 0, 0, 0) == 0)
		sbx_timer_slack = slack;
	if (strcmp(argv[1], "exec") == 0) {
		char buf[4200];
		const char *path = fast_path(buf, sizeof(buf));
		if (path && sbx_fast_socket(path)) {
			// The fast client (fastclient.c): returns only when the service did not take the run.
			sbx_fast_exec(argc, argv, path, slack > 0 ? (unsigned long)slack : 0, sbx_closed_stdio);
			// Root's sbx exec hands the run to the service's Go client then (cmd/sbx's
			// service_client.go): none of a cold run's early work is started; a run that falls
			// back to cold goes without it (slower to start, the same run).
			if (geteuid() == 0) {
				sbx_service_seen = 1;
				return;
			}
		}
	}
	if (geteuid() != 0)
		return;
	// A mount namespace of sbx's own, a slave of the host's, while the process has one thread: the
	// run's overlays, layer and binds (a server's whole pool) never enter the host's mount table, where
	// every other run's sandbox would copy them into its own namespace (and detach them again), and
	// they go with sbx however it ends. Host mounts made later still show here; nothing made here shows
	// there.
	if (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) == 0)
		sbx_private_mounts = 1;
	if (server)
		return;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); // the thread starts with this mask
	pthread_attr_t attr;
	pthread_t t;
	if (pthread_attr_init(&attr) == 0) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, 64 * 1024);
		if (pthread_create(&t, &attr, kick, NULL) == 0)
			sbx_cgprime_started = 1;
		pthread_attr_destroy(&attr);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}
