/*
 * Two MPI ranks: a ping-pong of every power-of-4 size from 1 byte to 4 MiB, four rounds each,
 * every message with a pattern of its size and round checked by the receiver (the answer is
 * the message with its bytes inverted, checked by rank 0); then 10 000 round trips of 8 bytes
 * timed, an allreduce. Rank 0 prints one line; the exit status is 0 only if every check held.
 * Built with mpicc.openmpi by crates/softib-cli/tests/libfabric.rs and scripts/libfabric.sh,
 * run over Open MPI's pml cm / mtl ofi on libfabric's verbs;ofi_rxm on softib.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pat(size_t n, int round, int from, size_t i)
{
	return (unsigned char)(n * 3 + round * 7 + from * 11 + i * 31 + (i >> 9));
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size, bad = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		if (!rank)
			fprintf(stderr, "run with 2 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	const size_t max = 4 << 20;
	unsigned char *buf = malloc(max), *ans = malloc(max);
	int peer = 1 - rank, checked = 0;
	for (size_t n = 1; n <= max; n *= 4) {
		for (int r = 0; r < 4; r++) {
			if (rank == 0) {
				for (size_t i = 0; i < n; i++)
					buf[i] = pat(n, r, 0, i);
				MPI_Send(buf, (int)n, MPI_BYTE, peer, r, MPI_COMM_WORLD);
				MPI_Recv(ans, (int)n, MPI_BYTE, peer, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (size_t i = 0; i < n; i++)
					if (ans[i] != (unsigned char)~pat(n, r, 0, i)) {
						bad++;
						break;
					}
			} else {
				MPI_Status st;
				MPI_Recv(buf, (int)n, MPI_BYTE, peer, r, MPI_COMM_WORLD, &st);
				int got;
				MPI_Get_count(&st, MPI_BYTE, &got);
				if ((size_t)got != n)
					bad++;
				for (size_t i = 0; i < n; i++) {
					if (buf[i] != pat(n, r, 0, i)) {
						bad++;
						break;
					}
					ans[i] = (unsigned char)~buf[i];
				}
				MPI_Send(ans, (int)n, MPI_BYTE, peer, r, MPI_COMM_WORLD);
			}
			checked++;
		}
	}
	const int iters = 10000;
	double t0 = MPI_Wtime();
	for (int k = 0; k < iters; k++) {
		if (rank == 0) {
			MPI_Send(buf, 8, MPI_BYTE, peer, 99, MPI_COMM_WORLD);
			MPI_Recv(buf, 8, MPI_BYTE, peer, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else {
			MPI_Recv(buf, 8, MPI_BYTE, peer, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Send(buf, 8, MPI_BYTE, peer, 99, MPI_COMM_WORLD);
		}
	}
	double rtt = (MPI_Wtime() - t0) / iters * 1e6;
	long v = rank + 1, sum = 0;
	MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (sum != 3)
		bad++;
	int all_bad = 0;
	MPI_Reduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_check: %d messages checked each way, %d bad; 8-byte round trip %.2f us "
		       "(average of %d); allreduce %ld\n",
		       checked, all_bad, rtt, iters, sum);
	free(buf);
	free(ans);
	MPI_Finalize();
	return all_bad ? 1 : 0;
}
