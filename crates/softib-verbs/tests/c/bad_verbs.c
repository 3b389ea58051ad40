/*
 * More bad input to libibverbs, as an unmodified rdma-core 44 program passes it (tests/c/
 * bad_input.c has the first cases). Built by tests/bad_verbs.rs against the installed
 * <infiniband/verbs.h>, linked with -libverbs and run on softib's libibverbs.so.1.
 * `bad_verbs CASE` runs one case; it exits 0 only if every call
 * behaved as rdma-core's man pages (and rxe, for completion statuses) say, and the process
 * goes on after each bad call. Every failed check is printed (file:line, what was expected).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <signal.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "check.h"

/* A pointer-returning verb failed the documented way: NULL with errno set. */
#define CHECK_NULL_SOME_ERRNO(expr)                                                        \
	do {                                                                              \
		errno = 0;                                                                    \
		void *p_ = (void *)(expr);                                                    \
		int e_ = errno;                                                               \
		CHECK(p_ == NULL && e_ != 0, "%s gave %p errno %d", #expr, p_, e_);           \
	} while (0)

/* An int verb documented as "0 on success, or the value of errno on failure". */
#define CHECK_ERRNO_VALUE(expr)                                                       \
	do {                                                                              \
		errno = 0;                                                                    \
		int r_ = (expr);                                                              \
		CHECK(r_ > 0, "%s returned %d (errno %d), want a positive errno value",       \
		      #expr, r_, errno);                                                      \
	} while (0)

/* An int verb documented as "0 on success, -1 on error" (errno set). */
#define CHECK_MINUS_ONE(expr)                                                         \
	do {                                                                              \
		errno = 0;                                                                    \
		int r_ = (expr);                                                              \
		int e_ = errno;                                                               \
		CHECK(r_ == -1 && e_ != 0, "%s returned %d errno %d, want -1 and errno",      \
		      #expr, r_, e_);                                                         \
	} while (0)

#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* ---- an RC pair on one context, connected to each other through GID index 0 ---- */

struct pair {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq; /* the requester's */
	struct ibv_cq *tcq;       /* the target's (send and recv) */
	struct ibv_qp *a, *b;     /* a: requester, b: target */
};

static void to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_INIT;
	at.pkey_index = 0;
	at.port_num = 1;
	at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			     IBV_ACCESS_REMOTE_ATOMIC;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		DIE("INIT");
}

static void to_rtr(struct ibv_context *ctx, struct ibv_qp *qp, uint32_t dqpn)
{
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		DIE("ibv_query_gid");
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = dqpn;
	at.rq_psn = 0;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 12;
	at.ah_attr.is_global = 1;
	at.ah_attr.grh.dgid = gid;
	at.ah_attr.grh.sgid_index = 0;
	at.ah_attr.grh.hop_limit = 1;
	at.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		DIE("RTR");
}

static void to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 14;
	at.retry_cnt = 7;
	at.rnr_retry = 7;
	at.sq_psn = 0;
	at.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		DIE("RTS");
}

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
			    uint32_t max_sge)
{
	struct ibv_qp_init_attr ia = {0};
	ia.send_cq = scq;
	ia.recv_cq = rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = max_sge;
	ia.cap.max_recv_sge = max_sge;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		DIE("ibv_create_qp");
	return qp;
}

/* A new connected pair on `ctx`/`pd` (both QPs in RTS). */
/* A new connected pair, requester `a` on ca/pa and target `b` on cb/pb (both in RTS). Two
 * contexts are two engines on two addresses: the packets cross UDP between them. */
static void pair_up2(struct pair *p, struct ibv_context *ca, struct ibv_pd *pa,
		     struct ibv_context *cb, struct ibv_pd *pb)
{
	memset(p, 0, sizeof(*p));
	p->ctx = ca;
	p->pd = pa;
	p->scq = ibv_create_cq(ca, 32, NULL, NULL, 0);
	p->rcq = ibv_create_cq(ca, 32, NULL, NULL, 0);
	p->tcq = ibv_create_cq(cb, 32, NULL, NULL, 0);
	if (!p->scq || !p->rcq || !p->tcq)
		DIE("ibv_create_cq");
	p->a = rc_qp(pa, p->scq, p->rcq, 2);
	p->b = rc_qp(pb, p->tcq, p->tcq, 2);
	to_init(p->a);
	to_init(p->b);
	to_rtr(cb, p->a, p->b->qp_num); /* the destination GID is the peer context's */
	to_rtr(ca, p->b, p->a->qp_num);
	to_rts(p->a);
	to_rts(p->b);
}

/* A new connected pair on `ctx`/`pd` (both QPs in RTS). */
static void pair_up(struct pair *p, struct ibv_context *ctx, struct ibv_pd *pd)
{
	pair_up2(p, ctx, pd, ctx, pd);
}

static void pair_down(struct pair *p)
{
	if (ibv_destroy_qp(p->a) || ibv_destroy_qp(p->b))
		DIE("ibv_destroy_qp");
	if (ibv_destroy_cq(p->scq) || ibv_destroy_cq(p->rcq) || ibv_destroy_cq(p->tcq))
		DIE("ibv_destroy_cq");
}

/* Posts one signaled WR on p->a and returns its completion status (-1: none in 5 s). */
static int post_wait(struct pair *p, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	wr->send_flags |= IBV_SEND_SIGNALED;
	int rc = ibv_post_send(p->a, wr, &bad);
	if (rc)
		DIE("ibv_post_send rc %d", rc);
	struct ibv_wc wc;
	if (!poll_one(p->scq, &wc, 5.0))
		return -1;
	CHECK(wc.wr_id == wr->wr_id, "wr_id %" PRIu64 " want %" PRIu64, wc.wr_id, wr->wr_id);
	return wc.status;
}

static const char *st(int s)
{
	return s < 0 ? "no completion" : ibv_wc_status_str((enum ibv_wc_status)s);
}

/* ===================================== cases ===================================== */

/* NULL and never-handed-out objects to each exported control verb. */
static void null_objects(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	if (!pd || !cq)
		DIE("setup");
	char buf[64];
	struct ibv_qp_attr qa = {0};
	struct ibv_qp_init_attr qia = {0};
	struct ibv_srq_attr sa = {0};
	struct ibv_srq_init_attr sia = {0};
	struct ibv_ah_attr aa = {0};
	struct ibv_device_attr da;
	union ibv_gid gid;
	uint16_t pkey;
	struct ibv_async_event ev;
	struct ibv_cq *evcq;
	void *evctx;

	/* Objects of the right type this library never handed out. */
	struct ibv_pd *fake_pd = calloc(1, 256);
	struct ibv_cq *fake_cq = calloc(1, 256);
	struct ibv_qp *fake_qp = calloc(1, 512);
	struct ibv_mr *fake_mr = calloc(1, 256);
	struct ibv_srq *fake_srq = calloc(1, 256);
	struct ibv_ah *fake_ah = calloc(1, 256);
	struct ibv_comp_channel *fake_ch = calloc(1, 256);
	fake_pd->context = ctx;
	fake_cq->context = ctx;
	fake_qp->context = ctx;
	fake_qp->pd = pd;
	fake_mr->context = ctx;
	fake_mr->pd = pd;
	fake_srq->context = ctx;
	fake_srq->pd = pd;
	fake_ah->context = ctx;
	fake_ah->pd = pd;
	fake_ch->context = ctx;
	fake_ch->fd = -1;

	CHECK(ibv_get_device_name(NULL) == NULL, "ibv_get_device_name(NULL)");
	CHECK_NULL_SOME_ERRNO(ibv_open_device(NULL));
	CHECK_MINUS_ONE(ibv_close_device(NULL));
	CHECK_ERRNO_VALUE(ibv_query_device(NULL, &da));
	CHECK_ERRNO_VALUE(ibv_query_device(ctx, NULL));
	CHECK_MINUS_ONE(ibv_query_gid(NULL, 1, 0, &gid));
	CHECK_MINUS_ONE(ibv_query_gid(ctx, 1, 0, NULL));
	CHECK_MINUS_ONE(ibv_query_gid(ctx, 1, 100000, &gid));
	CHECK_MINUS_ONE(ibv_query_gid(ctx, 99, 0, &gid));
	CHECK_MINUS_ONE(ibv_query_pkey(NULL, 1, 0, &pkey));
	CHECK_MINUS_ONE(ibv_query_pkey(ctx, 99, 0, &pkey));
	CHECK_MINUS_ONE(ibv_get_async_event(NULL, &ev));

	CHECK_NULL_SOME_ERRNO(ibv_alloc_pd(NULL));
	CHECK_ERRNO_VALUE(ibv_dealloc_pd(NULL));
	CHECK_ERRNO_VALUE(ibv_dealloc_pd(fake_pd));

	CHECK_NULL_SOME_ERRNO(ibv_reg_mr(NULL, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE));
	CHECK_NULL_SOME_ERRNO(ibv_reg_mr(fake_pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE));
	/* REMOTE_WRITE without LOCAL_WRITE is invalid (ibv_reg_mr(3): EINVAL). */
	CHECK_NULL_SOME_ERRNO(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE));
	CHECK_NULL_SOME_ERRNO(ibv_reg_mr_iova(NULL, buf, sizeof(buf), 0, 0));
	CHECK_ERRNO_VALUE(ibv_dereg_mr(NULL));
	CHECK_ERRNO_VALUE(ibv_dereg_mr(fake_mr));
	CHECK(ibv_rereg_mr(NULL, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE) != 0, "ibv_rereg_mr(NULL) succeeded");

	CHECK_NULL_SOME_ERRNO(ibv_create_comp_channel(NULL));
	CHECK_ERRNO_VALUE(ibv_destroy_comp_channel(NULL));
	CHECK_ERRNO_VALUE(ibv_destroy_comp_channel(fake_ch));
	CHECK_MINUS_ONE(ibv_get_cq_event(NULL, &evcq, &evctx));

	CHECK_NULL_SOME_ERRNO(ibv_create_cq(NULL, 4, NULL, NULL, 0));
	CHECK_NULL_SOME_ERRNO(ibv_create_cq(ctx, 4, NULL, fake_ch, 0));
	CHECK_NULL_SOME_ERRNO(ibv_create_cq(ctx, 0, NULL, NULL, 0));
	CHECK_NULL_SOME_ERRNO(ibv_create_cq(ctx, -1, NULL, NULL, 0));
	CHECK_ERRNO_VALUE(ibv_destroy_cq(NULL));
	CHECK_ERRNO_VALUE(ibv_destroy_cq(fake_cq));
	CHECK_ERRNO_VALUE(ibv_resize_cq(NULL, 8));

	qia.send_cq = cq;
	qia.recv_cq = cq;
	qia.qp_type = IBV_QPT_RC;
	qia.cap.max_send_wr = 1;
	qia.cap.max_recv_wr = 1;
	qia.cap.max_send_sge = 1;
	qia.cap.max_recv_sge = 1;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(NULL, &qia));
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(fake_pd, &qia));
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, NULL));
	qia.send_cq = NULL;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, &qia));
	qia.send_cq = fake_cq;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, &qia));
	qia.send_cq = cq;
	qia.recv_cq = NULL;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, &qia));
	qia.recv_cq = cq;
	qia.srq = fake_srq;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, &qia));
	qia.srq = NULL;
	qa.qp_state = IBV_QPS_INIT;
	CHECK_ERRNO_VALUE(ibv_modify_qp(NULL, &qa, IBV_QP_STATE));
	CHECK_ERRNO_VALUE(ibv_modify_qp(fake_qp, &qa, IBV_QP_STATE));
	CHECK_ERRNO_VALUE(ibv_query_qp(NULL, &qa, IBV_QP_STATE, &qia));
	CHECK_ERRNO_VALUE(ibv_query_qp(fake_qp, &qa, IBV_QP_STATE, &qia));
	CHECK_ERRNO_VALUE(ibv_destroy_qp(NULL));
	CHECK_ERRNO_VALUE(ibv_destroy_qp(fake_qp));
	CHECK_ERRNO_VALUE(ibv_attach_mcast(NULL, &gid, 0));
	CHECK_ERRNO_VALUE(ibv_detach_mcast(NULL, &gid, 0));

	sia.attr.max_wr = 4;
	sia.attr.max_sge = 1;
	CHECK_NULL_SOME_ERRNO(ibv_create_srq(NULL, &sia));
	CHECK_NULL_SOME_ERRNO(ibv_create_srq(fake_pd, &sia));
	CHECK_NULL_SOME_ERRNO(ibv_create_srq(pd, NULL));
	CHECK_ERRNO_VALUE(ibv_modify_srq(NULL, &sa, IBV_SRQ_LIMIT));
	CHECK_ERRNO_VALUE(ibv_modify_srq(fake_srq, &sa, IBV_SRQ_LIMIT));
	CHECK_ERRNO_VALUE(ibv_query_srq(NULL, &sa));
	CHECK_ERRNO_VALUE(ibv_query_srq(fake_srq, &sa));
	CHECK_ERRNO_VALUE(ibv_destroy_srq(NULL));
	CHECK_ERRNO_VALUE(ibv_destroy_srq(fake_srq));

	aa.is_global = 1;
	aa.port_num = 1;
	if (ibv_query_gid(ctx, 1, 0, &aa.grh.dgid))
		DIE("ibv_query_gid");
	CHECK_NULL_SOME_ERRNO(ibv_create_ah(NULL, &aa));
	CHECK_NULL_SOME_ERRNO(ibv_create_ah(fake_pd, &aa));
	CHECK_NULL_SOME_ERRNO(ibv_create_ah(pd, NULL));
	CHECK_ERRNO_VALUE(ibv_destroy_ah(NULL));
	CHECK_ERRNO_VALUE(ibv_destroy_ah(fake_ah));

	/* The process goes on and the real objects still work. */
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr != NULL, "ibv_reg_mr after the bad calls");
	CHECK(mr == NULL || ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	free(fake_pd);
	free(fake_cq);
	free(fake_qp);
	free(fake_mr);
	free(fake_srq);
	free(fake_ah);
	free(fake_ch);
}

/* Each object kind destroyed twice: the second destroy fails with an errno value. */
static void double_destroy(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_srq_init_attr sia = {0};
	sia.attr.max_wr = 4;
	sia.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	struct ibv_qp *qp = rc_qp(pd, cq, cq, 1);
	struct ibv_ah_attr aa = {0};
	aa.is_global = 1;
	aa.port_num = 1;
	if (ibv_query_gid(ctx, 1, 0, &aa.grh.dgid))
		DIE("ibv_query_gid");
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!pd || !ch || !cq || !mr || !srq || !ah)
		DIE("setup");

	CHECK(ibv_destroy_ah(ah) == 0, "first ibv_destroy_ah");
	CHECK_ERRNO_VALUE(ibv_destroy_ah(ah));
	CHECK(ibv_destroy_qp(qp) == 0, "first ibv_destroy_qp");
	CHECK_ERRNO_VALUE(ibv_destroy_qp(qp));
	CHECK(ibv_destroy_srq(srq) == 0, "first ibv_destroy_srq");
	CHECK_ERRNO_VALUE(ibv_destroy_srq(srq));
	CHECK(ibv_dereg_mr(mr) == 0, "first ibv_dereg_mr");
	CHECK_ERRNO_VALUE(ibv_dereg_mr(mr));
	CHECK(ibv_destroy_cq(cq) == 0, "first ibv_destroy_cq");
	CHECK_ERRNO_VALUE(ibv_destroy_cq(cq));
	CHECK(ibv_destroy_comp_channel(ch) == 0, "first ibv_destroy_comp_channel");
	CHECK_ERRNO_VALUE(ibv_destroy_comp_channel(ch));
	CHECK(ibv_dealloc_pd(pd) == 0, "first ibv_dealloc_pd");
	CHECK_ERRNO_VALUE(ibv_dealloc_pd(pd));
	CHECK(ibv_close_device(ctx) == 0, "first ibv_close_device");
	CHECK_MINUS_ONE(ibv_close_device(ctx));
	/* And the library still works. */
	struct ibv_context *ctx2 = open_ctx();
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx2);
	CHECK(pd2 != NULL, "ibv_alloc_pd after the double destroys");
	CHECK(pd2 == NULL || ibv_dealloc_pd(pd2) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(ctx2) == 0, "ibv_close_device");
}

