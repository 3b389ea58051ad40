/* pt2pt: point-to-point latency and bandwidth between pairs of ranks, every value checked
 * (scripts/mpi.sh).
 *
 *   pt2pt [-n LAT_ITERS] [-s LAT_BYTES] [-b BW_BYTES] [-w WINDOW] [-r BW_REPS] [-c]
 *
 * Rank r pairs with rank (r + N/2) mod N (N even), so that with ranks placed in blocks on two
 * hosts every pair crosses between them. Latency: LAT_ITERS ping-pongs of LAT_BYTES
 * (multiple of 8) after 100 of warm-up; each message's every 64-bit value is a function of
 * (iteration, sender, position) and is checked on arrival. Bandwidth: BW_REPS times, WINDOW
 * messages of BW_BYTES in flight from the lower rank to the higher (MPI_Isend/MPI_Irecv),
 * then a checked 8-byte acknowledgement; every value of every message checked. Each rank also
 * sends 64 KiB to itself (MPI_Sendrecv), checked. Rank 0 prints the slowest pair's median
 * one-way latency and the lowest bandwidth. Exit 0 when every value was right; -c corrupts
 * one received value on the last rank (the run must then fail).
 */
#include "common.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void fill(uint64_t *buf, size_t n, uint64_t it, uint64_t sender, uint64_t tag)
{
	for (size_t k = 0; k < n; k++)
		buf[k] = value(it, sender, tag, k);
}

static void check(const char *what, uint64_t *buf, size_t n, uint64_t it, uint64_t sender,
		  uint64_t tag)
{
	maybe_corrupt(buf, n);
	for (size_t k = 0; k < n; k++)
		check_u64(what, buf[k], value(it, sender, tag, k), (long long)k);
}

int main(int argc, char **argv)
{
	int iters = 2000, lat_bytes = 8, bw_bytes = 1 << 20, window = 16, reps = 10, opt;

	start(&argc, &argv);
	while ((opt = getopt(argc, argv, "n:s:b:w:r:c")) != -1) {
		switch (opt) {
		case 'n': iters = atoi(optarg); break;
		case 's': lat_bytes = atoi(optarg); break;
		case 'b': bw_bytes = atoi(optarg); break;
		case 'w': window = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		case 'c': corrupt = 1; break;
		default:
			if (rank == 0)
				fprintf(stderr, "usage: pt2pt [-n iters] [-s lat_bytes] [-b bw_bytes] "
						"[-w window] [-r reps] [-c]\n");
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (nranks % 2 || lat_bytes % 8 || lat_bytes <= 0 || bw_bytes % 8 || bw_bytes <= 0 ||
	    iters <= 0 || window <= 0 || reps <= 0) {
		if (rank == 0)
			fprintf(stderr, "pt2pt: needs an even number of ranks and sizes that are "
					"positive multiples of 8 (got %d ranks)\n", nranks);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int half = nranks / 2, peer = (rank + half) % nranks, first = rank < half;
	size_t lat_n = (size_t)lat_bytes / 8, bw_n = (size_t)bw_bytes / 8;

	/* To itself. */
	size_t self_n = 65536 / 8;
	uint64_t *self_out = xmalloc(self_n * 8), *self_in = xmalloc(self_n * 8);
	fill(self_out, self_n, 0, (uint64_t)rank, 7);
	MPI_Sendrecv(self_out, (int)self_n, MPI_UINT64_T, rank, 7, self_in, (int)self_n,
		     MPI_UINT64_T, rank, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	check("self", self_in, self_n, 0, (uint64_t)rank, 7);

	/* Latency. */
	uint64_t *out = xmalloc(lat_n * 8), *in = xmalloc(lat_n * 8);
	double *rtt = xmalloc(sizeof(double) * (size_t)iters);
	int warm = 100;
	MPI_Barrier(MPI_COMM_WORLD);
	for (int i = -warm; i < iters; i++) {
		uint64_t it = (uint64_t)(i + warm);
		double t0 = now();
		if (first) {
			fill(out, lat_n, it, (uint64_t)rank, 1);
			MPI_Send(out, (int)lat_n, MPI_UINT64_T, peer, 1, MPI_COMM_WORLD);
			MPI_Recv(in, (int)lat_n, MPI_UINT64_T, peer, 1, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
			if (i >= 0)
				rtt[i] = now() - t0;
			check("latency", in, lat_n, it, (uint64_t)peer, 1);
		} else {
			MPI_Recv(in, (int)lat_n, MPI_UINT64_T, peer, 1, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
			check("latency", in, lat_n, it, (uint64_t)peer, 1);
			fill(out, lat_n, it, (uint64_t)rank, 1);
			MPI_Send(out, (int)lat_n, MPI_UINT64_T, peer, 1, MPI_COMM_WORLD);
		}
	}
	double median_us = 0;
	if (first) {
		qsort(rtt, (size_t)iters, sizeof(double), cmp_double);
		median_us = rtt[iters / 2] / 2 * 1e6;
	}

	/* Bandwidth. */
	uint64_t **bufs = xmalloc(sizeof(uint64_t *) * (size_t)window);
	for (int w = 0; w < window; w++)
		bufs[w] = xmalloc(bw_n * 8);
	MPI_Request *req = xmalloc(sizeof(MPI_Request) * (size_t)window);
	/* Statuses, not MPI_STATUSES_IGNORE: GCC 12 takes MPICH's (MPI_Status *)1 for an empty
	 * array (-Wstringop-overflow). */
	MPI_Status *st = xmalloc(sizeof(MPI_Status) * (size_t)window);
	uint64_t ack;
	double busy = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	for (int r = 0; r < reps; r++) {
		if (first) {
			for (int w = 0; w < window; w++)
				fill(bufs[w], bw_n, (uint64_t)r, (uint64_t)rank, 100 + (uint64_t)w);
			double t0 = now();
			for (int w = 0; w < window; w++)
				MPI_Isend(bufs[w], (int)bw_n, MPI_UINT64_T, peer, 2, MPI_COMM_WORLD,
					  &req[w]);
			MPI_Waitall(window, req, st);
			MPI_Recv(&ack, 1, MPI_UINT64_T, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			busy += now() - t0;
			check("bandwidth ack", &ack, 1, (uint64_t)r, (uint64_t)peer, 3);
		} else {
			for (int w = 0; w < window; w++)
				MPI_Irecv(bufs[w], (int)bw_n, MPI_UINT64_T, peer, 2, MPI_COMM_WORLD,
					  &req[w]);
			MPI_Waitall(window, req, st);
			ack = value((uint64_t)r, (uint64_t)rank, 3, 0);
			MPI_Send(&ack, 1, MPI_UINT64_T, peer, 3, MPI_COMM_WORLD);
			for (int w = 0; w < window; w++)
				check("bandwidth", bufs[w], bw_n, (uint64_t)r, (uint64_t)peer,
				      100 + (uint64_t)w);
		}
	}
	double mbps = first ? (double)bw_bytes * window * reps / busy / 1e6 : 1e300;

	double worst_lat = 0, least_bw = 0;
	MPI_Reduce(&median_us, &worst_lat, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Reduce(&mbps, &least_bw, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("pt2pt: %d pairs: latency %d B median %.2f us one way (slowest pair, %d "
		       "round trips), bandwidth %d B x %d in flight: %.0f MB/s (slowest pair)\n",
		       half, lat_bytes, worst_lat, iters, bw_bytes, window, least_bw);
	return finish("pt2pt");
}
