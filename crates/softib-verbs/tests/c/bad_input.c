/* Bad input to softib's libibverbs.so.1, one case per argv[1]. Built against Debian's
 * rdma-core 44 headers by tests/bad_input.rs and linked with softib's library. A case exits
 * 0 when every bad call got the documented error (or completion status) and the process
 * went on; it prints what went wrong otherwise. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static int failures;

#define CHECK(cond, ...)                                                              \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__,        \
				__LINE__, #cond);                                     \
			fprintf(stderr, __VA_ARGS__);                                 \
			fprintf(stderr, "\n");                                        \
			failures++;                                                   \
		}                                                                     \
	} while (0)

static struct ibv_context *open_ctx(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fprintf(stderr, "no device\n");
		exit(2);
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!ctx) {
		perror("ibv_open_device");
		exit(2);
	}
	return ctx;
}

/* A connected RC pair on one context (the QPs talk to each other through GID 0). */
struct pair {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_qp *a, *b;
};

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq, int max_sge)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = max_sge,
			 .max_recv_sge = max_sge },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp) {
		perror("ibv_create_qp");
		exit(2);
	}
	return qp;
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_ATOMIC };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct ibv_qp *qp, struct ibv_context *ctx, uint32_t dest)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				 .dest_qp_num = dest, .rq_psn = 0, .max_dest_rd_atomic = 4,
				 .min_rnr_timer = 1 };
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.sgid_index = 0;
	a.ah_attr.grh.hop_limit = 64;
	ibv_query_gid(ctx, 1, 0, &a.ah_attr.grh.dgid);
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .timeout = 10, .retry_cnt = 3,
				 .rnr_retry = 3, .sq_psn = 0, .max_rd_atomic = 4 };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					    IBV_QP_MAX_QP_RD_ATOMIC);
}

static void make_pair(struct pair *p, struct ibv_context *ctx, struct ibv_pd *pd)
{
	p->ctx = ctx;
	p->pd = pd;
	p->cq_a = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	p->cq_b = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	p->a = make_qp(pd, p->cq_a, 2);
	p->b = make_qp(pd, p->cq_b, 2);
	if (to_init(p->a) || to_init(p->b) || to_rtr(p->a, ctx, p->b->qp_num) ||
	    to_rtr(p->b, ctx, p->a->qp_num) || to_rts(p->a) || to_rts(p->b)) {
		fprintf(stderr, "cannot connect the pair\n");
		exit(2);
	}
}

static void free_pair(struct pair *p)
{
	ibv_destroy_qp(p->a);
	ibv_destroy_qp(p->b);
	ibv_destroy_cq(p->cq_a);
	ibv_destroy_cq(p->cq_b);
}

/* Polls one completion (up to 5 s); returns 0 and fills wc, or -1. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n == 1)
			return 0;
		if (n < 0)
			return -1;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 5)
			return -1;
	}
}

/* True if no completion arrives within ~100 ms. */
static int stays_empty(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (ibv_poll_cq(cq, 1, &wc) != 0)
			return 0;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > 100000000L)
			return 1;
	}
}

/* ----- cases ------------------------------------------------------------------------ */

