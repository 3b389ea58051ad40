/*
 * rsockets through softib's librdmacm.so.1, as an unmodified rdma-core 44 program calls them.
 * Built by tests/rsocket_cases.rs against the installed <rdma/rsocket.h>, linked with -lrdmacm
 * -libverbs, run on softib's libraries (LD_LIBRARY_PATH). `rsocket_cases CASE` runs one case.
 * Most cases fork before touching softib: the parent is the server (listening on a free
 * loopback address, port chosen by softib), the child the client (its device on another
 * loopback address); a socketpair carries what the test itself coordinates (the server's
 * address, "go" signals, byte counts). The program exits 0 only if every check held in both
 * processes; each failed check is printed. Each process gives up after 30 s (SIGALRM) and
 * names the step it was at.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include <rdma/rsocket.h>

static int failures;
static const char *role = "main";
static const char *volatile step = "start";

#define STEP(s) (step = (s))

#define CHECK(cond, ...)                                                              \
	do {                                                                              \
		if (!(cond)) {                                                                \
			int e_ = errno;                                                           \
			__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);                       \
			fprintf(stderr, "FAIL %s %s:%d: %s: ", role, __func__, __LINE__, #cond);  \
			fprintf(stderr, __VA_ARGS__);                                             \
			fprintf(stderr, " (errno %d %s)\n", e_, strerror(e_));                    \
		}                                                                             \
	} while (0)

#define DIE(...)                                                                      \
	do {                                                                              \
		int e_ = errno;                                                               \
		fprintf(stderr, "SETUP FAILED %s %s:%d: ", role, __func__, __LINE__);         \
		fprintf(stderr, __VA_ARGS__);                                                 \
		fprintf(stderr, " (errno %d %s)\n", e_, strerror(e_));                        \
		exit(2);                                                                      \
	} while (0)

#define KiB 1024
#define MiB (1024 * 1024)

/* Where each of the `many` case's threads is (named on a timeout). */
#define MANY 8
static const char *volatile thread_step[MANY];

static void say(const char *s)
{
	if (write(2, s, strlen(s)) < 0)
		_exit(3);
}

static void on_alarm(int sig)
{
	(void)sig;
	say("TIMEOUT (");
	say(role);
	say(") at: ");
	say(step);
	say("\n");
	for (int i = 0; i < MANY; i++) {
		if (thread_step[i]) {
			char n[2] = { (char)('0' + i), 0 };
			say("  thread ");
			say(n);
			say(": ");
			say(thread_step[i]);
			say("\n");
		}
	}
	_exit(3);
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int is_again(int e)
{
	return e == EAGAIN || e == EWOULDBLOCK;
}

/* ---- byte patterns -------------------------------------------------------------------- */

/* Byte `i` of stream `seed`: no short period, so a byte out of place shows. */
static uint8_t pat(uint64_t i, uint32_t seed)
{
	uint64_t x = (i + ((uint64_t)seed << 32)) * 0x9E3779B97F4A7C15ull;
	return (uint8_t)((x >> 56) ^ (x >> 29));
}

static void fill(uint8_t *b, size_t len, uint64_t from, uint32_t seed)
{
	for (size_t i = 0; i < len; i++)
		b[i] = pat(from + i, seed);
}

/* The index of the first byte of `b` that is not the pattern, or `len`. */
static size_t mismatch(const uint8_t *b, size_t len, uint64_t from, uint32_t seed)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != pat(from + i, seed))
			return i;
	return len;
}

static uint32_t checksum(uint32_t sum, const uint8_t *b, size_t len)
{
	for (size_t i = 0; i < len; i++)
		sum = sum * 31 + b[i];
	return sum;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p)
		DIE("malloc %zu", n);
	return p;
}

/* ---- the control channel between the two processes ------------------------------------ */

static void ctl_put(int fd, const void *p, size_t n)
{
	if (write(fd, p, n) != (ssize_t)n)
		DIE("control channel write");
}

static void ctl_get(int fd, void *p, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)p + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			DIE("control channel read at \"%s\": the other process went away", step);
		got += r;
	}
}

static void ctl_signal(int fd, char c)
{
	ctl_put(fd, &c, 1);
}

static void ctl_expect(int fd, char want)
{
	char c;
	ctl_get(fd, &c, 1);
	if (c != want)
		DIE("control channel: got '%c', want '%c'", c, want);
}

/* ---- sockets ---------------------------------------------------------------------------- */

static int same_addr(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_family == b->sin_family && a->sin_port == b->sin_port &&
	       a->sin_addr.s_addr == b->sin_addr.s_addr;
}

static const char *fmt_addr(const struct sockaddr_in *a)
{
	static __thread char buf[4][48];
	static __thread int n;
	char *b = buf[n++ & 3];
	char ip[INET_ADDRSTRLEN] = "?";
	inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
	snprintf(b, 48, "%s:%u (family %d)", ip, ntohs(a->sin_port), a->sin_family);
	return b;
}

/* Binds `fd` to a free loopback address (another process may hold one: its softib device is
 * there), port 0; the address and the port softib chose in `addr`. */
static void free_bind(int fd, struct sockaddr_in *addr)
{
	for (int n = 1; n < 255; n++) {
		memset(addr, 0, sizeof(*addr));
		addr->sin_family = AF_INET;
		addr->sin_addr.s_addr = htonl(0x7f000000 | n);
		if (rbind(fd, (struct sockaddr *)addr, sizeof(*addr)) == 0) {
			struct sockaddr_in got;
			socklen_t len = sizeof(got);
			memset(&got, 0, sizeof(got));
			if (rgetsockname(fd, (struct sockaddr *)&got, &len))
				DIE("rgetsockname");
			CHECK(len == sizeof(got) && got.sin_family == AF_INET &&
				      got.sin_addr.s_addr == addr->sin_addr.s_addr,
			      "rgetsockname after rbind: %s (len %u)", fmt_addr(&got), len);
			CHECK(got.sin_port != 0, "rbind with port 0 chose a port");
			if (got.sin_port == 0)
				DIE("no port to connect to");
			addr->sin_port = got.sin_port;
			return;
		}
		if (errno != EADDRINUSE)
			DIE("rbind 127.0.0.%d", n);
	}
	DIE("no free loopback address");
}

static int make_listener(struct sockaddr_in *addr, int type_flags, void (*opts)(int))
{
	int l = rsocket(AF_INET, SOCK_STREAM | type_flags, 0);
	if (l < 0)
		DIE("rsocket");
	if (opts)
		opts(l);
	free_bind(l, addr);
	if (rlisten(l, 16))
		DIE("rlisten");
	return l;
}

static int connect_to(const struct sockaddr_in *addr, void (*opts)(int))
{
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	if (c < 0)
		DIE("rsocket");
	if (opts)
		opts(c);
	STEP("rconnect");
	if (rconnect(c, (const struct sockaddr *)addr, sizeof(*addr)))
		DIE("rconnect to %s", fmt_addr(addr));
	return c;
}

static int accept_one(int l)
{
	STEP("raccept");
	int a = raccept(l, NULL, NULL);
	if (a < 0)
		DIE("raccept");
	return a;
}

/* rsend until all of `len` is sent; false (and a failure) if a call fails. */
static int send_all(int fd, const void *buf, size_t len)
{
	size_t off = 0;
	while (off < len) {
		ssize_t r = rsend(fd, (const char *)buf + off, len - off, 0);
		if (r <= 0) {
			CHECK(r > 0, "rsend after %zu of %zu bytes returned %zd", off, len, r);
			return 0;
		}
		off += r;
	}
	return 1;
}

/* rrecv until `len` bytes came or the stream ended; the count. */
static size_t recv_all(int fd, void *buf, size_t len)
{
	size_t off = 0;
	while (off < len) {
		ssize_t r = rrecv(fd, (char *)buf + off, len - off, 0);
		if (r <= 0) {
			CHECK(r > 0, "rrecv after %zu of %zu bytes returned %zd", off, len, r);
			break;
		}
		off += r;
	}
	return off;
}

/* Reads `total` bytes of pattern `seed` and checks them. */
static void recv_check(int fd, size_t total, uint32_t seed, const char *what)
{
	uint8_t *b = xmalloc(total ? total : 1);
	size_t got = recv_all(fd, b, total);
	CHECK(got == total, "%s: %zu of %zu bytes", what, got, total);
	size_t m = mismatch(b, got, 0, seed);
	CHECK(m == got, "%s: byte %zu is %#x, want %#x", what, m, m < got ? b[m] : 0,
	      pat(m, seed));
	free(b);
}

/* Forks: the child runs `client`, the parent `server`; each gets its end of the control
 * channel. The client's failures fail the case. */
static void run_pair(void (*server)(int ctl), void (*client)(int ctl))
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		DIE("socketpair");
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		DIE("fork");
	if (pid == 0) {
		close(sv[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		role = "client";
		alarm(30);
		client(sv[1]);
		STEP("exit");
		exit(failures ? 1 : 0);
	}
	close(sv[1]);
	role = "server";
	server(sv[0]);
	STEP("waiting for the client process");
	int st;
	if (waitpid(pid, &st, 0) != pid)
		DIE("waitpid");
	close(sv[0]);
	role = "main";
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
		if (WIFEXITED(st))
			fprintf(stderr, "FAIL: the client process exited with %d\n", WEXITSTATUS(st));
		else
			fprintf(stderr, "FAIL: the client process was killed by signal %d\n",
				WTERMSIG(st));
	}
}