/* Control verbs given objects already destroyed. */
static void use_after_destroy(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_pd *dead_pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *dead_ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_cq *dead_cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_srq_init_attr sia = {0};
	sia.attr.max_wr = 4;
	sia.attr.max_sge = 1;
	struct ibv_srq *dead_srq = ibv_create_srq(pd, &sia);
	struct ibv_qp *dead_qp = rc_qp(pd, cq, cq, 1);
	static char buf[64];
	struct ibv_mr *dead_mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !dead_pd || !dead_ch || !cq || !dead_cq || !dead_srq || !dead_mr)
		DIE("setup");
	if (ibv_dealloc_pd(dead_pd) || ibv_destroy_comp_channel(dead_ch) ||
	    ibv_destroy_cq(dead_cq) || ibv_destroy_srq(dead_srq) || ibv_destroy_qp(dead_qp) ||
	    ibv_dereg_mr(dead_mr))
		DIE("destroy");

	struct ibv_qp_attr qa = {0};
	struct ibv_qp_init_attr qia = {0};
	struct ibv_srq_attr sa = {0};
	struct ibv_ah_attr aa = {0};
	aa.is_global = 1;
	aa.port_num = 1;
	if (ibv_query_gid(ctx, 1, 0, &aa.grh.dgid))
		DIE("ibv_query_gid");

	CHECK_NULL_SOME_ERRNO(ibv_reg_mr(dead_pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE));
	CHECK_NULL_SOME_ERRNO(ibv_create_ah(dead_pd, &aa));
	CHECK_NULL_SOME_ERRNO(ibv_create_srq(dead_pd, &sia));
	CHECK_NULL_SOME_ERRNO(ibv_create_cq(ctx, 4, NULL, dead_ch, 0));
	qia.send_cq = dead_cq;
	qia.recv_cq = cq;
	qia.qp_type = IBV_QPT_RC;
	qia.cap.max_send_wr = 1;
	qia.cap.max_recv_wr = 1;
	qia.cap.max_send_sge = 1;
	qia.cap.max_recv_sge = 1;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, &qia));
	qia.send_cq = cq;
	qia.recv_cq = dead_cq;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, &qia));
	qia.recv_cq = cq;
	qia.srq = dead_srq;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, &qia));
	qia.srq = NULL;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(dead_pd, &qia));
	qa.qp_state = IBV_QPS_INIT;
	CHECK_ERRNO_VALUE(ibv_modify_qp(dead_qp, &qa, IBV_QP_STATE));
	CHECK_ERRNO_VALUE(ibv_query_qp(dead_qp, &qa, IBV_QP_STATE, &qia));
	CHECK_ERRNO_VALUE(ibv_modify_srq(dead_srq, &sa, IBV_SRQ_LIMIT));
	CHECK_ERRNO_VALUE(ibv_query_srq(dead_srq, &sa));
	CHECK_ERRNO_VALUE(ibv_resize_cq(dead_cq, 8));
	CHECK(ibv_rereg_mr(dead_mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE) != 0, "ibv_rereg_mr(deregistered) succeeded");

	/* A PD with a live MR cannot be deallocated (EBUSY); then it can. */
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		DIE("ibv_reg_mr");
	CHECK_ERRNO_VALUE(ibv_dealloc_pd(pd));
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
}

/* ---- one-sided operations against a region inside a guarded buffer ---- */

#define GUARD 64
#define REGION 256

struct target {
	unsigned char *buf; /* GUARD | REGION | GUARD */
	unsigned char *region;
	struct ibv_mr *mr;
	unsigned char snapshot[GUARD + REGION + GUARD];
};

static void target_new(struct target *t, struct ibv_pd *pd, int access)
{
	t->buf = malloc(GUARD + REGION + GUARD);
	if (!t->buf)
		DIE("malloc");
	for (int i = 0; i < GUARD + REGION + GUARD; i++)
		t->buf[i] = (unsigned char)(0xa0 + i % 7);
	t->region = t->buf + GUARD;
	t->mr = ibv_reg_mr(pd, t->region, REGION, access);
	if (!t->mr)
		DIE("ibv_reg_mr target");
	memcpy(t->snapshot, t->buf, sizeof(t->snapshot));
}

/* The guards (and, if `whole`, the region too) are as they were. */
static int target_intact(struct target *t, int whole)
{
	if (memcmp(t->buf, t->snapshot, GUARD))
		return 0;
	if (memcmp(t->buf + GUARD + REGION, t->snapshot + GUARD + REGION, GUARD))
		return 0;
	return !whole || !memcmp(t->region, t->snapshot + GUARD, REGION);
}

static void target_free(struct target *t)
{
	ibv_dereg_mr(t->mr);
	free(t->buf);
}

struct one_sided {
	const char *what;
	int opcode;
	int64_t offset; /* from the region's start */
	uint32_t len;
	int wrong_rkey;
};

/*
 * For each case: a new pair, one good operation inside the region (the pair works and the
 * region can be written/read), then the bad one, which must complete with `want` at the
 * requester and leave the target (guards and region) and the local buffer unchanged.
 */
static void one_sided_cases_on(int two_contexts, int access, const struct one_sided *cs, int n,
			       int want)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		DIE("ibv_alloc_pd");
	/* The target on the second device (its own address: packets over UDP). */
	struct ibv_context *tctx = two_contexts ? open_ctx_of(1) : ctx;
	struct ibv_pd *tpd = two_contexts ? ibv_alloc_pd(tctx) : pd;
	if (!tpd)
		DIE("ibv_alloc_pd");
	if (two_contexts) {
		union ibv_gid g1, g2, g3;
		if (ibv_query_gid(ctx, 1, 0, &g1) || ibv_query_gid(tctx, 1, 0, &g2))
			DIE("gid");
		CHECK(memcmp(&g1, &g2, sizeof(g1)) != 0, "two devices share one GID");
		/* Two contexts of one device share its GID, as on any HCA. */
		struct ibv_context *again = open_ctx_of(1);
		if (ibv_query_gid(again, 1, 0, &g3))
			DIE("gid");
		CHECK(memcmp(&g2, &g3, sizeof(g2)) == 0, "two contexts of one device differ");
		CHECK(ibv_close_device(again) == 0, "close");
	}
	static unsigned char local[REGION + 64];
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, sizeof(local),
					IBV_ACCESS_LOCAL_WRITE);
	if (!lmr)
		DIE("ibv_reg_mr local");
	for (int i = 0; i < n; i++) {
		struct target t;
		target_new(&t, tpd, access);
		struct pair p;
		pair_up2(&p, ctx, pd, tctx, tpd);
		const struct one_sided *c = &cs[i];
		int atomic = c->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
			     c->opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
		int allowed_good = (c->opcode == IBV_WR_RDMA_WRITE && (access & IBV_ACCESS_REMOTE_WRITE)) ||
				   (c->opcode == IBV_WR_RDMA_READ && (access & IBV_ACCESS_REMOTE_READ)) ||
				   (atomic && (access & IBV_ACCESS_REMOTE_ATOMIC));

		struct ibv_sge sge = {(uintptr_t)local, 8, lmr->lkey};
		struct ibv_send_wr wr = {0};
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = c->opcode;
		if (allowed_good) {
			/* The good operation: 8 bytes at the region's start. */
			memset(local, 0x5c, sizeof(local));
			wr.wr_id = 100 + i;
			if (atomic) {
				wr.wr.atomic.remote_addr = (uintptr_t)t.region;
				wr.wr.atomic.rkey = t.mr->rkey;
				wr.wr.atomic.compare_add = 1;
			} else {
				wr.wr.rdma.remote_addr = (uintptr_t)t.region;
				wr.wr.rdma.rkey = t.mr->rkey;
			}
			int s = post_wait(&p, &wr);
			CHECK(s == IBV_WC_SUCCESS, "%s: the good operation: %s", c->what, st(s));
			CHECK(target_intact(&t, 0), "%s: the good operation touched a guard", c->what);
			memcpy(t.snapshot, t.buf, sizeof(t.snapshot));
		}
		memset(local, 0x5c, sizeof(local));
		unsigned char lsnap[sizeof(local)];
		memcpy(lsnap, local, sizeof(local));
		uint64_t raddr = (uintptr_t)t.region + c->offset;
		uint32_t rkey = c->wrong_rkey ? t.mr->rkey ^ 0x80 : t.mr->rkey;
		sge.length = c->len;
		wr.wr_id = 200 + i;
		if (atomic) {
			wr.wr.atomic.remote_addr = raddr;
			wr.wr.atomic.rkey = rkey;
			wr.wr.atomic.compare_add = 1;
			wr.wr.atomic.swap = 0x0123456789abcdefULL;
		} else {
			wr.wr.rdma.remote_addr = raddr;
			wr.wr.rdma.rkey = rkey;
		}
		int s = post_wait(&p, &wr);
		CHECK(s == want, "%s: %s, want %s", c->what, st(s),
		      ibv_wc_status_str((enum ibv_wc_status)want));
		usleep(20000);
		CHECK(target_intact(&t, 1), "%s: the target buffer changed", c->what);
		CHECK(memcmp(local, lsnap, sizeof(local)) == 0,
		      "%s: the local buffer changed", c->what);
		pair_down(&p);
		target_free(&t);
	}
	ibv_dereg_mr(lmr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	if (two_contexts) {
		ibv_dealloc_pd(tpd);
		ibv_close_device(tctx);
	}
}

static void one_sided_cases(int access, const struct one_sided *cs, int n, int want)
{
	one_sided_cases_on(0, access, cs, n, want);
}

/* The requester and the target on contexts of two devices (two engines, two addresses, UDP
 * between them): a good operation, then one the target's region refuses, on a new pair each. */
static void two_contexts_remote_errors(void)
{
	const struct one_sided acc[] = {
		{"WRITE ending after the region", IBV_WR_RDMA_WRITE, REGION - 8, 16, 0},
		{"WRITE starting before the region", IBV_WR_RDMA_WRITE, -8, 16, 0},
		{"WRITE with a wrong rkey", IBV_WR_RDMA_WRITE, 0, 16, 1},
		{"READ ending after the region", IBV_WR_RDMA_READ, REGION - 8, 16, 0},
		{"FETCH_AND_ADD past the region", IBV_WR_ATOMIC_FETCH_AND_ADD, REGION, 8, 0},
	};
	one_sided_cases_on(1, RW | IBV_ACCESS_REMOTE_ATOMIC, acc, sizeof(acc) / sizeof(acc[0]),
			   IBV_WC_REM_ACCESS_ERR);
	const struct one_sided noaccess[] = {
		{"WRITE to a region without REMOTE_WRITE", IBV_WR_RDMA_WRITE, 0, 16, 0},
		{"FETCH_AND_ADD on a region without REMOTE_ATOMIC", IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, 0},
	};
	one_sided_cases_on(1, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, noaccess, 2,
			   IBV_WC_REM_ACCESS_ERR);
	const struct one_sided noread[] = {
		{"READ from a region without REMOTE_READ", IBV_WR_RDMA_READ, 0, 16, 0},
	};
	one_sided_cases_on(1, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, noread, 1,
			   IBV_WC_REM_ACCESS_ERR);
	const struct one_sided misaligned[] = {
		{"CMP_AND_SWP at region+2", IBV_WR_ATOMIC_CMP_AND_SWP, 2, 8, 0},
	};
	one_sided_cases_on(1, RW | IBV_ACCESS_REMOTE_ATOMIC, misaligned, 1, IBV_WC_REM_INV_REQ_ERR);
}

/* An atomic at an address not 8-byte aligned: NAK Invalid Request (IBA class C, as rxe). */
static void atomic_misaligned(void)
{
	const struct one_sided cs[] = {
		{"FETCH_AND_ADD at region+4", IBV_WR_ATOMIC_FETCH_AND_ADD, 4, 8, 0},
		{"CMP_AND_SWP at region+1", IBV_WR_ATOMIC_CMP_AND_SWP, 1, 8, 0},
	};
	one_sided_cases(RW | IBV_ACCESS_REMOTE_ATOMIC, cs, 2, IBV_WC_REM_INV_REQ_ERR);
}

/* The exported ibv_query_port@IBVERBS_1.1 (what pre-1.x binaries and bypassing callers use)
 * fills rdma-core's struct _compat_ibv_port_attr: struct ibv_port_attr up to `flags`. */
#undef ibv_query_port
static void compat_query_port(void)
{
	struct ibv_context *ctx = open_ctx();
	unsigned char buf[sizeof(struct ibv_port_attr) + 16];
	memset(buf, 0xee, sizeof(buf));
	size_t compat = offsetof(struct ibv_port_attr, port_cap_flags2);
	int rc = ibv_query_port(ctx, 1, (struct _compat_ibv_port_attr *)buf);
	CHECK(rc == 0, "ibv_query_port rc %d", rc);
	struct ibv_port_attr full;
	memset(&full, 0, sizeof(full));
	memcpy(&full, buf, compat);
	CHECK(full.state == IBV_PORT_ACTIVE, "state %d", full.state);
	CHECK(full.gid_tbl_len > 0, "gid_tbl_len %d", full.gid_tbl_len);
	CHECK(full.active_mtu >= IBV_MTU_256 && full.active_mtu <= IBV_MTU_4096, "active_mtu %d",
	      full.active_mtu);
	CHECK(full.link_layer == IBV_LINK_LAYER_ETHERNET, "link_layer %d", full.link_layer);
	int beyond = 1;
	for (size_t i = compat; i < sizeof(buf); i++)
		beyond &= buf[i] == 0xee;
	CHECK(beyond, "wrote past the %zu bytes of struct _compat_ibv_port_attr", compat);
	/* The verbs.h wrapper (verbs_context::query_port) agrees. */
	struct ibv_port_attr cur;
	rc = ___ibv_query_port(ctx, 1, &cur);
	CHECK(rc == 0 && memcmp(&cur, buf, compat) == 0, "the two ibv_query_port differ");
	CHECK_ERRNO_VALUE(ibv_query_port(ctx, 99, (struct _compat_ibv_port_attr *)buf));
	ibv_close_device(ctx);
}

/* Memory the process cannot access: rdma-core pins the pages at registration (rxe:
 * ib_umem_get), so unmapped, PROT_NONE and (for writable access) read-only pages fail with
 * EFAULT instead of faulting later when a remote peer writes there. */
static void reg_mr_bad_memory(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		DIE("ibv_alloc_pd");
	long pg = sysconf(_SC_PAGESIZE);
	unsigned char *m = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				-1, 0);
	if (m == MAP_FAILED)
		DIE("mmap");
	/* m: rw | rw | (unmapped) | PROT_NONE ; a read-only mapping elsewhere. */
	if (munmap(m + 2 * pg, pg) || mprotect(m + 3 * pg, pg, PROT_NONE))
		DIE("munmap/mprotect");
	unsigned char *ro = mmap(NULL, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ro == MAP_FAILED)
		DIE("mmap ro");
	int lw = IBV_ACCESS_LOCAL_WRITE, rw = lw | IBV_ACCESS_REMOTE_WRITE;

	struct ibv_mr *ok = ibv_reg_mr(pd, m, 2 * pg, rw);
	CHECK(ok != NULL, "ibv_reg_mr of two mapped rw pages: errno %d", errno);
	if (ok)
		ibv_dereg_mr(ok);
	ok = ibv_reg_mr(pd, ro, pg, IBV_ACCESS_REMOTE_READ);
	CHECK(ok != NULL, "ibv_reg_mr of a read-only page, read access only: errno %d", errno);
	if (ok)
		ibv_dereg_mr(ok);

#define CHECK_EFAULT(expr)                                                            \
	do {                                                                              \
		errno = 0;                                                                    \
		struct ibv_mr *r_ = (expr);                                                   \
		int e_ = errno;                                                               \
		CHECK(r_ == NULL && e_ == EFAULT, "%s gave %p errno %d, want NULL and EFAULT", \
		      #expr, (void *)r_, e_);                                                 \
		if (r_)                                                                       \
			ibv_dereg_mr(r_);                                                         \
	} while (0)
	CHECK_EFAULT(ibv_reg_mr(pd, m + 2 * pg, pg, lw));     /* unmapped */
	CHECK_EFAULT(ibv_reg_mr(pd, m + pg, 2 * pg, lw));     /* runs into the hole */
	CHECK_EFAULT(ibv_reg_mr(pd, m + 3 * pg, pg, 0));      /* PROT_NONE */
	CHECK_EFAULT(ibv_reg_mr(pd, ro, pg, lw));             /* read-only, writable access */
	CHECK_EFAULT(ibv_reg_mr(pd, ro, pg, rw));
	CHECK_EFAULT(ibv_reg_mr(pd, (void *)(uintptr_t)pg, pg, lw)); /* page 1: never mapped */
	CHECK_EFAULT(ibv_reg_mr(pd, (void *)(~(uintptr_t)0 - 2 * pg), pg, 0)); /* kernel half */

	munmap(m, 2 * pg);
	munmap(m + 3 * pg, pg);
	munmap(ro, pg);
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	ibv_close_device(ctx);
}