static void case_null_objects(void)
{
	struct ibv_qp_attr qa = { 0 };
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	char buf[64];

	errno = 0;
	CHECK(ibv_open_device(NULL) == NULL && errno, "open_device(NULL)");
	errno = 0;
	CHECK(ibv_get_device_name(NULL) == NULL, "get_device_name(NULL)");
	errno = 0;
	CHECK(ibv_close_device(NULL) == -1 && errno == EINVAL, "close_device(NULL)");
	CHECK(ibv_query_device(NULL, &da) != 0, "query_device(NULL)");
	CHECK(ibv_query_gid(NULL, 1, 0, &gid) != 0, "query_gid(NULL)");
	errno = 0;
	CHECK(ibv_alloc_pd(NULL) == NULL && errno == EINVAL, "alloc_pd(NULL): errno %d", errno);
	CHECK(ibv_dealloc_pd(NULL) == EINVAL, "dealloc_pd(NULL)");
	errno = 0;
	CHECK(ibv_reg_mr(NULL, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
	      "reg_mr(NULL pd): errno %d", errno);
	CHECK(ibv_dereg_mr(NULL) == EINVAL, "dereg_mr(NULL)");
	errno = 0;
	CHECK(ibv_create_cq(NULL, 16, NULL, NULL, 0) == NULL && errno == EINVAL,
	      "create_cq(NULL): errno %d", errno);
	CHECK(ibv_destroy_cq(NULL) == EINVAL, "destroy_cq(NULL)");
	errno = 0;
	CHECK(ibv_create_qp(NULL, &ia) == NULL && errno == EINVAL, "create_qp(NULL pd)");
	CHECK(ibv_modify_qp(NULL, &qa, IBV_QP_STATE) == EINVAL, "modify_qp(NULL)");
	CHECK(ibv_query_qp(NULL, &qa, IBV_QP_STATE, &ia) == EINVAL, "query_qp(NULL)");
	CHECK(ibv_destroy_qp(NULL) == EINVAL, "destroy_qp(NULL)");
	CHECK(ibv_destroy_srq(NULL) == EINVAL, "destroy_srq(NULL)");
	CHECK(ibv_destroy_ah(NULL) == EINVAL, "destroy_ah(NULL)");
	CHECK(ibv_destroy_comp_channel(NULL) != 0, "destroy_comp_channel(NULL)");
	errno = 0;
	CHECK(ibv_create_comp_channel(NULL) == NULL && errno == EINVAL, "create_comp_channel(NULL)");

	/* With a real context: NULL attribute pointers. */
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL, "alloc_pd");
	errno = 0;
	CHECK(ibv_create_qp(pd, NULL) == NULL && errno == EINVAL, "create_qp(attr NULL)");
	errno = 0;
	CHECK(ibv_create_ah(pd, NULL) == NULL && errno == EINVAL, "create_ah(attr NULL)");
	CHECK(ibv_query_device(ctx, NULL) != 0, "query_device(attr NULL)");
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "query_port");
	CHECK(ibv_query_port(ctx, 7, &pa) != 0, "query_port(port 7)");
	errno = 0;
	CHECK(ibv_create_cq(ctx, 0, NULL, NULL, 0) == NULL && errno == EINVAL, "create_cq(0)");
	errno = 0;
	CHECK(ibv_create_cq(ctx, -5, NULL, NULL, 0) == NULL && errno == EINVAL, "create_cq(-5)");
	errno = 0;
	CHECK(ibv_reg_mr(pd, NULL, 64, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
	      "reg_mr(addr NULL)");
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL,
	      "reg_mr(remote write without local write): errno %d", errno);
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "close_device");
}

static void case_freed_objects(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = malloc(4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *qp = make_qp(pd, cq, 1);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_qp_attr qa = { 0 };
	struct ibv_qp_init_attr ia;

	/* A PD with objects is busy; a CQ used by a QP is busy; a channel used by a CQ too. */
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc_pd with a QP and an MR");
	CHECK(ibv_destroy_cq(cq) == EBUSY, "destroy_cq used by a QP");
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 4, NULL, ch, 0);
	CHECK(cq2 != NULL, "create_cq on a channel");
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "destroy_comp_channel in use");
	CHECK(ibv_destroy_cq(cq2) == 0, "destroy_cq");

	CHECK(ibv_destroy_qp(qp) == 0, "destroy_qp");
	CHECK(ibv_destroy_qp(qp) == EINVAL, "destroy_qp twice");
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE) == EINVAL, "modify_qp after destroy");
	CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &ia) == EINVAL, "query_qp after destroy");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr");
	CHECK(ibv_dereg_mr(mr) == EINVAL, "dereg_mr twice");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
	CHECK(ibv_destroy_cq(cq) == EINVAL, "destroy_cq twice");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy_comp_channel");
	CHECK(ibv_destroy_comp_channel(ch) != 0, "destroy_comp_channel twice");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	CHECK(ibv_dealloc_pd(pd) == EINVAL, "dealloc_pd twice");
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
	      "reg_mr on a freed PD");
	errno = 0;
	CHECK(ibv_create_cq(ctx, 4, NULL, ch, 0) == NULL && errno == EINVAL,
	      "create_cq on a freed channel");
	CHECK(ibv_close_device(ctx) == 0, "close_device");
	errno = 0;
	CHECK(ibv_close_device(ctx) == -1 && errno == EINVAL,
	      "close_device twice: -1 and errno EINVAL (ibv_open_device(3))");
	errno = 0;
	CHECK(ibv_alloc_pd(ctx) == NULL && errno == EINVAL, "alloc_pd on a closed context");
	free(buf);
}