/* ---- stream ----------------------------------------------------------------------------- */

#define STREAM_TOTAL (3 * MiB)

/* 3 MiB in rsend calls of 1 B .. 200 KiB, read with rrecv into buffers of 1 B .. 256 KiB and
 * checked byte by byte, a checksum echoed; the four addresses agree. */
static void stream_server(int ctl)
{
	struct sockaddr_in addr;
	int l = make_listener(&addr, 0, NULL);
	ctl_put(ctl, &addr, sizeof(addr));
	struct sockaddr_in peer;
	socklen_t plen = sizeof(peer);
	memset(&peer, 0, sizeof(peer));
	STEP("raccept");
	int a = raccept(l, (struct sockaddr *)&peer, &plen);
	if (a < 0)
		DIE("raccept");
	struct sockaddr_in cl_name, cl_peer;
	uint32_t seed;
	ctl_get(ctl, &cl_name, sizeof(cl_name));
	ctl_get(ctl, &cl_peer, sizeof(cl_peer));
	ctl_get(ctl, &seed, sizeof(seed));
	CHECK(plen == sizeof(peer) && same_addr(&peer, &cl_name),
	      "raccept's address %s is the client's rgetsockname %s (len %u)", fmt_addr(&peer),
	      fmt_addr(&cl_name), plen);
	CHECK(same_addr(&cl_peer, &addr),
	      "the client's rgetpeername %s is the server's bound address %s", fmt_addr(&cl_peer),
	      fmt_addr(&addr));
	struct sockaddr_in x;
	socklen_t xl = sizeof(x);
	memset(&x, 0, sizeof(x));
	CHECK(rgetpeername(a, (struct sockaddr *)&x, &xl) == 0 && same_addr(&x, &cl_name),
	      "the accepted socket's peer %s is the client's address %s", fmt_addr(&x),
	      fmt_addr(&cl_name));
	xl = sizeof(x);
	memset(&x, 0, sizeof(x));
	CHECK(rgetsockname(a, (struct sockaddr *)&x, &xl) == 0 && same_addr(&x, &addr),
	      "the accepted socket's name %s is the listener's %s", fmt_addr(&x), fmt_addr(&addr));

	uint8_t *buf = xmalloc(256 * KiB);
	size_t got = 0;
	uint32_t sum = 0;
	int bad = 0;
	unsigned rs = seed ^ 0x5a5a5a5a;
	STEP("reading 3 MiB");
	while (got < STREAM_TOTAL) {
		size_t want = 1 + rand_r(&rs) % (256 * KiB);
		ssize_t n = rrecv(a, buf, want, 0);
		if (n <= 0) {
			CHECK(n > 0, "rrecv after %zu of %d bytes returned %zd", got, STREAM_TOTAL, n);
			break;
		}
		CHECK((size_t)n <= want, "rrecv returned %zd for a %zu-byte buffer", n, want);
		if (!bad) {
			size_t m = mismatch(buf, n, got, seed);
			if (m < (size_t)n) {
				bad = 1;
				CHECK(m == (size_t)n, "byte %zu is %#x, want %#x (seed %u)", got + m,
				      buf[m], pat(got + m, seed), seed);
			}
		}
		sum = checksum(sum, buf, n);
		got += n;
	}
	CHECK(got == STREAM_TOTAL, "%zu bytes, want %d", got, STREAM_TOTAL);
	uint32_t nsum = htonl(sum);
	STEP("checksum");
	CHECK(rsend(a, &nsum, 4, 0) == 4, "the checksum is sent");
	/* Closed right after the send: the checksum must still reach the client. */
	CHECK(rclose(a) == 0, "rclose the connection");
	CHECK(rclose(l) == 0, "rclose the listener");
	free(buf);
}

static void stream_client(int ctl)
{
	struct sockaddr_in addr;
	ctl_get(ctl, &addr, sizeof(addr));
	int c = connect_to(&addr, NULL);
	struct sockaddr_in name, peer;
	socklen_t len = sizeof(name);
	memset(&name, 0, sizeof(name));
	memset(&peer, 0, sizeof(peer));
	CHECK(rgetsockname(c, (struct sockaddr *)&name, &len) == 0 && len == sizeof(name) &&
		      name.sin_family == AF_INET && name.sin_port != 0 &&
		      (ntohl(name.sin_addr.s_addr) >> 24) == 127,
	      "the client's name: a loopback address and a port: %s", fmt_addr(&name));
	len = sizeof(peer);
	CHECK(rgetpeername(c, (struct sockaddr *)&peer, &len) == 0 && len == sizeof(peer),
	      "rgetpeername");
	uint32_t seed = (uint32_t)getpid() * 2654435761u ^ (uint32_t)time(NULL);
	ctl_put(ctl, &name, sizeof(name));
	ctl_put(ctl, &peer, sizeof(peer));
	ctl_put(ctl, &seed, sizeof(seed));

	uint8_t *data = xmalloc(STREAM_TOTAL);
	fill(data, STREAM_TOTAL, 0, seed);
	size_t off = 0;
	unsigned rs = seed;
	STEP("sending 3 MiB");
	while (off < STREAM_TOTAL) {
		size_t n = 1 + rand_r(&rs) % (200 * KiB);
		if (n > STREAM_TOTAL - off)
			n = STREAM_TOTAL - off;
		ssize_t r = rsend(c, data + off, n, 0);
		if (r <= 0) {
			CHECK(r > 0, "rsend of %zu bytes at %zu returned %zd", n, off, r);
			break;
		}
		CHECK((size_t)r == n, "a blocking rsend sends it all: %zd of %zu", r, n);
		off += r;
	}
	uint32_t nsum = 0;
	STEP("the checksum");
	CHECK(recv_all(c, &nsum, 4) == 4, "the checksum arrives");
	uint32_t want = checksum(0, data, STREAM_TOTAL);
	CHECK(ntohl(nsum) == want, "checksum %#x, want %#x (seed %u)", ntohl(nsum), want, seed);
	char b;
	STEP("rrecv after the server's rclose");
	CHECK(rrecv(c, &b, 1, 0) == 0, "end of stream after the server's rclose");
	CHECK(rclose(c) == 0, "rclose");
	free(data);
}

/* ---- peek_waitall ----------------------------------------------------------------------- */

static const char hello[] = "hello, rsockets"; /* 15 bytes sent */
static const char digits[] = "0123456789";

/* Receives `total` bytes into the iovecs (advancing through them as rreadv / rrecvmsg
 * return), then checks them against pattern `seed`. */
static void recv_iov_check(int fd, const size_t *sizes, int n, int use_msg, uint32_t seed)
{
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += sizes[i];
	uint8_t *b = xmalloc(total);
	memset(b, 0, total);
	size_t got = 0;
	while (got < total) {
		/* The iovecs from byte `got` on. */
		struct iovec iov[8];
		int k = 0;
		size_t start = 0;
		for (int i = 0; i < n; i++) {
			size_t end = start + sizes[i];
			if (end > got) {
				size_t from = got > start ? got : start;
				iov[k].iov_base = b + from;
				iov[k].iov_len = end - from;
				k++;
			}
			start = end;
		}
		ssize_t r;
		if (use_msg) {
			struct msghdr m;
			memset(&m, 0, sizeof(m));
			m.msg_iov = iov;
			m.msg_iovlen = k;
			r = rrecvmsg(fd, &m, 0);
			CHECK(r <= 0 || m.msg_flags == 0, "rrecvmsg sets msg_flags 0: %#x", m.msg_flags);
		} else {
			r = rreadv(fd, iov, k);
		}
		if (r <= 0) {
			CHECK(r > 0, "%s after %zu of %zu bytes returned %zd",
			      use_msg ? "rrecvmsg" : "rreadv", got, total, r);
			break;
		}
		got += r;
	}
	size_t m = mismatch(b, got, 0, seed);
	CHECK(m == got, "%s: byte %zu is %#x, want %#x", use_msg ? "rrecvmsg" : "rreadv", m,
	      m < got ? b[m] : 0, pat(m, seed));
	free(b);
}

