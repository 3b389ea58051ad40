/* common.h - what the MPI programs of scripts/mpi.sh share: the value every element must
 * have, wrong-value counting and reporting, timing, and the -c option that corrupts one
 * received value on purpose (to show that the checks catch it). */
#ifndef SOFTIB_MPI_COMMON_H
#define SOFTIB_MPI_COMMON_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, nranks;
/* Wrong values seen by this rank; a few are printed, all are counted. */
static long long wrong;
/* -c: the last rank flips one received value before it checks. */
static int corrupt;

/* The value of element k of message (a, b, c): a 64-bit mix, distinct for every argument. */
static inline uint64_t value(uint64_t a, uint64_t b, uint64_t c, uint64_t k)
{
	uint64_t x = a * 0x9E3779B97F4A7C15ull ^ b * 0xC2B2AE3D27D4EB4Full ^
		     c * 0x165667B19E3779F9ull ^ (k + 1) * 0xD6E8FEB86659FD93ull;
	x ^= x >> 32;
	x *= 0xD6E8FEB86659FD93ull;
	x ^= x >> 32;
	return x;
}

static inline void check_u64(const char *what, uint64_t got, uint64_t want, long long at)
{
	if (got == want)
		return;
	if (wrong < 5)
		fprintf(stderr, "rank %d: %s: element %lld is %#llx, not %#llx\n", rank, what, at,
			(unsigned long long)got, (unsigned long long)want);
	wrong++;
}

/* Flips one value of a received buffer when -c is given, on the last rank, once. */
static inline void maybe_corrupt(uint64_t *buf, size_t n)
{
	static int done;
	if (corrupt && !done && rank == nranks - 1 && n > 0) {
		buf[n / 2] ^= 1;
		done = 1;
	}
}

static inline double now(void)
{
	return MPI_Wtime();
}

static inline void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", rank, n);
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
	return p;
}

/* MPI_Init; with MPI_CHECK_PIDS=DIR in the environment, each rank writes its process id to
 * DIR/rank.RANK (so that a test can kill one rank by its id). */
static inline void start(int *argc, char ***argv)
{
	MPI_Init(argc, argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	const char *dir = getenv("MPI_CHECK_PIDS");
	if (dir && *dir) {
		char path[4096], tmp[4200];
		snprintf(path, sizeof(path), "%s/rank.%d", dir, rank);
		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		FILE *f = fopen(tmp, "w");
		if (!f || fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f) != 0 ||
		    rename(tmp, path) != 0) {
			fprintf(stderr, "rank %d: cannot write %s\n", rank, path);
			MPI_Abort(MPI_COMM_WORLD, 3);
		}
	}
}

/* Sums every rank's wrong values; rank 0 prints the verdict. Returns the exit status: 0 when
 * every value of every rank was right. */
static inline int finish(const char *prog)
{
	long long total = 0;
	MPI_Allreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0) {
		if (total == 0)
			printf("%s: %d ranks: every value checked, all right\n", prog, nranks);
		else
			printf("%s: %d ranks: %lld wrong values\n", prog, nranks, total);
		fflush(stdout);
	}
	MPI_Finalize();
	return total == 0 ? 0 : 1;
}

#endif