/* A SEND whose lkey is not the caller's fails locally and sends nothing. */
static void case_foreign_lkey(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *other = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 8192);
	struct ibv_mr *mine = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *theirs = ibv_reg_mr(other, buf + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *gone = ibv_reg_mr(pd, buf + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
	uint32_t gone_lkey = gone->lkey;
	ibv_dereg_mr(gone);
	struct {
		const char *what;
		uint64_t addr;
		uint32_t lkey;
	} cases[] = {
		{ "another PD's region", (uintptr_t)buf + 4096, theirs->lkey },
		{ "a deregistered region", (uintptr_t)buf + 4096, gone_lkey },
		{ "a made-up key", (uintptr_t)buf, 0x7fff12 },
		{ "the right key, outside the region", (uintptr_t)buf + 4000, mine->lkey },
	};
	for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct pair p;
		make_pair(&p, ctx, pd);
		struct ibv_sge rs = { (uintptr_t)buf + 2048, 1024, mine->lkey };
		struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
		CHECK(ibv_post_recv(p.b, &rwr, &rbad) == 0, "post_recv");
		struct ibv_sge s = { cases[i].addr, 200, cases[i].lkey };
		struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &s, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "post_send (%s)", cases[i].what);
		struct ibv_wc wc;
		CHECK(poll_one(p.cq_a, &wc) == 0, "a completion (%s)", cases[i].what);
		CHECK(wc.wr_id == 9 && (wc.status == IBV_WC_LOC_PROT_ERR ||
					wc.status == IBV_WC_LOC_LEN_ERR),
		      "%s: status %s", cases[i].what, ibv_wc_status_str(wc.status));
		CHECK(stays_empty(p.cq_b), "%s: the peer received something", cases[i].what);
		free_pair(&p);
	}
	ibv_dereg_mr(mine);
	ibv_dereg_mr(theirs);
	ibv_dealloc_pd(pd);
	ibv_dealloc_pd(other);
	ibv_close_device(ctx);
	free(buf);
}

static void case_wrong_state_post(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *qp = make_qp(pd, cq, 1);
	struct ibv_sge s = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &s, .num_sge = 1,
				  .opcode = IBV_WR_SEND }, *bad = NULL;
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &s, .num_sge = 1 }, *rbad = NULL;

	CHECK(ibv_post_send(qp, &wr, &bad) != 0 && bad == &wr, "post_send in RESET");
	rbad = NULL;
	CHECK(ibv_post_recv(qp, &rwr, &rbad) != 0 && rbad == &rwr, "post_recv in RESET");
	CHECK(to_init(qp) == 0, "to INIT");
	bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) != 0 && bad == &wr, "post_send in INIT");
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == 0, "post_recv in INIT");
	CHECK(to_rtr(qp, ctx, qp->qp_num) == 0, "to RTR");
	bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) != 0 && bad == &wr, "post_send in RTR");
	/* An invalid transition is refused and the state stays. */
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "RTR -> INIT");
	struct ibv_qp_init_attr ia;
	CHECK(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) == 0 && a.qp_state == IBV_QPS_RTR,
	      "state after a refused transition: %d", a.qp_state);
	CHECK(qp->state == IBV_QPS_RTR, "qp->state %d", qp->state);
	/* A bad enum value. */
	a.qp_state = 42;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "qp_state 42");
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
}

