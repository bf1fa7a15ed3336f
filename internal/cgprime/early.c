// The same write as Prime, from a constructor that runs before Go's runtime starts: 0.3 ms after the
// process starts instead of 2.5 ms (the runtime and the package inits of a 17 MB binary). See the
// package's doc. The write, and the lookup of the file, run on a thread of their own with every signal
// blocked; the thread ends after its write, which waits for the grace period. Only for argv[1] "exec" or
// "probe" and euid 0, the same test as StartsNow.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef CGROUP_SUPER_MAGIC
#define CGROUP_SUPER_MAGIC 0x27e0eb
#endif

int sbx_cgprime_started;
int sbx_private_mounts; // the process has a mount namespace of its own (see sbx_cgprime)
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

__attribute__((constructor)) static void sbx_cgprime(int argc, char **argv)
{
	if (argc < 2 || !argv || !argv[1] || geteuid() != 0)
		return;
	if (strcmp(argv[1], "exec") != 0 && strcmp(argv[1], "probe") != 0)
		return;
	// A mount namespace of sbx's own, a slave of the host's, while the process has one thread: the
	// run's overlays, layer and binds then never enter the host's mount table, where every other run's
	// sandbox would copy them into its own namespace (and detach them again), and they go with sbx
	// however it ends. Host mounts made later still show here; nothing made here shows there.
	if (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) == 0)
		sbx_private_mounts = 1;
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
