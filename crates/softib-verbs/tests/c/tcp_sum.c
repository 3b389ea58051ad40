/*
 * tcp_sum: an ordinary TCP program (socket, bind, listen, accept, connect, read, write,
 * shutdown, close; no RDMA header), run by tests/rsocket_cases.rs under rdma-core's rsocket
 * preload library (LD_PRELOAD=librspreload.so) on softib's librdmacm.so.1.
 *
 *   tcp_sum s ADDR PORT   accepts one connection, reads to end of stream, answers the
 *                         byte count and sum, exits 0
 *   tcp_sum c ADDR PORT   connects, writes 8 MiB of pseudo-random bytes, shuts down its
 *                         sending side, checks the answer, exits 0 if it matches
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char buf[1 << 20];

static int read_full(int fd, void *p, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, (char *)p + got, len - got);
		if (n <= 0)
			return -1;
		got += n;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	long answer[2] = { 0, 0 }, back[2];

	if (argc != 4 || inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) {
		fprintf(stderr, "usage: tcp_sum s|c ADDR PORT\n");
		return 2;
	}
	a.sin_port = htons(atoi(argv[3]));
	if (argv[1][0] == 's') {
		int l = socket(AF_INET, SOCK_STREAM, 0), one = 1, c;
		ssize_t n;

		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (l < 0 || bind(l, (void *)&a, sizeof a) || listen(l, 4)) {
			perror("tcp_sum server: socket/bind/listen");
			return 1;
		}
		c = accept(l, NULL, NULL);
		if (c < 0) {
			perror("tcp_sum server: accept");
			return 1;
		}
		while ((n = read(c, buf, sizeof buf)) > 0) {
			for (ssize_t i = 0; i < n; i++)
				answer[1] += (unsigned char)buf[i];
			answer[0] += n;
		}
		if (n < 0 || write(c, answer, sizeof answer) != sizeof answer) {
			perror("tcp_sum server: read/write");
			return 1;
		}
		printf("server: %ld bytes, sum %ld\n", answer[0], answer[1]);
		close(c);
		close(l);
		return 0;
	}
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (void *)&a, sizeof a)) {
		perror("tcp_sum client: socket/connect");
		return 1;
	}
	srand(7);
	for (int r = 0; r < 8; r++) {
		for (size_t i = 0; i < sizeof buf; i++) {
			buf[i] = (char)rand();
			answer[1] += (unsigned char)buf[i];
		}
		if (write(c, buf, sizeof buf) != (ssize_t)sizeof buf) {
			perror("tcp_sum client: write");
			return 1;
		}
		answer[0] += sizeof buf;
	}
	if (shutdown(c, SHUT_WR) || read_full(c, back, sizeof back)) {
		perror("tcp_sum client: shutdown/read");
		return 1;
	}
	close(c);
	if (back[0] != answer[0] || back[1] != answer[1]) {
		fprintf(stderr, "tcp_sum client: the server counted %ld bytes, sum %ld; sent %ld, sum %ld\n",
			back[0], back[1], answer[0], answer[1]);
		return 1;
	}
	printf("client: %ld bytes, sum matches\n", answer[0]);
	return 0;
}