static void peek_waitall_server(int ctl)
{
	struct sockaddr_in addr;
	int l = make_listener(&addr, 0, NULL);
	ctl_put(ctl, &addr, sizeof(addr));
	int a = accept_one(l);

	/* MSG_PEEK: the bytes stay. */
	ctl_expect(ctl, 'a');
	char b1[64], b2[64];
	memset(b1, 0, sizeof(b1));
	memset(b2, 0, sizeof(b2));
	STEP("MSG_PEEK");
	ssize_t n = rrecv(a, b1, sizeof(b1), MSG_PEEK);
	CHECK(n == 15 && memcmp(b1, hello, 15) == 0, "MSG_PEEK sees the message: %zd", n);
	n = rrecv(a, b2, 5, MSG_PEEK);
	CHECK(n == 5 && memcmp(b2, hello, 5) == 0, "a shorter MSG_PEEK: %zd", n);
	memset(b2, 0, sizeof(b2));
	n = rrecv(a, b2, sizeof(b2), 0);
	CHECK(n == 15 && memcmp(b2, hello, 15) == 0, "rrecv after MSG_PEEK returns the same bytes: %zd",
	      n);
	n = rrecv(a, b2, sizeof(b2), MSG_DONTWAIT);
	CHECK(n == -1 && is_again(errno), "nothing left after the peeked bytes were read: %zd", n);

	/* A message partly read, then peeked. */
	ctl_signal(ctl, 'b');
	ctl_expect(ctl, 'b');
	memset(b2, 0, sizeof(b2));
	n = rrecv(a, b2, 4, 0);
	CHECK(n == 4 && memcmp(b2, "0123", 4) == 0, "the first 4 bytes: %zd", n);
	memset(b1, 0, sizeof(b1));
	n = rrecv(a, b1, sizeof(b1), MSG_PEEK);
	CHECK(n == 6 && memcmp(b1, "456789", 6) == 0, "MSG_PEEK of the rest: %zd '%.*s'", n,
	      n > 0 ? (int)n : 0, b1);
	memset(b2, 0, sizeof(b2));
	n = rrecv(a, b2, sizeof(b2), 0);
	CHECK(n == 6 && memcmp(b2, "456789", 6) == 0, "then rrecv of the rest: %zd", n);

	/* MSG_WAITALL across four sends 30 ms apart. */
	uint8_t w[4000];
	memset(w, 0, sizeof(w));
	ctl_signal(ctl, 'w');
	STEP("MSG_WAITALL");
	double t0 = now_ms();
	n = rrecv(a, w, sizeof(w), MSG_WAITALL);
	double el = now_ms() - t0;
	CHECK(n == 4000, "MSG_WAITALL returns the full length: %zd", n);
	size_t m = mismatch(w, sizeof(w), 0, 7);
	CHECK(m == sizeof(w), "MSG_WAITALL: byte %zu", m);
	CHECK(el >= 60, "MSG_WAITALL waited for the later sends: %.1f ms", el);

	/* rwritev (10, 3000, 20000) into rreadv (7000, 15, 15995). */
	ctl_signal(ctl, 'v');
	STEP("rreadv");
	static const size_t rv[] = { 7000, 15, 15995 };
	recv_iov_check(a, rv, 3, 0, 8);

	/* rsendmsg (1, 40000, 999) into rrecvmsg (20000, 20000, 1000). */
	ctl_signal(ctl, 'm');
	STEP("rrecvmsg");
	static const size_t rm[] = { 20000, 20000, 1000 };
	recv_iov_check(a, rm, 3, 1, 9);

	/* rsendto without an address; rrecvfrom names the peer; rread of an rwrite. */
	ctl_signal(ctl, 't');
	STEP("rrecvfrom");
	struct sockaddr_in from, peer;
	socklen_t fl = sizeof(from), pl = sizeof(peer);
	memset(&from, 0, sizeof(from));
	memset(b1, 0, sizeof(b1));
	n = rrecvfrom(a, b1, 3, MSG_WAITALL, (struct sockaddr *)&from, &fl);
	CHECK(n == 3 && memcmp(b1, "xyz", 3) == 0, "rrecvfrom: %zd", n);
	CHECK(rgetpeername(a, (struct sockaddr *)&peer, &pl) == 0 && fl == sizeof(from) &&
		      same_addr(&from, &peer),
	      "rrecvfrom names the peer: %s, want %s", fmt_addr(&from), fmt_addr(&peer));
	memset(b1, 0, sizeof(b1));
	n = rread(a, b1, 5);
	CHECK(n > 0 && n <= 5 && memcmp(b1, "rwrit", n) == 0, "rread: %zd", n);
	if (n > 0 && n < 5)
		recv_all(a, b1 + n, 5 - n);
	ctl_signal(ctl, 'z');
	ctl_expect(ctl, 'z');
	CHECK(rclose(a) == 0, "rclose");
	CHECK(rclose(l) == 0, "rclose the listener");
}

static void peek_waitall_client(int ctl)
{
	struct sockaddr_in addr;
	ctl_get(ctl, &addr, sizeof(addr));
	int c = connect_to(&addr, NULL);
	CHECK(rsend(c, hello, 15, 0) == 15, "rsend hello");
	ctl_signal(ctl, 'a');
	ctl_expect(ctl, 'b');
	CHECK(rsend(c, digits, 10, 0) == 10, "rsend digits");
	ctl_signal(ctl, 'b');

	ctl_expect(ctl, 'w');
	uint8_t w[4000];
	fill(w, sizeof(w), 0, 7);
	for (int i = 0; i < 4; i++) {
		usleep(30000);
		CHECK(rsend(c, w + i * 1000, 1000, 0) == 1000, "rsend part %d", i);
	}

	ctl_expect(ctl, 'v');
	uint8_t *v = xmalloc(23010);
	fill(v, 23010, 0, 8);
	struct iovec iov[3] = { { v, 10 }, { v + 10, 3000 }, { v + 3010, 20000 } };
	ssize_t n = rwritev(c, iov, 3);
	CHECK(n == 23010, "rwritev of 3 iovecs: %zd", n);
	free(v);

	ctl_expect(ctl, 'm');
	uint8_t *s = xmalloc(41000);
	fill(s, 41000, 0, 9);
	struct iovec siov[3] = { { s, 1 }, { s + 1, 40000 }, { s + 40001, 999 } };
	struct msghdr msg;
	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = siov;
	msg.msg_iovlen = 3;
	n = rsendmsg(c, &msg, 0);
	CHECK(n == 41000, "rsendmsg of 3 iovecs: %zd", n);
	free(s);

	ctl_expect(ctl, 't');
	struct sockaddr_in to = addr;
	n = rsendto(c, "xyz", 3, 0, (struct sockaddr *)&to, sizeof(to));
	CHECK(n == -1 && errno == EISCONN, "rsendto with an address on a stream socket: %zd", n);
	CHECK(rsendto(c, "xyz", 3, 0, NULL, 0) == 3, "rsendto without an address");
	CHECK(rwrite(c, "rwrit", 5) == 5, "rwrite");
	ctl_expect(ctl, 'z');
	CHECK(rclose(c) == 0, "rclose");
	ctl_signal(ctl, 'z');
}

/* ---- shutdown --------------------------------------------------------------------------- */

#define SHUT_N 100000
#define SHUT_M 50000

static void shutdown_server(int ctl)
{
	struct sockaddr_in addr;
	int l = make_listener(&addr, 0, NULL);
	ctl_put(ctl, &addr, sizeof(addr));

	/* 1: the client sends N bytes and shuts its side; the server reads them, then EOF, and
	 * answers on the half-open connection. */
	int a = accept_one(l);
	uint8_t *b = xmalloc(SHUT_N + 1);
	size_t got = 0;
	ssize_t r;
	STEP("reading until EOF");
	while ((r = rrecv(a, b + got, SHUT_N + 1 - got, 0)) > 0) {
		got += r;
		if (got > SHUT_N)
			break;
	}
	CHECK(r == 0 && got == SHUT_N, "N bytes then EOF: %zu bytes, last rrecv %zd", got, r);
	size_t m = mismatch(b, got, 0, 11);
	CHECK(m == got, "byte %zu", m);
	CHECK(rrecv(a, b, 10, 0) == 0, "EOF stays");
	uint8_t *s = xmalloc(SHUT_M);
	fill(s, SHUT_M, 0, 12);
	STEP("sending after the client's SHUT_WR");
	CHECK(rsend(a, s, SHUT_M, 0) == SHUT_M, "the server still sends after the client's SHUT_WR");
	ctl_expect(ctl, 'r'); /* the client read them */
	CHECK(rclose(a) == 0, "rclose 1");
	ctl_signal(ctl, 'c');

	/* 2: the server closes a connection the client still uses. */
	a = accept_one(l);
	ctl_expect(ctl, '2');
	CHECK(rclose(a) == 0, "rclose 2");
	ctl_signal(ctl, 'c');
	ctl_expect(ctl, 'e');
	CHECK(rclose(l) == 0, "rclose the listener");
	free(b);
	free(s);
}

static void shutdown_client(int ctl)
{
	struct sockaddr_in addr;
	ctl_get(ctl, &addr, sizeof(addr));

	int c = connect_to(&addr, NULL);
	uint8_t *d = xmalloc(SHUT_N);
	fill(d, SHUT_N, 0, 11);
	STEP("sending N bytes");
	send_all(c, d, SHUT_N);
	STEP("rshutdown(SHUT_WR)");
	CHECK(rshutdown(c, SHUT_WR) == 0, "rshutdown(SHUT_WR)");
	STEP("reading after SHUT_WR");
	recv_check(c, SHUT_M, 12, "the server's bytes after SHUT_WR");
	ctl_signal(ctl, 'r');
	ctl_expect(ctl, 'c');
	STEP("rrecv after the server's rclose");
	char x;
	double t0 = now_ms();
	CHECK(rrecv(c, &x, 1, 0) == 0, "EOF after the server's rclose");
	CHECK(now_ms() - t0 < 5000, "promptly");
	CHECK(rclose(c) == 0, "rclose 1");

	c = connect_to(&addr, NULL);
	ctl_signal(ctl, '2');
	ctl_expect(ctl, 'c');
	STEP("rrecv after the peer's rclose");
	t0 = now_ms();
	ssize_t r = rrecv(c, &x, 1, 0);
	CHECK(r == 0 || r == -1, "rrecv after the peer closed: %zd", r);
	CHECK(now_ms() - t0 < 5000, "rrecv returned promptly: %.0f ms", now_ms() - t0);
	STEP("rpoll after the peer's rclose");
	struct pollfd p = { .fd = c, .events = POLLIN | POLLOUT };
	int pr = rpoll(&p, 1, 1000);
	CHECK(pr == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR)),
	      "rpoll reports the closed connection: %d revents %#x", pr, p.revents);
	STEP("rsend after the peer's rclose");
	errno = 0;
	r = rsend(c, "data", 4, 0);
	int e = errno;
	CHECK(r == -1, "rsend after the peer closed: %zd", r);
	CHECK(r != -1 || e == ECONNRESET || e == EPIPE || e == ENOTCONN,
	      "rsend after the peer closed fails with a connection errno, not %d", e);
	CHECK(rclose(c) == 0, "rclose 2");
	ctl_signal(ctl, 'e');
	free(d);
}