/* Objects still in use cannot be destroyed (EBUSY, as the kernel's uverbs), and stay usable. */
static void busy_objects(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, ch, 0);
	struct ibv_srq_init_attr sia = {0};
	sia.attr.max_wr = 4;
	sia.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	if (!pd || !ch || !cq || !srq)
		DIE("setup");
	struct ibv_qp_init_attr ia = {0};
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.srq = srq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 4;
	ia.cap.max_send_sge = 1;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		DIE("ibv_create_qp");

	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "destroy of a channel with a CQ");
	CHECK(ibv_destroy_cq(cq) == EBUSY, "destroy of a CQ with a QP");
	CHECK(ibv_destroy_srq(srq) == EBUSY, "destroy of an SRQ with a QP");
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc of a PD with a QP and an SRQ");
	/* Still usable. */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia) == 0 && qia.srq == srq &&
		      qia.send_cq == cq, "ibv_query_qp after the refused destroys");
	struct ibv_srq_attr sa;
	CHECK(ibv_query_srq(srq, &sa) == 0, "ibv_query_srq after the refused destroy");
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "ibv_poll_cq after the refused destroy");

	CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	CHECK(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");
	CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
	/* An address handle alone keeps its PD busy too. */
	struct ibv_ah_attr aa = {0};
	aa.is_global = 1;
	aa.port_num = 1;
	if (ibv_query_gid(ctx, 1, 0, &aa.grh.dgid))
		DIE("gid");
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah != NULL, "ibv_create_ah");
	if (ah) {
		CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc of a PD with an AH");
		CHECK(ibv_destroy_ah(ah) == 0, "ibv_destroy_ah");
	}
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	ibv_close_device(ctx);
}

/* ibv_modify_qp with an invalid transition or missing/invalid attributes: an errno value and
 * the QP stays where it was. */
static void bad_modify_qp(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	if (!pd || !cq)
		DIE("setup");
	struct ibv_qp *qp = rc_qp(pd, cq, cq, 1);
	struct ibv_qp_attr at = {0};
	struct ibv_qp_init_attr ia;

	at.qp_state = IBV_QPS_RTS;
	CHECK_ERRNO_VALUE(ibv_modify_qp(qp, &at, IBV_QP_STATE)); /* RESET -> RTS */
	at.qp_state = IBV_QPS_INIT;
	CHECK_ERRNO_VALUE(ibv_modify_qp(qp, &at, IBV_QP_STATE)); /* required attrs missing */
	at.qp_state = (enum ibv_qp_state)99;
	CHECK_ERRNO_VALUE(ibv_modify_qp(qp, &at, IBV_QP_STATE));
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 99;
	at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	CHECK_ERRNO_VALUE(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						    IBV_QP_ACCESS_FLAGS));
	at.port_num = 1;
	at.pkey_index = 999;
	CHECK_ERRNO_VALUE(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						    IBV_QP_ACCESS_FLAGS));
	CHECK(ibv_query_qp(qp, &at, IBV_QP_STATE, &ia) == 0 && at.qp_state == IBV_QPS_RESET,
	      "state %d after the refused transitions, want RESET", at.qp_state);
	CHECK(qp->state == IBV_QPS_RESET, "qp->state %d", qp->state);

	to_init(qp);
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = qp->qp_num;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 12;
	at.ah_attr.is_global = 1;
	at.ah_attr.grh.sgid_index = 200; /* no such GID */
	at.ah_attr.grh.hop_limit = 1;
	at.ah_attr.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	CHECK_ERRNO_VALUE(ibv_modify_qp(qp, &at, mask));
	at.ah_attr.grh.sgid_index = 0;
	CHECK_ERRNO_VALUE(ibv_modify_qp(qp, &at, mask & ~IBV_QP_DEST_QPN));
	/* Values out of range (rxe_qp_chk_attr): no such path MTU, more outstanding RDMA
	 * READ/atomics than the device allows. */
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		DIE("ibv_query_device");
	at.dest_qp_num = qp->qp_num;
	enum ibv_mtu bad_mtu[] = {(enum ibv_mtu)0, (enum ibv_mtu)6, (enum ibv_mtu)99};
	for (unsigned i = 0; i < 3; i++) {
		at.path_mtu = bad_mtu[i];
		CHECK_ERRNO_VALUE(ibv_modify_qp(qp, &at, mask));
	}
	at.path_mtu = IBV_MTU_1024;
	at.max_dest_rd_atomic = da.max_qp_rd_atom + 1;
	CHECK_ERRNO_VALUE(ibv_modify_qp(qp, &at, mask));
	at.max_dest_rd_atomic = 1;
	CHECK(ibv_query_qp(qp, &at, IBV_QP_STATE, &ia) == 0 && at.qp_state == IBV_QPS_INIT,
	      "state %d after the refused transitions, want INIT", at.qp_state);
	to_rtr(ctx, qp, qp->qp_num);
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 14;
	at.retry_cnt = 7;
	at.rnr_retry = 7;
	at.max_rd_atomic = da.max_qp_init_rd_atom + 1;
	CHECK_ERRNO_VALUE(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
							 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
							 IBV_QP_MAX_QP_RD_ATOMIC));
	CHECK(ibv_query_qp(qp, &at, IBV_QP_STATE, &ia) == 0 && at.qp_state == IBV_QPS_RTR,
	      "state %d after the refused RTS, want RTR", at.qp_state);

	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* Work requests no QP can take: an errno value, bad_wr at the WR, nothing sent. */
static void bad_send_wr(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !mr)
		DIE("setup");
	struct pair p;
	pair_up(&p, ctx, pd);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	if (ibv_query_qp(p.a, &qa, IBV_QP_CAP, &qia))
		DIE("ibv_query_qp");
	struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
	struct ibv_send_wr wr, *bad;
	int rc;

#define EXPECT_REFUSED(qp_, what)                                                      \
	do {                                                                              \
		bad = NULL;                                                                   \
		rc = ibv_post_send(qp_, &wr, &bad);                                           \
		CHECK(rc > 0 && bad == &wr, "%s: rc %d bad_wr %p", what, rc, (void *)bad);     \
	} while (0)

	memset(&wr, 0, sizeof(wr));
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.opcode = (enum ibv_wr_opcode)77;
	EXPECT_REFUSED(p.a, "an unknown opcode");
	wr.opcode = IBV_WR_SEND;
	wr.num_sge = -1;
	EXPECT_REFUSED(p.a, "num_sge -1");
	wr.num_sge = 1;
	wr.send_flags |= IBV_SEND_INLINE;
	sge.length = qia.cap.max_inline_data + 1;
	EXPECT_REFUSED(p.a, "inline data above max_inline_data");
	wr.send_flags = IBV_SEND_SIGNALED;
	sge.length = 8;

	/* UD: no AH, a destroyed AH; an RDMA WRITE on UD. */
	struct ibv_cq *ucq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr ui = {0};
	ui.send_cq = ucq;
	ui.recv_cq = ucq;
	ui.qp_type = IBV_QPT_UD;
	ui.cap.max_send_wr = 4;
	ui.cap.max_recv_wr = 4;
	ui.cap.max_send_sge = 1;
	ui.cap.max_recv_sge = 1;
	struct ibv_qp *ud = ucq ? ibv_create_qp(pd, &ui) : NULL;
	if (!ud)
		DIE("UD QP");
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	at.qkey = 0x11111111;
	if (ibv_modify_qp(ud, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		DIE("UD INIT");
	at.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(ud, &at, IBV_QP_STATE))
		DIE("UD RTR");
	at.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(ud, &at, IBV_QP_STATE | IBV_QP_SQ_PSN))
		DIE("UD RTS");
	struct ibv_ah_attr aa = {0};
	aa.is_global = 1;
	aa.port_num = 1;
	if (ibv_query_gid(ctx, 1, 0, &aa.grh.dgid))
		DIE("gid");
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		DIE("ibv_create_ah");
	wr.wr.ud.remote_qpn = ud->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	wr.wr.ud.ah = NULL;
	EXPECT_REFUSED(ud, "UD SEND without an AH");
	ibv_destroy_ah(ah);
	wr.wr.ud.ah = ah;
	EXPECT_REFUSED(ud, "UD SEND with a destroyed AH");
	wr.opcode = IBV_WR_RDMA_WRITE;
	EXPECT_REFUSED(ud, "RDMA WRITE on a UD QP");
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	EXPECT_REFUSED(ud, "an atomic on a UD QP");

	struct ibv_wc wc;
	usleep(50000);
	CHECK(ibv_poll_cq(p.scq, 1, &wc) == 0, "a completion for a refused WR (RC)");
	CHECK(ibv_poll_cq(ucq, 1, &wc) == 0, "a completion for a refused WR (UD)");
	/* The RC pair still works. */
	struct ibv_recv_wr rwr = {.wr_id = 5, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *rbad;
	if (ibv_post_recv(p.b, &rwr, &rbad))
		DIE("ibv_post_recv");
	memset(&wr, 0, sizeof(wr));
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	int s = post_wait(&p, &wr);
	CHECK(s == IBV_WC_SUCCESS, "SEND after the refused WRs: %s", st(s));
	ibv_destroy_qp(ud);
	ibv_destroy_cq(ucq);
	pair_down(&p);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* Extended verbs with reserved input bits: EINVAL (rdma-core's verbs.h wrappers). */
static void bad_extended(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_query_device_ex_input in = {.comp_mask = 1};
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, &in, &dx) == EINVAL,
	      "ibv_query_device_ex with input comp_mask 1");
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0, "ibv_query_device_ex");
	struct ibv_cq_init_attr_ex cx = {0};
	cx.cqe = 4;
	cx.comp_mask = 1u << 20;
	CHECK_NULL_SOME_ERRNO(ibv_create_cq_ex(ctx, &cx));
	cx.comp_mask = 0;
	cx.cqe = 0;
	CHECK_NULL_SOME_ERRNO(ibv_create_cq_ex(ctx, &cx));
	cx.cqe = 4;
	cx.wc_flags = 1ull << 40; /* no such field */
	CHECK_NULL_SOME_ERRNO(ibv_create_cq_ex(ctx, &cx));
	cx.wc_flags = IBV_WC_STANDARD_FLAGS;
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &cx);
	CHECK(cq != NULL, "ibv_create_cq_ex: errno %d", errno);
	if (cq)
		CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "ibv_destroy_cq");
	ibv_close_device(ctx);
}

/* The void verbs given NULL do nothing. */
static void void_verbs_tolerate_null(void)
{
	ibv_free_device_list(NULL);
	ibv_ack_cq_events(NULL, 1);
	ibv_ack_async_event(NULL);
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL, "ibv_alloc_pd after the NULL calls");
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* Local protection: a SEND gather entry running past its MR, an RDMA READ into an MR without
 * LOCAL_WRITE: IBV_WC_LOC_PROT_ERR (rxe), nothing delivered, local memory unchanged. */
