/* allreduce: MPI_Allreduce of several sizes, every value checked (scripts/mpi.sh).
 *
 *   allreduce [-i ITERS] [-m MAX_COUNT] [-c]
 *
 * For each count of 1, 7, 1000, 65536 and MAX_COUNT (default 1048576) 64-bit elements, ITERS
 * times (fewer for the large counts): MPI_SUM of unsigned 64-bit integers whose every element
 * is a function of (iteration, rank, position), then MPI_MAX of doubles, then an in-place
 * MPI_BXOR; every element of every result is compared with the value computed from all ranks'
 * inputs. Rank 0 prints the average time of one MPI_SUM allreduce per count (the slowest
 * rank's). Exit 0 when every value was right; -c corrupts one result value on the last rank.
 */
#include "common.h"

int main(int argc, char **argv)
{
	int iters = 20, max_count = 1 << 20, opt;

	start(&argc, &argv);
	while ((opt = getopt(argc, argv, "i:m:c")) != -1) {
		switch (opt) {
		case 'i': iters = atoi(optarg); break;
		case 'm': max_count = atoi(optarg); break;
		case 'c': corrupt = 1; break;
		default:
			if (rank == 0)
				fprintf(stderr, "usage: allreduce [-i iters] [-m max_count] [-c]\n");
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (iters <= 0 || max_count <= 0)
		MPI_Abort(MPI_COMM_WORLD, 2);
	int counts[] = {1, 7, 1000, 65536, max_count};
	int ncounts = sizeof(counts) / sizeof(counts[0]);
	uint64_t *in = xmalloc((size_t)max_count * 8), *res = xmalloc((size_t)max_count * 8);
	double *din = xmalloc((size_t)max_count * 8), *dres = xmalloc((size_t)max_count * 8);
	char line[1024] = "";
	size_t used = 0;

	for (int c = 0; c < ncounts; c++) {
		size_t n = (size_t)counts[c];
		if (c > 0 && n <= (size_t)counts[c - 1])
			continue;
		/* The large counts: fewer iterations, so that a run stays short. */
		int its = n >= 65536 ? (iters + 9) / 10 : iters;
		double busy = 0;
		for (int it = 0; it < its; it++) {
			/* MPI_SUM of integers below 2^48: no carry past 64 bits with any rank count
			 * an int holds. */
			for (size_t k = 0; k < n; k++)
				in[k] = value((uint64_t)it, (uint64_t)rank, 1, k) >> 16;
			MPI_Barrier(MPI_COMM_WORLD);
			double t0 = now();
			MPI_Allreduce(in, res, (int)n, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
			busy += now() - t0;
			maybe_corrupt(res, n);
			for (size_t k = 0; k < n; k++) {
				uint64_t want = 0;
				for (int r = 0; r < nranks; r++)
					want += value((uint64_t)it, (uint64_t)r, 1, k) >> 16;
				check_u64("allreduce sum", res[k], want, (long long)k);
			}
			/* MPI_MAX of doubles: integers below 2^52 are exact. */
			for (size_t k = 0; k < n; k++)
				din[k] = (double)(value((uint64_t)it, (uint64_t)rank, 2, k) >> 12);
			MPI_Allreduce(din, dres, (int)n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
			for (size_t k = 0; k < n; k++) {
				uint64_t want = 0;
				for (int r = 0; r < nranks; r++) {
					uint64_t v = value((uint64_t)it, (uint64_t)r, 2, k) >> 12;
					if (v > want)
						want = v;
				}
				check_u64("allreduce max", (uint64_t)dres[k], want, (long long)k);
			}
			/* In place, MPI_BXOR. */
			for (size_t k = 0; k < n; k++)
				res[k] = value((uint64_t)it, (uint64_t)rank, 3, k);
			MPI_Allreduce(MPI_IN_PLACE, res, (int)n, MPI_UINT64_T, MPI_BXOR,
				      MPI_COMM_WORLD);
			for (size_t k = 0; k < n; k++) {
				uint64_t want = 0;
				for (int r = 0; r < nranks; r++)
					want ^= value((uint64_t)it, (uint64_t)r, 3, k);
				check_u64("allreduce in-place bxor", res[k], want, (long long)k);
			}
		}
		double avg = busy / its, worst = 0;
		MPI_Reduce(&avg, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		if (used < sizeof(line))
			used += (size_t)snprintf(line + used, sizeof(line) - used, "%s%zu: %.1f us",
						 used ? ", " : "", n, worst * 1e6);
	}
	if (rank == 0)
		printf("allreduce: sum of 64-bit integers, average per call by count: %s\n", line);
	return finish("allreduce");
}