/* ---- nonblocking ------------------------------------------------------------------------ */

#define NB_BIG (8 * MiB)

static void nonblocking_server(int ctl)
{
	struct sockaddr_in addr;
	/* A listener made non-blocking by SOCK_NONBLOCK (softib, as socket(2)). */
	int l = make_listener(&addr, SOCK_NONBLOCK, NULL);
	CHECK(rfcntl(l, F_GETFL) & O_NONBLOCK, "SOCK_NONBLOCK shows in F_GETFL");
	STEP("raccept with nothing pending");
	double t0 = now_ms();
	int r = raccept(l, NULL, NULL);
	CHECK(r == -1 && is_again(errno), "raccept with nothing pending: %d", r);
	CHECK(now_ms() - t0 < 1000, "raccept did not wait");
	struct pollfd p = { .fd = l, .events = POLLIN };
	CHECK(rpoll(&p, 1, 0) == 0 && p.revents == 0, "the listener is not readable yet");
	ctl_put(ctl, &addr, sizeof(addr));
	STEP("rpoll on the listener");
	CHECK(rpoll(&p, 1, 10000) == 1 && (p.revents & POLLIN), "a connection is waiting");
	int a = raccept(l, NULL, NULL);
	CHECK(a >= 0, "raccept of the waiting connection");
	if (a < 0)
		DIE("raccept");
	/* rdma-core (and accept(2) on Linux): the accepted socket does not inherit O_NONBLOCK. */
	CHECK(!(rfcntl(a, F_GETFL) & O_NONBLOCK),
	      "an accepted socket starts blocking, as rdma-core's (flags %#x)", rfcntl(a, F_GETFL));
	CHECK(rfcntl(a, F_SETFL, O_NONBLOCK) == 0 && (rfcntl(a, F_GETFL) & O_NONBLOCK),
	      "rfcntl(F_SETFL, O_NONBLOCK)");
	char x;
	t0 = now_ms();
	ssize_t n = rrecv(a, &x, 1, 0);
	CHECK(n == -1 && is_again(errno), "rrecv with no data: %zd", n);
	CHECK(now_ms() - t0 < 1000, "rrecv did not wait");
	ctl_signal(ctl, 'g');

	/* The client fills what it may; then the server reads it all. */
	uint64_t total;
	ctl_get(ctl, &total, sizeof(total));
	CHECK(rfcntl(a, F_SETFL, 0) == 0 && !(rfcntl(a, F_GETFL) & O_NONBLOCK), "back to blocking");
	STEP("reading what the client sent");
	recv_check(a, total, 21, "the non-blocking sends");
	ctl_signal(ctl, 'd');
	ctl_expect(ctl, 'e');
	CHECK(rclose(a) == 0, "rclose");
	CHECK(rclose(l) == 0, "rclose the listener");
}

static void nonblocking_client(int ctl)
{
	struct sockaddr_in addr;
	ctl_get(ctl, &addr, sizeof(addr));
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	if (c < 0)
		DIE("rsocket");
	CHECK(!(rfcntl(c, F_GETFL) & O_NONBLOCK), "a new socket blocks");
	CHECK(rfcntl(c, F_SETFL, O_NONBLOCK) == 0, "rfcntl(F_SETFL, O_NONBLOCK)");
	CHECK(rfcntl(c, F_GETFL) & O_NONBLOCK, "F_GETFL reflects O_NONBLOCK");
	STEP("non-blocking rconnect");
	double t0 = now_ms();
	int r = rconnect(c, (struct sockaddr *)&addr, sizeof(addr));
	/* It may also have connected at once (POSIX allows it; the server's side answers
	 * from its own threads): then rpoll below finds it writable all the same. */
	CHECK((r == -1 && errno == EINPROGRESS) || r == 0, "a non-blocking rconnect: %d", r);
	CHECK(now_ms() - t0 < 1000, "rconnect did not wait");
	STEP("rpoll(POLLOUT) for the connection");
	struct pollfd p = { .fd = c, .events = POLLOUT };
	int pr = rpoll(&p, 1, 10000);
	CHECK(pr == 1 && (p.revents & POLLOUT), "connected and writable: %d revents %#x", pr,
	      p.revents);
	int err = -1;
	socklen_t el = sizeof(err);
	CHECK(rgetsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0,
	      "SO_ERROR after the connection: %d", err);
	char x;
	ssize_t n = rrecv(c, &x, 1, 0);
	CHECK(n == -1 && is_again(errno), "rrecv with no data: %zd", n);
	ctl_expect(ctl, 'g');

	/* 8 MiB at a peer that does not read: partial counts, then EAGAIN; never a wait. */
	uint8_t *big = xmalloc(NB_BIG);
	fill(big, NB_BIG, 0, 21);
	STEP("non-blocking rsend of 8 MiB");
	t0 = now_ms();
	ssize_t first = rsend(c, big, NB_BIG, 0);
	int e = errno;
	CHECK((first > 0 && first < NB_BIG) || (first == -1 && is_again(e)),
	      "the first rsend: a partial count or EAGAIN: %zd", first);
	uint64_t total = first > 0 ? first : 0;
	int again = first == -1 && is_again(e);
	for (int i = 0; i < 10000 && !again && total < NB_BIG; i++) {
		n = rsend(c, big + total, NB_BIG - total, 0);
		if (n < 0) {
			CHECK(is_again(errno), "a non-blocking rsend fails with EAGAIN: %zd", n);
			again = 1;
			break;
		}
		CHECK(n > 0, "rsend returned 0");
		if (n <= 0)
			break;
		total += n;
	}
	double el_ms = now_ms() - t0;
	CHECK(again && total < NB_BIG, "EAGAIN once the peer's buffer is full: %llu bytes sent",
	      (unsigned long long)total);
	CHECK(el_ms < 3000, "the non-blocking sends never waited: %.0f ms", el_ms);
	p.events = POLLOUT;
	p.revents = 0;
	CHECK(rpoll(&p, 1, 0) == 0, "not writable while the peer does not read (revents %#x)",
	      p.revents);
	/* MSG_DONTWAIT on a blocking socket. */
	CHECK(rfcntl(c, F_SETFL, 0) == 0 && !(rfcntl(c, F_GETFL) & O_NONBLOCK), "back to blocking");
	n = rsend(c, big, 4096, MSG_DONTWAIT);
	CHECK(n == -1 && is_again(errno), "rsend(MSG_DONTWAIT) with no room: %zd", n);
	n = rrecv(c, &x, 1, MSG_DONTWAIT);
	CHECK(n == -1 && is_again(errno), "rrecv(MSG_DONTWAIT) with no data: %zd", n);
	ctl_put(ctl, &total, sizeof(total));
	ctl_expect(ctl, 'd');
	STEP("rpoll(POLLOUT) after the peer read");
	p.revents = 0;
	pr = rpoll(&p, 1, 5000);
	CHECK(pr == 1 && (p.revents & POLLOUT), "writable again once the peer read: %d %#x", pr,
	      p.revents);
	ctl_signal(ctl, 'e');
	CHECK(rclose(c) == 0, "rclose");
	free(big);
}

/* ---- poll_select ------------------------------------------------------------------------ */

static int wake_pipe;

static void *write_pipe_later(void *arg)
{
	(void)arg;
	usleep(100000);
	if (write(wake_pipe, "p", 1) != 1)
		abort();
	return NULL;
}