static void local_protection(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static unsigned char big[4096], dst[4096];
	struct ibv_mr *small = ibv_reg_mr(pd, big, 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *ro = ibv_reg_mr(pd, big + 1024, 64, IBV_ACCESS_REMOTE_READ);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, sizeof(dst), RW);
	if (!pd || !small || !ro || !dmr)
		DIE("setup");

	struct pair p;
	pair_up(&p, ctx, pd);
	memset(dst, 0x11, sizeof(dst));
	struct ibv_sge rs = {(uintptr_t)dst, sizeof(dst), dmr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 9, .sg_list = &rs, .num_sge = 1};
	struct ibv_recv_wr *rbad;
	if (ibv_post_recv(p.b, &rwr, &rbad))
		DIE("ibv_post_recv");
	struct ibv_sge ss = {(uintptr_t)big + 32, 64, small->lkey}; /* 32 bytes past the MR */
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND};
	int s = post_wait(&p, &wr);
	CHECK(s == IBV_WC_LOC_PROT_ERR, "SEND past its MR's end: %s", st(s));
	usleep(50000);
	struct ibv_wc wc;
	int got = ibv_poll_cq(p.tcq, 1, &wc);
	CHECK(got == 0 || wc.status != IBV_WC_SUCCESS, "SEND past its MR's end was received");
	pair_down(&p);

	pair_up(&p, ctx, pd);
	memset(big + 1024, 0x77, 64);
	struct ibv_sge ls = {(uintptr_t)big + 1024, 16, ro->lkey};
	struct ibv_send_wr rd = {.wr_id = 2, .sg_list = &ls, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_READ};
	rd.wr.rdma.remote_addr = (uintptr_t)dst;
	rd.wr.rdma.rkey = dmr->rkey;
	s = post_wait(&p, &rd);
	CHECK(s == IBV_WC_LOC_PROT_ERR, "READ into an MR without LOCAL_WRITE: %s", st(s));
	int same = 1;
	for (int i = 0; i < 64; i++)
		same &= big[1024 + i] == 0x77;
	CHECK(same, "READ into an MR without LOCAL_WRITE wrote it");
	pair_down(&p);
	ibv_dereg_mr(small);
	ibv_dereg_mr(ro);
	ibv_dereg_mr(dmr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* Receiver-side errors: a receive WR whose lkey is bad, a receive buffer too small. The
 * receiver's WR completes in error (rxe: LOC_QP_OP_ERR / LOC_LEN_ERR), the requester gets the
 * NAK (REM_OP_ERR / REM_INV_REQ_ERR), nothing is written. */
static void recv_side_errors(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static unsigned char src[256], dst[256];
	struct ibv_mr *smr = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !smr || !dmr)
		DIE("setup");
	struct {
		const char *what;
		uint32_t lkey;
		uint32_t len;
		int want_recv1, want_recv2, want_send;
	} cs[] = {
		{"a receive WR with a made-up lkey", 0x5a5a5a00, 64, IBV_WC_LOC_QP_OP_ERR,
		 IBV_WC_LOC_PROT_ERR, IBV_WC_REM_OP_ERR},
		{"a receive buffer too small", 0, 8, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_LEN_ERR,
		 IBV_WC_REM_INV_REQ_ERR},
	};
	for (unsigned i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
		struct pair p;
		pair_up(&p, ctx, pd);
		memset(dst, 0x11, sizeof(dst));
		uint32_t lkey = cs[i].lkey ? cs[i].lkey : dmr->lkey;
		if (lkey == smr->lkey || (cs[i].lkey && lkey == dmr->lkey))
			lkey ^= 0x100;
		struct ibv_sge rs = {(uintptr_t)dst, cs[i].len, lkey};
		struct ibv_recv_wr rwr = {.wr_id = 9, .sg_list = &rs, .num_sge = 1};
		struct ibv_recv_wr *rbad;
		if (ibv_post_recv(p.b, &rwr, &rbad))
			DIE("ibv_post_recv");
		memset(src, 0x22, sizeof(src));
		struct ibv_sge ss = {(uintptr_t)src, 64, smr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &ss, .num_sge = 1,
					 .opcode = IBV_WR_SEND};
		int s = post_wait(&p, &wr);
		CHECK(s == cs[i].want_send, "%s: requester %s, want %s", cs[i].what, st(s),
		      ibv_wc_status_str(cs[i].want_send));
		struct ibv_wc wc;
		int got = poll_one(p.tcq, &wc, 2.0);
		CHECK(got && wc.wr_id == 9 &&
			      (wc.status == (enum ibv_wc_status)cs[i].want_recv1 ||
			       wc.status == (enum ibv_wc_status)cs[i].want_recv2),
		      "%s: receiver %s", cs[i].what, got ? st(wc.status) : "no completion");
		int same = 1;
		for (unsigned j = cs[i].len; j < sizeof(dst); j++)
			same &= dst[j] == 0x11;
		if (cs[i].lkey)
			for (unsigned j = 0; j < cs[i].len; j++)
				same &= dst[j] == 0x11;
		CHECK(same, "%s: the receive buffer was written", cs[i].what);
		pair_down(&p);
	}
	ibv_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* More WRs than the queues hold: ENOMEM with bad_wr at the first that did not fit; an SRQ WR
 * above the SRQ's max_sge: an error with bad_wr. */
static void queue_overflow(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !cq || !mr)
		DIE("setup");
	struct ibv_qp *qp = rc_qp(pd, cq, cq, 1);
	to_init(qp);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	if (ibv_query_qp(qp, &qa, IBV_QP_CAP, &qia))
		DIE("ibv_query_qp");
	int n = qia.cap.max_recv_wr + 1;
	struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
	struct ibv_recv_wr *rw = calloc(n, sizeof(*rw));
	for (int i = 0; i < n; i++) {
		rw[i].wr_id = i;
		rw[i].sg_list = &sge;
		rw[i].num_sge = 1;
		rw[i].next = i + 1 < n ? &rw[i + 1] : NULL;
	}
	struct ibv_recv_wr *rbad = NULL;
	int rc = ibv_post_recv(qp, rw, &rbad);
	CHECK(rc == ENOMEM && rbad == &rw[n - 1],
	      "%d receive WRs into %u slots: rc %d bad_wr index %ld", n, qia.cap.max_recv_wr, rc,
	      rbad ? (long)(rbad - rw) : -1L);
	free(rw);

	struct ibv_srq_init_attr sia = {0};
	sia.attr.max_wr = 4;
	sia.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	if (!srq)
		DIE("ibv_create_srq");
	struct ibv_srq_attr sa;
	if (ibv_query_srq(srq, &sa))
		DIE("ibv_query_srq");
	int m = sa.max_sge + 1;
	struct ibv_sge *sg = calloc(m, sizeof(*sg));
	for (int i = 0; i < m; i++)
		sg[i] = sge;
	struct ibv_recv_wr s2 = {.wr_id = 2, .sg_list = sg, .num_sge = m};
	struct ibv_recv_wr s1 = {.wr_id = 1, .next = &s2, .sg_list = sg, .num_sge = 1};
	rbad = NULL;
	rc = ibv_post_srq_recv(srq, &s1, &rbad);
	CHECK((rc == EINVAL || rc == ENOMEM) && rbad == &s2,
	      "SRQ WR with num_sge %d > max_sge %u: rc %d bad_wr %p", m, sa.max_sge, rc,
	      (void *)rbad);
	int k = sa.max_wr + 1;
	struct ibv_recv_wr *sw = calloc(k, sizeof(*sw));
	for (int i = 0; i < k; i++) {
		sw[i].sg_list = &sge;
		sw[i].num_sge = 1;
		sw[i].next = i + 1 < k ? &sw[i + 1] : NULL;
	}
	rbad = NULL;
	rc = ibv_post_srq_recv(srq, sw, &rbad);
	/* One slot is taken by s1 already. */
	CHECK(rc == ENOMEM && rbad == &sw[sa.max_wr - 1],
	      "%d SRQ WRs into %u slots (1 used): rc %d bad_wr index %ld", k, sa.max_wr, rc,
	      rbad ? (long)(rbad - sw) : -1L);
	free(sw);
	free(sg);
	ibv_destroy_srq(srq);
	ibv_destroy_qp(qp);

	/* The send queue: an unsignaled flood into a pair that is not connected to anyone
	 * answering (a QP in RTS whose peer is in RESET), so nothing drains. */
	struct ibv_qp *a = rc_qp(pd, cq, cq, 1), *b = rc_qp(pd, cq, cq, 1);
	to_init(a);
	to_rtr(ctx, a, b->qp_num);
	to_rts(a);
	if (ibv_query_qp(a, &qa, IBV_QP_CAP, &qia))
		DIE("ibv_query_qp");
	n = qia.cap.max_send_wr + 1;
	struct ibv_send_wr *sws = calloc(n, sizeof(*sws));
	for (int i = 0; i < n; i++) {
		sws[i].wr_id = i;
		sws[i].sg_list = &sge;
		sws[i].num_sge = 1;
		sws[i].opcode = IBV_WR_SEND;
		sws[i].next = i + 1 < n ? &sws[i + 1] : NULL;
	}
	struct ibv_send_wr *sbad = NULL;
	rc = ibv_post_send(a, sws, &sbad);
	CHECK(rc == ENOMEM && sbad == &sws[n - 1],
	      "%d send WRs into %u slots: rc %d bad_wr index %ld", n, qia.cap.max_send_wr, rc,
	      sbad ? (long)(sbad - sws) : -1L);
	free(sws);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* The extended QP and CQ (ibv_wr_*, ibv_start_poll): a batch refused by ibv_wr_complete posts
 * none of its WRs (ibv_wr_post(3)); errors complete through the extended CQ. */
static void extended_qp_errors(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq_init_attr_ex cx = {0};
	cx.cqe = 32;
	cx.wc_flags = IBV_WC_STANDARD_FLAGS;
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cx);
	struct ibv_cq *tcq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	if (!pd || !mr || !cqx || !tcq)
		DIE("setup");
	struct ibv_poll_cq_attr pa = {0};
	CHECK(ibv_start_poll(cqx, &pa) == ENOENT, "ibv_start_poll on an empty CQ");

	struct ibv_qp_init_attr_ex ia = {0};
	ia.send_cq = ibv_cq_ex_to_cq(cqx);
	ia.recv_cq = ibv_cq_ex_to_cq(cqx);
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = 2;
	ia.cap.max_recv_sge = 2;
	ia.cap.max_inline_data = 16;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.pd = pd;
	ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	struct ibv_qp *a = ibv_create_qp_ex(ctx, &ia);
	if (!a)
		DIE("ibv_create_qp_ex");
	struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(a);
	CHECK(ax != NULL, "ibv_qp_to_qp_ex");
	if (!ax)
		DIE("no qp_ex");
	struct ibv_qp *b = rc_qp(pd, tcq, tcq, 2);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	if (ibv_query_qp(a, &qa, IBV_QP_CAP, &qia))
		DIE("ibv_query_qp");
	int rc;

	/* RESET: refused. */
	ibv_wr_start(ax);
	ax->wr_id = 1;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(ax);
	ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)buf, 8);
	rc = ibv_wr_complete(ax);
	CHECK(rc != 0, "ibv_wr_complete in RESET returned 0");

	to_init(a);
	to_init(b);
	to_rtr(ctx, a, b->qp_num);
	to_rtr(ctx, b, a->qp_num);
	to_rts(a);
	to_rts(b);
	struct ibv_sge rs = {(uintptr_t)buf + 2048, 64, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 50, .sg_list = &rs, .num_sge = 1};
	struct ibv_recv_wr *rbad;
	for (int i = 0; i < 4; i++)
		if (ibv_post_recv(b, &rwr, &rbad))
			DIE("ibv_post_recv");

	/* An operation the QP was not created for. */
	ibv_wr_start(ax);
	ax->wr_id = 2;
	ibv_wr_rdma_read(ax, 0x1234, (uintptr_t)buf);
	ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)buf, 8);
	rc = ibv_wr_complete(ax);
	CHECK(rc != 0, "ibv_wr_rdma_read without IBV_QP_EX_WITH_RDMA_READ: ibv_wr_complete 0");

	/* A good WR then one with too many SGEs: the whole batch is refused. */
	int n = qia.cap.max_send_sge + 1;
	struct ibv_sge *sg = calloc(n, sizeof(*sg));
	for (int i = 0; i < n; i++)
		sg[i] = (struct ibv_sge){(uintptr_t)buf + 8 * i, 8, mr->lkey};
	ibv_wr_start(ax);
	ax->wr_id = 3;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(ax);
	ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)buf, 8);
	ax->wr_id = 4;
	ibv_wr_send(ax);
	ibv_wr_set_sge_list(ax, n, sg);
	rc = ibv_wr_complete(ax);
	CHECK(rc != 0, "a batch with %d SGEs above max_send_sge %u: ibv_wr_complete 0", n,
	      qia.cap.max_send_sge);

	/* Inline data above max_inline_data. */
	static char big[8192];
	ibv_wr_start(ax);
	ax->wr_id = 5;
	ax->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(ax);
	ibv_wr_set_inline_data(ax, big, qia.cap.max_inline_data + 1);
	rc = ibv_wr_complete(ax);
	CHECK(rc != 0, "inline data of %u bytes above max_inline_data %u: ibv_wr_complete 0",
	      qia.cap.max_inline_data + 1, qia.cap.max_inline_data);

	/* Nothing of the refused batches went out. */
	usleep(100000);
	rc = ibv_start_poll(cqx, &pa);
	if (rc == 0) {
		CHECK(0, "a completion (wr_id %" PRIu64 " status %s) from a refused batch",
		      cqx->wr_id, ibv_wc_status_str(cqx->status));
		ibv_end_poll(cqx);
	}
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(tcq, 1, &wc) == 0, "the target received a WR of a refused batch");

	/* A SEND with a made-up lkey: LOC_PROT_ERR through the extended CQ. */
	ibv_wr_start(ax);
	ax->wr_id = 6;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(ax);
	ibv_wr_set_sge(ax, mr->lkey ^ 0x5a5a00, (uintptr_t)buf, 8);
	rc = ibv_wr_complete(ax);
	CHECK(rc == 0, "ibv_wr_complete of a SEND with a bad lkey: %d", rc);
	double end = now() + 5.0;
	while ((rc = ibv_start_poll(cqx, &pa)) == ENOENT && now() < end)
		usleep(100);
	CHECK(rc == 0, "no completion for the bad-lkey SEND");
	if (rc == 0) {
		CHECK(cqx->wr_id == 6 && cqx->status == IBV_WC_LOC_PROT_ERR,
		      "wr_id %" PRIu64 " status %s, want 6 %s", cqx->wr_id,
		      ibv_wc_status_str(cqx->status), ibv_wc_status_str(IBV_WC_LOC_PROT_ERR));
		CHECK(ibv_wc_read_qp_num(cqx) == a->qp_num, "qp_num %u", ibv_wc_read_qp_num(cqx));
		ibv_end_poll(cqx);
	}
	free(sg);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	ibv_destroy_cq(tcq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* Sizes above what ibv_query_device reports, unknown QP types, AH and multicast misuse:
 * NULL + errno (or an errno value) as the kernel's uverbs/rxe give, the process goes on. */
static void bad_create_limits(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_device_attr da;
	if (!pd || !cq || ibv_query_device(ctx, &da))
		DIE("setup");

	CHECK_NULL_SOME_ERRNO(ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0));
	CHECK_ERRNO_VALUE(ibv_resize_cq(cq, da.max_cqe + 1));
	CHECK_ERRNO_VALUE(ibv_resize_cq(cq, 0));

	struct ibv_qp_init_attr base = {0};
	base.send_cq = cq;
	base.recv_cq = cq;
	base.qp_type = IBV_QPT_RC;
	base.cap.max_send_wr = 4;
	base.cap.max_recv_wr = 4;
	base.cap.max_send_sge = 1;
	base.cap.max_recv_sge = 1;
	struct ibv_qp_init_attr ia = base;
	ia.cap.max_send_wr = da.max_qp_wr + 1;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, &ia));
	ia = base;
	ia.cap.max_recv_wr = da.max_qp_wr + 1;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, &ia));
	ia = base;
	ia.cap.max_send_sge = da.max_sge + 1;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, &ia));
	ia = base;
	ia.cap.max_recv_sge = da.max_sge + 1;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, &ia));
	ia = base;
	ia.qp_type = (enum ibv_qp_type)77;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(pd, &ia));

	struct ibv_srq_init_attr sia = {0};
	sia.attr.max_wr = da.max_srq_wr + 1;
	sia.attr.max_sge = 1;
	CHECK_NULL_SOME_ERRNO(ibv_create_srq(pd, &sia));
	sia.attr.max_wr = 4;
	sia.attr.max_sge = da.max_srq_sge + 1;
	CHECK_NULL_SOME_ERRNO(ibv_create_srq(pd, &sia));
	sia.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	CHECK(srq != NULL, "ibv_create_srq within the limits: errno %d", errno);
	if (srq) {
		struct ibv_srq_attr sa = {0};
		if (ibv_query_srq(srq, &sa))
			DIE("ibv_query_srq");
		sa.srq_limit = sa.max_wr + 1; /* a limit above the queue's size */
		CHECK_ERRNO_VALUE(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT));
		sa.max_wr = da.max_srq_wr + 1;
		CHECK_ERRNO_VALUE(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR));
		CHECK(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");
	}

	/* Address handles: no such port, no such source GID, RoCE without a GRH. */
	struct ibv_ah_attr aa = {0};
	aa.is_global = 1;
	aa.port_num = 1;
	if (ibv_query_gid(ctx, 1, 0, &aa.grh.dgid))
		DIE("gid");
	aa.port_num = 9;
	CHECK_NULL_SOME_ERRNO(ibv_create_ah(pd, &aa));
	aa.port_num = 1;
	aa.grh.sgid_index = 200;
	CHECK_NULL_SOME_ERRNO(ibv_create_ah(pd, &aa));
	aa.grh.sgid_index = 0;
	aa.is_global = 0;
	CHECK_NULL_SOME_ERRNO(ibv_create_ah(pd, &aa));
	aa.is_global = 1;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah != NULL, "ibv_create_ah with a valid GRH: errno %d", errno);
	if (ah)
		ibv_destroy_ah(ah);

	/* Multicast: only UD QPs attach, only to multicast GIDs. */
	struct ibv_qp *rc = ibv_create_qp(pd, &base);
	ia = base;
	ia.qp_type = IBV_QPT_UD;
	struct ibv_qp *ud = ibv_create_qp(pd, &ia);
	if (!rc || !ud)
		DIE("ibv_create_qp");
	union ibv_gid mgid = {0}, ugid;
	mgid.raw[0] = 0xff;
	mgid.raw[1] = 0x0e;
	mgid.raw[15] = 0x01;
	if (ibv_query_gid(ctx, 1, 0, &ugid))
		DIE("gid");
	CHECK_ERRNO_VALUE(ibv_attach_mcast(rc, &mgid, 0));
	CHECK_ERRNO_VALUE(ibv_attach_mcast(ud, &ugid, 0));
	CHECK_ERRNO_VALUE(ibv_attach_mcast(ud, NULL, 0));
	CHECK(ibv_attach_mcast(ud, &mgid, 0) == 0, "ibv_attach_mcast of a UD QP to ff0e::1");
	CHECK_ERRNO_VALUE(ibv_detach_mcast(ud, &ugid, 0));
	CHECK(ibv_detach_mcast(ud, &mgid, 0) == 0, "ibv_detach_mcast");
	CHECK_ERRNO_VALUE(ibv_detach_mcast(ud, &mgid, 0)); /* not attached any more */

	/* ibv_poll_cq with a negative count or no array: an error, not a crash. */
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, -1, &wc) < 0, "ibv_poll_cq(-1) did not fail");
	CHECK(ibv_poll_cq(cq, 0, NULL) == 0, "ibv_poll_cq(0, NULL)");

	ibv_destroy_qp(rc);
	ibv_destroy_qp(ud);
	CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	ibv_close_device(ctx);
}

/* ibv_close_device with objects still alive (ibv_open_device(3): the application should free
 * them first): the close succeeds, and destroying them afterwards fails or succeeds but never
 * crashes; the library works on. */
static void close_with_live_objects(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, ch, 0);
	static char buf[256];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), RW);
	struct ibv_srq_init_attr sia = {0};
	sia.attr.max_wr = 4;
	sia.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	if (!pd || !ch || !cq || !mr || !srq)
		DIE("setup");
	struct pair p;
	pair_up(&p, ctx, pd);
	struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *rbad;
	if (ibv_post_recv(p.b, &rwr, &rbad))
		DIE("ibv_post_recv");
	struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND};
	struct ibv_send_wr *sbad;
	if (ibv_post_send(p.a, &wr, &sbad)) /* in flight while the device closes */
		DIE("ibv_post_send");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device with live objects");
	int r[8];
	r[0] = ibv_destroy_qp(p.a);
	r[1] = ibv_destroy_qp(p.b);
	r[2] = ibv_destroy_srq(srq);
	r[3] = ibv_dereg_mr(mr);
	r[4] = ibv_destroy_cq(p.scq) | ibv_destroy_cq(p.rcq) | ibv_destroy_cq(p.tcq);
	r[5] = ibv_destroy_cq(cq);
	r[6] = ibv_destroy_comp_channel(ch);
	r[7] = ibv_dealloc_pd(pd);
	printf("destroy after close: qp %d %d srq %d mr %d cqs %d %d channel %d pd %d\n", r[0], r[1],
	       r[2], r[3], r[4], r[5], r[6], r[7]);
	for (int i = 0; i < 8; i++)
		CHECK(r[i] >= 0, "destroy %d after close returned %d", i, r[i]);
	/* A new context works. */
	struct ibv_context *c2 = open_ctx();
	struct ibv_pd *pd2 = ibv_alloc_pd(c2);
	CHECK(pd2 != NULL, "ibv_alloc_pd on a new context");
	struct pair q;
	static char b2[64];
	struct ibv_mr *m2 = ibv_reg_mr(pd2, b2, sizeof(b2), IBV_ACCESS_LOCAL_WRITE);
	if (!m2)
		DIE("ibv_reg_mr");
	pair_up(&q, c2, pd2);
	struct ibv_sge s2 = {(uintptr_t)b2, 8, m2->lkey};
	struct ibv_recv_wr r2 = {.wr_id = 3, .sg_list = &s2, .num_sge = 1};
	if (ibv_post_recv(q.b, &r2, &rbad))
		DIE("ibv_post_recv");
	struct ibv_send_wr w2 = {.wr_id = 4, .sg_list = &s2, .num_sge = 1, .opcode = IBV_WR_SEND};
	int s = post_wait(&q, &w2);
	CHECK(s == IBV_WC_SUCCESS, "SEND on a new context: %s", st(s));
	pair_down(&q);
	ibv_dereg_mr(m2);
	ibv_dealloc_pd(pd2);
	CHECK(ibv_close_device(c2) == 0, "ibv_close_device");
}