static void case_oversized_sge_list(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct pair p;
	make_pair(&p, ctx, pd);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;
	ibv_query_qp(p.a, &qa, IBV_QP_CAP, &ia);
	int n = ia.cap.max_send_sge + 1;
	struct ibv_sge *sges = calloc(n + 64, sizeof *sges);
	for (int i = 0; i < n + 64; i++)
		sges[i] = (struct ibv_sge){ (uintptr_t)buf + i, 1, mr->lkey };
	struct ibv_send_wr ok = { .wr_id = 1, .sg_list = sges, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr big = { .wr_id = 2, .sg_list = sges, .num_sge = n,
				   .opcode = IBV_WR_SEND };
	ok.next = &big;
	struct ibv_send_wr *bad = NULL;
	struct ibv_recv_wr rwr = { .wr_id = 3, .sg_list = sges, .num_sge = 1 }, *rbad;
	ibv_post_recv(p.b, &rwr, &rbad);
	int rc = ibv_post_send(p.a, &ok, &bad);
	CHECK(rc == EINVAL || rc == ENOMEM, "post_send with %d SGEs (max %u): rc %d", n,
	      ia.cap.max_send_sge, rc);
	CHECK(bad == &big, "bad_wr points at the oversized WR");
	/* The WR before it was posted and completes. */
	struct ibv_wc wc;
	CHECK(poll_one(p.cq_a, &wc) == 0 && wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS,
	      "the first WR completes");
	big.num_sge = n + 60;
	bad = NULL;
	CHECK(ibv_post_send(p.a, &big, &bad) != 0 && bad == &big, "far too many SGEs");
	big.num_sge = -1;
	bad = NULL;
	CHECK(ibv_post_send(p.a, &big, &bad) != 0 && bad == &big, "num_sge -1");
	struct ibv_recv_wr rbig = { .wr_id = 4, .sg_list = sges, .num_sge = ia.cap.max_recv_sge + 1 };
	rbad = NULL;
	CHECK(ibv_post_recv(p.b, &rbig, &rbad) != 0 && rbad == &rbig, "post_recv too many SGEs");
	free_pair(&p);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	free(sges);
}

/* RDMA WRITE / READ / atomics the target region does not allow: the requester gets a
 * remote error, the bytes around and in the region are unchanged. */
static void case_remote_outside_region(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	enum { GUARD = 4096, LEN = 4096 };
	unsigned char *target = malloc(GUARD + LEN + GUARD);
	memset(target, 0xA5, GUARD + LEN + GUARD);
	unsigned char *before = malloc(GUARD + LEN + GUARD);
	memcpy(before, target, GUARD + LEN + GUARD);
	struct ibv_mr *rw = ibv_reg_mr(pd, target + GUARD, LEN,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	struct ibv_mr *ro = ibv_reg_mr(pd, target + GUARD, LEN, IBV_ACCESS_LOCAL_WRITE);
	unsigned char *src = calloc(1, 8192);
	memset(src, 0x5A, 8192);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, 8192, IBV_ACCESS_LOCAL_WRITE);
	uintptr_t base = (uintptr_t)target + GUARD;
	struct {
		const char *what;
		enum ibv_wr_opcode op;
		uint64_t addr;
		uint32_t rkey;
		uint32_t len;
	} cases[] = {
		{ "WRITE past the end", IBV_WR_RDMA_WRITE, base + LEN - 100, rw->rkey, 200 },
		{ "WRITE before the start", IBV_WR_RDMA_WRITE, base - 100, rw->rkey, 200 },
		{ "WRITE with a wrong rkey", IBV_WR_RDMA_WRITE, base, rw->rkey ^ 0x100, 64 },
		{ "WRITE without REMOTE_WRITE", IBV_WR_RDMA_WRITE, base, ro->rkey, 64 },
		{ "WRITE with the lkey as rkey", IBV_WR_RDMA_WRITE, base, rw->lkey, 64 },
		{ "WRITE of 2^32-1 bytes", IBV_WR_RDMA_WRITE, base, rw->rkey, 8000 },
		{ "READ without REMOTE_READ", IBV_WR_RDMA_READ, base, ro->rkey, 64 },
		{ "READ past the end", IBV_WR_RDMA_READ, base + LEN - 10, rw->rkey, 64 },
		{ "FETCH_ADD without REMOTE_ATOMIC", IBV_WR_ATOMIC_FETCH_AND_ADD, base, ro->rkey, 8 },
		{ "CMP_SWP past the end", IBV_WR_ATOMIC_CMP_AND_SWP, base + LEN, rw->rkey, 8 },
	};
	for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct pair p;
		make_pair(&p, ctx, pd);
		struct ibv_sge s = { (uintptr_t)src, cases[i].len, smr->lkey };
		struct ibv_send_wr wr = { .wr_id = 100 + i, .sg_list = &s, .num_sge = 1,
					  .opcode = cases[i].op,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		if (cases[i].op == IBV_WR_ATOMIC_FETCH_AND_ADD ||
		    cases[i].op == IBV_WR_ATOMIC_CMP_AND_SWP) {
			wr.wr.atomic.remote_addr = cases[i].addr;
			wr.wr.atomic.rkey = cases[i].rkey;
			wr.wr.atomic.compare_add = 1;
			wr.wr.atomic.swap = 2;
		} else {
			wr.wr.rdma.remote_addr = cases[i].addr;
			wr.wr.rdma.rkey = cases[i].rkey;
		}
		CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "post_send (%s)", cases[i].what);
		struct ibv_wc wc;
		CHECK(poll_one(p.cq_a, &wc) == 0, "a completion (%s)", cases[i].what);
		CHECK(wc.wr_id == 100 + i && (wc.status == IBV_WC_REM_ACCESS_ERR ||
					      wc.status == IBV_WC_REM_INV_REQ_ERR),
		      "%s: status %s", cases[i].what, ibv_wc_status_str(wc.status));
		free_pair(&p);
		CHECK(memcmp(target, before, GUARD + LEN + GUARD) == 0,
		      "%s: bytes changed in or around the region", cases[i].what);
	}
	/* A misaligned atomic is an invalid request. */
	{
		struct pair p;
		make_pair(&p, ctx, pd);
		struct ibv_sge s = { (uintptr_t)src, 8, smr->lkey };
		struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &s, .num_sge = 1,
					  .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad = NULL;
		wr.wr.atomic.remote_addr = base + 3;
		wr.wr.atomic.rkey = rw->rkey;
		wr.wr.atomic.compare_add = 1;
		int rc = ibv_post_send(p.a, &wr, &bad);
		if (rc == 0) {
			struct ibv_wc wc;
			CHECK(poll_one(p.cq_a, &wc) == 0 && wc.status != IBV_WC_SUCCESS,
			      "misaligned atomic completed with %s", ibv_wc_status_str(wc.status));
		} else {
			CHECK(bad == &wr, "misaligned atomic refused without bad_wr");
		}
		free_pair(&p);
		CHECK(memcmp(target, before, GUARD + LEN + GUARD) == 0,
		      "misaligned atomic: bytes changed");
	}
	/* And the region still works for a good WRITE. */
	{
		struct pair p;
		make_pair(&p, ctx, pd);
		struct ibv_sge s = { (uintptr_t)src, 64, smr->lkey };
		struct ibv_send_wr wr = { .wr_id = 8, .sg_list = &s, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		wr.wr.rdma.remote_addr = base + 10;
		wr.wr.rdma.rkey = rw->rkey;
		CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "good WRITE posted");
		struct ibv_wc wc;
		CHECK(poll_one(p.cq_a, &wc) == 0 && wc.status == IBV_WC_SUCCESS,
		      "good WRITE: %s", ibv_wc_status_str(wc.status));
		memset(before + GUARD + 10, 0x5A, 64);
		CHECK(memcmp(target, before, GUARD + LEN + GUARD) == 0,
		      "good WRITE: exactly its 64 bytes changed");
		free_pair(&p);
	}
	ibv_dereg_mr(rw);
	ibv_dereg_mr(ro);
	ibv_dereg_mr(smr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(target);
	free(before);
	free(src);
}

/* Completion channels and the async fd are real descriptors: poll(2) wakes on them, a
 * non-blocking read fails with EAGAIN, and the events name the right objects. */
static void case_events(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch && ch->fd >= 0, "a channel with a descriptor");
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK on the channel");
	struct ibv_cq *cq_b = ibv_create_cq(ctx, 16, (void *)0x1234, ch, 0);
	struct pair p;
	make_pair(&p, ctx, pd);
	/* Re-make b on the channel's CQ. */
	ibv_destroy_qp(p.b);
	ibv_destroy_qp(p.a);
	p.a = make_qp(pd, p.cq_a, 1);
	p.b = make_qp(pd, cq_b, 1);
	CHECK(!to_init(p.a) && !to_init(p.b) && !to_rtr(p.a, ctx, p.b->qp_num) &&
	      !to_rtr(p.b, ctx, p.a->qp_num) && !to_rts(p.a) && !to_rts(p.b), "connect");
	struct ibv_cq *got_cq = NULL;
	void *got_ctx = NULL;
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &got_cq, &got_ctx) == -1 && errno == EAGAIN,
	      "no event yet: EAGAIN (errno %d)", errno);
	CHECK(ibv_req_notify_cq(cq_b, 0) == 0, "req_notify_cq");
	struct ibv_sge rs = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(p.b, &rwr, &rbad) == 0, "post_recv");
	struct ibv_sge ss = { (uintptr_t)buf + 1024, 64, mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &ss, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *sbad;
	CHECK(ibv_post_send(p.a, &swr, &sbad) == 0, "post_send");
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 5000) == 1 && (pfd.revents & POLLIN), "poll wakes on the channel");
	CHECK(ibv_get_cq_event(ch, &got_cq, &got_ctx) == 0 && got_cq == cq_b &&
	      got_ctx == (void *)0x1234, "the event names the CQ and its context");
	ibv_ack_cq_events(cq_b, 1);
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq_b, 1, &wc) == 1 && wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS,
	      "the receive completion");
	CHECK(poll_one(p.cq_a, &wc) == 0 && wc.status == IBV_WC_SUCCESS, "the send completion");

	/* An overrun CQ raises IBV_EVENT_CQ_ERR on the async fd. */
	struct ibv_cq *tiny = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	struct ibv_qp *q = make_qp(pd, tiny, 1);
	CHECK(to_init(q) == 0, "to INIT");
	for (int i = 0; i < 4; i++) {
		struct ibv_recv_wr r = { .wr_id = 10 + i, .sg_list = &rs, .num_sge = 1 };
		ibv_post_recv(q, &r, &rbad);
	}
	struct ibv_qp_attr ea = { .qp_state = IBV_QPS_ERR };
	CHECK(ibv_modify_qp(q, &ea, IBV_QP_STATE) == 0, "to ERR (flushes 4 receives into 1 slot)");
	fl = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	pfd.fd = ctx->async_fd;
	CHECK(poll(&pfd, 1, 5000) == 1, "poll wakes on the async fd");
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(ctx, &ev) == 0 && ev.event_type == IBV_EVENT_CQ_ERR &&
	      ev.element.cq == tiny, "IBV_EVENT_CQ_ERR for the overrun CQ (got %d)", ev.event_type);
	ibv_ack_async_event(&ev);
	errno = 0;
	CHECK(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN, "no second event: EAGAIN");
	ibv_destroy_qp(q);
	ibv_destroy_cq(tiny);
	ibv_destroy_qp(p.a);
	ibv_destroy_qp(p.b);
	ibv_destroy_cq(p.cq_a);
	ibv_destroy_cq(p.cq_b);
	ibv_destroy_cq(cq_b);
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy_comp_channel");
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
}

