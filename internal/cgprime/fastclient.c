// The fast client of the sbx service: an sbx exec that finds its caller's service socket hands the
// service its command line, environment, working directory and stdio from the constructor, before Go's
// runtime starts, and exits with the status the service gives (cmd/sbx/serve_raw.go has the protocol
// and the service's side, which runs the CLI's own code). Where the service hands the run back, or
// anything here fails before the run started, sbx_fast_exec returns and the CLI goes on as without it.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "fastclient.h"

extern char **environ;

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

// FAST_WAIT_MS bounds each wait before the run starts (the CLI's serviceWait).
#define FAST_WAIT_MS 5000
// FAST_MAX_REQUEST bounds the request (the service's maxServiceFrame).
#define FAST_MAX_REQUEST (16u << 20)
// FAST_MAX_REPLY bounds a reply frame.
#define FAST_MAX_REPLY 65536

struct buf {
	char *p;
	size_t len, cap;
	int bad;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->bad)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = cap <= FAST_MAX_REQUEST + 4 ? realloc(b->p, cap) : NULL;
		if (!p) {
			b->bad = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

// field appends s and its NUL.
static void field(struct buf *b, const char *s) { put(b, s, strlen(s) + 1); }

static void fieldu(struct buf *b, unsigned long long v)
{
	char s[32];
	snprintf(s, sizeof(s), "%llu", v);
	field(b, s);
}

// sbx_fast_socket says whether path is a socket of the caller's in a directory only it (or root) can
// change: the CLI's checkServiceSocket.
int sbx_fast_socket(const char *path)
{
	struct stat st, dir;
	if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != geteuid())
		return 0;
	char d[4096];
	size_t n = strlen(path);
	if (n >= sizeof(d))
		return 0;
	memcpy(d, path, n + 1);
	char *slash = strrchr(d, '/');
	if (!slash)
		strcpy(d, ".");
	else if (slash == d)
		d[1] = '\0';
	else
		*slash = '\0';
	if (stat(d, &dir) != 0 || (dir.st_uid != geteuid() && dir.st_uid != 0))
		return 0;
	return (dir.st_mode & 022) == 0 || (dir.st_mode & S_ISVTX) != 0;
}

// waitfor polls fd for events, FAST_WAIT_MS at most; 1 when ready.
static int waitfor(int fd, short events)
{
	struct pollfd p = {.fd = fd, .events = events};
	for (;;) {
		int r = poll(&p, 1, FAST_WAIT_MS);
		if (r < 0 && errno == EINTR)
			continue;
		return r == 1;
	}
}

static int sendall(int fd, const char *p, size_t n)
{
	while (n > 0) {
		if (!waitfor(fd, POLLOUT))
			return -1;
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= w;
	}
	return 0;
}

// sendframe sends a frame of fields (NUL-separated, as given in b) on fd.
static int sendframe(int fd, const char *body, size_t n)
{
	char hdr[4] = {(char)(n >> 24), (char)(n >> 16), (char)(n >> 8), (char)n};
	if (sendall(fd, hdr, 4) != 0)
		return -1;
	return sendall(fd, body, n);
}

// recvall reads n bytes; wait says whether to bound the wait (before the run starts).
static int recvall(int fd, char *p, size_t n, int wait)
{
	while (n > 0) {
		if (wait && !waitfor(fd, POLLIN))
			return -1;
		ssize_t r = recv(fd, p, n, wait ? MSG_DONTWAIT : 0);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= r;
	}
	return 0;
}

// recvframe reads a frame into out (NUL-terminated; its fields NUL-separated); its length, or -1.
static ssize_t recvframe(int fd, char *out, size_t size, int wait)
{
	unsigned char hdr[4];
	if (recvall(fd, (char *)hdr, 4, wait) != 0)
		return -1;
	size_t n = (size_t)hdr[0] << 24 | (size_t)hdr[1] << 16 | (size_t)hdr[2] << 8 | hdr[3];
	if (n >= size)
		return -1;
	if (recvall(fd, out, n, wait) != 0)
		return -1;
	out[n] = '\0';
	return (ssize_t)n;
}

// samens says whether the process pid is in this process's namespace ns.
static int samens(int pid, const char *ns)
{
	char own[128], its[128], path[64];
	ssize_t a = readlink((snprintf(path, sizeof(path), "/proc/self/ns/%s", ns), path), own, sizeof(own));
	ssize_t b = readlink((snprintf(path, sizeof(path), "/proc/%d/ns/%s", pid, ns), path), its, sizeof(its));
	return a > 0 && a == b && memcmp(own, its, a) == 0;
}

// ownpeer says whether the service at the other end of fd is of this process's uid, in its user and
// pid namespaces (the CLI's ownPeer): a process in a sandbox must not pose as the service.
static int ownpeer(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid() || cred.pid <= 0)
		return 0;
	int pidfd = -1;
	len = sizeof(pidfd);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0)
		pidfd = -1;
	int ok = samens(cred.pid, "user") && samens(cred.pid, "pid");
	if (pidfd >= 0) {
		ok = ok && syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
		close(pidfd);
	}
	return ok;
}

// cwd is the working directory as Go's os.Getwd names it: $PWD when it is the same directory, else
// getcwd's.
static int cwd(char *out, size_t size)
{
	const char *pwd = getenv("PWD");
	struct stat a, b;
	if (pwd && pwd[0] == '/' && strlen(pwd) < size && stat(pwd, &a) == 0 && stat(".", &b) == 0 &&
	    a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
		strcpy(out, pwd);
		return 0;
	}
	return getcwd(out, size) ? 0 : -1;
}