/* A UD QP on ctx/pd, in RTS, with its own CQ. */
static struct ibv_qp *ud_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ui = {0};
	ui.send_cq = cq;
	ui.recv_cq = cq;
	ui.qp_type = IBV_QPT_UD;
	ui.cap.max_send_wr = 4;
	ui.cap.max_recv_wr = 4;
	ui.cap.max_send_sge = 1;
	ui.cap.max_recv_sge = 1;
	struct ibv_qp *qp = ibv_create_qp(pd, &ui);
	if (!qp)
		DIE("UD QP");
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	at.qkey = 0x11111111;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		DIE("UD INIT");
	at.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE))
		DIE("UD RTR");
	at.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN))
		DIE("UD RTS");
	(void)ctx;
	return qp;
}

/* Objects of another context (another device instance: its own engine and handles) or
 * another PD where the kernel's uverbs / rxe refuse them: a QP on CQs or an SRQ of another
 * context (EINVAL), a UD send through an AH of another PD or context (rxe: the send completes
 * in error, nothing is delivered). */
static void cross_context_objects(void)
{
	struct ibv_context *c1 = open_ctx(), *c2 = open_ctx();
	struct ibv_pd *p1 = ibv_alloc_pd(c1), *p1b = ibv_alloc_pd(c1), *p2 = ibv_alloc_pd(c2);
	struct ibv_cq *q1 = ibv_create_cq(c1, 16, NULL, NULL, 0);
	struct ibv_cq *q2 = ibv_create_cq(c2, 16, NULL, NULL, 0);
	struct ibv_srq_init_attr sia = {0};
	sia.attr.max_wr = 4;
	sia.attr.max_sge = 1;
	struct ibv_srq *s2 = p2 ? ibv_create_srq(p2, &sia) : NULL;
	if (!p1 || !p1b || !p2 || !q1 || !q2 || !s2)
		DIE("setup");

	struct ibv_qp_init_attr ia = {0};
	ia.send_cq = q2;
	ia.recv_cq = q1;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 4;
	ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(p1, &ia)); /* send CQ of another context */
	ia.send_cq = q1;
	ia.recv_cq = q2;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(p1, &ia)); /* receive CQ of another context */
	ia.recv_cq = q1;
	ia.srq = s2;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp(p1, &ia)); /* SRQ of another context */
	ia.srq = NULL;
	struct ibv_qp_init_attr_ex ix = {0};
	ix.send_cq = q1;
	ix.recv_cq = q1;
	ix.qp_type = IBV_QPT_RC;
	ix.cap = ia.cap;
	ix.comp_mask = IBV_QP_INIT_ATTR_PD;
	ix.pd = p2;
	CHECK_NULL_SOME_ERRNO(ibv_create_qp_ex(c1, &ix)); /* PD of another context */

	/* UD: the receiver on c1, senders on c1 (through an AH of another PD) and on c2 (through
	 * an AH of c1). */
	static char buf[256];
	struct ibv_mr *m1 = ibv_reg_mr(p1, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *m1b = ibv_reg_mr(p1b, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *rq = ibv_create_cq(c1, 16, NULL, NULL, 0);
	if (!m1 || !m1b || !rq)
		DIE("setup UD");
	struct ibv_qp *recv = ud_qp(c1, p1, rq);
	struct ibv_qp *send1 = ud_qp(c1, p1b, q1);
	struct ibv_sge rs = {(uintptr_t)buf, sizeof(buf), m1->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1};
	struct ibv_recv_wr *rbad;
	for (int i = 0; i < 3; i++)
		if (ibv_post_recv(recv, &rwr, &rbad))
			DIE("ibv_post_recv");
	struct ibv_ah_attr aa = {0};
	aa.is_global = 1;
	aa.port_num = 1;
	if (ibv_query_gid(c1, 1, 0, &aa.grh.dgid))
		DIE("gid");
	struct ibv_ah *ah_p1 = ibv_create_ah(p1, &aa);   /* c1, the receiver's PD */
	struct ibv_ah *ah_p1b = ibv_create_ah(p1b, &aa); /* c1, the sender's PD */
	if (!ah_p1 || !ah_p1b)
		DIE("ibv_create_ah");

	/* Positive control: the sender's own PD's AH delivers. */
	struct ibv_sge ss = {(uintptr_t)buf, 16, m1b->lkey};
	struct ibv_send_wr wr = {.wr_id = 10, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.ud.ah = ah_p1b;
	wr.wr.ud.remote_qpn = recv->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	struct ibv_send_wr *sbad = NULL;
	CHECK(ibv_post_send(send1, &wr, &sbad) == 0, "UD SEND through its own PD's AH");
	struct ibv_wc wc;
	CHECK(poll_one(q1, &wc, 5.0) && wc.status == IBV_WC_SUCCESS, "UD SEND completion");
	CHECK(poll_one(rq, &wc, 5.0) && wc.status == IBV_WC_SUCCESS, "UD SEND not received");

	/* An AH of another PD of the same context. */
	wr.wr_id = 11;
	wr.wr.ud.ah = ah_p1;
	sbad = NULL;
	int rc = ibv_post_send(send1, &wr, &sbad);
	if (rc == 0) {
		CHECK(poll_one(q1, &wc, 5.0) && wc.wr_id == 11 && wc.status != IBV_WC_SUCCESS,
		      "UD SEND through an AH of another PD completed with %s",
		      st(wc.status));
	} else {
		CHECK(sbad == &wr, "refused without bad_wr");
	}
	usleep(50000);
	CHECK(ibv_poll_cq(rq, 1, &wc) == 0, "UD SEND through an AH of another PD was received");

	/* An AH of another context. */
	struct ibv_cq *q2s = ibv_create_cq(c2, 16, NULL, NULL, 0);
	struct ibv_mr *m2 = ibv_reg_mr(p2, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!q2s || !m2)
		DIE("setup c2");
	struct ibv_qp *send2 = ud_qp(c2, p2, q2s);
	struct ibv_sge s2s = {(uintptr_t)buf, 16, m2->lkey};
	wr.sg_list = &s2s;
	wr.wr_id = 12;
	wr.wr.ud.ah = ah_p1;
	sbad = NULL;
	rc = ibv_post_send(send2, &wr, &sbad);
	if (rc == 0) {
		CHECK(poll_one(q2s, &wc, 5.0) && wc.wr_id == 12 && wc.status != IBV_WC_SUCCESS,
		      "UD SEND through an AH of another context completed with %s",
		      st(wc.status));
	} else {
		CHECK(sbad == &wr, "refused without bad_wr");
	}
	usleep(50000);
	CHECK(ibv_poll_cq(rq, 1, &wc) == 0, "UD SEND through an AH of another context was received");

	ibv_destroy_qp(send2);
	ibv_destroy_qp(send1);
	ibv_destroy_qp(recv);
	ibv_destroy_ah(ah_p1);
	ibv_destroy_ah(ah_p1b);
	ibv_dereg_mr(m1);
	ibv_dereg_mr(m1b);
	ibv_dereg_mr(m2);
	ibv_destroy_srq(s2);
	ibv_destroy_cq(rq);
	ibv_destroy_cq(q1);
	ibv_destroy_cq(q2);
	ibv_destroy_cq(q2s);
	ibv_dealloc_pd(p1);
	ibv_dealloc_pd(p1b);
	ibv_dealloc_pd(p2);
	ibv_close_device(c1);
	ibv_close_device(c2);
}

/* Queries outside the tables: ibv_query_gid_ex(3) (errno value), ibv_query_gid_table(3)
 * (negative errno when the array is too small), ibv_query_pkey(3) and ibv_get_pkey_index(3)
 * (-1), ibv_query_port on a port that does not exist (errno value). ibv_query_port is
 * #undef'd above (compat_query_port): verbs.h's wrapper is ___ibv_query_port. */
static void bad_query_ranges(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_port_attr pa;
	if (___ibv_query_port(ctx, 1, &pa))
		DIE("ibv_query_port");
	struct ibv_gid_entry e;
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &e, 0) == 0, "ibv_query_gid_ex index 0");
	CHECK(e.gid_index == 0 && e.port_num == 1 && e.gid_type == IBV_GID_TYPE_ROCE_V2,
	      "gid entry: index %u port %u type %u", e.gid_index, e.port_num, e.gid_type);
	CHECK_ERRNO_VALUE(ibv_query_gid_ex(ctx, 1, pa.gid_tbl_len, &e, 0));
	CHECK_ERRNO_VALUE(ibv_query_gid_ex(ctx, 1, 100000, &e, 0));
	CHECK_ERRNO_VALUE(ibv_query_gid_ex(ctx, 2, 0, &e, 0));
	CHECK_ERRNO_VALUE(ibv_query_gid_ex(ctx, 0, 0, &e, 0));
	struct ibv_gid_entry tab[64];
	ssize_t n = ibv_query_gid_table(ctx, tab, 64, 0);
	CHECK(n >= 1, "ibv_query_gid_table: %zd", n);
	if (n >= 1)
		CHECK(ibv_query_gid_table(ctx, tab, n - 1, 0) < 0,
		      "ibv_query_gid_table into %zd entries for %zd GIDs did not fail", n - 1, n);
	uint16_t pkey;
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == 0xffff, "P_Key 0: %#x", pkey);
	CHECK_MINUS_ONE(ibv_query_pkey(ctx, 1, pa.pkey_tbl_len, &pkey));
	CHECK(ibv_get_pkey_index(ctx, 1, htons(0xffff)) == 0, "ibv_get_pkey_index(0xffff)");
	CHECK(ibv_get_pkey_index(ctx, 1, htons(0x1234)) < 0, "ibv_get_pkey_index(0x1234)");
	CHECK(___ibv_query_port(ctx, 2, &pa) != 0, "ibv_query_port(2) (verbs.h)");
	CHECK(___ibv_query_port(ctx, 0, &pa) != 0, "ibv_query_port(0) (verbs.h)");
	ibv_close_device(ctx);
}

/* After a local protection error the QP is in the error state (IBA 10.3.1, rxe): its posted
 * receives and every WR posted afterwards complete with IBV_WC_WR_FLUSH_ERR, in order, and
 * nothing reaches the peer; ibv_query_qp reports IBV_QPS_ERR. A reset QP can be reused. */
