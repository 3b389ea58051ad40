/* Calls librdmacm.so.1's entry points through rdma-core's own header: with the fake
 * libibverbs.so.1 of fake_ibverbs.c they must forward arguments and results; a function the
 * fake lacks must fail as documented with ENOSYS. Prints one line per check. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

int main(void)
{
	int fails = 0;
#define CHECK(cond, what) do { if (cond) printf("ok %s\n", what); else { printf("FAIL %s\n", what); fails++; } } while (0)
	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "FAKE ESTABLISHED") == 0,
	      "rdma_event_str forwarded");
	off_t r = riomap(1, (void *)2, 3, 4, 5, 6);
	CHECK(r == 654321, "riomap: six arguments and the result forwarded");
	errno = 0;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch == NULL && errno == ENOSYS, "absent pointer function: NULL, ENOSYS");
	errno = 0;
	CHECK(rdma_listen(NULL, 1) == -1 && errno == ENOSYS, "absent int function: -1, ENOSYS");
	errno = 0;
	CHECK(rdma_get_src_port(NULL) == 0 && errno == ENOSYS, "absent port function: 0, ENOSYS");
	rdma_destroy_event_channel(NULL);
	CHECK(1, "absent void function returns");
	return fails != 0;
}
