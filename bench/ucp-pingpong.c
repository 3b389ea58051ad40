/*
 * UCP tag ping-pong that times every round trip of a new connection, from the first.
 *
 *   cc -O2 -o ucp-pingpong bench/ucp-pingpong.c -lucp -lucs     (Debian: libucx-dev)
 *   softib run -- ./ucp-pingpong [-n ITERS] [-s SIZE] [-p PORT]          # server
 *   softib run -- ./ucp-pingpong [-n ITERS] [-s SIZE] [-p PORT] [-v] HOST # client
 *
 * The two sides swap UCP worker addresses over TCP (PORT, default 13338), create their
 * endpoints and ping-pong SIZE-byte tagged messages ITERS times with no warm-up, both
 * busy-polling their worker. The client prints one summary line:
 *
 *   iters N first10 A B C ... median_after10 M max X over10x K last_over10x I
 *
 * (round-trip times in microseconds: the first ten, then the median and the largest of the
 * others; K = round trips after the tenth slower than 10x that median; I = the index of the
 * last of them, -1 if none) and with -v every round trip first, one per line: index,
 * microseconds, and when it began (CLOCK_MONOTONIC, microseconds). The first round trip
 * includes the connection's wire-up. UCX_TLS and the other UCX_* variables choose the
 * transports as usual.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <ucp/api/ucp.h>

#define TAG 0x1337

static void die(const char *what)
{
	fprintf(stderr, "ucp-pingpong: %s\n", what);
	exit(1);
}

static void check(ucs_status_t st, const char *what)
{
	if (st != UCS_OK) {
		fprintf(stderr, "ucp-pingpong: %s: %s\n", what, ucs_status_string(st));
		exit(1);
	}
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void full_io(int fd, void *buf, size_t len, int out)
{
	char *p = buf;
	while (len > 0) {
		ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
		if (n <= 0)
			die("address exchange over TCP failed");
		p += n;
		len -= (size_t)n;
	}
}

static int tcp_connect(const char *host, int port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	if (getaddrinfo(host, ps, &hints, &ai) != 0)
		die("cannot resolve the server");
	for (int tries = 0; tries < 100; tries++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
			freeaddrinfo(ai);
			return fd;
		}
		if (fd >= 0)
			close(fd);
		usleep(100000);
	}
	die("cannot connect to the server");
	return -1;
}

static int tcp_accept(int port)
{
	int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1))
		die("cannot listen");
	int fd = accept(ls, NULL, NULL);
	close(ls);
	if (fd < 0)
		die("accept failed");
	return fd;
}

/* Drives the worker until the request completes. */
static void wait_req(ucp_worker_h w, void *req, const char *what)
{
	if (req == NULL)
		return;
	if (UCS_PTR_IS_ERR(req))
		check(UCS_PTR_STATUS(req), what);
	ucs_status_t st;
	while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS)
		ucp_worker_progress(w);
	check(st, what);
	ucp_request_free(req);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int iters = 1000, port = 13338, verbose = 0, c;
	size_t size = 8;
	while ((c = getopt(argc, argv, "n:s:p:v")) != -1) {
		switch (c) {
		case 'n': iters = atoi(optarg); break;
		case 's': size = (size_t)atol(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 'v': verbose = 1; break;
		default: die("usage: ucp-pingpong [-n ITERS] [-s SIZE] [-p PORT] [-v] [HOST]");
		}
	}
	const char *host = optind < argc ? argv[optind] : NULL;
	int is_client = host != NULL;
	if (iters < 11)
		die("-n must be at least 11");

	ucp_params_t params = { .field_mask = UCP_PARAM_FIELD_FEATURES,
				.features = UCP_FEATURE_TAG };
	ucp_context_h ctx;
	check(ucp_init(&params, NULL, &ctx), "ucp_init");
	ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				   .thread_mode = UCS_THREAD_MODE_SINGLE };
	ucp_worker_h worker;
	check(ucp_worker_create(ctx, &wp, &worker), "ucp_worker_create");
	ucp_address_t *addr;
	size_t addr_len;
	check(ucp_worker_get_address(worker, &addr, &addr_len), "ucp_worker_get_address");

	int fd = is_client ? tcp_connect(host, port) : tcp_accept(port);
	uint64_t len = addr_len, peer_len;
	full_io(fd, &len, sizeof(len), 1);
	full_io(fd, addr, addr_len, 1);
	full_io(fd, &peer_len, sizeof(peer_len), 0);
	void *peer = malloc(peer_len);
	full_io(fd, peer, peer_len, 0);

	ucp_ep_params_t ep_params = { .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
				      .address = peer };
	ucp_ep_h ep;
	check(ucp_ep_create(worker, &ep_params, &ep), "ucp_ep_create");

	char *sbuf = calloc(1, size ? size : 1), *rbuf = calloc(1, size ? size : 1);
	double *rtt = calloc((size_t)iters, sizeof(double));
	double *start = calloc((size_t)iters, sizeof(double));
	ucp_request_param_t rp = { 0 };
	for (int i = 0; i < iters; i++) {
		double t0 = now_us();
		start[i] = t0;
		if (is_client) {
			wait_req(worker, ucp_tag_send_nbx(ep, sbuf, size, TAG, &rp), "send");
			wait_req(worker, ucp_tag_recv_nbx(worker, rbuf, size, TAG, ~0ull, &rp),
				 "recv");
		} else {
			wait_req(worker, ucp_tag_recv_nbx(worker, rbuf, size, TAG, ~0ull, &rp),
				 "recv");
			wait_req(worker, ucp_tag_send_nbx(ep, sbuf, size, TAG, &rp), "send");
		}
		rtt[i] = now_us() - t0;
	}

	/* Both sides done before either closes its endpoint. */
	char done = 1;
	full_io(fd, &done, 1, 1);
	full_io(fd, &done, 1, 0);

	if (is_client) {
		if (verbose)
			for (int i = 0; i < iters; i++)
				printf("%d %.3f %.3f\n", i, rtt[i], start[i]);
		double *sorted = malloc(sizeof(double) * (size_t)(iters - 10));
		memcpy(sorted, rtt + 10, sizeof(double) * (size_t)(iters - 10));
		qsort(sorted, (size_t)(iters - 10), sizeof(double), cmp);
		double median = sorted[(iters - 10) / 2], max = sorted[iters - 11];
		int over = 0, last = -1;
		for (int i = 10; i < iters; i++)
			if (rtt[i] > 10 * median) {
				over++;
				last = i;
			}
		printf("iters %d first10", iters);
		for (int i = 0; i < 10; i++)
			printf(" %.1f", rtt[i]);
		printf(" median_after10 %.2f max %.1f over10x %d last_over10x %d\n", median, max,
		       over, last);
		free(sorted);
	}

	/* Both sides are done: no flush, and whatever the close says is not the measurement's. */
	ucp_request_param_t cp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				   .flags = UCP_EP_CLOSE_FLAG_FORCE };
	void *creq = ucp_ep_close_nbx(ep, &cp);
	if (creq != NULL && !UCS_PTR_IS_ERR(creq)) {
		while (ucp_request_check_status(creq) == UCS_INPROGRESS)
			ucp_worker_progress(worker);
		ucp_request_free(creq);
	}
	close(fd);
	ucp_worker_release_address(worker, addr);
	ucp_worker_destroy(worker);
	ucp_cleanup(ctx);
	free(peer);
	free(sbuf);
	free(rbuf);
	free(rtt);
	free(start);
	return 0;
}