static void poll_select_server(int ctl)
{
	struct sockaddr_in addr;
	int l = make_listener(&addr, 0, NULL);
	struct pollfd lp = { .fd = l, .events = POLLIN };
	CHECK(rpoll(&lp, 1, 0) == 0, "no connection waiting yet (revents %#x)", lp.revents);
	ctl_put(ctl, &addr, sizeof(addr));
	STEP("rpoll on the listener");
	CHECK(rpoll(&lp, 1, 10000) == 1 && (lp.revents & POLLIN), "a connection is waiting: %#x",
	      lp.revents);
	int a = accept_one(l);
	int pfd[2];
	if (pipe(pfd))
		DIE("pipe");
	wake_pipe = pfd[1];
	char buf[16];
	pthread_t t;

	/* rpoll: nothing ready for 100 ms. */
	struct pollfd p[2] = { { .fd = a, .events = POLLIN }, { .fd = pfd[0], .events = POLLIN } };
	STEP("rpoll timeout");
	double t0 = now_ms();
	int r = rpoll(p, 2, 100);
	double el = now_ms() - t0;
	CHECK(r == 0, "nothing ready: %d (revents %#x %#x)", r, p[0].revents, p[1].revents);
	CHECK(el >= 90 && el < 2000, "the 100 ms timeout: %.1f ms", el);

	/* The pipe wakes it. */
	if (pthread_create(&t, NULL, write_pipe_later, NULL))
		DIE("pthread_create");
	STEP("rpoll woken by the pipe");
	t0 = now_ms();
	r = rpoll(p, 2, 5000);
	el = now_ms() - t0;
	CHECK(r == 1 && p[1].revents == POLLIN && p[0].revents == 0,
	      "only the pipe: %d (revents %#x %#x)", r, p[0].revents, p[1].revents);
	CHECK(el >= 50 && el < 4000, "woken by the write: %.1f ms", el);
	pthread_join(t, NULL);
	if (read(pfd[0], buf, 1) != 1)
		DIE("read pipe");

	/* The peer's data wakes it. */
	ctl_signal(ctl, 's');
	STEP("rpoll woken by the peer");
	t0 = now_ms();
	r = rpoll(p, 2, 5000);
	el = now_ms() - t0;
	CHECK(r == 1 && (p[0].revents & POLLIN) && p[1].revents == 0,
	      "only the rsocket: %d (revents %#x %#x)", r, p[0].revents, p[1].revents);
	CHECK(el < 4000, "woken by the data: %.1f ms", el);
	CHECK(recv_all(a, buf, 3) == 3 && memcmp(buf, "abc", 3) == 0, "the peer's bytes");

	/* rselect: the same three. */
	fd_set rd;
	int nfds = (a > pfd[0] ? a : pfd[0]) + 1;
	struct timeval tv = { 0, 100000 };
	FD_ZERO(&rd);
	FD_SET(a, &rd);
	FD_SET(pfd[0], &rd);
	STEP("rselect timeout");
	t0 = now_ms();
	r = rselect(nfds, &rd, NULL, NULL, &tv);
	el = now_ms() - t0;
	CHECK(r == 0 && !FD_ISSET(a, &rd) && !FD_ISSET(pfd[0], &rd), "rselect: nothing ready: %d",
	      r);
	CHECK(el >= 90 && el < 2000, "rselect's 100 ms timeout: %.1f ms", el);

	if (pthread_create(&t, NULL, write_pipe_later, NULL))
		DIE("pthread_create");
	FD_ZERO(&rd);
	FD_SET(a, &rd);
	FD_SET(pfd[0], &rd);
	tv.tv_sec = 5;
	tv.tv_usec = 0;
	STEP("rselect woken by the pipe");
	r = rselect(nfds, &rd, NULL, NULL, &tv);
	CHECK(r == 1 && FD_ISSET(pfd[0], &rd) && !FD_ISSET(a, &rd), "rselect: only the pipe: %d",
	      r);
	pthread_join(t, NULL);
	if (read(pfd[0], buf, 1) != 1)
		DIE("read pipe");

	ctl_signal(ctl, 's');
	FD_ZERO(&rd);
	FD_SET(a, &rd);
	FD_SET(pfd[0], &rd);
	tv.tv_sec = 5;
	tv.tv_usec = 0;
	STEP("rselect woken by the peer");
	r = rselect(nfds, &rd, NULL, NULL, &tv);
	CHECK(r == 1 && FD_ISSET(a, &rd) && !FD_ISSET(pfd[0], &rd), "rselect: only the rsocket: %d",
	      r);
	CHECK(recv_all(a, buf, 3) == 3 && memcmp(buf, "abc", 3) == 0, "the peer's bytes");

	/* Writable at once. */
	fd_set wr;
	FD_ZERO(&wr);
	FD_SET(a, &wr);
	tv.tv_sec = 1;
	tv.tv_usec = 0;
	CHECK(rselect(nfds, NULL, &wr, NULL, &tv) == 1 && FD_ISSET(a, &wr), "rselect: writable");
	p[0].events = POLLOUT;
	CHECK(rpoll(p, 1, 0) == 1 && (p[0].revents & POLLOUT), "rpoll: writable (%#x)",
	      p[0].revents);

	ctl_signal(ctl, 'e');
	ctl_expect(ctl, 'e');
	CHECK(rclose(a) == 0, "rclose");
	CHECK(rclose(l) == 0, "rclose the listener");
	close(pfd[0]);
	close(pfd[1]);
}

static void poll_select_client(int ctl)
{
	struct sockaddr_in addr;
	ctl_get(ctl, &addr, sizeof(addr));
	int c = connect_to(&addr, NULL);
	for (int i = 0; i < 2; i++) {
		ctl_expect(ctl, 's');
		usleep(100000);
		CHECK(rsend(c, "abc", 3, 0) == 3, "rsend");
	}
	ctl_expect(ctl, 'e');
	CHECK(rclose(c) == 0, "rclose");
	ctl_signal(ctl, 'e');
}

/* ---- iomap ------------------------------------------------------------------------------ */

#define IOMAP_LEN MiB

static void iomap_size_4(int fd)
{
	int v = 4;
	if (rsetsockopt(fd, SOL_RDMA, RDMA_IOMAPSIZE, &v, sizeof(v)))
		DIE("rsetsockopt(RDMA_IOMAPSIZE)");
}

static void iomap_server(int ctl)
{
	struct sockaddr_in addr;
	int l = make_listener(&addr, 0, iomap_size_4);
	ctl_put(ctl, &addr, sizeof(addr));
	int a = accept_one(l);
	int v = 0;
	socklen_t vl = sizeof(v);
	CHECK(rgetsockopt(a, SOL_RDMA, RDMA_IOMAPSIZE, &v, &vl) == 0 && v == 4,
	      "the accepted socket has the listener's iomap size: %d", v);
	uint8_t *win = aligned_alloc(4096, IOMAP_LEN);
	if (!win)
		DIE("aligned_alloc");
	memset(win, 0, IOMAP_LEN);
	off_t off = riomap(a, win, IOMAP_LEN, PROT_WRITE, 0, 0);
	CHECK(off == 0, "riomap at offset 0: %lld", (long long)off);
	STEP("ready");
	CHECK(rsend(a, "R", 1, 0) == 1, "the ready message (it publishes the mapping)");
	char d = 0;
	STEP("waiting for done");
	CHECK(recv_all(a, &d, 1) == 1 && d == 'D', "the done message: '%c'", d);
	size_t m = mismatch(win, 4096, 0, 31);
	CHECK(m == 4096, "the mapping's byte %zu", m);
	m = mismatch(win + 4096, 100, 0, 32);
	CHECK(m == 100, "the second write's byte %zu (at 4096 + %zu)", m, m);
	m = mismatch(win + 4196, IOMAP_LEN - 4196, 4196, 31);
	CHECK(m == IOMAP_LEN - 4196, "the mapping's byte %zu", 4196 + m);
	CHECK(riounmap(a, win, IOMAP_LEN) == 0, "riounmap");
	char other[64];
	CHECK(riounmap(a, other, sizeof(other)) == -1 && errno == EINVAL,
	      "riounmap of a buffer never mapped");
	CHECK(riounmap(a, win, IOMAP_LEN) == -1 && errno == EINVAL, "riounmap twice");
	ctl_signal(ctl, 'x');
	ctl_expect(ctl, 'x');
	CHECK(rclose(a) == 0, "rclose");
	CHECK(rclose(l) == 0, "rclose the listener");
	free(win);
}

static void iomap_client(int ctl)
{
	struct sockaddr_in addr;
	ctl_get(ctl, &addr, sizeof(addr));
	int c = connect_to(&addr, iomap_size_4);
	char r = 0;
	STEP("waiting for ready");
	CHECK(recv_all(c, &r, 1) == 1 && r == 'R', "the ready message: '%c'", r);
	uint8_t *data = xmalloc(IOMAP_LEN);
	fill(data, IOMAP_LEN, 0, 31);
	uint8_t small[100];
	fill(small, sizeof(small), 0, 32);
	STEP("riowrite");
	size_t w = riowrite(c, data, IOMAP_LEN, 0, 0);
	CHECK(w == IOMAP_LEN, "riowrite of 1 MiB at 0: %zd", (ssize_t)w);
	w = riowrite(c, small, sizeof(small), 4096, 0);
	CHECK(w == sizeof(small), "riowrite of 100 bytes at 4096: %zd", (ssize_t)w);
	w = riowrite(c, small, sizeof(small), 2 * IOMAP_LEN, 0);
	CHECK(w == 0, "riowrite outside every mapping writes nothing (as rdma-core): %zd",
	      (ssize_t)w);
	CHECK(rsend(c, "D", 1, 0) == 1, "done");
	ctl_expect(ctl, 'x');
	CHECK(rclose(c) == 0, "rclose");
	ctl_signal(ctl, 'x');
	free(data);
}

/* ---- options ---------------------------------------------------------------------------- */

#define OPT_BYTES (200 * KiB)

static int getint(int fd, int level, int name, int *v)
{
	socklen_t len = sizeof(*v);
	*v = -12345;
	int r = rgetsockopt(fd, level, name, v, &len);
	if (r == 0 && len != sizeof(*v))
		return -2;
	return r;
}