static void error_state_flushes(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[1024];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !mr)
		DIE("setup");
	struct pair p;
	pair_up(&p, ctx, pd);
	struct ibv_sge sge = {(uintptr_t)buf, 16, mr->lkey};
	struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *rbad;
	for (int i = 0; i < 2; i++) {
		rwr.wr_id = 30 + i;
		if (ibv_post_recv(p.a, &rwr, &rbad))
			DIE("ibv_post_recv");
	}
	rwr.wr_id = 40;
	if (ibv_post_recv(p.b, &rwr, &rbad))
		DIE("ibv_post_recv");
	struct ibv_sge bad_sge = {(uintptr_t)buf, 16, mr->lkey ^ 0x5a5a00};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &bad_sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND};
	int s = post_wait(&p, &wr);
	CHECK(s == IBV_WC_LOC_PROT_ERR, "bad lkey: %s", st(s));
	struct ibv_wc wc;
	for (int i = 0; i < 2; i++) {
		int got = poll_one(p.rcq, &wc, 5.0);
		CHECK(got && wc.wr_id == (uint64_t)(30 + i) && wc.status == IBV_WC_WR_FLUSH_ERR,
		      "receive %d: %s wr_id %" PRIu64, i, got ? st(wc.status) : "no completion",
		      got ? wc.wr_id : 0);
	}
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	CHECK(ibv_query_qp(p.a, &qa, IBV_QP_STATE, &qia) == 0 && qa.qp_state == IBV_QPS_ERR,
	      "state %d after the error, want ERR", qa.qp_state);
	/* Posts in ERR are accepted and flushed, in order. */
	struct ibv_send_wr w2 = {.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr w3 = w2;
	w3.wr_id = 3;
	w2.next = &w3;
	struct ibv_send_wr *sbad = NULL;
	CHECK(ibv_post_send(p.a, &w2, &sbad) == 0, "post_send in ERR");
	for (int i = 2; i <= 3; i++) {
		int got = poll_one(p.scq, &wc, 5.0);
		CHECK(got && wc.wr_id == (uint64_t)i && wc.status == IBV_WC_WR_FLUSH_ERR,
		      "send %d in ERR: %s", i, got ? st(wc.status) : "no completion");
	}
	rwr.wr_id = 50;
	CHECK(ibv_post_recv(p.a, &rwr, &rbad) == 0, "post_recv in ERR");
	CHECK(poll_one(p.rcq, &wc, 5.0) && wc.wr_id == 50 && wc.status == IBV_WC_WR_FLUSH_ERR,
	      "receive posted in ERR not flushed");
	usleep(50000);
	CHECK(ibv_poll_cq(p.tcq, 1, &wc) == 0, "the peer received from a QP in ERR");
	/* RESET, then reconnect: the QP works again. */
	qa.qp_state = IBV_QPS_RESET;
	CHECK(ibv_modify_qp(p.a, &qa, IBV_QP_STATE) == 0, "ERR -> RESET");
	CHECK(ibv_poll_cq(p.scq, 1, &wc) == 0 && ibv_poll_cq(p.rcq, 1, &wc) == 0,
	      "completions left after the flushes");
	/* A new peer on a new CQ (the old peer's receive stays outside this check). */
	ibv_destroy_qp(p.b);
	ibv_destroy_cq(p.tcq);
	p.tcq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	if (!p.tcq)
		DIE("ibv_create_cq");
	p.b = rc_qp(pd, p.tcq, p.tcq, 2);
	to_init(p.a);
	to_init(p.b);
	to_rtr(ctx, p.a, p.b->qp_num);
	to_rtr(ctx, p.b, p.a->qp_num);
	to_rts(p.a);
	to_rts(p.b);
	rwr.wr_id = 60;
	if (ibv_post_recv(p.b, &rwr, &rbad))
		DIE("ibv_post_recv");
	struct ibv_send_wr w4 = {.wr_id = 4, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND};
	s = post_wait(&p, &w4);
	CHECK(s == IBV_WC_SUCCESS, "SEND after RESET and reconnect: %s", st(s));
	int got = poll_one(p.tcq, &wc, 5.0);
	CHECK(got && wc.wr_id == 60 && wc.status == IBV_WC_SUCCESS,
	      "after reconnect the peer's CQ gave %s wr_id %" PRIu64 ", want the SEND in 60",
	      got ? st(wc.status) : "no completion", got ? wc.wr_id : 0);
	pair_down(&p);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* ibv_destroy_qp with WRs outstanding on both queues: they are not processed and no work
 * completions are generated for them (rdma-core; rxe drains without notifying), so a CQ the
 * application goes on using never returns a wr_id of the destroyed QP; another QP on the same
 * CQs is unaffected. */
static void destroy_qp_with_outstanding_wrs(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[1024];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !mr)
		DIE("setup");
	struct pair p;
	pair_up(&p, ctx, pd);
	/* A second requester on the same CQs, connected to a peer that never answers (RESET),
	 * so its SEND stays outstanding; plus receives of its own. */
	struct ibv_qp *doomed = rc_qp(pd, p.scq, p.rcq, 1);
	struct ibv_qp *silent = rc_qp(pd, p.tcq, p.tcq, 1);
	to_init(doomed);
	to_rtr(ctx, doomed, silent->qp_num);
	to_rts(doomed);
	struct ibv_sge sge = {(uintptr_t)buf, 16, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 0xdead0001, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *rbad;
	if (ibv_post_recv(doomed, &rwr, &rbad))
		DIE("ibv_post_recv");
	struct ibv_send_wr swr = {.wr_id = 0xdead0002, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *sbad;
	if (ibv_post_send(doomed, &swr, &sbad))
		DIE("ibv_post_send");
	usleep(20000);
	CHECK(ibv_destroy_qp(doomed) == 0, "ibv_destroy_qp with outstanding WRs");
	/* The surviving pair works on the same CQs, and no completion of the dead QP shows. */
	rwr.wr_id = 7;
	if (ibv_post_recv(p.b, &rwr, &rbad))
		DIE("ibv_post_recv");
	struct ibv_send_wr ok = {.wr_id = 8, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND};
	int s = post_wait(&p, &ok);
	CHECK(s == IBV_WC_SUCCESS, "SEND on the surviving pair: %s", st(s));
	usleep(50000);
	struct ibv_wc wc[8];
	int n = ibv_poll_cq(p.scq, 8, wc) + 0;
	for (int i = 0; i < n; i++)
		CHECK(wc[i].wr_id >> 16 != 0xdead, "send CQ: wr_id %#" PRIx64 " (%s) of the destroyed QP",
		      wc[i].wr_id, st(wc[i].status));
	n = ibv_poll_cq(p.rcq, 8, wc);
	for (int i = 0; i < n; i++)
		CHECK(wc[i].wr_id >> 16 != 0xdead, "recv CQ: wr_id %#" PRIx64 " (%s) of the destroyed QP",
		      wc[i].wr_id, st(wc[i].status));
	ibv_destroy_qp(silent);
	pair_down(&p);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* UD datagrams the receiver cannot take: a receive buffer smaller than the 40-byte GRH plus
 * the payload (IBA C9-205: silently dropped, the WQE kept; rxe completes it with
 * IBV_WC_LOC_LEN_ERR; the sender succeeds either way), a wrong Q_Key (silently dropped), a
 * payload above the path MTU (C9-200: refused at post or completed in error; nothing
 * received). */
static void ud_errors(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[16384];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !mr || !scq || !rcq)
		DIE("setup");
	struct ibv_qp *snd = ud_qp(ctx, pd, scq), *rcv = ud_qp(ctx, pd, rcq);
	struct ibv_ah_attr aa = {0};
	aa.is_global = 1;
	aa.port_num = 1;
	if (ibv_query_gid(ctx, 1, 0, &aa.grh.dgid))
		DIE("gid");
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	struct ibv_port_attr pa;
	if (!ah || ___ibv_query_port(ctx, 1, &pa))
		DIE("ah/port");
	int mtu = 128 << pa.active_mtu;
	struct ibv_wc wc;
	struct ibv_recv_wr *rbad;
	struct ibv_send_wr *sbad;

	/* Too small a receive buffer. */
	memset(buf + 8192, 0x11, 256);
	struct ibv_sge rs = {(uintptr_t)buf + 8192, 40 + 8, mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1};
	if (ibv_post_recv(rcv, &rwr, &rbad))
		DIE("ibv_post_recv");
	struct ibv_sge ss = {(uintptr_t)buf, 64, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = rcv->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	CHECK(ibv_post_send(snd, &wr, &sbad) == 0, "UD post_send");
	CHECK(poll_one(scq, &wc, 5.0) && wc.wr_id == 2 && wc.status == IBV_WC_SUCCESS,
	      "UD sender: %s", st(wc.status));
	/* IBA C9-205: silently dropped, the receive WQE stays (softib); rxe completes it with
	 * IBV_WC_LOC_LEN_ERR instead (class D). Either way nothing lands past the buffer. */
	int got = poll_one(rcq, &wc, 0.5);
	CHECK(!got || (wc.wr_id == 1 && wc.status == IBV_WC_LOC_LEN_ERR),
	      "UD receive into 48 bytes of a 64-byte datagram: %s wr_id %" PRIu64, st(wc.status),
	      wc.wr_id);
	int same = 1;
	for (int i = 48; i < 256; i++)
		same &= buf[8192 + i] == 0x11;
	CHECK(same, "bytes past the receive buffer changed");
	if (!got) {
		/* The WQE is still there and takes a datagram that fits. */
		ss.length = 8;
		wr.wr_id = 20;
		CHECK(ibv_post_send(snd, &wr, &sbad) == 0, "UD post_send");
		CHECK(poll_one(scq, &wc, 5.0) && wc.status == IBV_WC_SUCCESS, "UD sender");
		got = poll_one(rcq, &wc, 5.0);
		CHECK(got && wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + 8,
		      "the kept receive: %s wr_id %" PRIu64 " byte_len %u",
		      got ? st(wc.status) : "no completion", got ? wc.wr_id : 0,
		      got ? wc.byte_len : 0);
		ss.length = 64;
	}

	/* A wrong Q_Key: dropped; the receive stays posted and takes the next good datagram. */
	rs.length = 40 + 256;
	rwr.wr_id = 3;
	if (ibv_post_recv(rcv, &rwr, &rbad))
		DIE("ibv_post_recv");
	wr.wr_id = 4;
	wr.wr.ud.remote_qkey = 0x22222222;
	CHECK(ibv_post_send(snd, &wr, &sbad) == 0, "UD post_send");
	CHECK(poll_one(scq, &wc, 5.0) && wc.status == IBV_WC_SUCCESS, "UD sender (wrong Q_Key)");
	usleep(100000);
	CHECK(ibv_poll_cq(rcq, 1, &wc) == 0, "a datagram with a wrong Q_Key was received");
	wr.wr_id = 5;
	wr.wr.ud.remote_qkey = 0x11111111;
	CHECK(ibv_post_send(snd, &wr, &sbad) == 0, "UD post_send");
	CHECK(poll_one(scq, &wc, 5.0) && wc.status == IBV_WC_SUCCESS, "UD sender");
	got = poll_one(rcq, &wc, 5.0);
	CHECK(got && wc.wr_id == 3 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + 64,
	      "the receive after the dropped datagram: %s wr_id %" PRIu64 " byte_len %u",
	      got ? st(wc.status) : "no completion", got ? wc.wr_id : 0, got ? wc.byte_len : 0);

	/* Above the path MTU. */
	rs.length = 40 + 8192;
	rwr.wr_id = 6;
	if (ibv_post_recv(rcv, &rwr, &rbad))
		DIE("ibv_post_recv");
	ss.length = mtu + 1;
	wr.wr_id = 7;
	sbad = NULL;
	int rc = ibv_post_send(snd, &wr, &sbad);
	if (rc == 0) {
		got = poll_one(scq, &wc, 5.0);
		CHECK(got && wc.wr_id == 7 && wc.status != IBV_WC_SUCCESS,
		      "a %d-byte UD datagram (MTU %d): %s", mtu + 1, mtu,
		      got ? st(wc.status) : "no completion");
	} else {
		CHECK(sbad == &wr, "refused without bad_wr");
	}
	usleep(50000);
	CHECK(ibv_poll_cq(rcq, 1, &wc) == 0, "a datagram above the MTU was received");

	ibv_destroy_qp(snd);
	ibv_destroy_qp(rcv);
	ibv_destroy_ah(ah);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* Rate conversions and strings, including values outside the enums, as rdma-core 44's
 * verbs.c / enum_strs.c: a rate that is not a whole multiple of 2.5 Gb/s has no multiple
 * (-1), an unknown multiple or Mb/s gives IBV_RATE_MAX, unknown enum values give "unknown". */
static void rates_and_strings(void)
{
	static const struct {
		enum ibv_rate rate;
		int mult, mbps;
	} t[] = {
		{IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},
		{IBV_RATE_10_GBPS, 4, 10000},     {IBV_RATE_20_GBPS, 8, 20000},
		{IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
		{IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},
		{IBV_RATE_120_GBPS, 48, 120000},  {IBV_RATE_14_GBPS, -1, 14062},
		{IBV_RATE_56_GBPS, -1, 56250},    {IBV_RATE_112_GBPS, -1, 112500},
		{IBV_RATE_168_GBPS, -1, 168750},  {IBV_RATE_25_GBPS, -1, 25781},
		{IBV_RATE_100_GBPS, -1, 103125},  {IBV_RATE_200_GBPS, -1, 206250},
		{IBV_RATE_300_GBPS, -1, 309375},  {IBV_RATE_28_GBPS, 11, 28125},
		{IBV_RATE_50_GBPS, 20, 53125},    {IBV_RATE_400_GBPS, 160, 425000},
		{IBV_RATE_600_GBPS, 240, 637500}, {IBV_RATE_800_GBPS, 320, 850000},
		{IBV_RATE_1200_GBPS, 480, 1275000},
	};
	for (unsigned i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		CHECK(ibv_rate_to_mult(t[i].rate) == t[i].mult, "ibv_rate_to_mult(%d) = %d, want %d",
		      t[i].rate, ibv_rate_to_mult(t[i].rate), t[i].mult);
		CHECK(ibv_rate_to_mbps(t[i].rate) == t[i].mbps, "ibv_rate_to_mbps(%d) = %d, want %d",
		      t[i].rate, ibv_rate_to_mbps(t[i].rate), t[i].mbps);
		if (t[i].mult > 0)
			CHECK(mult_to_ibv_rate(t[i].mult) == t[i].rate, "mult_to_ibv_rate(%d)",
			      t[i].mult);
		CHECK(mbps_to_ibv_rate(t[i].mbps) == t[i].rate, "mbps_to_ibv_rate(%d)", t[i].mbps);
	}
	int bad_mult[] = {0, -1, 3, 5, 10, 22, 40, 45, 67, 80, 120, 1000};
	for (unsigned i = 0; i < sizeof(bad_mult) / sizeof(bad_mult[0]); i++)
		CHECK(mult_to_ibv_rate(bad_mult[i]) == IBV_RATE_MAX, "mult_to_ibv_rate(%d) = %d",
		      bad_mult[i], mult_to_ibv_rate(bad_mult[i]));
	CHECK(ibv_rate_to_mult(IBV_RATE_MAX) == -1, "ibv_rate_to_mult(MAX)");
	CHECK(ibv_rate_to_mult((enum ibv_rate)999) == -1, "ibv_rate_to_mult(999)");
	CHECK(ibv_rate_to_mbps((enum ibv_rate)999) == -1, "ibv_rate_to_mbps(999)");
	CHECK(mbps_to_ibv_rate(0) == IBV_RATE_MAX && mbps_to_ibv_rate(12345) == IBV_RATE_MAX,
	      "mbps_to_ibv_rate of unknown rates");

	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success"), "%s",
	      ibv_wc_status_str(IBV_WC_SUCCESS));
	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_LOC_PROT_ERR), "local protection error"), "%s",
	      ibv_wc_status_str(IBV_WC_LOC_PROT_ERR));
	CHECK(!strcmp(ibv_wc_status_str((enum ibv_wc_status)999), "unknown"), "%s",
	      ibv_wc_status_str((enum ibv_wc_status)999));
	CHECK(!strcmp(ibv_wc_status_str((enum ibv_wc_status)-1), "unknown"), "status -1");
	CHECK(!strcmp(ibv_event_type_str((enum ibv_event_type)999), "unknown"), "event 999");
	CHECK(!strcmp(ibv_node_type_str((enum ibv_node_type)999), "unknown"), "node 999");
	CHECK(!strcmp(ibv_node_type_str((enum ibv_node_type)-5), "unknown"), "node -5");
	CHECK(!strcmp(ibv_port_state_str((enum ibv_port_state)999), "unknown"), "port 999");
	CHECK(!strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active"), "%s",
	      ibv_port_state_str(IBV_PORT_ACTIVE));
	CHECK(!strcmp(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter"), "%s",
	      ibv_node_type_str(IBV_NODE_CA));
	CHECK(!strcmp(ibv_event_type_str(IBV_EVENT_CQ_ERR), "CQ error"), "%s",
	      ibv_event_type_str(IBV_EVENT_CQ_ERR));
}

/* An atomic whose local buffer is not 8 bytes (rxe: EINVAL at post; an error completion is
 * accepted too): the target is unchanged either way. */
static void atomic_local_length(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static uint64_t target[4], local[4];
	struct ibv_mr *tmr = ibv_reg_mr(pd, target, sizeof(target),
					RW | IBV_ACCESS_REMOTE_ATOMIC);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, sizeof(local), IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !tmr || !lmr)
		DIE("setup");
	uint32_t lens[] = {4, 16, 0};
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		struct pair p;
		pair_up(&p, ctx, pd);
		target[1] = 100;
		struct ibv_sge sge = {(uintptr_t)local, lens[i], lmr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
					 .send_flags = IBV_SEND_SIGNALED};
		wr.wr.atomic.remote_addr = (uintptr_t)&target[1];
		wr.wr.atomic.rkey = tmr->rkey;
		wr.wr.atomic.compare_add = 5;
		struct ibv_send_wr *bad = NULL;
		int rc = ibv_post_send(p.a, &wr, &bad);
		if (rc == 0) {
			struct ibv_wc wc;
			int got = poll_one(p.scq, &wc, 5.0);
			CHECK(got && wc.status != IBV_WC_SUCCESS,
			      "FETCH_AND_ADD with a %u-byte local buffer: %s", lens[i],
			      got ? st(wc.status) : "no completion");
		} else {
			CHECK(bad == &wr, "refused without bad_wr");
		}
		usleep(20000);
		CHECK(target[1] == 100, "FETCH_AND_ADD with a %u-byte local buffer changed the target",
		      lens[i]);
		pair_down(&p);
	}
	ibv_dereg_mr(tmr);
	ibv_dereg_mr(lmr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* num_sge far above the QP's limit with a short sg_list: refused before the list is read
 * (rdma-core's rxe provider checks num_sge against max_sge first), never a read past the
 * caller's array; the same for ibv_wr_set_sge_list and SRQs, and for inline data longer than
 * max_inline_data whose buffer ends at an unmapped page. */
static void huge_num_sge(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !mr)
		DIE("setup");
	/* The list sits at the end of a mapping followed by an unmapped page: reading past its
	 * two entries faults. */
	long pg = sysconf(_SC_PAGESIZE);
	unsigned char *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED || munmap(m + pg, pg))
		DIE("mmap");
	struct ibv_sge *sg = (struct ibv_sge *)(m + pg) - 2;
	sg[0] = (struct ibv_sge){(uintptr_t)buf, 8, mr->lkey};
	sg[1] = sg[0];
	int huge[] = {3, 1000, 1 << 20, 0x7fffffff};
	struct pair p;
	pair_up(&p, ctx, pd);
	for (unsigned i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
		struct ibv_send_wr wr = {.wr_id = 1, .sg_list = sg, .num_sge = huge[i],
					 .opcode = IBV_WR_SEND};
		struct ibv_send_wr *bad = NULL;
		int rc = ibv_post_send(p.a, &wr, &bad);
		CHECK((rc == EINVAL || rc == ENOMEM) && bad == &wr, "post_send num_sge %d: rc %d",
		      huge[i], rc);
		struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = sg, .num_sge = huge[i]};
		struct ibv_recv_wr *rbad = NULL;
		rc = ibv_post_recv(p.b, &rwr, &rbad);
		CHECK((rc == EINVAL || rc == ENOMEM) && rbad == &rwr, "post_recv num_sge %d: rc %d",
		      huge[i], rc);
	}
	struct ibv_srq_init_attr sia = {0};
	sia.attr.max_wr = 4;
	sia.attr.max_sge = 2;
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	if (!srq)
		DIE("ibv_create_srq");
	for (unsigned i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
		struct ibv_recv_wr rwr = {.wr_id = 3, .sg_list = sg, .num_sge = huge[i]};
		struct ibv_recv_wr *rbad = NULL;
		int rc = ibv_post_srq_recv(srq, &rwr, &rbad);
		CHECK((rc == EINVAL || rc == ENOMEM) && rbad == &rwr,
		      "post_srq_recv num_sge %d: rc %d", huge[i], rc);
	}
	/* ibv_wr_set_sge_list. */
	struct ibv_qp_init_attr_ex ia = {0};
	ia.send_cq = p.scq;
	ia.recv_cq = p.rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 4;
	ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = 2;
	ia.cap.max_recv_sge = 2;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.pd = pd;
	ia.send_ops_flags = IBV_QP_EX_WITH_SEND;
	struct ibv_qp *x = ibv_create_qp_ex(ctx, &ia);
	if (!x)
		DIE("ibv_create_qp_ex");
	struct ibv_qp *peer = rc_qp(pd, p.tcq, p.tcq, 2);
	to_init(x);
	to_rtr(ctx, x, peer->qp_num);
	to_rts(x);
	struct ibv_qp_ex *xx = ibv_qp_to_qp_ex(x);
	for (unsigned i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
		ibv_wr_start(xx);
		xx->wr_id = 4;
		ibv_wr_send(xx);
		ibv_wr_set_sge_list(xx, (size_t)huge[i], sg);
		int rc = ibv_wr_complete(xx);
		CHECK(rc != 0, "ibv_wr_set_sge_list of %d entries: ibv_wr_complete 0", huge[i]);
	}
	/* Inline data: a length far above max_inline_data for a buffer just before the unmapped
	 * page, on both interfaces. */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	if (ibv_query_qp(x, &qa, IBV_QP_CAP, &qia))
		DIE("ibv_query_qp");
	unsigned char *tail = m + pg - 16;
	size_t lens[] = {qia.cap.max_inline_data + 1, 4096, (size_t)1 << 30};
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		ibv_wr_start(xx);
		xx->wr_id = 5;
		xx->wr_flags = IBV_SEND_INLINE;
		ibv_wr_send(xx);
		ibv_wr_set_inline_data(xx, tail, lens[i]);
		int rc = ibv_wr_complete(xx);
		CHECK(rc != 0, "ibv_wr_set_inline_data of %zu bytes (max %u): ibv_wr_complete 0",
		      lens[i], qia.cap.max_inline_data);
		struct ibv_data_buf bl[2] = {{tail, 8}, {tail, lens[i]}};
		ibv_wr_start(xx);
		ibv_wr_send(xx);
		ibv_wr_set_inline_data_list(xx, 2, bl);
		rc = ibv_wr_complete(xx);
		CHECK(rc != 0, "ibv_wr_set_inline_data_list of 8 + %zu bytes: ibv_wr_complete 0",
		      lens[i]);
		struct ibv_sge is = {(uintptr_t)tail, (uint32_t)lens[i], 0};
		struct ibv_send_wr iw = {.wr_id = 6, .sg_list = &is, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_INLINE};
		struct ibv_send_wr *ibad = NULL;
		rc = ibv_post_send(x, &iw, &ibad);
		CHECK(rc != 0 && ibad == &iw, "inline post_send of %zu bytes: rc %d", lens[i], rc);
	}
	ibv_destroy_qp(x);
	ibv_destroy_qp(peer);
	ibv_destroy_srq(srq);
	pair_down(&p);
	munmap(m, pg);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* Exported at IBVERBS_1.0 and declared only in rdma-core's provider header (driver.h). */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

