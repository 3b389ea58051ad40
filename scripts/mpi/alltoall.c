/* alltoall: MPI_Alltoall and MPI_Alltoallv, every value checked (scripts/mpi.sh).
 *
 *   alltoall [-i ITERS] [-m MAX_COUNT] [-c]
 *
 * MPI_Alltoall with 1, 64, 4096 and MAX_COUNT (default 65536) 64-bit elements per pair of
 * ranks, ITERS times each (fewer for the large counts); then MPI_Alltoallv with a different
 * count for every (sender, receiver) pair, some of them zero. Every element is a function of
 * (iteration, sender, receiver, position) and every element received is checked. Rank 0
 * prints the average time of one MPI_Alltoall per count (the slowest rank's). Exit 0 when
 * every value was right; -c corrupts one received value on the last rank.
 */
#include "common.h"

/* The Alltoallv count from rank s to rank d. */
static int vcount(int s, int d, int it)
{
	return ((s * 7 + d * 3 + it) % 5) * 300;
}

int main(int argc, char **argv)
{
	int iters = 20, max_count = 65536, opt;

	start(&argc, &argv);
	while ((opt = getopt(argc, argv, "i:m:c")) != -1) {
		switch (opt) {
		case 'i': iters = atoi(optarg); break;
		case 'm': max_count = atoi(optarg); break;
		case 'c': corrupt = 1; break;
		default:
			if (rank == 0)
				fprintf(stderr, "usage: alltoall [-i iters] [-m max_count] [-c]\n");
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (iters <= 0 || max_count <= 0)
		MPI_Abort(MPI_COMM_WORLD, 2);
	int counts[] = {1, 64, 4096, max_count};
	int ncounts = sizeof(counts) / sizeof(counts[0]);
	size_t cap = (size_t)(max_count > 1200 ? max_count : 1200) * (size_t)nranks;
	uint64_t *out = xmalloc(cap * 8), *in = xmalloc(cap * 8);
	char line[1024] = "";
	size_t used = 0;

	for (int c = 0; c < ncounts; c++) {
		size_t n = (size_t)counts[c];
		if (c > 0 && n <= (size_t)counts[c - 1])
			continue;
		int its = n >= 4096 ? (iters + 4) / 5 : iters;
		double busy = 0;
		for (int it = 0; it < its; it++) {
			for (int d = 0; d < nranks; d++)
				for (size_t k = 0; k < n; k++)
					out[(size_t)d * n + k] =
						value((uint64_t)it, (uint64_t)rank, (uint64_t)d, k);
			memset(in, 0, n * (size_t)nranks * 8);
			MPI_Barrier(MPI_COMM_WORLD);
			double t0 = now();
			MPI_Alltoall(out, (int)n, MPI_UINT64_T, in, (int)n, MPI_UINT64_T,
				     MPI_COMM_WORLD);
			busy += now() - t0;
			maybe_corrupt(in, n * (size_t)nranks);
			for (int s = 0; s < nranks; s++)
				for (size_t k = 0; k < n; k++)
					check_u64("alltoall", in[(size_t)s * n + k],
						  value((uint64_t)it, (uint64_t)s, (uint64_t)rank, k),
						  (long long)((size_t)s * n + k));
		}
		double avg = busy / its, worst = 0;
		MPI_Reduce(&avg, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		if (used < sizeof(line))
			used += (size_t)snprintf(line + used, sizeof(line) - used, "%s%zu: %.1f us",
						 used ? ", " : "", n, worst * 1e6);
	}

	/* Alltoallv: a count of its own for every pair. */
	int *scount = xmalloc(sizeof(int) * (size_t)nranks), *sdispl = xmalloc(sizeof(int) * (size_t)nranks);
	int *rcount = xmalloc(sizeof(int) * (size_t)nranks), *rdispl = xmalloc(sizeof(int) * (size_t)nranks);
	for (int it = 0; it < iters; it++) {
		int so = 0, ro = 0;
		for (int p = 0; p < nranks; p++) {
			scount[p] = vcount(rank, p, it);
			sdispl[p] = so;
			so += scount[p];
			rcount[p] = vcount(p, rank, it);
			rdispl[p] = ro;
			ro += rcount[p];
		}
		for (int d = 0; d < nranks; d++)
			for (int k = 0; k < scount[d]; k++)
				out[sdispl[d] + k] = value((uint64_t)it + 1000, (uint64_t)rank,
							   (uint64_t)d, (uint64_t)k);
		memset(in, 0, (size_t)ro * 8);
		MPI_Alltoallv(out, scount, sdispl, MPI_UINT64_T, in, rcount, rdispl, MPI_UINT64_T,
			      MPI_COMM_WORLD);
		maybe_corrupt(in, (size_t)ro);
		for (int s = 0; s < nranks; s++)
			for (int k = 0; k < rcount[s]; k++)
				check_u64("alltoallv", in[rdispl[s] + k],
					  value((uint64_t)it + 1000, (uint64_t)s, (uint64_t)rank,
						(uint64_t)k),
					  (long long)(rdispl[s] + k));
	}
	if (rank == 0)
		printf("alltoall: 64-bit elements per pair, average per call by count: %s; "
		       "alltoallv x %d\n", line, iters);
	return finish("alltoall");
}