static int setint(int fd, int level, int name, int v)
{
	return rsetsockopt(fd, level, name, &v, sizeof(v));
}

static void options_server(int ctl)
{
	struct sockaddr_in addr;
	int l = make_listener(&addr, 0, NULL);
	ctl_put(ctl, &addr, sizeof(addr));
	int a = accept_one(l);
	CHECK(setint(a, SOL_RDMA, RDMA_SQSIZE, 32) == -1 && errno == EINVAL,
	      "SOL_RDMA on an accepted socket");
	STEP("reading");
	recv_check(a, OPT_BYTES, 41, "through the small buffers");
	CHECK(rsend(a, "k", 1, 0) == 1, "ack");
	char x = 0;
	STEP("echo after the keepalive");
	CHECK(recv_all(a, &x, 1) == 1 && x == 'q', "the byte after the keepalive");
	CHECK(rsend(a, "Q", 1, 0) == 1, "echo");
	ctl_expect(ctl, 'e');
	CHECK(rclose(a) == 0, "rclose");
	CHECK(rclose(l) == 0, "rclose the listener");
}

static void options_client(int ctl)
{
	struct sockaddr_in addr;
	ctl_get(ctl, &addr, sizeof(addr));
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	if (c < 0)
		DIE("rsocket");
	int v;

	/* Buffer sizes: the doubled value, as rdma-core (and Linux) report it. */
	CHECK(setint(c, SOL_SOCKET, SO_RCVBUF, 16384) == 0, "SO_RCVBUF");
	CHECK(getint(c, SOL_SOCKET, SO_RCVBUF, &v) == 0 && v == 32768, "SO_RCVBUF: %d", v);
	CHECK(setint(c, SOL_SOCKET, SO_SNDBUF, 100) == 0, "a tiny SO_SNDBUF");
	CHECK(getint(c, SOL_SOCKET, SO_SNDBUF, &v) == 0 && v == 4096,
	      "SO_SNDBUF below the low-water mark becomes 4096 (as rdma-core): %d", v);
	CHECK(setint(c, SOL_SOCKET, SO_SNDBUF, 16384) == 0, "SO_SNDBUF");
	CHECK(getint(c, SOL_SOCKET, SO_SNDBUF, &v) == 0 && v == 32768, "SO_SNDBUF: %d", v);

	CHECK(getint(c, IPPROTO_TCP, TCP_NODELAY, &v) == 0 && v == 0, "TCP_NODELAY off: %d", v);
	CHECK(setint(c, IPPROTO_TCP, TCP_NODELAY, 1) == 0, "TCP_NODELAY on");
	CHECK(getint(c, IPPROTO_TCP, TCP_NODELAY, &v) == 0 && v == 1, "TCP_NODELAY: %d", v);
	CHECK(setint(c, IPPROTO_TCP, TCP_NODELAY, 0) == 0 &&
		      getint(c, IPPROTO_TCP, TCP_NODELAY, &v) == 0 && v == 0,
	      "TCP_NODELAY off again: %d", v);

	CHECK(getint(c, SOL_SOCKET, SO_KEEPALIVE, &v) == 0 && v == 0, "SO_KEEPALIVE off: %d", v);
	CHECK(setint(c, IPPROTO_TCP, TCP_KEEPIDLE, 1) == 0, "TCP_KEEPIDLE 1 s");
	CHECK(getint(c, IPPROTO_TCP, TCP_KEEPIDLE, &v) == 0 && v == 1, "TCP_KEEPIDLE: %d", v);
	CHECK(setint(c, IPPROTO_TCP, TCP_KEEPIDLE, 0) == -1 && errno == EINVAL, "TCP_KEEPIDLE 0");
	CHECK(getint(c, IPPROTO_TCP, TCP_KEEPIDLE, &v) == 0 && v == 1, "TCP_KEEPIDLE kept: %d", v);
	CHECK(setint(c, SOL_SOCKET, SO_KEEPALIVE, 1) == 0, "SO_KEEPALIVE on");
	CHECK(getint(c, SOL_SOCKET, SO_KEEPALIVE, &v) == 0 && v == 1, "SO_KEEPALIVE: %d", v);

	CHECK(getint(c, SOL_SOCKET, SO_REUSEADDR, &v) == 0 && v == 0, "SO_REUSEADDR off: %d", v);
	CHECK(setint(c, SOL_SOCKET, SO_REUSEADDR, 1) == 0, "SO_REUSEADDR on");
	CHECK(getint(c, SOL_SOCKET, SO_REUSEADDR, &v) == 0 && v == 1, "SO_REUSEADDR: %d", v);

	/* SO_LINGER: rdma-core keeps it inverted (off in so_opts is on), l_linger always 0. */
	struct linger lg;
	socklen_t ll = sizeof(lg);
	memset(&lg, 0x55, sizeof(lg));
	CHECK(rgetsockopt(c, SOL_SOCKET, SO_LINGER, &lg, &ll) == 0 && ll == sizeof(lg) &&
		      lg.l_onoff == 1 && lg.l_linger == 0,
	      "SO_LINGER by default as rdma-core reports it: %d %d", lg.l_onoff, lg.l_linger);
	lg.l_onoff = 0;
	lg.l_linger = 0;
	CHECK(rsetsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0, "SO_LINGER off");
	ll = sizeof(lg);
	CHECK(rgetsockopt(c, SOL_SOCKET, SO_LINGER, &lg, &ll) == 0 && lg.l_onoff == 0,
	      "SO_LINGER: %d", lg.l_onoff);
	lg.l_onoff = 1;
	lg.l_linger = 10;
	CHECK(rsetsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0, "SO_LINGER on");
	ll = sizeof(lg);
	CHECK(rgetsockopt(c, SOL_SOCKET, SO_LINGER, &lg, &ll) == 0 && lg.l_onoff == 1,
	      "SO_LINGER: %d", lg.l_onoff);

	CHECK(setint(c, SOL_RDMA, RDMA_SQSIZE, 64) == 0, "RDMA_SQSIZE");
	CHECK(getint(c, SOL_RDMA, RDMA_SQSIZE, &v) == 0 && v == 64, "RDMA_SQSIZE: %d", v);
	CHECK(setint(c, SOL_RDMA, RDMA_RQSIZE, 64) == 0, "RDMA_RQSIZE");
	CHECK(getint(c, SOL_RDMA, RDMA_RQSIZE, &v) == 0 && v == 64, "RDMA_RQSIZE: %d", v);
	CHECK(setint(c, SOL_RDMA, RDMA_INLINE, 32) == 0, "RDMA_INLINE");
	CHECK(getint(c, SOL_RDMA, RDMA_INLINE, &v) == 0 && v == 32, "RDMA_INLINE: %d", v);
	CHECK(setint(c, SOL_RDMA, RDMA_IOMAPSIZE, 2) == 0, "RDMA_IOMAPSIZE");
	CHECK(getint(c, SOL_RDMA, RDMA_IOMAPSIZE, &v) == 0 && v == 2, "RDMA_IOMAPSIZE: %d", v);

	CHECK(getint(c, IPPROTO_TCP, TCP_MAXSEG, &v) == 0 && v > 0, "TCP_MAXSEG: %d", v);
	CHECK(getint(c, SOL_SOCKET, SO_ERROR, &v) == 0 && v == 0, "SO_ERROR: %d", v);

	/* Options rsockets do not know. */
	CHECK(setint(c, SOL_SOCKET, SO_BROADCAST, 1) == -1 && errno == ENOTSUP, "set SO_BROADCAST");
	CHECK(getint(c, SOL_SOCKET, SO_BROADCAST, &v) == -1 && errno == ENOTSUP, "get SO_BROADCAST");
	CHECK(setint(c, IPPROTO_TCP, TCP_CORK, 1) == -1 && errno == ENOTSUP, "set TCP_CORK");
	CHECK(setint(c, 12345, 1, 1) == -1 && errno == ENOTSUP, "set at an unknown level");
	CHECK(getint(c, 12345, 1, &v) == -1 && errno == ENOTSUP, "get at an unknown level");
	CHECK(setint(c, SOL_RDMA, 99, 1) == -1 && errno == ENOTSUP, "an unknown SOL_RDMA option");
	CHECK(getint(c, SOL_RDMA, 99, &v) == -1 && errno == ENOTSUP, "get an unknown SOL_RDMA");

	STEP("rconnect");
	if (rconnect(c, (struct sockaddr *)&addr, sizeof(addr)))
		DIE("rconnect");
	CHECK(setint(c, SOL_RDMA, RDMA_SQSIZE, 128) == -1 && errno == EINVAL,
	      "RDMA_SQSIZE after connecting");
	CHECK(setint(c, SOL_RDMA, RDMA_INLINE, 0) == -1 && errno == EINVAL,
	      "RDMA_INLINE after connecting");
	CHECK(getint(c, SOL_RDMA, RDMA_SQSIZE, &v) == 0 && v == 64, "RDMA_SQSIZE kept: %d", v);
	CHECK(getint(c, SOL_RDMA, RDMA_RQSIZE, &v) == 0 && v == 64, "RDMA_RQSIZE kept: %d", v);
	CHECK(getint(c, SOL_RDMA, RDMA_INLINE, &v) == 0 && v >= 32, "RDMA_INLINE: %d", v);
	CHECK(getint(c, SOL_SOCKET, SO_RCVBUF, &v) == 0 && v == 32768, "SO_RCVBUF kept: %d", v);
	CHECK(setint(c, SOL_SOCKET, SO_RCVBUF, 1 << 20) == 0, "SO_RCVBUF after connecting");
	CHECK(getint(c, SOL_SOCKET, SO_RCVBUF, &v) == 0 && v == 32768,
	      "SO_RCVBUF after connecting changes nothing (as rdma-core): %d", v);
	CHECK(getint(c, IPPROTO_TCP, TCP_MAXSEG, &v) == 0 && v >= 256 && v <= 4096,
	      "TCP_MAXSEG from the path MTU: %d", v);

	uint8_t *d = xmalloc(OPT_BYTES);
	fill(d, OPT_BYTES, 0, 41);
	STEP("sending through the small buffers");
	send_all(c, d, OPT_BYTES);
	char k = 0;
	CHECK(recv_all(c, &k, 1) == 1 && k == 'k', "ack");
	/* A keepalive falls due (1 s idle) and goes out with the next call: the connection
	 * works after it. */
	STEP("keepalive");
	usleep(1200000);
	struct pollfd p = { .fd = c, .events = POLLIN };
	CHECK(rpoll(&p, 1, 100) == 0, "nothing to read (%#x)", p.revents);
	usleep(100000);
	CHECK(rsend(c, "q", 1, 0) == 1, "a byte after the keepalive");
	CHECK(recv_all(c, &k, 1) == 1 && k == 'Q', "its echo");
	CHECK(getint(c, SOL_SOCKET, SO_ERROR, &v) == 0 && v == 0, "SO_ERROR: %d", v);
	ctl_signal(ctl, 'e');
	CHECK(rclose(c) == 0, "rclose");
	free(d);
}

