/* The cost of one blocking thread wake-up on this machine: two threads ping-pong through
 * eventfds (read blocks, write wakes the peer). bench/verbs-ratios.sh prints it beside the
 * latency ratio: a program that spins on memory (perftest's ib_write_lat) is served by
 * softib's progress thread, which sleeps until the packet arrives, so each one-way trip pays at
 * least one wake-up, while `softib bench --lat` busy-polls on both sides.
 * Usage: wakeup [N]   prints "<us per wake-up>" */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static int to_peer, to_main;
static long n = 20000;

static void *peer(void *arg)
{
	(void)arg;
	uint64_t v;
	for (long i = 0; i < n; i++) {
		if (read(to_peer, &v, 8) != 8 || write(to_main, &v, 8) != 8)
			exit(1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		n = atol(argv[1]);
	to_peer = eventfd(0, 0);
	to_main = eventfd(0, 0);
	pthread_t t;
	pthread_create(&t, NULL, peer, NULL);
	struct timespec a, b;
	uint64_t v = 1;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++) {
		if (write(to_peer, &v, 8) != 8 || read(to_main, &v, 8) != 8)
			return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	pthread_join(t, NULL);
	double us = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3;
	printf("%.2f\n", us / n / 2);
	return 0;
}