// handsfd says whether arg names a descriptor by path (the CLI warns about those, warnCallerFDs).
static int handsfd(const char *arg) { return strstr(arg, "/dev/fd/") || strstr(arg, "/proc/self/fd/"); }

void sbx_fast_exec(int argc, char **argv, const char *socket_path, unsigned long caller_slack, int closed)
{
	if (getenv("_SBX_COLD") || getenv("_SBX_NO_FAST"))
		return;
	for (int i = 0; i < 3; i++)
		if (isatty(i))
			return; // the command gets a terminal: the CLI runs it (cold)
	for (int i = 2; i < argc; i++)
		if (handsfd(argv[i]))
			return;
	char dir[4096], exe[128];
	struct stat self;
	if (cwd(dir, sizeof(dir)) != 0 || stat("/proc/self/exe", &self) != 0)
		return;
	snprintf(exe, sizeof(exe), "%llu:%llu:%lld:%lld.%ld", (unsigned long long)self.st_dev,
		 (unsigned long long)self.st_ino, (long long)self.st_size, (long long)self.st_mtim.tv_sec,
		 self.st_mtim.tv_nsec);
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	if (strlen(socket_path) >= sizeof(addr.sun_path))
		return;
	strcpy(addr.sun_path, socket_path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return;
	// A Unix socket connects at once, or not (EAGAIN: a backlog that is full; the CLI tries again).
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || !ownpeer(fd)) {
		close(fd);
		return;
	}

	struct rlimit nofile = {0}, memlock = {0};
	getrlimit(RLIMIT_NOFILE, &nofile);
	getrlimit(RLIMIT_MEMLOCK, &memlock);
	mode_t mask = umask(022); // one thread: nothing races the two calls
	umask(mask);
	struct buf b = {0};
	put(&b, "\0\0\0\0", 4); // the frame's length, below
	field(&b, "sbx-raw 1");
	field(&b, exe);
	field(&b, dir);
	field(&b, socket_path);
	fieldu(&b, (unsigned)closed);
	fieldu(&b, nofile.rlim_cur);
	fieldu(&b, nofile.rlim_max);
	fieldu(&b, memlock.rlim_cur);
	fieldu(&b, memlock.rlim_max);
	fieldu(&b, caller_slack);
	fieldu(&b, mask);
	fieldu(&b, (unsigned)(argc - 1));
	for (int i = 1; i < argc; i++)
		field(&b, argv[i]);
	size_t envc = 0;
	for (char **e = environ; e && *e; e++)
		envc++;
	fieldu(&b, envc);
	for (char **e = environ; e && *e; e++)
		field(&b, *e);
	if (b.bad || b.len - 4 > FAST_MAX_REQUEST) {
		free(b.p);
		close(fd);
		return;
	}
	size_t n = b.len - 4 - 1; // the last field's NUL ends the body
	b.p[0] = n >> 24, b.p[1] = n >> 16, b.p[2] = n >> 8, b.p[3] = n;
	// The frame's first bytes carry stdio.
	int fds[3] = {0, 1, 2};
	char ctl[CMSG_SPACE(sizeof(fds))];
	memset(ctl, 0, sizeof(ctl));
	struct iovec iov = {.iov_base = b.p, .iov_len = b.len - 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	ssize_t w;
	while ((w = sendmsg(fd, &msg, MSG_NOSIGNAL)) < 0 && (errno == EINTR || (errno == EAGAIN && waitfor(fd, POLLOUT))))
		;
	if (w <= 0 || sendall(fd, b.p + w, b.len - 1 - w) != 0) {
		free(b.p);
		close(fd);
		return;
	}
	free(b.p);

	static char reply[FAST_MAX_REPLY];
	ssize_t got = recvframe(fd, reply, sizeof(reply), 1);
	if (got < 0 || strcmp(reply, "back") == 0) {
		close(fd);
		return; // nothing was written: the CLI goes on
	}
	if (strcmp(reply, "exit") == 0 && (size_t)got > 5)
		_exit(atoi(reply + 5)); // the command line's error, which the service printed
	if (strcmp(reply, "ready") != 0) {
		close(fd);
		return;
	}
	// From here the run is the service's: the signals sbx gets are its, and its status is sbx's.
	char lost[FAST_MAX_REPLY];
	snprintf(lost, sizeof(lost), "%s", (size_t)got > 6 ? reply + 6 : "sbx: error: the sbx service ended during the run\n");
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	int sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sendframe(fd, "go", 2) != 0) {
		// Not started, or started and gone: the service ends a run whose client it lost.
		if (write(2, lost, strlen(lost)) < 0) {
		}
		_exit(SBX_EXIT_SETUP);
	}
	struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
	for (;;) {
		int r = poll(p, sfd >= 0 ? 2 : 1, -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		if (sfd >= 0 && p[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
				char m[16];
				int len = snprintf(m, sizeof(m), "signal%c%u", 0, si.ssi_signo);
				sendframe(fd, m, len);
			}
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			got = recvframe(fd, reply, sizeof(reply), 0);
			if (got > 5 && strcmp(reply, "exit") == 0)
				_exit(atoi(reply + 5));
			break;
		}
	}
	if (write(2, lost, strlen(lost)) < 0) {
	}
	_exit(SBX_EXIT_SETUP);
}