/* ---- bad_calls -------------------------------------------------------------------------- */

static void case_bad_calls(void)
{
	role = "bad_calls";
	errno = 0;
	CHECK(rsocket(AF_INET, SOCK_DGRAM, 0) == -1 && errno == ENOTSUP,
	      "datagram rsockets are not provided");
	CHECK(rsocket(AF_UNIX, SOCK_STREAM, 0) == -1 && errno == ENOTSUP, "AF_UNIX");
	CHECK(rsocket(AF_INET, SOCK_SEQPACKET, 0) == -1 && errno == ENOTSUP, "SOCK_SEQPACKET");
	CHECK(rsocket(AF_INET, SOCK_STREAM, IPPROTO_UDP) == -1 && errno == ENOTSUP,
	      "a stream over UDP");
	CHECK(rsocket(AF_IB, SOCK_STREAM, 0) == -1 && errno == EAFNOSUPPORT, "AF_IB");

	/* Descriptors that are not rsockets. */
	int pfd[2];
	if (pipe(pfd))
		DIE("pipe");
	int bad[] = { 9999, pfd[0], -1 };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int fd = bad[i];
		char b[8] = { 0 };
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(7471) };
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		socklen_t sl = sizeof(sa);
		int v = 1;
		socklen_t vl = sizeof(v);
		struct iovec iov = { b, sizeof(b) };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
#define EBADF_CHECK(call) CHECK((call) == -1 && errno == EBADF, "%s on %d", #call, fd)
		EBADF_CHECK(rsend(fd, b, 1, 0));
		EBADF_CHECK(rrecv(fd, b, 1, 0));
		EBADF_CHECK(rread(fd, b, 1));
		EBADF_CHECK(rwrite(fd, b, 1));
		EBADF_CHECK(rreadv(fd, &iov, 1));
		EBADF_CHECK(rwritev(fd, &iov, 1));
		EBADF_CHECK(rsendmsg(fd, &msg, 0));
		EBADF_CHECK(rrecvmsg(fd, &msg, 0));
		EBADF_CHECK(rclose(fd));
		EBADF_CHECK(rbind(fd, (struct sockaddr *)&sa, sizeof(sa)));
		EBADF_CHECK(rlisten(fd, 1));
		EBADF_CHECK(raccept(fd, NULL, NULL));
		EBADF_CHECK(rconnect(fd, (struct sockaddr *)&sa, sizeof(sa)));
		EBADF_CHECK(rshutdown(fd, SHUT_RDWR));
		EBADF_CHECK(rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &vl));
		EBADF_CHECK(rsetsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &v, sizeof(v)));
		EBADF_CHECK(rfcntl(fd, F_GETFL));
		EBADF_CHECK(rfcntl(fd, F_SETFL, O_NONBLOCK));
		EBADF_CHECK(rgetpeername(fd, (struct sockaddr *)&sa, &sl));
		EBADF_CHECK(rgetsockname(fd, (struct sockaddr *)&sa, &sl));
		EBADF_CHECK(riomap(fd, b, sizeof(b), PROT_WRITE, 0, 0));
		EBADF_CHECK(riounmap(fd, b, sizeof(b)));
		EBADF_CHECK((ssize_t)riowrite(fd, b, 1, 0, 0));
#undef EBADF_CHECK
	}
	CHECK(fcntl(pfd[0], F_GETFD) != -1, "rclose left the pipe open");
	close(pfd[0]);
	close(pfd[1]);

	/* An unconnected socket. */
	int s = rsocket(AF_INET, SOCK_STREAM, 0);
	if (s < 0)
		DIE("rsocket");
	char b[16];
	CHECK(rsend(s, b, 1, 0) == -1 && errno == ENOTCONN, "rsend on an unconnected socket");
	CHECK(rrecv(s, b, 1, 0) == -1 && errno == ENOTCONN, "rrecv on an unconnected socket");
	{
		/* riowrite before any connection: no mapping to use, nothing to send through. */
		int four = 4;
		CHECK(rsetsockopt(s, SOL_RDMA, RDMA_IOMAPSIZE, &four, sizeof four) == 0,
		      "RDMA_IOMAPSIZE before connecting");
		CHECK(riowrite(s, b, 8, 0, 0) == (size_t)-1 && errno == ENOTCONN,
		      "riowrite on an unconnected socket");
	}
	CHECK(rsend(s, NULL, 10, 0) == -1 && errno == EFAULT, "rsend from NULL");
	CHECK(rrecv(s, NULL, 10, 0) == -1 && errno == EFAULT, "rrecv into NULL");
	CHECK(rshutdown(s, 42) == -1 && errno == EINVAL, "rshutdown how=42");
	CHECK(rshutdown(s, SHUT_RDWR) == -1 && errno == ENOTCONN,
	      "rshutdown of an unconnected socket");
	CHECK(raccept(s, NULL, NULL) == -1 && errno == EBADF,
	      "raccept on a socket that does not listen (EBADF, as rdma-core)");
	CHECK(rfcntl(s, F_GETFD) == -1 && errno == ENOTSUP, "rfcntl(F_GETFD)");
	CHECK(riomap(s, b, sizeof(b), PROT_WRITE, 0, 0) == -1 && errno == EINVAL,
	      "riomap before the socket has a device");
	CHECK(riounmap(s, b, sizeof(b)) == -1 && errno == EINVAL, "riounmap of nothing mapped");
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	CHECK(rgetpeername(s, (struct sockaddr *)&sa, &sl) == -1 && errno == ENOTCONN,
	      "rgetpeername of an unconnected socket");
	sl = sizeof(sa);
	memset(&sa, 0x55, sizeof(sa));
	CHECK(rgetsockname(s, (struct sockaddr *)&sa, &sl) == 0 && sl == sizeof(sa) &&
		      sa.sin_family == AF_INET && sa.sin_port == 0 && sa.sin_addr.s_addr == 0,
	      "rgetsockname of an unbound socket: the unspecified address: %s", fmt_addr(&sa));
	int v = 1;
	CHECK(rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, 2) == -1 && errno == EINVAL,
	      "an int option shorter than an int");
	struct pollfd *nullfds = NULL;
	CHECK(rpoll(nullfds, 1, 0) == -1 && errno == EFAULT, "rpoll of NULL");
	CHECK(rselect(-1, NULL, NULL, NULL, NULL) == -1 && errno == EINVAL, "rselect nfds -1");

	/* Addresses. */
	struct sockaddr_in foreign = { .sin_family = AF_INET };
	foreign.sin_addr.s_addr = inet_addr("192.0.2.1"); /* TEST-NET-1: not this host's */
	CHECK(rbind(s, (struct sockaddr *)&foreign, sizeof(foreign)) == -1 &&
		      errno == EADDRNOTAVAIL,
	      "rbind to a foreign address");
	struct sockaddr_in addr;
	free_bind(s, &addr);
	CHECK(rbind(s, (struct sockaddr *)&addr, sizeof(addr)) == -1 && errno == EINVAL,
	      "rbind twice");
	CHECK(riomap(s, b, sizeof(b), PROT_READ, 0, 0) == -1 && errno == EINVAL,
	      "riomap with PROT_READ");
	CHECK(rclose(s) == 0, "rclose");
	CHECK(rclose(s) == -1 && errno == EBADF, "rclose twice");

	/* A port nobody listens on: REJ (Invalid Service ID), ECONNREFUSED. */
	int l = make_listener(&addr, 0, NULL);
	CHECK(rconnect(l, (struct sockaddr *)&addr, sizeof(addr)) == -1 && errno == EINVAL,
	      "rconnect on a listening socket (EINVAL, as rdma-core)");
	int t = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(rbind(t, (struct sockaddr *)&addr, sizeof(addr)) == -1 && errno == EADDRINUSE,
	      "rbind to the listener's port");
	rclose(t);
	struct sockaddr_in other = addr;
	other.sin_port = htons(ntohs(addr.sin_port) + 1);
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	if (c < 0)
		DIE("rsocket");
	STEP("rconnect to a port nobody listens on");
	double t0 = now_ms();
	int r = rconnect(c, (struct sockaddr *)&other, sizeof(other));
	int e = errno;
	CHECK(r == -1 && e == ECONNREFUSED, "rconnect to %s, where nobody listens: %d",
	      fmt_addr(&other), r);
	CHECK(now_ms() - t0 < 10000, "refused promptly: %.0f ms", now_ms() - t0);
	CHECK(getint(c, SOL_SOCKET, SO_ERROR, &v) == 0 && v == ECONNREFUSED,
	      "SO_ERROR after the refusal: %d", v);
	CHECK(getint(c, SOL_SOCKET, SO_ERROR, &v) == 0 && v == 0, "SO_ERROR is cleared: %d", v);
	CHECK(rsend(c, b, 1, 0) == -1, "rsend on a refused socket");
	CHECK(rconnect(c, (struct sockaddr *)&other, sizeof(other)) == -1,
	      "rconnect again on a refused socket");
	CHECK(rclose(c) == 0, "rclose the refused socket");
	CHECK(rclose(l) == 0, "rclose the listener");
}