/* ibv_read_sysfs_file as rdma-core's sysfs.c: one read of at most `size` bytes (a file with
 * no end such as /dev/zero is not read to its end), a trailing newline stripped, contents that
 * fill the buffer without a newline fail, a missing file fails. */
static void read_sysfs_file(void)
{
	char dir[] = "/tmp/softib-sysfs-XXXXXX";
	if (!mkdtemp(dir))
		DIE("mkdtemp");
	char path[64];
	snprintf(path, sizeof(path), "%s/attr", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		DIE("fopen");
	fputs("InfiniBand\n", f);
	fclose(f);
	char buf[32];
	memset(buf, 'x', sizeof(buf));
	int n = ibv_read_sysfs_file(dir, "attr", buf, sizeof(buf));
	CHECK(n == 10 && !strcmp(buf, "InfiniBand"), "read %d \"%.*s\"", n, 10, buf);
	memset(buf, 'x', sizeof(buf));
	n = ibv_read_sysfs_file(dir, "attr", buf, 4);
	CHECK(n == -1, "4 bytes of a longer line without its newline: %d, want -1", n);
	CHECK(buf[4] == 'x', "wrote past the 4-byte buffer");
	double t0 = now();
	n = ibv_read_sysfs_file("/dev", "zero", buf, 16);
	CHECK(n == -1 && now() - t0 < 1.0, "/dev/zero: %d after %.2f s", n, now() - t0);
	errno = 0;
	n = ibv_read_sysfs_file(dir, "missing", buf, sizeof(buf));
	CHECK(n == -1 && errno == ENOENT, "a missing file: %d errno %d", n, errno);
	CHECK(ibv_read_sysfs_file(dir, "attr", NULL, 16) == -1, "NULL buffer");
	unlink(path);
	rmdir(dir);
}

/* A UD reply addressed from the request's completion: ibv_init_ah_from_wc and
 * ibv_create_ah_from_wc read the 40-byte network header area before the payload, which on
 * RoCEv2 over IPv4 is 20 zero bytes and the IPv4 header (not a GRH): the reply's destination
 * is the sender's IPv4-mapped GID, its source GID index the GID the request went to. A NULL
 * GRH for a completion that has one is EINVAL. */
static void ud_reply_from_wc(void)
{
	struct ibv_context *c = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct ibv_cq *qa = ibv_create_cq(c, 16, NULL, NULL, 0);
	struct ibv_cq *qb = ibv_create_cq(c, 16, NULL, NULL, 0);
	static char buf[512];
	struct ibv_mr *m = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!pd || !qa || !qb || !m)
		DIE("setup");
	struct ibv_qp *a = ud_qp(c, pd, qa), *b = ud_qp(c, pd, qb);
	struct ibv_recv_wr *rbad;
	struct ibv_sge ra = {(uintptr_t)buf, 256, m->lkey};
	struct ibv_recv_wr rwa = {.wr_id = 1, .sg_list = &ra, .num_sge = 1};
	struct ibv_sge rb = {(uintptr_t)buf + 256, 256, m->lkey};
	struct ibv_recv_wr rwb = {.wr_id = 2, .sg_list = &rb, .num_sge = 1};
	if (ibv_post_recv(a, &rwa, &rbad) || ibv_post_recv(b, &rwb, &rbad))
		DIE("ibv_post_recv");
	union ibv_gid gid;
	if (ibv_query_gid(c, 1, 0, &gid))
		DIE("gid");
	struct ibv_ah_attr aa = {0};
	aa.is_global = 1;
	aa.port_num = 1;
	aa.grh.dgid = gid;
	struct ibv_ah *to_b = ibv_create_ah(pd, &aa);
	if (!to_b)
		DIE("ibv_create_ah");
	static char msg[16] = "request";
	struct ibv_mr *mm = ibv_reg_mr(pd, msg, sizeof(msg), IBV_ACCESS_LOCAL_WRITE);
	if (!mm)
		DIE("reg msg");
	struct ibv_sge ss = {(uintptr_t)msg, sizeof(msg), mm->lkey};
	struct ibv_send_wr wr = {.wr_id = 3, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *sbad;
	wr.wr.ud.ah = to_b;
	wr.wr.ud.remote_qpn = b->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	if (ibv_post_send(a, &wr, &sbad))
		DIE("post request");
	struct ibv_wc wc;
	CHECK(poll_one(qa, &wc, 5.0) && wc.status == IBV_WC_SUCCESS, "request sent");
	CHECK(poll_one(qb, &wc, 5.0) && wc.status == IBV_WC_SUCCESS && (wc.wc_flags & IBV_WC_GRH),
	      "request received with a network header");
	struct ibv_grh *grh = (struct ibv_grh *)(buf + 256);
	struct ibv_ah_attr r = {0};
	CHECK(ibv_init_ah_from_wc(c, 1, &wc, grh, &r) == 0, "ibv_init_ah_from_wc: errno %d", errno);
	CHECK(r.is_global == 1 && memcmp(&r.grh.dgid, &gid, 16) == 0,
	      "reply goes to the sender's GID");
	CHECK(r.grh.sgid_index == 0, "reply from the GID the request went to (index %u)",
	      r.grh.sgid_index);
	errno = 0;
	CHECK(ibv_init_ah_from_wc(c, 1, &wc, NULL, &r) == -1 && errno == EINVAL,
	      "NULL GRH with IBV_WC_GRH: EINVAL");
	struct ibv_ah *back = ibv_create_ah_from_wc(pd, &wc, grh, 1);
	CHECK(back != NULL, "ibv_create_ah_from_wc");
	if (back) {
		wr.wr_id = 4;
		wr.wr.ud.ah = back;
		wr.wr.ud.remote_qpn = wc.src_qp;
		if (ibv_post_send(b, &wr, &sbad))
			DIE("post reply");
		CHECK(poll_one(qb, &wc, 5.0) && wc.status == IBV_WC_SUCCESS, "reply sent");
		CHECK(poll_one(qa, &wc, 5.0) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 1,
		      "reply received by the requester");
		CHECK(memcmp(buf + 40, "request", 8) == 0, "reply payload");
		ibv_destroy_ah(back);
	}
	ibv_destroy_ah(to_b);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mm);
	ibv_dereg_mr(m);
	ibv_destroy_cq(qa);
	ibv_destroy_cq(qb);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
}

/* ibv_create_cq(3) / ibv_create_cq_ex(3): a comp_vector not below the context's
 * num_comp_vectors, or more CQEs than max_cqe: NULL and exactly EINVAL, as the kernel returns
 * (rdma-core's tests/test_cq.py, test_cqex.py); the last vector and max_cqe itself work. */
static void bad_cq_comp_vector(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		DIE("ibv_query_device");
	int nv = ctx->num_comp_vectors;
	CHECK(nv >= 1, "num_comp_vectors %d", nv);

	CHECK_NULL_ERRNO(ibv_create_cq(ctx, 8, NULL, NULL, nv), EINVAL);
	CHECK_NULL_ERRNO(ibv_create_cq(ctx, 8, NULL, NULL, nv + 1), EINVAL);
	CHECK_NULL_ERRNO(ibv_create_cq(ctx, 8, NULL, NULL, -1), EINVAL);
	CHECK_NULL_ERRNO(ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0), EINVAL);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, nv - 1);
	CHECK(cq != NULL, "ibv_create_cq on the last vector: errno %d", errno);
	if (cq)
		ibv_destroy_cq(cq);
	cq = ibv_create_cq(ctx, da.max_cqe, NULL, NULL, 0);
	CHECK(cq != NULL, "ibv_create_cq of max_cqe entries: errno %d", errno);
	if (cq)
		ibv_destroy_cq(cq);

	struct ibv_cq_init_attr_ex cx = {0};
	cx.cqe = 8;
	cx.comp_vector = nv;
	CHECK_NULL_ERRNO(ibv_create_cq_ex(ctx, &cx), EINVAL);
	cx.comp_vector = nv + 1;
	CHECK_NULL_ERRNO(ibv_create_cq_ex(ctx, &cx), EINVAL);
	cx.comp_vector = 0;
	cx.cqe = da.max_cqe + 1;
	CHECK_NULL_ERRNO(ibv_create_cq_ex(ctx, &cx), EINVAL);
	cx.cqe = 8;
	cx.comp_vector = nv - 1;
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cx);
	CHECK(cqx != NULL, "ibv_create_cq_ex on the last vector: errno %d", errno);
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	ibv_close_device(ctx);
}

/* ibv_create_qp_ex with IBV_QP_INIT_ATTR_CREATE_FLAGS: no flag at all is an ordinary QP
 * (rdma-core's tests/test_qp.py sets the mask with flags 0); a flag rdma-core knows that
 * softib does not implement is EOPNOTSUPP (as rxe), one it does not know EINVAL. */
static void create_qp_flags(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	if (!pd || !cq)
		DIE("setup");
	enum ibv_qp_type types[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
	for (unsigned t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		struct ibv_qp_init_attr_ex ia = {0};
		ia.qp_type = types[t];
		ia.send_cq = cq;
		ia.recv_cq = cq;
		ia.cap.max_send_wr = 4;
		ia.cap.max_recv_wr = 4;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		ia.pd = pd;
		ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
		ia.create_flags = 0;
		struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
		CHECK(qp != NULL, "type %d with CREATE_FLAGS 0: errno %d", types[t], errno);
		if (qp)
			CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
		ia.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
		CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &ia), EOPNOTSUPP);
		ia.create_flags = IBV_QP_CREATE_SCATTER_FCS;
		CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &ia), EOPNOTSUPP);
		ia.create_flags = 1u << 30;
		CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &ia), EINVAL);
	}
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* How many completions `cq` holds now (polled and dropped); the wr_ids into `ids`. */
static int drain_cq(struct ibv_cq *cq, uint64_t *ids, int max)
{
	int n = 0;
	struct ibv_wc wc;
	while (ibv_poll_cq(cq, 1, &wc) == 1) {
		if (n < max)
			ids[n] = wc.wr_id;
		n++;
	}
	return n;
}

/* A QP moved to RESET (or destroyed) takes its unpolled completions out of its CQs, as
 * rdma-core's mlx4 and mlx5 providers do: a QP recycled through RESET (rdma-core's
 * tests/test_mr.py) does not poll the WRs flushed before. Another QP's completions on the
 * same CQs stay, and so do receive completions that came from an SRQ. */