/* fork() after ibv_fork_init: the child may not use its parent's objects (they fail with
 * EINVAL, the parent's engine untouched), opens its own device and moves data; the parent's
 * connection still works afterwards. */
static void case_fork(void)
{
	CHECK(ibv_fork_init() == 0, "ibv_fork_init");
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "ibv_is_fork_initialized");
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE |
						    IBV_ACCESS_REMOTE_WRITE);
	struct pair p;
	make_pair(&p, ctx, pd);
	pid_t child = fork();
	if (child == 0) {
		int bad = 0;
		if (ibv_dealloc_pd(pd) != EINVAL)
			bad++;
		errno = 0;
		if (ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE) != NULL || errno != EINVAL)
			bad++;
		struct ibv_context *c2 = open_ctx();
		struct ibv_pd *pd2 = ibv_alloc_pd(c2);
		struct ibv_mr *mr2 = ibv_reg_mr(pd2, buf, 8192, IBV_ACCESS_LOCAL_WRITE |
								 IBV_ACCESS_REMOTE_WRITE);
		struct pair q;
		make_pair(&q, c2, pd2);
		memset(buf, 7, 64);
		struct ibv_sge s = { (uintptr_t)buf, 64, mr2->lkey };
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED },
				   *wb;
		w.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
		w.wr.rdma.rkey = mr2->rkey;
		struct ibv_wc wc;
		if (ibv_post_send(q.a, &w, &wb) || poll_one(q.cq_a, &wc) || wc.status ||
		    buf[4096 + 63] != 7)
			bad++;
		_exit(bad ? 1 : 0);
	}
	int st = 0;
	CHECK(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the child's checks (status %d)", st);
	memset(buf, 9, 64);
	struct ibv_sge s = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_send_wr w = { .wr_id = 2, .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED },
			   *wb;
	w.wr.rdma.remote_addr = (uintptr_t)buf + 2048;
	w.wr.rdma.rkey = mr->rkey;
	struct ibv_wc wc;
	CHECK(ibv_post_send(p.a, &w, &wb) == 0 && poll_one(p.cq_a, &wc) == 0 &&
	      wc.status == IBV_WC_SUCCESS && buf[2048 + 63] == 9,
	      "the parent's connection after the fork");
	free_pair(&p);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
}

