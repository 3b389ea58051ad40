/* The cost of moving one cache line between CPUs 0 and 1 on this machine: two threads, one
 * pinned on each, ping-pong a counter through two cache lines (each spins until the other's
 * line shows the count it waits for, then writes its own). bench/shm-ratios.sh prints it
 * beside the shared-memory path's message rate: every datagram that path carries is written
 * into the ring by the sender's CPU and read by the receiver's, so each cache line of it
 * crosses once, a cost the UDP path pays inside the kernel's copies instead.
 * Usage: line-transfer [N]   prints "<ns per one-way transfer>" (half a round trip) */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) _Atomic long ping;
static _Alignas(64) _Atomic long pong;
static long n = 2000000;

static int pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *peer(void *arg)
{
	(void)arg;
	if (pin(1) != 0)
		exit(2);
	for (long i = 1; i <= n; i++) {
		while (atomic_load_explicit(&ping, memory_order_acquire) != i)
			;
		atomic_store_explicit(&pong, i, memory_order_release);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		n = atol(argv[1]);
	if (pin(0) != 0)
		return 2;
	pthread_t t;
	pthread_create(&t, NULL, peer, NULL);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 1; i <= n; i++) {
		atomic_store_explicit(&ping, i, memory_order_release);
		while (atomic_load_explicit(&pong, memory_order_acquire) != i)
			;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	pthread_join(t, NULL);
	double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
	printf("%.1f\n", ns / n / 2);
	return 0;
}
