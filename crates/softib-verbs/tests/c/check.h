/*
 * What the C test programs of softib-verbs share: the check counters and macros, and the
 * setup helpers every case uses. A program includes it after <infiniband/verbs.h>; its main
 * reports `checks` and exits non-zero when `failures` is.
 */
#ifndef SOFTIB_TESTS_CHECK_H
#define SOFTIB_TESTS_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static int failures;
static int checks;

/* Counts a check; prints the failed condition (function:line) and the message. */
#define CHECK(cond, ...)                                                              \
	do {                                                                              \
		checks++;                                                                     \
		if (!(cond)) {                                                                \
			failures++;                                                               \
			fprintf(stderr, "FAIL %s:%d: %s: ", __func__, __LINE__, #cond);          \
			fprintf(stderr, __VA_ARGS__);                                             \
			fprintf(stderr, "\n");                                                    \
		}                                                                             \
	} while (0)

/* A setup step the checks depend on failed: exit 2 with errno. */
#define DIE(...)                                                                      \
	do {                                                                              \
		fprintf(stderr, "SETUP FAILED %s:%d: ", __func__, __LINE__);                 \
		fprintf(stderr, __VA_ARGS__);                                                 \
		fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno));                  \
		exit(2);                                                                      \
	} while (0)

/* A pointer-returning call failed with exactly errno `want`. */
#define CHECK_NULL_ERRNO(expr, want)                                                  \
	do {                                                                              \
		errno = 0;                                                                    \
		void *p_ = (void *)(expr);                                                    \
		int e_ = errno;                                                               \
		CHECK(p_ == NULL && e_ == (want), "%s gave %p errno %d (%s), want NULL and %s", \
		      #expr, p_, e_, strerror(e_), #want);                                   \
	} while (0)

/* Device `idx` of the list, opened. */
static inline struct ibv_context *open_ctx_of(int idx)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n <= idx)
		DIE("no device %d (of %d)", idx, n);
	struct ibv_context *ctx = ibv_open_device(list[idx]);
	if (!ctx)
		DIE("ibv_open_device");
	ibv_free_device_list(list);
	return ctx;
}

/* The first device, opened. */
static inline struct ibv_context *open_ctx(void)
{
	return open_ctx_of(0);
}

static inline double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Polls one completion within `secs`; 1 if one came. */
static inline int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, double secs)
{
	double end = now() + secs;
	while (now() < end) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			DIE("ibv_poll_cq %d", n);
		if (n == 1)
			return 1;
		usleep(100);
	}
	return 0;
}

#endif
