"""mpi4py on softib (scripts/mpi.sh): allreduce and alltoall, every value checked.

    mpirun ... /usr/bin/python3 scripts/mpi/check.py

Buffers (array.array through MPI.DOUBLE / MPI.INT64_T, no numpy needed) and pickled Python
objects: MPI_Allreduce with SUM and MAX, MPI_Alltoall, and the object forms allreduce and
alltoall. Every element is a function of (rank, position) and every element of every result
is compared with the value computed from all ranks' inputs. Exit 0 when all are right.
"""

import sys
from array import array

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
wrong = 0


def check(what, got, want):
    global wrong
    if got != want:
        if wrong < 5:
            print(f"rank {rank}: {what}: {got!r} is not {want!r}", file=sys.stderr)
        wrong += 1


def val(r, k):
    # Below 2^40: sums of any number of ranks stay exact in 64 bits.
    return (r * 1_000_003 + k * 7_919 + 17) % (1 << 40)


N = 100_000
for it in range(3):
    mine = array("q", (val(rank + it, k) for k in range(N)))
    total = array("q", bytes(8 * N))
    comm.Allreduce([mine, MPI.INT64_T], [total, MPI.INT64_T], op=MPI.SUM)
    for k in range(N):
        check("Allreduce sum", total[k], sum(val(r + it, k) for r in range(size)))
    dmine = array("d", (float(val(rank + it, k)) for k in range(N)))
    dmax = array("d", bytes(8 * N))
    comm.Allreduce([dmine, MPI.DOUBLE], [dmax, MPI.DOUBLE], op=MPI.MAX)
    for k in range(N):
        check("Allreduce max", dmax[k], float(max(val(r + it, k) for r in range(size))))

# Alltoall: M elements from every rank to every rank.
M = 4096
out = array("q", (val(rank * size + d, k) for d in range(size) for k in range(M)))
got = array("q", bytes(8 * M * size))
comm.Alltoall([out, MPI.INT64_T], [got, MPI.INT64_T])
for s in range(size):
    for k in range(M):
        check("Alltoall", got[s * M + k], val(s * size + rank, k))

# The object forms (pickled).
check("allreduce", comm.allreduce(rank + 1, op=MPI.SUM), size * (size + 1) // 2)
objs = comm.alltoall([(rank, d, "x" * d) for d in range(size)])
for s in range(size):
    check("alltoall", objs[s], (s, rank, "x" * rank))

total_wrong = comm.allreduce(wrong, op=MPI.SUM)
if rank == 0:
    if total_wrong == 0:
        print(f"mpi4py: {size} ranks: every value checked, all right")
    else:
        print(f"mpi4py: {size} ranks: {total_wrong} wrong values")
sys.exit(0 if total_wrong == 0 else 1)
