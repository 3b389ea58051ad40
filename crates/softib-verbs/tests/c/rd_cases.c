/*
 * RD through softib's C extension <softib/rd.h>: reliable datagram domains
 * (softib_alloc_rdd / softib_dealloc_rdd), EE contexts (softib_create_eec, softib_modify_eec,
 * softib_query_eec, softib_eec_num, softib_destroy_eec) and RD QPs (softib_create_rd_qp, then
 * the ordinary ibv_modify_qp / ibv_query_qp / ibv_post_recv / ibv_post_send / ibv_destroy_qp
 * and a CQ), with the errno of every bad call. Built by tests/rd_cases.rs against the
 * installed <infiniband/verbs.h> and crates/softib-verbs/include, linked with -libverbs and
 * run on softib's libibverbs.so.1. `rd_cases CASE` runs one case; it exits 0 only if every
 * check held. Every failed check is printed (function:line, what was expected).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <softib/rd.h>

static int failures;
static int checks;

#define CHECK(cond, ...)                                                              \
	do {                                                                              \
		checks++;                                                                     \
		if (!(cond)) {                                                                \
			failures++;                                                               \
			fprintf(stderr, "FAIL %s:%d: %s: ", __func__, __LINE__, #cond);          \
			fprintf(stderr, __VA_ARGS__);                                             \
			fprintf(stderr, "\n");                                                    \
		}                                                                             \
	} while (0)

#define DIE(...)                                                                      \
	do {                                                                              \
		fprintf(stderr, "SETUP FAILED %s:%d: ", __func__, __LINE__);                 \
		fprintf(stderr, __VA_ARGS__);                                                 \
		fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno));                  \
		exit(2);                                                                      \
	} while (0)

/* A pointer-returning call failed with exactly errno `want`. */
#define CHECK_NULL_ERRNO(expr, want)                                                  \
	do {                                                                              \
		errno = 0;                                                                    \
		void *p_ = (void *)(expr);                                                    \
		int e_ = errno;                                                               \
		CHECK(p_ == NULL && e_ == (want), "%s gave %p errno %d (%s), want NULL and %s", \
		      #expr, p_, e_, strerror(e_), #want);                                   \
	} while (0)

/* An int call that returns 0 or the errno value gave exactly `want`; on failure errno is
 * the same value. */
#define CHECK_RET(expr, want)                                                         \
	do {                                                                              \
		errno = 0;                                                                    \
		int r_ = (expr);                                                              \
		int e_ = errno;                                                               \
		CHECK(r_ == (want) && (r_ == 0 || e_ == r_),                                  \
		      "%s returned %d (%s) errno %d, want %s", #expr, r_,                     \
		      r_ > 0 ? strerror(r_) : "", e_, #want);                                \
	} while (0)

/* A data-path call (ibv_post_*) returned exactly `want` (they return the value only). */
#define CHECK_POST(expr, want)                                                        \
	do {                                                                              \
		int r_ = (expr);                                                              \
		CHECK(r_ == (want), "%s returned %d (%s), want %s", #expr, r_,                \
		      r_ > 0 ? strerror(r_) : "", #want);                                    \
	} while (0)

static struct ibv_context *open_ctx(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		DIE("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		DIE("ibv_open_device");
	ibv_free_device_list(list);
	return ctx;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Polls one completion within `secs`; 1 if one came. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, double secs)
{
	double end = now() + secs;
	while (now() < end) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			DIE("ibv_poll_cq %d", n);
		if (n == 1)
			return 1;
		usleep(100);
	}
	return 0;
}

static int eec_state(struct softib_eec *e)
{
	struct ibv_qp_attr a;
	memset(&a, 0xee, sizeof(a));
	if (softib_query_eec(e, &a))
		return -1;
	return a.qp_state;
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return a.qp_state;
}

/* The attributes of each step of an EE context's walk to RTS; `remote` is the peer's EECN. */
static struct ibv_qp_attr eec_init_attr(void)
{
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	return a;
}
#define EEC_INIT_MASK (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT)

static struct ibv_qp_attr eec_rtr_attr(struct ibv_context *ctx, uint32_t remote)
{
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		DIE("ibv_query_gid");
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = remote;
	a.rq_psn = 0x1234;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	return a;
}
#define EEC_RTR_MASK                                                                  \
	(IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |   \
	 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)

static struct ibv_qp_attr eec_rts_attr(void)
{
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x5678;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 6;
	a.max_rd_atomic = 1;
	return a;
}
#define EEC_RTS_MASK                                                                  \
	(IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |               \
	 IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)

/* RESET -> INIT -> RTR -> RTS; 0 if every step succeeded. */
static int eec_to_rts(struct ibv_context *ctx, struct softib_eec *e, uint32_t remote)
{
	struct ibv_qp_attr a = eec_init_attr();
	if (softib_modify_eec(e, &a, EEC_INIT_MASK))
		return -1;
	a = eec_rtr_attr(ctx, remote);
	if (softib_modify_eec(e, &a, EEC_RTR_MASK))
		return -2;
	a = eec_rts_attr();
	if (softib_modify_eec(e, &a, EEC_RTS_MASK))
		return -3;
	return 0;
}

static struct ibv_qp_init_attr rd_init_attr(struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr ia = {0};
	ia.qp_type = SOFTIB_QPT_RD;
	ia.send_cq = scq;
	ia.recv_cq = rcq;
	ia.cap.max_send_wr = 8;
	ia.cap.max_recv_wr = 8;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	return ia;
}

/* RESET -> INIT -> RTR -> RTS of an RD QP with its Q_Key; 0 if every step succeeded. */
static int rd_qp_to_rts(struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qkey = qkey;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -2;
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -3;
	return 0;
}

/* ----- cases ---------------------------------------------------------------------------- */

/* Domains and the life cycle of every object: NULL, never handed out, of another kind,
 * destroyed; a busy domain. */
static void domains(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		DIE("ibv_alloc_pd");
	/* Memory softib never handed out, zeroed and not. */
	static uint64_t junk[64];
	memset(junk, 0x5a, sizeof(junk));

	CHECK_NULL_ERRNO(softib_alloc_rdd(NULL), EINVAL);
	CHECK_NULL_ERRNO(softib_alloc_rdd((struct ibv_context *)junk), EINVAL);
	CHECK_NULL_ERRNO(softib_alloc_rdd((struct ibv_context *)pd), EINVAL);

	struct softib_rdd *r1 = softib_alloc_rdd(ctx);
	struct softib_rdd *r2 = softib_alloc_rdd(ctx);
	CHECK(r1 && r2 && r1 != r2, "two domains: %p %p errno %d", (void *)r1, (void *)r2,
	      errno);
	if (!r1 || !r2)
		DIE("softib_alloc_rdd");

	CHECK_RET(softib_dealloc_rdd(NULL), EINVAL);
	CHECK_RET(softib_dealloc_rdd((struct softib_rdd *)junk), EINVAL);
	CHECK_RET(softib_dealloc_rdd((struct softib_rdd *)pd), EINVAL);

	CHECK_NULL_ERRNO(softib_create_eec(NULL), EINVAL);
	CHECK_NULL_ERRNO(softib_create_eec((struct softib_rdd *)junk), EINVAL);
	CHECK_NULL_ERRNO(softib_create_eec((struct softib_rdd *)ctx), EINVAL);

	struct softib_eec *e1 = softib_create_eec(r1);
	struct softib_eec *e2 = softib_create_eec(r1);
	struct softib_eec *e3 = softib_create_eec(r2);
	CHECK(e1 && e2 && e3, "three EE contexts: errno %d", errno);
	if (!e1 || !e2 || !e3)
		DIE("softib_create_eec");
	uint32_t n1 = softib_eec_num(e1), n2 = softib_eec_num(e2), n3 = softib_eec_num(e3);
	CHECK(n1 && n2 && n3 && n1 != n2 && n1 != n3 && n2 != n3,
	      "distinct non-zero EECNs: %u %u %u", n1, n2, n3);
	CHECK(n1 < (1u << 24) && n2 < (1u << 24) && n3 < (1u << 24), "24-bit EECNs: %u %u %u",
	      n1, n2, n3);
	CHECK(eec_state(e1) == IBV_QPS_RESET, "a new EE context is in RESET: %d", eec_state(e1));

	errno = 0;
	CHECK(softib_eec_num(NULL) == 0 && errno == EINVAL, "eec_num(NULL): errno %d", errno);
	errno = 0;
	CHECK(softib_eec_num((struct softib_eec *)junk) == 0 && errno == EINVAL,
	      "eec_num(junk): errno %d", errno);
	errno = 0;
	CHECK(softib_eec_num((struct softib_eec *)r1) == 0 && errno == EINVAL,
	      "eec_num(a domain): errno %d", errno);

	/* A domain with EE contexts is busy; objects of one kind are not the other. */
	CHECK_RET(softib_dealloc_rdd(r1), EBUSY);
	CHECK_RET(softib_dealloc_rdd(r2), EBUSY);
	CHECK_RET(softib_dealloc_rdd((struct softib_rdd *)e3), EINVAL);
	CHECK_RET(softib_destroy_eec((struct softib_eec *)r2), EINVAL);
	CHECK_RET(softib_destroy_eec(NULL), EINVAL);
	CHECK_RET(softib_destroy_eec((struct softib_eec *)junk), EINVAL);
	struct ibv_qp_attr a;
	CHECK_RET(softib_query_eec(NULL, &a), EINVAL);
	CHECK_RET(softib_query_eec((struct softib_eec *)r1, &a), EINVAL);
	CHECK_RET(softib_query_eec(e1, NULL), EINVAL);
	a = eec_init_attr();
	CHECK_RET(softib_modify_eec(NULL, &a, EEC_INIT_MASK), EINVAL);
	CHECK_RET(softib_modify_eec((struct softib_eec *)junk, &a, EEC_INIT_MASK), EINVAL);
	CHECK_RET(softib_modify_eec(e1, NULL, EEC_INIT_MASK), EINVAL);
	CHECK(eec_state(e1) == IBV_QPS_RESET, "still RESET: %d", eec_state(e1));

	/* Destroyed EE context: every call refuses it. */
	CHECK_RET(softib_destroy_eec(e3), 0);
	CHECK_RET(softib_destroy_eec(e3), EINVAL);
	CHECK_RET(softib_query_eec(e3, &a), EINVAL);
	a = eec_init_attr();
	CHECK_RET(softib_modify_eec(e3, &a, EEC_INIT_MASK), EINVAL);
	errno = 0;
	CHECK(softib_eec_num(e3) == 0 && errno == EINVAL, "eec_num(destroyed): errno %d", errno);
	/* The others are untouched. */
	CHECK(softib_eec_num(e1) == n1 && softib_eec_num(e2) == n2, "the others keep %u %u",
	      softib_eec_num(e1), softib_eec_num(e2));

	/* r2 is empty now; r1 still holds two. */
	CHECK_RET(softib_dealloc_rdd(r2), 0);
	CHECK_RET(softib_dealloc_rdd(r2), EINVAL);
	CHECK_NULL_ERRNO(softib_create_eec(r2), EINVAL);
	CHECK_RET(softib_destroy_eec(e1), 0);
	CHECK_RET(softib_dealloc_rdd(r1), EBUSY);
	/* An EE context in RTS is destroyed as well. */
	CHECK(eec_to_rts(ctx, e2, n1) == 0, "e2 to RTS: errno %d", errno);
	CHECK_RET(softib_destroy_eec(e2), 0);
	CHECK_RET(softib_dealloc_rdd(r1), 0);
	CHECK_RET(softib_dealloc_rdd(r1), EINVAL);

	/* A closed context makes no domain. */
	CHECK_RET(ibv_dealloc_pd(pd), 0);
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	CHECK_NULL_ERRNO(softib_alloc_rdd(ctx), EINVAL);
}

/* The EE context state walk RESET -> INIT -> RTR -> RTS -> ERR -> RESET between two EE
 * contexts naming each other, each step's attributes read back, and every refused modify
 * (missing, disallowed, out-of-range attributes; illegal transitions) leaving the state as
 * it was. */
static void eec_states(void)
{
	struct ibv_context *ctx = open_ctx();
	struct softib_rdd *rdd = softib_alloc_rdd(ctx);
	if (!rdd)
		DIE("softib_alloc_rdd");
	struct softib_eec *e = softib_create_eec(rdd);
	struct softib_eec *peer = softib_create_eec(rdd);
	if (!e || !peer)
		DIE("softib_create_eec");
	uint32_t me = softib_eec_num(e), remote = softib_eec_num(peer);
	struct ibv_qp_attr a, q;

	/* RESET: illegal targets, and INIT with missing or disallowed attributes. */
	a = eec_rtr_attr(ctx, remote);
	CHECK_RET(softib_modify_eec(e, &a, EEC_RTR_MASK), EINVAL); /* RESET -> RTR */
	a = eec_rts_attr();
	CHECK_RET(softib_modify_eec(e, &a, EEC_RTS_MASK), EINVAL); /* RESET -> RTS */
	a.qp_state = IBV_QPS_ERR;
	CHECK_RET(softib_modify_eec(e, &a, IBV_QP_STATE), EINVAL); /* RESET -> ERR */
	a = eec_init_attr();
	CHECK_RET(softib_modify_eec(e, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX), EINVAL);
	CHECK_RET(softib_modify_eec(e, &a, IBV_QP_STATE | IBV_QP_PORT), EINVAL);
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	CHECK_RET(softib_modify_eec(e, &a, EEC_INIT_MASK | IBV_QP_ACCESS_FLAGS), EINVAL);
	a = eec_init_attr();
	CHECK_RET(softib_modify_eec(e, &a, EEC_INIT_MASK | IBV_QP_QKEY), EINVAL);
	a.port_num = 2; /* the device has one port */
	CHECK_RET(softib_modify_eec(e, &a, EEC_INIT_MASK), EINVAL);
	a = eec_init_attr();
	a.qp_state = (enum ibv_qp_state)42;
	CHECK_RET(softib_modify_eec(e, &a, EEC_INIT_MASK), EINVAL);
	a = eec_init_attr();
	CHECK_RET(softib_modify_eec(e, &a, EEC_INIT_MASK | (1 << 30)), EINVAL);
	CHECK_RET(softib_modify_eec(e, &a, -1), EINVAL);
	CHECK(eec_state(e) == IBV_QPS_RESET, "refused modifies leave RESET: %d", eec_state(e));

	/* RESET -> INIT. */
	a = eec_init_attr();
	CHECK_RET(softib_modify_eec(e, &a, EEC_INIT_MASK), 0);
	memset(&q, 0xee, sizeof(q));
	CHECK_RET(softib_query_eec(e, &q), 0);
	CHECK(q.qp_state == IBV_QPS_INIT && q.port_num == 1 && q.pkey_index == 0,
	      "INIT: state %d port %u pkey_index %u", q.qp_state, q.port_num, q.pkey_index);
	CHECK(q.qkey == 0 && q.qp_access_flags == 0 && q.cap.max_send_wr == 0,
	      "no Q_Key, access flags or queues: %u %u %u", q.qkey, q.qp_access_flags,
	      q.cap.max_send_wr);

	/* INIT -> RTR: each required attribute missing, a bad value. */
	static const int rtr_required[] = {IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_DEST_QPN,
					   IBV_QP_RQ_PSN, IBV_QP_MAX_DEST_RD_ATOMIC,
					   IBV_QP_MIN_RNR_TIMER};
	for (unsigned k = 0; k < sizeof(rtr_required) / sizeof(rtr_required[0]); k++) {
		a = eec_rtr_attr(ctx, remote);
		CHECK_RET(softib_modify_eec(e, &a, EEC_RTR_MASK & ~rtr_required[k]), EINVAL);
	}
	a = eec_rtr_attr(ctx, remote);
	CHECK_RET(softib_modify_eec(e, &a, EEC_RTR_MASK | IBV_QP_ACCESS_FLAGS), EINVAL);
	CHECK_RET(softib_modify_eec(e, &a, EEC_RTR_MASK | IBV_QP_SQ_PSN), EINVAL);
	a.dest_qp_num = 1u << 24; /* EECNs have 24 bits */
	CHECK_RET(softib_modify_eec(e, &a, EEC_RTR_MASK), EINVAL);
	a = eec_rtr_attr(ctx, remote);
	a.path_mtu = (enum ibv_mtu)9;
	CHECK_RET(softib_modify_eec(e, &a, EEC_RTR_MASK), EINVAL);
	/* Above the port's active MTU (the runner caps it at 1024 with SOFTIB_MTU). */
	struct ibv_port_attr pa;
	if (ibv_query_port(ctx, 1, &pa))
		DIE("ibv_query_port");
	CHECK(pa.active_mtu == IBV_MTU_1024, "active MTU %d (SOFTIB_MTU=1024)", pa.active_mtu);
	a = eec_rtr_attr(ctx, remote);
	a.path_mtu = IBV_MTU_2048;
	CHECK_RET(softib_modify_eec(e, &a, EEC_RTR_MASK), EINVAL);
	a = eec_rts_attr();
	CHECK_RET(softib_modify_eec(e, &a, EEC_RTS_MASK), EINVAL); /* INIT -> RTS */
	CHECK(eec_state(e) == IBV_QPS_INIT, "refused modifies leave INIT: %d", eec_state(e));

	a = eec_rtr_attr(ctx, remote);
	CHECK_RET(softib_modify_eec(e, &a, EEC_RTR_MASK), 0);
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 0, &gid);
	memset(&q, 0xee, sizeof(q));
	CHECK_RET(softib_query_eec(e, &q), 0);
	CHECK(q.qp_state == IBV_QPS_RTR && q.dest_qp_num == remote && q.path_mtu == IBV_MTU_1024 &&
		      q.rq_psn == 0x1234 && q.max_dest_rd_atomic == 1 && q.min_rnr_timer == 12,
	      "RTR: state %d dest %u (want %u) mtu %d rq_psn %#x rd_atomic %u rnr %u", q.qp_state,
	      q.dest_qp_num, remote, q.path_mtu, q.rq_psn, q.max_dest_rd_atomic,
	      q.min_rnr_timer);
	CHECK(q.ah_attr.is_global == 1 && q.ah_attr.port_num == 1 &&
		      !memcmp(q.ah_attr.grh.dgid.raw, gid.raw, 16),
	      "RTR path: global %u port %u", q.ah_attr.is_global, q.ah_attr.port_num);

	/* RTR -> RTS: each required attribute missing, access flags. */
	static const int rts_required[] = {IBV_QP_SQ_PSN, IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT,
					   IBV_QP_RNR_RETRY, IBV_QP_MAX_QP_RD_ATOMIC};
	for (unsigned k = 0; k < sizeof(rts_required) / sizeof(rts_required[0]); k++) {
		a = eec_rts_attr();
		CHECK_RET(softib_modify_eec(e, &a, EEC_RTS_MASK & ~rts_required[k]), EINVAL);
	}
	a = eec_rts_attr();
	CHECK_RET(softib_modify_eec(e, &a, EEC_RTS_MASK | IBV_QP_ACCESS_FLAGS), EINVAL);
	CHECK(eec_state(e) == IBV_QPS_RTR, "refused modifies leave RTR: %d", eec_state(e));
	CHECK_RET(softib_modify_eec(e, &a, EEC_RTS_MASK), 0);
	memset(&q, 0xee, sizeof(q));
	CHECK_RET(softib_query_eec(e, &q), 0);
	CHECK(q.qp_state == IBV_QPS_RTS && q.sq_psn == 0x5678 && q.timeout == 14 &&
		      q.retry_cnt == 7 && q.rnr_retry == 6 && q.max_rd_atomic == 1 &&
		      q.dest_qp_num == remote && q.rq_psn == 0x1234,
	      "RTS: state %d sq_psn %#x timeout %u retry %u rnr %u rd_atomic %u dest %u",
	      q.qp_state, q.sq_psn, q.timeout, q.retry_cnt, q.rnr_retry, q.max_rd_atomic,
	      q.dest_qp_num);

	/* RTS -> RTS with an optional attribute; a required-only one is refused. */
	a.min_rnr_timer = 20;
	CHECK_RET(softib_modify_eec(e, &a, IBV_QP_MIN_RNR_TIMER), 0);
	CHECK_RET(softib_modify_eec(e, &a, IBV_QP_SQ_PSN), EINVAL);
	CHECK_RET(softib_query_eec(e, &q), 0);
	CHECK(q.qp_state == IBV_QPS_RTS && q.min_rnr_timer == 20, "RTS -> RTS: %d rnr %u",
	      q.qp_state, q.min_rnr_timer);

	/* The peer, walked the same way, names this one. */
	CHECK(eec_to_rts(ctx, peer, me) == 0, "peer to RTS: errno %d", errno);
	CHECK_RET(softib_query_eec(peer, &q), 0);
	CHECK(q.qp_state == IBV_QPS_RTS && q.dest_qp_num == me, "peer: state %d dest %u want %u",
	      q.qp_state, q.dest_qp_num, me);

	/* RTS -> ERR; ERR -> RTS is no transition; ERR -> RESET clears the connection. */
	a.qp_state = IBV_QPS_ERR;
	CHECK_RET(softib_modify_eec(e, &a, IBV_QP_STATE), 0);
	CHECK(eec_state(e) == IBV_QPS_ERR, "ERR: %d", eec_state(e));
	a = eec_rts_attr();
	CHECK_RET(softib_modify_eec(e, &a, EEC_RTS_MASK), EINVAL);
	a = eec_init_attr();
	CHECK_RET(softib_modify_eec(e, &a, EEC_INIT_MASK), EINVAL);
	CHECK(eec_state(e) == IBV_QPS_ERR, "still ERR: %d", eec_state(e));
	a.qp_state = IBV_QPS_RESET;
	CHECK_RET(softib_modify_eec(e, &a, IBV_QP_STATE), 0);
	memset(&q, 0xee, sizeof(q));
	CHECK_RET(softib_query_eec(e, &q), 0);
	CHECK(q.qp_state == IBV_QPS_RESET && q.dest_qp_num == 0, "RESET: state %d dest %u",
	      q.qp_state, q.dest_qp_num);
	/* The peer is another EE context: untouched. */
	CHECK(eec_state(peer) == IBV_QPS_RTS, "peer still RTS: %d", eec_state(peer));

	/* Reused after RESET: the walk again. */
	CHECK(eec_to_rts(ctx, e, remote) == 0, "second walk to RTS: errno %d", errno);
	CHECK(eec_state(e) == IBV_QPS_RTS, "RTS again: %d", eec_state(e));
	/* Any state -> RESET directly. */
	a.qp_state = IBV_QPS_RESET;
	CHECK_RET(softib_modify_eec(e, &a, IBV_QP_STATE), 0);
	CHECK(eec_state(e) == IBV_QPS_RESET, "RTS -> RESET: %d", eec_state(e));

	CHECK_RET(softib_destroy_eec(e), 0);
	CHECK_RET(softib_destroy_eec(peer), 0);
	CHECK_RET(softib_dealloc_rdd(rdd), 0);
	ibv_close_device(ctx);
}

/* RD QPs: creation and its bad input, ibv_modify_qp with RD's table, ibv_query_qp,
 * ibv_post_recv (flushed into the CQ on ERR), ibv_post_send refused until the RD data path,
 * ibv_destroy_qp; the domain and PD busy while the QP lives. */
static void rd_qps(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct softib_rdd *rdd = softib_alloc_rdd(ctx);
	struct softib_rdd *gone = softib_alloc_rdd(ctx);
	if (!pd || !scq || !rcq || !rdd || !gone)
		DIE("setup");
	CHECK_RET(softib_dealloc_rdd(gone), 0);
	static uint64_t junk[64];
	memset(junk, 0x5a, sizeof(junk));
	size_t len = 4096;
	char *buf = calloc(1, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!buf || !mr)
		DIE("ibv_reg_mr");

	/* Bad input. */
	struct ibv_qp_init_attr ia = rd_init_attr(scq, rcq);
	CHECK_NULL_ERRNO(softib_create_rd_qp(NULL, rdd, &ia), EINVAL);
	CHECK_NULL_ERRNO(softib_create_rd_qp((struct ibv_pd *)junk, rdd, &ia), EINVAL);
	CHECK_NULL_ERRNO(softib_create_rd_qp((struct ibv_pd *)rdd, rdd, &ia), EINVAL);
	CHECK_NULL_ERRNO(softib_create_rd_qp(pd, NULL, &ia), EINVAL);
	CHECK_NULL_ERRNO(softib_create_rd_qp(pd, (struct softib_rdd *)junk, &ia), EINVAL);
	CHECK_NULL_ERRNO(softib_create_rd_qp(pd, (struct softib_rdd *)pd, &ia), EINVAL);
	CHECK_NULL_ERRNO(softib_create_rd_qp(pd, gone, &ia), EINVAL);
	CHECK_NULL_ERRNO(softib_create_rd_qp(pd, rdd, NULL), EINVAL);
	ia.qp_type = IBV_QPT_UD;
	CHECK_NULL_ERRNO(softib_create_rd_qp(pd, rdd, &ia), EINVAL);
	ia = rd_init_attr(NULL, rcq);
	CHECK_NULL_ERRNO(softib_create_rd_qp(pd, rdd, &ia), EINVAL);
	ia = rd_init_attr(scq, (struct ibv_cq *)junk);
	CHECK_NULL_ERRNO(softib_create_rd_qp(pd, rdd, &ia), EINVAL);
	ia = rd_init_attr(scq, rcq);
	ia.cap.max_send_wr = 1u << 30;
	CHECK_NULL_ERRNO(softib_create_rd_qp(pd, rdd, &ia), EINVAL);
	/* The ordinary verbs cannot make an RD QP: it needs its domain. */
	ia = rd_init_attr(scq, rcq);
	CHECK_NULL_ERRNO(ibv_create_qp(pd, &ia), EINVAL);
	struct ibv_qp_init_attr_ex iax = {0};
	iax.qp_type = SOFTIB_QPT_RD;
	iax.send_cq = scq;
	iax.recv_cq = rcq;
	iax.cap = ia.cap;
	iax.comp_mask = IBV_QP_INIT_ATTR_PD;
	iax.pd = pd;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &iax), EINVAL);
	CHECK_RET(softib_dealloc_rdd(rdd), 0); /* nothing was left behind */
	rdd = softib_alloc_rdd(ctx);
	if (!rdd)
		DIE("softib_alloc_rdd");

	/* Creation. */
	ia = rd_init_attr(scq, rcq);
	int ctx_marker = 7;
	ia.qp_context = &ctx_marker;
	struct ibv_qp *qp = softib_create_rd_qp(pd, rdd, &ia);
	CHECK(qp != NULL, "softib_create_rd_qp: errno %d (%s)", errno, strerror(errno));
	if (!qp)
		DIE("softib_create_rd_qp");
	CHECK(qp->qp_type == SOFTIB_QPT_RD && qp->context == ctx && qp->pd == pd &&
		      qp->send_cq == scq && qp->recv_cq == rcq && qp->srq == NULL &&
		      qp->qp_context == &ctx_marker && qp->state == IBV_QPS_RESET && qp->qp_num != 0,
	      "the ibv_qp: type %d state %d qp_num %u", qp->qp_type, qp->state, qp->qp_num);
	CHECK(ia.cap.max_send_wr >= 8 && ia.cap.max_recv_wr >= 8 && ia.cap.max_recv_sge >= 1,
	      "caps read back: %u %u %u", ia.cap.max_send_wr, ia.cap.max_recv_wr,
	      ia.cap.max_recv_sge);
	struct ibv_qp *qp2 = softib_create_rd_qp(pd, rdd, &ia);
	CHECK(qp2 != NULL && qp2->qp_num != qp->qp_num, "a second RD QP of the domain");
	struct softib_eec *eec = softib_create_eec(rdd);
	CHECK(eec != NULL, "an EE context beside the QPs");
	/* Busy: the domain while QPs or EE contexts live, the PD and CQs while QPs do. */
	CHECK_RET(softib_dealloc_rdd(rdd), EBUSY);
	CHECK_RET(ibv_dealloc_pd(pd), EBUSY);
	CHECK_RET(ibv_destroy_cq(rcq), EBUSY);

	/* Sending: refused until the RD data path, in every state, posting nothing. */
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr swr = {0}, *bad_s = NULL;
	swr.wr_id = 99;
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	swr.send_flags = IBV_SEND_SIGNALED;
	CHECK_POST(ibv_post_send(qp, &swr, &bad_s), EINVAL);
	CHECK(bad_s == &swr, "bad_wr names the WR (RESET)");

	/* ibv_modify_qp: RD's table. RESET -> INIT needs PORT and QKEY. */
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = 0x11111111;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	CHECK_RET(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT), EINVAL);
	CHECK_RET(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_QKEY), EINVAL);
	CHECK_RET(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV),
		  EINVAL);
	CHECK(qp_state(qp) == IBV_QPS_RESET, "refused modifies leave RESET: %d", qp_state(qp));
	CHECK_RET(ibv_modify_qp(qp, &a,
				IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
					IBV_QP_ACCESS_FLAGS),
		  0);
	CHECK(qp->state == IBV_QPS_INIT, "ibv_qp state follows: %d", qp->state);
	/* Receives may be posted from INIT on. */
	struct ibv_sge rsge[3];
	struct ibv_recv_wr rwr[3], *bad_r = NULL;
	for (int k = 0; k < 3; k++) {
		rsge[k] = (struct ibv_sge){
			.addr = (uintptr_t)buf + 1024 * (k + 1), .length = 1024, .lkey = mr->lkey};
		memset(&rwr[k], 0, sizeof(rwr[k]));
		rwr[k].wr_id = 10 + k;
		rwr[k].sg_list = &rsge[k];
		rwr[k].num_sge = 1;
		rwr[k].next = k < 2 ? &rwr[k + 1] : NULL;
	}
	rwr[2].num_sge = 2; /* beyond max_recv_sge 1: the chain stops there */
	CHECK_POST(ibv_post_recv(qp, &rwr[0], &bad_r), EINVAL);
	CHECK(bad_r == &rwr[2], "bad_wr names the third receive WR");
	/* INIT -> RTR -> RTS with the state alone; no path, no SQ PSN. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.dest_qp_num = 5;
	CHECK_RET(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN), EINVAL);
	CHECK_RET(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x42;
	CHECK_RET(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), EINVAL);
	CHECK(qp_state(qp) == IBV_QPS_RTR, "refused RTS leaves RTR: %d", qp_state(qp));
	CHECK_RET(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	CHECK(rd_qp_to_rts(qp2, 0x22222222) == 0, "second QP to RTS: errno %d", errno);

	/* ibv_query_qp. */
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	memset(&q, 0xee, sizeof(q));
	memset(&qi, 0xee, sizeof(qi));
	CHECK_RET(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_QKEY | IBV_QP_PORT, &qi), 0);
	CHECK(q.qp_state == IBV_QPS_RTS && q.qkey == 0x11111111 && q.port_num == 1 &&
		      q.pkey_index == 0 && q.qp_access_flags == IBV_ACCESS_REMOTE_WRITE,
	      "query: state %d qkey %#x port %u access %#x", q.qp_state, q.qkey, q.port_num,
	      q.qp_access_flags);
	CHECK(qi.qp_type == SOFTIB_QPT_RD && qi.send_cq == scq && qi.recv_cq == rcq &&
		      qi.srq == NULL && qi.qp_context == &ctx_marker && qi.cap.max_recv_wr >= 8,
	      "init attr: type %d", qi.qp_type);

	/* Sending in RTS: still refused, nothing completes. */
	bad_s = NULL;
	CHECK_POST(ibv_post_send(qp, &swr, &bad_s), EINVAL);
	CHECK(bad_s == &swr, "bad_wr names the WR (RTS)");
	struct ibv_wc wc;
	CHECK(!poll_one(scq, &wc, 0.05), "a refused send completes nothing");

	/* The two posted receives flush into the receive CQ on ERR, in order. */
	a.qp_state = IBV_QPS_ERR;
	CHECK_RET(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	for (uint64_t k = 0; k < 2; k++) {
		int got = poll_one(rcq, &wc, 2.0);
		CHECK(got && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 10 + k &&
			      wc.qp_num == qp->qp_num,
		      "flushed receive %" PRIu64 ": got %d status %d wr_id %" PRIu64 " qp %u",
		      k, got, got ? wc.status : -1, got ? wc.wr_id : 0, got ? wc.qp_num : 0);
	}
	CHECK(!poll_one(rcq, &wc, 0.05), "nothing more: the third receive was never posted");
	/* In ERR sends are refused all the same (no RD send exists yet to flush). */
	CHECK_POST(ibv_post_send(qp, &swr, &bad_s), EINVAL);
	a.qp_state = IBV_QPS_RESET;
	CHECK_RET(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	CHECK(rd_qp_to_rts(qp, 0x33333333) == 0, "back to RTS after RESET");

	/* Receives outstanding at destroy complete nothing (rdma-core). */
	rwr[0].next = NULL;
	CHECK_POST(ibv_post_recv(qp, &rwr[0], &bad_r), 0);
	CHECK_RET(ibv_destroy_qp(qp), 0);
	CHECK(!poll_one(rcq, &wc, 0.05), "destroy flushes no completions");
	CHECK_RET(ibv_destroy_qp(qp), EINVAL);
	CHECK_RET(softib_dealloc_rdd(rdd), EBUSY); /* qp2 and the EE context */
	CHECK_RET(ibv_destroy_qp(qp2), 0);
	CHECK_RET(softib_dealloc_rdd(rdd), EBUSY); /* the EE context */
	CHECK_RET(softib_destroy_eec(eec), 0);

	/* An RD QP with an SRQ. */
	struct ibv_srq_init_attr sa = {0};
	sa.attr.max_wr = 8;
	sa.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	if (!srq)
		DIE("ibv_create_srq");
	ia = rd_init_attr(scq, rcq);
	ia.srq = srq;
	struct ibv_qp *qs = softib_create_rd_qp(pd, rdd, &ia);
	CHECK(qs != NULL && qs->srq == srq, "an RD QP with an SRQ: errno %d", errno);
	if (qs) {
		CHECK_RET(ibv_query_qp(qs, &q, IBV_QP_STATE, &qi), 0);
		CHECK(qi.srq == srq && qi.qp_type == SOFTIB_QPT_RD, "its init attr names the SRQ");
		CHECK_RET(ibv_destroy_srq(srq), EBUSY);
		CHECK_RET(ibv_destroy_qp(qs), 0);
	}
	CHECK_RET(ibv_destroy_srq(srq), 0);

	CHECK_RET(softib_dealloc_rdd(rdd), 0);
	CHECK_RET(ibv_dereg_mr(mr), 0);
	free(buf);
	CHECK_RET(ibv_destroy_cq(scq), 0);
	CHECK_RET(ibv_destroy_cq(rcq), 0);
	CHECK_RET(ibv_dealloc_pd(pd), 0);
	ibv_close_device(ctx);
}

/* Two contexts (two HCAs): their EE contexts are numbered each in its own space and never
 * reach into the other; a domain and CQ of one context are refused with the other's PD. */
static void contexts(void)
{
	struct ibv_context *c1 = open_ctx(), *c2 = open_ctx();
	struct ibv_pd *p1 = ibv_alloc_pd(c1), *p2 = ibv_alloc_pd(c2);
	struct ibv_cq *q1 = ibv_create_cq(c1, 8, NULL, NULL, 0);
	struct ibv_cq *q2 = ibv_create_cq(c2, 8, NULL, NULL, 0);
	struct softib_rdd *r1 = softib_alloc_rdd(c1), *r2 = softib_alloc_rdd(c2);
	if (!p1 || !p2 || !q1 || !q2 || !r1 || !r2)
		DIE("setup");
	struct softib_eec *e1 = softib_create_eec(r1), *e2 = softib_create_eec(r2);
	if (!e1 || !e2)
		DIE("softib_create_eec");
	uint32_t n1 = softib_eec_num(e1), n2 = softib_eec_num(e2);
	CHECK(n1 && n2, "EECNs %u %u", n1, n2);

	/* An RD QP: PD, domain and CQs of one context. Each context's first domain has the
	 * same handle inside its HCA, so only the context check tells r2 from r1 here. */
	struct ibv_qp_init_attr ia = rd_init_attr(q1, q1);
	CHECK_NULL_ERRNO(softib_create_rd_qp(p1, r2, &ia), EINVAL);
	ia = rd_init_attr(q2, q2);
	CHECK_NULL_ERRNO(softib_create_rd_qp(p2, r1, &ia), EINVAL);
	ia = rd_init_attr(q2, q1);
	CHECK_NULL_ERRNO(softib_create_rd_qp(p1, r1, &ia), EINVAL);
	ia = rd_init_attr(q1, q2);
	CHECK_NULL_ERRNO(softib_create_rd_qp(p1, r1, &ia), EINVAL);
	ia = rd_init_attr(q1, q1);
	struct ibv_qp *qp = softib_create_rd_qp(p1, r1, &ia);
	CHECK(qp != NULL && qp->context == c1, "same context: errno %d", errno);
	ia = rd_init_attr(q2, q2);
	struct ibv_qp *qp2 = softib_create_rd_qp(p2, r2, &ia);
	CHECK(qp2 != NULL && qp2->context == c2, "same context: errno %d", errno);
	if (qp)
		CHECK_RET(ibv_destroy_qp(qp), 0);
	if (qp2)
		CHECK_RET(ibv_destroy_qp(qp2), 0);

	/* Modifying and destroying the other context's EE context leaves this one alone, even
	 * where both have the same number. */
	struct ibv_qp_attr a = eec_init_attr();
	CHECK_RET(softib_modify_eec(e2, &a, EEC_INIT_MASK), 0);
	CHECK(eec_state(e1) == IBV_QPS_RESET && eec_state(e2) == IBV_QPS_INIT,
	      "each its own: %d %d (EECNs %u %u)", eec_state(e1), eec_state(e2), n1, n2);
	CHECK(eec_to_rts(c1, e1, n2) == 0, "e1 to RTS");
	CHECK(eec_state(e2) == IBV_QPS_INIT, "e2 unmoved: %d", eec_state(e2));
	CHECK_RET(softib_destroy_eec(e2), 0);
	CHECK(eec_state(e1) == IBV_QPS_RTS, "e1 survives e2: %d", eec_state(e1));
	/* Each domain counts only its own: r2 is empty now, r1 holds e1. */
	CHECK_RET(softib_dealloc_rdd(r2), 0);
	CHECK_RET(softib_dealloc_rdd(r1), EBUSY);

	CHECK_RET(softib_destroy_eec(e1), 0);
	CHECK_RET(softib_dealloc_rdd(r1), 0);
	ibv_destroy_cq(q1);
	ibv_destroy_cq(q2);
	ibv_dealloc_pd(p1);
	ibv_dealloc_pd(p2);
	ibv_close_device(c1);
	ibv_close_device(c2);
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{"domains", domains},
	{"eec_states", eec_states},
	{"rd_qps", rd_qps},
	{"contexts", contexts},
};

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc != 2) {
		fprintf(stderr, "usage: rd_cases CASE\n");
		return 2;
	}
	for (unsigned k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		if (!strcmp(cases[k].name, argv[1])) {
			cases[k].fn();
			printf("%s: %d checks, %d failed\n", argv[1], checks, failures);
			return failures ? 1 : 0;
		}
	}
	fprintf(stderr, "unknown case %s\n", argv[1]);
	return 2;
}
