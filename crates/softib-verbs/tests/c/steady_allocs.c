/*
 * Heap allocations per message through the C ABI, on the steady path: none. An unmodified
 * rdma-core 44 program's view: two RC QPs of one context move 64-byte RDMA WRITEs and SENDs in
 * rounds of 16, posted with ibv_post_send or with the ibv_wr_* interface (ibv_wr_start ...
 * ibv_wr_complete, what perftest uses by default), their payload in one SGE or inline; the
 * application polls both CQs and reposts the receives. After a warm-up, the process's
 * malloc / calloc / realloc / aligned allocations are counted (this program defines them and
 * forwards to glibc's, so softib's library calls these) over 500 rounds.
 *
 * `steady_allocs CASE` with CASE = {post,wr}_{write,send}_{sge,inline}; exits 0 only if the
 * count is zero. Built by tests/steady_allocs.rs.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "check.h"

/* ---- a counting allocator over glibc's ---- */

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static atomic_long allocs;

void *malloc(size_t n)
{
	atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
	return __libc_malloc(n);
}
void *calloc(size_t n, size_t m)
{
	atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
	return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n)
{
	atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
	return __libc_realloc(p, n);
}
void *memalign(size_t a, size_t n)
{
	atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
	return __libc_memalign(a, n);
}
void *aligned_alloc(size_t a, size_t n)
{
	return memalign(a, n);
}
int posix_memalign(void **out, size_t a, size_t n)
{
	void *p = memalign(a, n);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}
void free(void *p)
{
	__libc_free(p);
}

/* ---- the pair ---- */

#define BATCH 16
#define SIZE 64

static void to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		DIE("INIT");
}

static void to_rts(struct ibv_context *ctx, struct ibv_qp *qp, uint32_t dqpn)
{
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		DIE("ibv_query_gid");
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = dqpn;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 12;
	at.ah_attr.is_global = 1;
	at.ah_attr.grh.dgid = gid;
	at.ah_attr.grh.hop_limit = 1;
	at.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		DIE("RTR");
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 14;
	at.retry_cnt = 7;
	at.rnr_retry = 7;
	at.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		DIE("RTS");
}

static struct ibv_qp *make_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq,
			      int ex)
{
	struct ibv_qp_init_attr_ex ia = {0};
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 4 * BATCH;
	ia.cap.max_recv_wr = 4 * BATCH;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = SIZE;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD;
	ia.pd = pd;
	if (ex) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	}
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
	if (!qp)
		DIE("ibv_create_qp_ex");
	return qp;
}

static char abuf[BATCH * SIZE], bbuf[BATCH * SIZE];