/* ---- close_while_blocked ------------------------------------------------------------------ */

/* A thread blocked in rrecv while another thread rclose()s the same socket: the blocked call
 * returns (-1, EBADF, or 0), the process does not crash, and later calls on the number fail. */
struct blocked_arg {
	int fd;
	ssize_t ret;
	int err;
};

static void *blocked_recv(void *arg)
{
	struct blocked_arg *b = arg;
	char c;
	b->ret = rrecv(b->fd, &c, 1, 0);
	b->err = errno;
	return NULL;
}

static void close_blocked_server(int ctl)
{
	struct sockaddr_in addr;
	int l = make_listener(&addr, 0, NULL);
	ctl_put(ctl, &addr, sizeof(addr));
	int a = accept_one(l);
	/* The client closes its end while its reader is blocked; this side only waits. */
	ctl_expect(ctl, 'd');
	rclose(a);
	rclose(l);
}

static void close_blocked_client(int ctl)
{
	struct sockaddr_in addr;
	ctl_get(ctl, &addr, sizeof(addr));
	int c = connect_to(&addr, NULL);
	struct blocked_arg b = { .fd = c, .ret = 42, .err = 0 };
	pthread_t t;
	if (pthread_create(&t, NULL, blocked_recv, &b))
		DIE("pthread_create");
	usleep(200 * 1000);
	STEP("rclose while another thread is blocked in rrecv");
	CHECK(rclose(c) == 0, "rclose with a reader blocked");
	double t0 = now_ms();
	pthread_join(t, NULL);
	CHECK(now_ms() - t0 < 5000, "the blocked rrecv returned promptly: %.0f ms", now_ms() - t0);
	CHECK(b.ret == 0 || (b.ret == -1 && (b.err == EBADF || b.err == ENOTCONN)),
	      "the blocked rrecv ended with %zd (errno %d)", b.ret, b.err);
	char x;
	CHECK(rrecv(c, &x, 1, MSG_DONTWAIT) == -1 && errno == EBADF, "rrecv after rclose: EBADF");
	ctl_signal(ctl, 'd');
}

/* ---- many ------------------------------------------------------------------------------- */

#define MANY_BYTES (256 * KiB)
#define MANY_CHUNK (32 * KiB)

struct echo_arg {
	int fd;
	int index;
};

static void *echo_thread(void *arg)
{
	struct echo_arg *ea = arg;
	int a = ea->fd;
	thread_step[ea->index] = "echoing";
	uint8_t *buf = xmalloc(64 * KiB);
	size_t total = 0;
	for (;;) {
		ssize_t n = rrecv(a, buf, 64 * KiB, 0);
		if (n == 0)
			break;
		if (n < 0) {
			CHECK(n >= 0, "echo: rrecv after %zu bytes", total);
			break;
		}
		if (!send_all(a, buf, n))
			break;
		total += n;
	}
	CHECK(total == MANY_BYTES, "echo: %zu bytes, want %d", total, MANY_BYTES);
	thread_step[ea->index] = "rclose";
	CHECK(rclose(a) == 0, "echo: rclose");
	thread_step[ea->index] = "done";
	free(buf);
	return NULL;
}

static void many_server(int ctl)
{
	struct sockaddr_in addr;
	int l = make_listener(&addr, 0, NULL);
	ctl_put(ctl, &addr, sizeof(addr));
	pthread_t t[MANY];
	struct echo_arg ea[MANY];
	for (int i = 0; i < MANY; i++) {
		ea[i].fd = accept_one(l);
		ea[i].index = i;
		if (pthread_create(&t[i], NULL, echo_thread, &ea[i]))
			DIE("pthread_create");
	}
	STEP("echo threads");
	for (int i = 0; i < MANY; i++)
		pthread_join(t[i], NULL);
	ctl_expect(ctl, 'e');
	STEP("rclose the listener");
	double t0 = now_ms();
	CHECK(rclose(l) == 0, "rclose the listener");
	CHECK(now_ms() - t0 < 5000, "the listener closed promptly: %.0f ms", now_ms() - t0);
}

struct many_arg {
	struct sockaddr_in addr;
	uint32_t seed;
	int index;
};

static void *many_client_thread(void *arg)
{
	struct many_arg *m = arg;
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	if (c < 0)
		DIE("rsocket");
	thread_step[m->index] = "rconnect";
	if (rconnect(c, (struct sockaddr *)&m->addr, sizeof(m->addr))) {
		CHECK(0, "rconnect of connection %u", m->seed);
		rclose(c);
		return NULL;
	}
	uint8_t *out = xmalloc(MANY_BYTES), *in = xmalloc(MANY_CHUNK);
	fill(out, MANY_BYTES, 0, m->seed);
	thread_step[m->index] = "sending and receiving the echo";
	for (size_t off = 0; off < MANY_BYTES; off += MANY_CHUNK) {
		if (!send_all(c, out + off, MANY_CHUNK))
			break;
		memset(in, 0, MANY_CHUNK);
		ssize_t n = rrecv(c, in, MANY_CHUNK, MSG_WAITALL);
		CHECK(n == MANY_CHUNK && memcmp(in, out + off, MANY_CHUNK) == 0,
		      "connection %u: the echo of bytes %zu.. (%zd bytes)", m->seed, off, n);
		if (n != MANY_CHUNK)
			break;
	}
	thread_step[m->index] = "rclose";
	CHECK(rclose(c) == 0, "rclose of connection %u", m->seed);
	thread_step[m->index] = "done";
	free(out);
	free(in);
	return NULL;
}

static void many_client(int ctl)
{
	struct many_arg m[MANY];
	pthread_t t[MANY];
	struct sockaddr_in addr;
	ctl_get(ctl, &addr, sizeof(addr));
	STEP("8 connections");
	for (int i = 0; i < MANY; i++) {
		m[i].addr = addr;
		m[i].seed = 100 + i;
		m[i].index = i;
		if (pthread_create(&t[i], NULL, many_client_thread, &m[i]))
			DIE("pthread_create");
	}
	for (int i = 0; i < MANY; i++)
		pthread_join(t[i], NULL);
	ctl_signal(ctl, 'e');
}

/* ---- main ------------------------------------------------------------------------------- */

static const struct {
	const char *name;
	void (*server)(int);
	void (*client)(int);
	void (*alone)(void);
} cases[] = {
	{ "stream", stream_server, stream_client, NULL },
	{ "peek_waitall", peek_waitall_server, peek_waitall_client, NULL },
	{ "shutdown", shutdown_server, shutdown_client, NULL },
	{ "nonblocking", nonblocking_server, nonblocking_client, NULL },
	{ "poll_select", poll_select_server, poll_select_client, NULL },
	{ "iomap", iomap_server, iomap_client, NULL },
	{ "options", options_server, options_client, NULL },
	{ "bad_calls", NULL, NULL, case_bad_calls },
	{ "many", many_server, many_client, NULL },
	{ "close_while_blocked", close_blocked_server, close_blocked_client, NULL },
};

int main(int argc, char **argv)
{
	unsigned n = sizeof(cases) / sizeof(cases[0]), i;
	for (i = 0; argc == 2 && i < n; i++)
		if (!strcmp(argv[1], cases[i].name))
			break;
	if (argc != 2 || i == n) {
		fprintf(stderr, "usage: rsocket_cases CASE (");
		for (unsigned k = 0; k < n; k++)
			fprintf(stderr, "%s%s", k ? "|" : "", cases[k].name);
		fprintf(stderr, ")\n");
		return 2;
	}
	setvbuf(stderr, NULL, _IOLBF, 0);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	alarm(40);
	if (cases[i].alone)
		cases[i].alone();
	else
		run_pair(cases[i].server, cases[i].client);
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