/* Several threads drive QPs of one context at once (libibverbs is thread-safe): each moves
 * 2000 checked SENDs over its own connection. */
struct worker {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int id;
	int bad;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct pair p;
	make_pair(&p, w->ctx, w->pd);
	unsigned char *buf = calloc(1, 8192);
	struct ibv_mr *mr = ibv_reg_mr(w->pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 2000 && !w->bad; i++) {
		struct ibv_sge rs = { (uintptr_t)buf + 4096, 256, mr->lkey };
		struct ibv_recv_wr r = { .wr_id = i, .sg_list = &rs, .num_sge = 1 }, *rb;
		if (ibv_post_recv(p.b, &r, &rb)) {
			w->bad++;
			break;
		}
		for (int k = 0; k < 256; k++)
			buf[k] = (unsigned char)(w->id * 31 + i + k);
		struct ibv_sge ss = { (uintptr_t)buf, 256, mr->lkey };
		struct ibv_send_wr s = { .wr_id = i, .sg_list = &ss, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *sb;
		struct ibv_wc wc;
		if (ibv_post_send(p.a, &s, &sb) || poll_one(p.cq_a, &wc) || wc.status ||
		    poll_one(p.cq_b, &wc) || wc.status || wc.byte_len != 256 ||
		    memcmp(buf, buf + 4096, 256))
			w->bad++;
	}
	free_pair(&p);
	ibv_dereg_mr(mr);
	free(buf);
	return NULL;
}

static void case_threads(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	enum { N = 4 };
	struct worker w[N];
	pthread_t t[N];
	for (int i = 0; i < N; i++) {
		w[i] = (struct worker){ ctx, pd, i, 0 };
		pthread_create(&t[i], NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		CHECK(w[i].bad == 0, "thread %d: %d bad exchanges", i, w[i].bad);
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CASE\n", argv[0]);
		return 2;
	}
	const char *c = argv[1];
	if (!strcmp(c, "null_objects"))
		case_null_objects();
	else if (!strcmp(c, "freed_objects"))
		case_freed_objects();
	else if (!strcmp(c, "foreign_lkey"))
		case_foreign_lkey();
	else if (!strcmp(c, "wrong_state_post"))
		case_wrong_state_post();
	else if (!strcmp(c, "oversized_sge_list"))
		case_oversized_sge_list();
	else if (!strcmp(c, "remote_outside_region"))
		case_remote_outside_region();
	else if (!strcmp(c, "events"))
		case_events();
	else if (!strcmp(c, "fork"))
		case_fork();
	else if (!strcmp(c, "threads"))
		case_threads();
	else {
		fprintf(stderr, "unknown case %s\n", c);
		return 2;
	}
	if (failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", c, failures);
		return 1;
	}
	printf("%s: ok\n", c);
	return 0;
}