/* Waits for `n` completions on `cq`, all successful (DIE after 5 s). */
static void drain(struct ibv_cq *cq, int n)
{
	struct ibv_wc wc[BATCH];
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (n > 0) {
		int got = ibv_poll_cq(cq, BATCH, wc);
		if (got < 0)
			DIE("ibv_poll_cq");
		for (int i = 0; i < got; i++)
			if (wc[i].status != IBV_WC_SUCCESS)
				DIE("completion status %s", ibv_wc_status_str(wc[i].status));
		n -= got;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 5)
			DIE("%d completions missing", n);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	char api[8], op[8], payload[8];
	if (argc != 2 || sscanf(argv[1], "%7[a-z]_%7[a-z]_%7[a-z]", api, op, payload) != 3) {
		fprintf(stderr, "usage: steady_allocs {post,wr}_{write,send}_{sge,inline}\n");
		return 2;
	}
	int ex = !strcmp(api, "wr"), send = !strcmp(op, "send");
	int inl = !strcmp(payload, "inline");

	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *acq = ibv_create_cq(ctx, 4 * BATCH, NULL, NULL, 0);
	struct ibv_cq *bcq = ibv_create_cq(ctx, 4 * BATCH, NULL, NULL, 0);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *amr = ibv_reg_mr(pd, abuf, sizeof(abuf), access);
	struct ibv_mr *bmr = ibv_reg_mr(pd, bbuf, sizeof(bbuf), access);
	if (!pd || !acq || !bcq || !amr || !bmr)
		DIE("setup");
	struct ibv_qp *a = make_qp(ctx, pd, acq, ex);
	struct ibv_qp *b = make_qp(ctx, pd, bcq, 0);
	to_init(a);
	to_init(b);
	to_rts(ctx, a, b->qp_num);
	to_rts(ctx, b, a->qp_num);
	struct ibv_qp_ex *ax = ex ? ibv_qp_to_qp_ex(a) : NULL;
	if (ex && !ax)
		DIE("ibv_qp_to_qp_ex");

	struct ibv_sge sges[BATCH], rsges[BATCH];
	struct ibv_send_wr wrs[BATCH];
	struct ibv_recv_wr rwrs[BATCH];
	for (int i = 0; i < BATCH; i++) {
		sges[i] = (struct ibv_sge){(uintptr_t)(abuf + i * SIZE), SIZE, amr->lkey};
		rsges[i] = (struct ibv_sge){(uintptr_t)(bbuf + i * SIZE), SIZE, bmr->lkey};
		memset(&wrs[i], 0, sizeof(wrs[i]));
		wrs[i].wr_id = i;
		wrs[i].sg_list = &sges[i];
		wrs[i].num_sge = 1;
		wrs[i].opcode = send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
		wrs[i].send_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0);
		wrs[i].wr.rdma.remote_addr = (uintptr_t)(bbuf + i * SIZE);
		wrs[i].wr.rdma.rkey = bmr->rkey;
		wrs[i].next = i + 1 < BATCH ? &wrs[i + 1] : NULL;
		memset(&rwrs[i], 0, sizeof(rwrs[i]));
		rwrs[i].wr_id = i;
		rwrs[i].sg_list = &rsges[i];
		rwrs[i].num_sge = 1;
		rwrs[i].next = i + 1 < BATCH ? &rwrs[i + 1] : NULL;
	}

	long before = 0;
	const int warm = 200, rounds = 500;
	for (int r = 0; r < warm + rounds; r++) {
		/* Halfway through the warm-up the application pauses, so that the progress thread
		 * has surely run (its start allocates) and served a round on its own. */
		if (r == warm / 2)
			usleep(20000);
		if (r == warm)
			before = atomic_load(&allocs);
		if (send) {
			struct ibv_recv_wr *bad_r;
			if (ibv_post_recv(b, rwrs, &bad_r))
				DIE("ibv_post_recv");
		}
		if (ex) {
			ibv_wr_start(ax);
			for (int i = 0; i < BATCH; i++) {
				ax->wr_id = i;
				ax->wr_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0);
				if (send)
					ibv_wr_send(ax);
				else
					ibv_wr_rdma_write(ax, bmr->rkey, (uintptr_t)(bbuf + i * SIZE));
				if (inl)
					ibv_wr_set_inline_data(ax, abuf + i * SIZE, SIZE);
				else
					ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)(abuf + i * SIZE), SIZE);
			}
			if (ibv_wr_complete(ax))
				DIE("ibv_wr_complete");
		} else {
			struct ibv_send_wr *bad;
			if (ibv_post_send(a, wrs, &bad))
				DIE("ibv_post_send");
		}
		drain(acq, BATCH);
		if (send)
			drain(bcq, BATCH);
	}
	long n = atomic_load(&allocs) - before;
	printf("%s: %ld heap allocations in %d messages (%.3f per message)\n", argv[1], n,
	       rounds * BATCH, (double)n / (rounds * BATCH));
	CHECK(n == 0, "%ld allocations on the steady path", n);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(amr);
	ibv_dereg_mr(bmr);
	ibv_destroy_cq(acq);
	ibv_destroy_cq(bcq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return failures ? 1 : 0;
}