static void reset_cleans_cqs(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[256];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !mr)
		DIE("setup");
	struct pair p;
	pair_up(&p, ctx, pd);
	/* A third QP on the target's CQ. */
	struct ibv_qp *c = rc_qp(pd, p.tcq, p.tcq, 1);
	struct ibv_sge sge = {(uintptr_t)buf, 16, mr->lkey};
	struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *rbad;
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
	rwr.wr_id = 0xb1;
	if (ibv_post_recv(p.b, &rwr, &rbad))
		DIE("ibv_post_recv b");
	rwr.wr_id = 0xc1;
	to_init(c);
	if (ibv_post_recv(c, &rwr, &rbad))
		DIE("ibv_post_recv c");
	if (ibv_modify_qp(p.b, &at, IBV_QP_STATE) || ibv_modify_qp(c, &at, IBV_QP_STATE))
		DIE("ERR");
	/* b's requester side too: a SEND posted in ERR is flushed into the target CQ. */
	struct ibv_send_wr swr = {.wr_id = 0xb2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *sbad;
	if (ibv_post_send(p.b, &swr, &sbad))
		DIE("ibv_post_send in ERR");
	usleep(20000);
	at.qp_state = IBV_QPS_RESET;
	CHECK(ibv_modify_qp(p.b, &at, IBV_QP_STATE) == 0, "b to RESET");
	uint64_t ids[8];
	int n = drain_cq(p.tcq, ids, 8);
	CHECK(n == 1 && ids[0] == 0xc1, "after b's RESET the CQ holds %d completions (first %#" PRIx64
	      "), want c's only", n, n ? ids[0] : 0);

	/* Destroy: c's flushed receive goes with it. */
	at.qp_state = IBV_QPS_RESET;
	if (ibv_modify_qp(c, &at, IBV_QP_STATE))
		DIE("c to RESET");
	to_init(c);
	rwr.wr_id = 0xc2;
	if (ibv_post_recv(c, &rwr, &rbad))
		DIE("ibv_post_recv c");
	at.qp_state = IBV_QPS_ERR;
	if (ibv_modify_qp(c, &at, IBV_QP_STATE))
		DIE("c to ERR");
	usleep(20000);
	CHECK(ibv_destroy_qp(c) == 0, "ibv_destroy_qp c");
	n = drain_cq(p.tcq, ids, 8);
	CHECK(n == 0, "after c's destroy the CQ holds %d completions", n);

	/* An SRQ's receive completion stays when its QP is reset. */
	struct ibv_srq_init_attr sia = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	if (!srq)
		DIE("ibv_create_srq");
	struct ibv_qp_init_attr ia = {0};
	ia.send_cq = p.tcq;
	ia.recv_cq = p.tcq;
	ia.srq = srq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 4;
	ia.cap.max_send_sge = 1;
	struct ibv_qp *s = ibv_create_qp(pd, &ia);
	struct ibv_qp *a = rc_qp(pd, p.scq, p.rcq, 1);
	if (!s || !a)
		DIE("ibv_create_qp");
	to_init(a);
	to_init(s);
	to_rtr(ctx, a, s->qp_num);
	to_rtr(ctx, s, a->qp_num);
	to_rts(a);
	to_rts(s);
	rwr.wr_id = 0x51;
	if (ibv_post_srq_recv(srq, &rwr, &rbad))
		DIE("ibv_post_srq_recv");
	swr.wr_id = 0xa1;
	if (ibv_post_send(a, &swr, &sbad))
		DIE("ibv_post_send a");
	struct ibv_wc wc;
	CHECK(poll_one(p.scq, &wc, 5.0) && wc.status == IBV_WC_SUCCESS, "SEND into the SRQ");
	usleep(20000);
	at.qp_state = IBV_QPS_RESET;
	CHECK(ibv_modify_qp(s, &at, IBV_QP_STATE) == 0, "s to RESET");
	n = drain_cq(p.tcq, ids, 8);
	CHECK(n == 1 && ids[0] == 0x51, "after the SRQ QP's RESET the CQ holds %d completions, "
	      "want the SRQ receive", n);
	ibv_destroy_qp(a);
	ibv_destroy_qp(s);
	ibv_destroy_srq(srq);
	pair_down(&p);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* ibv_resize_cq right after posts, while the application polls (softib then defers the
 * posted sends to batch them with its next poll): the sends' completions are there before
 * the resize, so a size below them fails with EINVAL (rdma-core's tests/test_cq.py,
 * test_resize_cq), as on a HCA that processed the WRs meanwhile. */
static void resize_after_posts(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *scq = ibv_create_cq(ctx, 7, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 7, NULL, NULL, 0);
	if (!pd || !mr || !scq || !rcq)
		DIE("setup");
	struct ibv_qp *snd = ud_qp(ctx, pd, scq), *rcv = ud_qp(ctx, pd, rcq);
	struct ibv_ah_attr aa = {0};
	aa.is_global = 1;
	aa.port_num = 1;
	if (ibv_query_gid(ctx, 1, 0, &aa.grh.dgid))
		DIE("gid");
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		DIE("ibv_create_ah");
	struct ibv_sge ss = {(uintptr_t)buf, 16, mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = rcv->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	struct ibv_send_wr *sbad;
	struct ibv_wc wc[8];
	for (int round = 0; round < 20; round++) {
		CHECK(ibv_resize_cq(scq, 7) == 0, "round %d: resize to 7", round);
		/* Poll for a while: the progress thread leaves the engine to the application. */
		double end = now() + 0.01;
		while (now() < end)
			CHECK(ibv_poll_cq(scq, 8, wc) == 0, "round %d: a completion from nowhere", round);
		for (int i = 0; i < 3; i++) {
			wr.wr_id = round * 10 + i;
			if (ibv_post_send(snd, &wr, &sbad))
				DIE("ibv_post_send");
		}
		errno = 0;
		int rc = ibv_resize_cq(scq, 1);
		CHECK(rc == EINVAL, "round %d: resize to 1 below 3 completions gave %d", round, rc);
		int n = 0;
		end = now() + 5;
		while (n < 3 && now() < end) {
			int k = ibv_poll_cq(scq, 8 - n, wc + n);
			if (k < 0)
				DIE("ibv_poll_cq");
			n += k;
		}
		CHECK(n == 3, "round %d: %d send completions", round, n);
	}
	ibv_destroy_ah(ah);
	ibv_destroy_qp(snd);
	ibv_destroy_qp(rcv);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* What middleware passes and expects as hardware gives it (docs/deviations.md, "Middleware
 * conventions"): a flow label with bits above the 20 of IBA's field (UCX sets ~0 on RoCE
 * paths) is taken, its low 20 bits kept; a UD receive over RoCEv2 from IPv4 reports the L3
 * header type 2 in `sl`, as mlx5 does (UCX reads `sl & 7` to find the address in the GRH
 * area); a CQ as large as mlx5's (4 194 303 entries; libfabric asks 262 144) is created. */
static void middleware_conventions(void)
{
	struct ibv_context *c = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct ibv_device_attr da;
	if (!pd || ibv_query_device(c, &da))
		DIE("setup");
	CHECK(da.max_cqe == 4194303, "max_cqe %d, want mlx5's 4194303", da.max_cqe);
	struct ibv_cq *big = ibv_create_cq(c, 262144, NULL, NULL, 0);
	CHECK(big != NULL && big->cqe >= 262144, "a CQ of 262144 entries: errno %d", errno);
	struct ibv_cq *most = ibv_create_cq(c, da.max_cqe, NULL, NULL, 0);
	CHECK(most != NULL, "a CQ of max_cqe entries: errno %d", errno);
	struct ibv_cq *qa = ibv_create_cq(c, 16, NULL, NULL, 0);
	struct ibv_cq *qb = ibv_create_cq(c, 16, NULL, NULL, 0);
	static char buf[256];
	struct ibv_mr *m = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!qa || !qb || !m)
		DIE("setup");

	union ibv_gid gid;
	if (ibv_query_gid(c, 1, 0, &gid))
		DIE("gid");
	struct ibv_ah_attr aa = {0};
	aa.is_global = 1;
	aa.port_num = 1;
	aa.grh.dgid = gid;
	aa.grh.hop_limit = 64;
	aa.grh.flow_label = 0xffffffff;
	aa.dlid = 0xc000;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah != NULL, "ibv_create_ah with flow_label 0xffffffff: errno %d", errno);

	/* An RC QP's path with the same flow label; query_qp gives its low 20 bits. */
	struct ibv_qp *rc = rc_qp(pd, qa, qa, 1);
	to_init(rc);
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = rc->qp_num;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 12;
	at.ah_attr = aa;
	CHECK(ibv_modify_qp(rc, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					     IBV_QP_MIN_RNR_TIMER) == 0,
	      "RTR with flow_label 0xffffffff: errno %d", errno);
	struct ibv_qp_init_attr ia;
	memset(&at, 0, sizeof(at));
	CHECK(ibv_query_qp(rc, &at, IBV_QP_AV, &ia) == 0 && at.ah_attr.grh.flow_label == 0xfffff,
	      "query_qp flow_label %#x, want 0xfffff", at.ah_attr.grh.flow_label);

	struct ibv_qp *a = ud_qp(c, pd, qa), *b = ud_qp(c, pd, qb);
	struct ibv_sge rs = {(uintptr_t)buf, sizeof(buf), m->lkey};
	struct ibv_recv_wr rw = {.wr_id = 7, .sg_list = &rs, .num_sge = 1}, *rbad;
	if (ibv_post_recv(b, &rw, &rbad))
		DIE("ibv_post_recv");
	static char msg[16] = "datagram";
	struct ibv_mr *mm = ibv_reg_mr(pd, msg, sizeof(msg), IBV_ACCESS_LOCAL_WRITE);
	if (!mm)
		DIE("reg msg");
	struct ibv_send_wr wr = {.wr_id = 8, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *sbad;
	struct ibv_sge ss = {(uintptr_t)msg, 9, mm->lkey};
	wr.sg_list = &ss;
	wr.num_sge = 1;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = b->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	int err = ah ? ibv_post_send(a, &wr, &sbad) : -1;
	if (err == 0) {
		struct ibv_wc wc;
		CHECK(poll_one(qa, &wc, 5.0) && wc.status == IBV_WC_SUCCESS, "sent");
		CHECK(poll_one(qb, &wc, 5.0) && wc.status == IBV_WC_SUCCESS &&
			      (wc.wc_flags & IBV_WC_GRH),
		      "received with a network header");
		CHECK(wc.sl == 2, "sl %u, want 2 (mlx5's L3 header type IPv4)", wc.sl);
		/* UCX's check: the destination address of the IPv4 header ends the GRH area. */
		CHECK(memcmp(buf + 36, &gid.raw[12], 4) == 0, "IPv4 destination at bytes 36..40");
		CHECK(memcmp(buf + 40, "datagram", 9) == 0, "payload");
	} else {
		CHECK(0, "UD send through the AH: %d", err);
	}
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_qp(rc);
	ibv_dereg_mr(mm);
	if (ah)
		ibv_destroy_ah(ah);
	ibv_dereg_mr(m);
	if (big)
		ibv_destroy_cq(big);
	if (most)
		ibv_destroy_cq(most);
	ibv_destroy_cq(qa);
	ibv_destroy_cq(qb);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
}

static void on_app_segv(int sig)
{
	(void)sig;
	_exit(42);
}

/* Registered memory the program unmaps while a receive is posted into it, as UCX does with a
 * UD interface's receive buffers before it destroys the QP (its registration cache
 * deregisters them later). A datagram arriving then is placed into fresh pages where the
 * buffer was, as hardware places it into the pages it pinned, and completes; the process
 * goes on. A fault of the program's own code there is the program's: a child that reads the
 * unmapped buffer dies of SIGSEGV, and one with a SIGSEGV handler of its own gets it. */
static void unmapped_registered_memory(void)
{
	struct ibv_context *c = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct ibv_cq *qa = ibv_create_cq(c, 16, NULL, NULL, 0);
	struct ibv_cq *qb = ibv_create_cq(c, 16, NULL, NULL, 0);
	long page = sysconf(_SC_PAGESIZE);
	size_t len = 4 * (size_t)page;
	char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!pd || !qa || !qb || buf == MAP_FAILED)
		DIE("setup");
	struct ibv_mr *m = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!m)
		DIE("ibv_reg_mr");
	struct ibv_qp *a = ud_qp(c, pd, qa), *b = ud_qp(c, pd, qb);
	/* The receive straddles a page boundary: two pages are written. */
	struct ibv_sge rs = {(uintptr_t)buf + (size_t)page - 20, 256, m->lkey};
	struct ibv_recv_wr rw = {.wr_id = 7, .sg_list = &rs, .num_sge = 1}, *rbad;
	if (ibv_post_recv(b, &rw, &rbad))
		DIE("ibv_post_recv");
	if (munmap(buf, len))
		DIE("munmap");

	/* The program's own access to the unmapped region still faults. */
	pid_t child = fork();
	if (child == 0) {
		volatile char x = buf[(size_t)page];
		(void)x;
		_exit(0);
	}
	int st = 0;
	waitpid(child, &st, 0);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
	      "the program's read of its unmapped buffer: status %#x, want SIGSEGV", st);
	child = fork();
	if (child == 0) {
		signal(SIGSEGV, on_app_segv);
		volatile char x = buf[(size_t)page];
		(void)x;
		_exit(0);
	}
	waitpid(child, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 42,
	      "the program's own SIGSEGV handler: status %#x, want exit 42", st);

	union ibv_gid gid;
	if (ibv_query_gid(c, 1, 0, &gid))
		DIE("gid");
	struct ibv_ah_attr aa = {0};
	aa.is_global = 1;
	aa.port_num = 1;
	aa.grh.dgid = gid;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		DIE("ibv_create_ah");
	static char msg[200];
	memset(msg, 'u', sizeof(msg));
	struct ibv_mr *mm = ibv_reg_mr(pd, msg, sizeof(msg), IBV_ACCESS_LOCAL_WRITE);
	if (!mm)
		DIE("reg msg");
	struct ibv_sge ss = {(uintptr_t)msg, sizeof(msg), mm->lkey};
	struct ibv_send_wr wr = {.wr_id = 8, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *sbad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = b->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	if (ibv_post_send(a, &wr, &sbad))
		DIE("ibv_post_send");
	struct ibv_wc wc;
	CHECK(poll_one(qa, &wc, 5.0) && wc.status == IBV_WC_SUCCESS, "sent");
	CHECK(poll_one(qb, &wc, 5.0) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 &&
		      wc.byte_len == 240,
	      "the receive into the unmapped buffer completes (status %d, %u bytes)", wc.status,
	      wc.byte_len);
	CHECK(memcmp(buf + page + 20, msg, sizeof(msg)) == 0,
	      "the datagram is in the pages mapped where the buffer was");

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_ah(ah);
	ibv_dereg_mr(mm);
	ibv_dereg_mr(m);
	ibv_destroy_cq(qa);
	ibv_destroy_cq(qb);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
}

/* Async events of a destroyed QP, as rdma-core has them (ibv_get_async_event(3)): an event
 * the application has not read yet is never delivered once its QP is destroyed, and
 * ibv_destroy_qp waits until every event of the QP that was read is acknowledged. A QP on an
 * SRQ moved to ERR raises IBV_EVENT_QP_LAST_WQE_REACHED (UCX waits for it at teardown). */
struct destroyer {
	struct ibv_qp *qp;
	volatile int done;
};

static void *destroy_in_thread(void *arg)
{
	struct destroyer *d = arg;
	CHECK(ibv_destroy_qp(d->qp) == 0, "ibv_destroy_qp in a thread");
	d->done = 1;
	return NULL;
}

static void to_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_ERR;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE))
		DIE("ERR");
}

/* The next async event within `secs` (0 if none came). */
static int next_event(struct ibv_context *ctx, struct ibv_async_event *ev, double secs)
{
	double end = now() + secs;
	for (;;) {
		if (ibv_get_async_event(ctx, ev) == 0)
			return 1;
		if (errno != EAGAIN || now() > end)
			return 0;
		struct pollfd p = {ctx->async_fd, POLLIN, 0};
		poll(&p, 1, 10);
	}
}

static void destroyed_qp_events(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
	struct ibv_srq *srq = pd ? ibv_create_srq(pd, &sa) : NULL;
	if (!pd || !cq || !srq)
		DIE("setup");
	int fl = fcntl(ctx->async_fd, F_GETFL);
	if (fl < 0 || fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) < 0)
		DIE("async_fd O_NONBLOCK");
	struct ibv_qp *q[2];
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .srq = srq,
					      .qp_type = IBV_QPT_RC,
					      .cap = {.max_send_wr = 4, .max_send_sge = 1}};
		q[i] = ibv_create_qp(pd, &ia);
		if (!q[i])
			DIE("ibv_create_qp on an SRQ");
		to_init(q[i]);
	}
	struct ibv_async_event ev;

	/* Its event queued, not read: the destroy takes it away. */
	to_err(q[0]);
	struct ibv_qp *gone = q[0];
	CHECK(ibv_destroy_qp(q[0]) == 0, "ibv_destroy_qp");
	/* The event of a QP that lives is delivered: QP 1's comes, and nothing of QP 0's. */
	to_err(q[1]);
	int got1 = 0;
	while (next_event(ctx, &ev, got1 ? 0.2 : 5.0)) {
		CHECK(ev.element.qp != gone, "event %s of a destroyed QP delivered",
		      ibv_event_type_str(ev.event_type));
		if (ev.element.qp == q[1] && ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED) {
			got1 = 1;
			break;
		}
		ibv_ack_async_event(&ev);
	}
	CHECK(got1, "no IBV_EVENT_QP_LAST_WQE_REACHED for the QP on the SRQ moved to ERR");

	/* Read, not acknowledged: the destroy waits for the ack. */
	if (got1) {
		struct destroyer d = {q[1], 0};
		pthread_t t;
		if (pthread_create(&t, NULL, destroy_in_thread, &d))
			DIE("pthread_create");
		usleep(200000);
		CHECK(!d.done, "ibv_destroy_qp returned before its event was acknowledged");
		ibv_ack_async_event(&ev);
		pthread_join(t, NULL);
		CHECK(d.done, "ibv_destroy_qp did not return after the ack");
	} else {
		ibv_destroy_qp(q[1]);
	}
	CHECK(!next_event(ctx, &ev, 0.1), "an async event left: %s",
	      ibv_event_type_str(ev.event_type));
	ibv_destroy_srq(srq);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{"null_objects", null_objects},
	{"double_destroy", double_destroy},
	{"use_after_destroy", use_after_destroy},
	{"atomic_misaligned", atomic_misaligned},
	{"compat_query_port", compat_query_port},
	{"reg_mr_bad_memory", reg_mr_bad_memory},
	{"busy_objects", busy_objects},
	{"bad_modify_qp", bad_modify_qp},
	{"bad_send_wr", bad_send_wr},
	{"bad_extended", bad_extended},
	{"void_verbs_tolerate_null", void_verbs_tolerate_null},
	{"local_protection", local_protection},
	{"recv_side_errors", recv_side_errors},
	{"queue_overflow", queue_overflow},
	{"extended_qp_errors", extended_qp_errors},
	{"bad_create_limits", bad_create_limits},
	{"two_contexts_remote_errors", two_contexts_remote_errors},
	{"close_with_live_objects", close_with_live_objects},
	{"cross_context_objects", cross_context_objects},
	{"bad_query_ranges", bad_query_ranges},
	{"error_state_flushes", error_state_flushes},
	{"destroy_qp_with_outstanding_wrs", destroy_qp_with_outstanding_wrs},
	{"ud_errors", ud_errors},
	{"rates_and_strings", rates_and_strings},
	{"atomic_local_length", atomic_local_length},
	{"huge_num_sge", huge_num_sge},
	{"ud_reply_from_wc", ud_reply_from_wc},
	{"read_sysfs_file", read_sysfs_file},
	{"bad_cq_comp_vector", bad_cq_comp_vector},
	{"create_qp_flags", create_qp_flags},
	{"reset_cleans_cqs", reset_cleans_cqs},
	{"resize_after_posts", resize_after_posts},
	{"middleware_conventions", middleware_conventions},
	{"unmapped_registered_memory", unmapped_registered_memory},
	{"destroyed_qp_events", destroyed_qp_events},
};

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc != 2) {
		fprintf(stderr, "usage: bad_verbs CASE\n");
		return 2;
	}
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (!strcmp(cases[i].name, argv[1])) {
			cases[i].fn();
			printf("%s: %d checks, %d failed\n", argv[1], checks, failures);
			return failures ? 1 : 0;
		}
	}
	fprintf(stderr, "unknown case %s\n", argv[1]);
	return 2;
}
