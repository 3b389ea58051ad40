/* A stand-in libibverbs.so.1 for the trampoline test: implements two softib_rdmacm_
 * functions, one of them with six arguments, and nothing else. */
#include <stdint.h>
#include <stddef.h>

const char *softib_rdmacm_rdma_event_str(int event)
{
	return event == 9 ? "FAKE ESTABLISHED" : "FAKE OTHER";
}

/* rdma_set_option(id, level, optname, optval, optlen) has five; riomap has six. */
long softib_rdmacm_riomap(long a, long b, long c, long d, long e, long f)
{
	return a + 10 * b + 100 * c + 1000 * d + 10000 * e + 100000 * f;
}
