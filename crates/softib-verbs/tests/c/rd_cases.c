/*
 * RD through softib's C extension <softib/rd.h>: reliable datagram domains
 * (softib_alloc_rdd / softib_dealloc_rdd), EE contexts (softib_create_eec, softib_modify_eec,
 * softib_query_eec, softib_eec_num, softib_destroy_eec), RD QPs (softib_create_rd_qp, then
 * the ordinary ibv_modify_qp / ibv_query_qp / ibv_post_recv / ibv_post_send / ibv_destroy_qp
 * and a CQ) and sending (softib_post_rd_send), with the errno of every bad call and, in
 * `rd_data`, messages that really move between RD QPs through a pair of EE contexts. Built by tests/rd_cases.rs against the
 * installed <infiniband/verbs.h> and crates/softib-verbs/include, linked with -libverbs and
 * run on softib's libibverbs.so.1. `rd_cases CASE` runs one case; it exits 0 only if every
 * check held. Every failed check is printed (function:line, what was expected).
 */
#include <errno.h>
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <softib/rd.h>

#include "check.h"

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
 * ibv_post_recv (flushed into the CQ on ERR), ibv_post_send refused (no RD destination),
 * softib_post_rd_send's bad input, ibv_destroy_qp; the domain and PD busy while the QP
 * lives. */
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

	/* ibv_post_send: refused in every state, posting nothing (an RD WR names an EE context,
	 * which struct ibv_send_wr cannot); softib_post_rd_send in RESET: EINVAL as well. */
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr swr = {0}, *bad_s = NULL;
	swr.wr_id = 99;
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	swr.send_flags = IBV_SEND_SIGNALED;
	swr.wr.ud.remote_qpn = qp2->qp_num;
	swr.wr.ud.remote_qkey = 0x22222222;
	CHECK_POST(ibv_post_send(qp, &swr, &bad_s), EINVAL);
	CHECK(bad_s == &swr, "bad_wr names the WR (RESET)");
	bad_s = NULL;
	CHECK_RET(softib_post_rd_send(qp, eec, &swr, NULL, &bad_s), EINVAL);
	CHECK(bad_s == &swr, "softib_post_rd_send: bad_wr names the WR (RESET)");

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

	/* ibv_post_send in RTS: still refused, nothing completes. */
	bad_s = NULL;
	CHECK_POST(ibv_post_send(qp, &swr, &bad_s), EINVAL);
	CHECK(bad_s == &swr, "bad_wr names the WR (RTS)");
	struct ibv_wc wc;
	CHECK(!poll_one(scq, &wc, 0.05), "a refused send completes nothing");

	/* softib_post_rd_send's bad input, in RTS (the EE context is in RESET: a WR it takes
	 * waits in the QP's send queue). Every refusal names the WR and posts nothing. */
	struct ibv_qp_init_attr uia = rd_init_attr(scq, rcq);
	uia.qp_type = IBV_QPT_UD;
	struct ibv_qp *ud = ibv_create_qp(pd, &uia);
	struct softib_eec *dead = softib_create_eec(rdd);
	if (!ud || !dead)
		DIE("a UD QP, a second EE context");
	CHECK_RET(softib_destroy_eec(dead), 0);
#define CHECK_RD_POST(q_, e_, w_, d_, want)                                           \
	do {                                                                              \
		bad_s = NULL;                                                                 \
		CHECK_RET(softib_post_rd_send(q_, e_, w_, d_, &bad_s), want);                 \
		CHECK(bad_s == (w_), "bad_wr %p, want %s", (void *)bad_s, #w_);              \
	} while (0)
	CHECK_RD_POST(NULL, eec, &swr, NULL, EINVAL);
	CHECK_RD_POST((struct ibv_qp *)junk, eec, &swr, NULL, EINVAL);
	CHECK_RD_POST((struct ibv_qp *)eec, eec, &swr, NULL, EINVAL);
	CHECK_RD_POST(ud, eec, &swr, NULL, EINVAL); /* not an RD QP */
	CHECK_RD_POST(qp, NULL, &swr, NULL, EINVAL);
	CHECK_RD_POST(qp, (struct softib_eec *)junk, &swr, NULL, EINVAL);
	CHECK_RD_POST(qp, (struct softib_eec *)rdd, &swr, NULL, EINVAL);
	CHECK_RD_POST(qp, (struct softib_eec *)qp, &swr, NULL, EINVAL);
	CHECK_RD_POST(qp, dead, &swr, NULL, EINVAL);
	CHECK_RET(softib_post_rd_send(qp, NULL, &swr, NULL, NULL), EINVAL); /* no bad_wr */
	/* Bad WRs: the first bad one stops the list. */
	struct softib_rd_dest dst[2] = {{qp2->qp_num, 0x22222222}, {qp2->qp_num, 0x22222222}};
	struct ibv_send_wr w2 = swr;
	w2.opcode = IBV_WR_RDMA_WRITE; /* no dest array: only SENDs carry their destination */
	w2.wr.rdma.remote_addr = (uintptr_t)buf;
	w2.wr.rdma.rkey = mr->rkey;
	CHECK_RD_POST(qp, eec, &w2, NULL, EINVAL);
	w2 = swr;
	w2.opcode = IBV_WR_SEND_WITH_INV; /* RD has no SEND with invalidate */
	CHECK_RD_POST(qp, eec, &w2, dst, EINVAL);
	CHECK_RD_POST(qp, eec, &w2, NULL, EINVAL);
	w2 = swr;
	w2.opcode = (enum ibv_wr_opcode)77;
	CHECK_RD_POST(qp, eec, &w2, dst, EINVAL);
	w2 = swr;
	w2.num_sge = 2; /* above max_send_sge 1 */
	CHECK_RD_POST(qp, eec, &w2, NULL, EINVAL);
	w2 = swr;
	w2.num_sge = -1;
	CHECK_RD_POST(qp, eec, &w2, NULL, EINVAL);
	w2 = swr;
	w2.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; /* 64 bytes: an atomic takes 8 */
	w2.wr.atomic.remote_addr = (uintptr_t)buf;
	w2.wr.atomic.rkey = mr->rkey;
	CHECK_RD_POST(qp, eec, &w2, dst, EINVAL);
	w2 = swr;
	w2.wr.ud.remote_qpn = 1u << 24; /* QPNs have 24 bits */
	CHECK_RD_POST(qp, eec, &w2, NULL, EINVAL);
	struct softib_rd_dest wide = {1u << 24, 0x22222222};
	CHECK_RD_POST(qp, eec, &swr, &wide, EINVAL);
	w2 = swr;
	w2.send_flags |= IBV_SEND_INLINE; /* above max_inline_data */
	sge.length = 4096;
	CHECK_RD_POST(qp, eec, &w2, NULL, EINVAL);
	sge.length = 64;
	CHECK(!poll_one(scq, &wc, 0.05), "refused WRs complete nothing");
	/* A list whose second WR is bad: the first is posted (it waits for the EE context),
	 * bad_wr names the second. An empty list posts nothing. */
	struct ibv_send_wr l1 = swr, l2 = swr;
	l1.wr_id = 1001;
	l1.next = &l2;
	l2.wr_id = 1002;
	l2.opcode = IBV_WR_RDMA_READ;
	bad_s = NULL;
	CHECK_RET(softib_post_rd_send(qp, eec, &l1, NULL, &bad_s), EINVAL);
	CHECK(bad_s == &l2, "bad_wr names the second WR: %p", (void *)bad_s);
	CHECK_RET(softib_post_rd_send(qp, eec, NULL, NULL, &bad_s), 0);
	CHECK(!poll_one(scq, &wc, 0.05), "the posted WR waits for its EE context (RESET)");
	CHECK_RET(ibv_destroy_qp(ud), 0);

	/* The two posted receives flush into the receive CQ on ERR, in order, and the send
	 * waiting for its EE context into the send CQ. */
	a.qp_state = IBV_QPS_ERR;
	CHECK_RET(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	{
		int got = poll_one(scq, &wc, 2.0);
		CHECK(got && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 1001 &&
			      wc.qp_num == qp->qp_num,
		      "flushed send: got %d status %d wr_id %" PRIu64, got, got ? wc.status : -1,
		      got ? wc.wr_id : 0);
		CHECK(!poll_one(scq, &wc, 0.05), "one send flushed");
	}
	for (uint64_t k = 0; k < 2; k++) {
		int got = poll_one(rcq, &wc, 2.0);
		CHECK(got && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 10 + k &&
			      wc.qp_num == qp->qp_num,
		      "flushed receive %" PRIu64 ": got %d status %d wr_id %" PRIu64 " qp %u",
		      k, got, got ? wc.status : -1, got ? wc.wr_id : 0, got ? wc.qp_num : 0);
	}
	CHECK(!poll_one(rcq, &wc, 0.05), "nothing more: the third receive was never posted");
	/* In ERR ibv_post_send is refused all the same; softib_post_rd_send's WRs flush. */
	CHECK_POST(ibv_post_send(qp, &swr, &bad_s), EINVAL);
	CHECK_RET(softib_post_rd_send(qp, eec, &swr, NULL, &bad_s), 0);
	{
		int got = poll_one(scq, &wc, 2.0);
		CHECK(got && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 99 &&
			      wc.qp_num == qp->qp_num,
		      "flushed in ERR: got %d status %d wr_id %" PRIu64, got, got ? wc.status : -1,
		      got ? wc.wr_id : 0);
	}
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
	/* softib_post_rd_send: an EE context of another context is refused (its EECN names
	 * another EE context there); one of the QP's context is taken (the WR waits: RESET). */
	if (qp && rd_qp_to_rts(qp, 0x44444444) == 0) {
		char byte = 0;
		struct ibv_send_wr w = {0}, *bad = NULL;
		struct ibv_sge sge = {.addr = (uintptr_t)&byte, .length = 0, .lkey = 0};
		w.sg_list = &sge;
		w.opcode = IBV_WR_SEND;
		w.wr.ud.remote_qpn = qp->qp_num;
		w.wr.ud.remote_qkey = 0x44444444;
		CHECK_RET(softib_post_rd_send(qp, e2, &w, NULL, &bad), EINVAL);
		CHECK(bad == &w, "bad_wr names the WR");
		CHECK_RET(softib_post_rd_send(qp, e1, &w, NULL, &bad), 0);
	} else {
		CHECK(0, "an RD QP of c1 to RTS");
	}
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

/* ----- rd_data: messages through a pair of EE contexts ----------------------------------- */

#define RD_QKEY 0x11110000u
#define RD_ACCESS                                                                     \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |          \
	 IBV_ACCESS_REMOTE_ATOMIC)

/* An EE context to RTS, connected to EECN `remote` at the context's own GID, sending from
 * and expecting PSN `psn` (its peer does the same). */
static int eec_connect(struct ibv_context *ctx, struct softib_eec *e, uint32_t remote,
		       uint32_t psn)
{
	struct ibv_qp_attr a = eec_init_attr();
	if (softib_modify_eec(e, &a, EEC_INIT_MASK))
		return -1;
	a = eec_rtr_attr(ctx, remote);
	a.rq_psn = psn;
	a.min_rnr_timer = 1;
	if (softib_modify_eec(e, &a, EEC_RTR_MASK))
		return -2;
	a = eec_rts_attr();
	a.sq_psn = psn;
	if (softib_modify_eec(e, &a, EEC_RTS_MASK))
		return -3;
	return 0;
}

/* An RD QP to RTS with Q_Key RD_QKEY and the remote access rights. */
static int rd_qp_up(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = RD_QKEY;
	a.qp_access_flags = RD_ACCESS;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
				  IBV_QP_ACCESS_FLAGS))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -2;
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -3;
	return 0;
}

/* Polls `n` completions into `wc` within `secs`; the number polled. */
static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n, double secs)
{
	double end = now() + secs;
	int got = 0;
	while (got < n && now() < end) {
		int k = ibv_poll_cq(cq, n - got, wc + got);
		if (k < 0)
			DIE("ibv_poll_cq %d", k);
		got += k;
		if (got < n)
			usleep(100);
	}
	return got;
}

/* The completion of `wr_id` among `n`, or NULL. */
static struct ibv_wc *wc_of(struct ibv_wc *wc, int n, uint64_t wr_id)
{
	for (int k = 0; k < n; k++)
		if (wc[k].wr_id == wr_id)
			return &wc[k];
	return NULL;
}

static void fill_pattern(char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (char)(i * 13 + seed);
}

static int has_pattern(const char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != (char)(i * 13 + seed))
			return 0;
	return 1;
}

/* A receive of `len` bytes at `buf + off` on `qp`. */
static void post_recv_at(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, size_t off,
			 uint32_t len, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf + off, .length = len, .lkey = mr->lkey};
	struct ibv_recv_wr w = {0}, *bad = NULL;
	w.wr_id = wr_id;
	w.sg_list = &sge;
	w.num_sge = 1;
	if (ibv_post_recv(qp, &w, &bad))
		DIE("ibv_post_recv");
}

/* A signaled SEND WR of `len` bytes at `buf + off` to `remote_qpn` with `qkey` (wr.ud). */
static struct ibv_send_wr send_wr(uint64_t wr_id, struct ibv_sge *sge, struct ibv_mr *mr,
				  char *buf, size_t off, uint32_t len, uint32_t remote_qpn,
				  uint32_t qkey)
{
	*sge = (struct ibv_sge){.addr = (uintptr_t)buf + off, .length = len, .lkey = mr->lkey};
	struct ibv_send_wr w = {0};
	w.wr_id = wr_id;
	w.sg_list = sge;
	w.num_sge = 1;
	w.opcode = IBV_WR_SEND;
	w.send_flags = IBV_SEND_SIGNALED;
	w.wr.ud.ah = NULL; /* not read: the EE context holds the path */
	w.wr.ud.remote_qpn = remote_qpn;
	w.wr.ud.remote_qkey = qkey;
	return w;
}

/* One context, its QPs talking to each other through its own socket: two EE contexts of one
 * domain connected to each other (each the other's remote EECN, both at the context's own
 * GID) and three RD QPs A, B, C sharing them. SENDs with and without immediate from A and B
 * to B and C through one EE context (destinations from wr.ud) and from C to A through the
 * other (a destination array, the sender's own Q_Key); RDMA WRITE, READ, fetch-and-add and
 * WRITE with immediate (a destination array); a wrong Q_Key fails one QP (REM_INV_RD_REQ_ERR,
 * SQE, its later WRs flushed) while the other QP's next message still arrives; destinations
 * that are no RD QP; a bad R_Key; an EE context of another domain. */
static void rd_data(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct softib_rdd *rdd = softib_alloc_rdd(ctx);
	struct softib_rdd *other = softib_alloc_rdd(ctx);
	if (!pd || !scq || !rcq || !rdd || !other)
		DIE("setup");
	size_t len = 0x10000;
	char *buf = calloc(1, len);
	struct ibv_mr *mr = buf ? ibv_reg_mr(pd, buf, len, RD_ACCESS) : NULL;
	if (!mr)
		DIE("ibv_reg_mr");
	struct softib_eec *e1 = softib_create_eec(rdd), *e2 = softib_create_eec(rdd);
	if (!e1 || !e2)
		DIE("softib_create_eec");
	uint32_t n1 = softib_eec_num(e1), n2 = softib_eec_num(e2);
	CHECK(eec_connect(ctx, e1, n2, 0x100) == 0, "e1 to RTS: errno %d", errno);
	CHECK(eec_connect(ctx, e2, n1, 0x100) == 0, "e2 to RTS: errno %d", errno);
	struct ibv_qp_init_attr ia = rd_init_attr(scq, rcq);
	struct ibv_qp *qa = softib_create_rd_qp(pd, rdd, &ia);
	struct ibv_qp *qb = softib_create_rd_qp(pd, rdd, &ia);
	struct ibv_qp *qc = softib_create_rd_qp(pd, rdd, &ia);
	if (!qa || !qb || !qc)
		DIE("softib_create_rd_qp");
	if (rd_qp_up(qa) || rd_qp_up(qb) || rd_qp_up(qc))
		DIE("RD QPs to RTS");
	uint32_t A = qa->qp_num, B = qb->qp_num, C = qc->qp_num;
	struct ibv_wc wc[8], *w;
	struct ibv_send_wr *bad = NULL;
	int got;

	/* SENDs. A: with immediate to B (2500 bytes: three packets at MTU 1024), then without to
	 * C, in one list; B: with immediate to C; all three through e1, destinations in wr.ud.
	 * C: to A through e2 with a destination array and the high bit of the Q_Key (C's own). */
	fill_pattern(buf + 0x0000, 2500, 1);
	fill_pattern(buf + 0x1000, 700, 2);
	fill_pattern(buf + 0x1400, 300, 3);
	fill_pattern(buf + 0x1800, 100, 4);
	post_recv_at(qb, mr, buf, 0x4000, 4096, 100);
	post_recv_at(qc, mr, buf, 0x5000, 4096, 200);
	post_recv_at(qc, mr, buf, 0x6000, 4096, 201);
	post_recv_at(qa, mr, buf, 0x7000, 4096, 300);
	struct ibv_sge sg[4];
	struct ibv_send_wr s1 = send_wr(1, &sg[0], mr, buf, 0x0000, 2500, B, RD_QKEY);
	struct ibv_send_wr s2 = send_wr(2, &sg[1], mr, buf, 0x1000, 700, C, RD_QKEY);
	struct ibv_send_wr s3 = send_wr(3, &sg[2], mr, buf, 0x1400, 300, C, RD_QKEY);
	struct ibv_send_wr s4 = send_wr(4, &sg[3], mr, buf, 0x1800, 100, 0xabcdef, 0x0bad);
	s1.opcode = IBV_WR_SEND_WITH_IMM;
	s1.imm_data = htonl(0x1234abcd);
	s1.next = &s2;
	s3.opcode = IBV_WR_SEND_WITH_IMM;
	s3.imm_data = htonl(0xbeef);
	struct softib_rd_dest to_a = {A, 0x80000000u}; /* s4's wr.ud is not read */
	CHECK_RET(softib_post_rd_send(qa, e1, &s1, NULL, &bad), 0);
	CHECK_RET(softib_post_rd_send(qb, e1, &s3, NULL, &bad), 0);
	CHECK_RET(softib_post_rd_send(qc, e2, &s4, &to_a, &bad), 0);
	got = poll_n(scq, wc, 4, 10.0);
	CHECK(got == 4, "four send completions, got %d", got);
	for (uint64_t id = 1; id <= 4; id++) {
		uint32_t from = id <= 2 ? A : id == 3 ? B : C;
		w = wc_of(wc, got, id);
		CHECK(w && w->status == IBV_WC_SUCCESS && w->opcode == IBV_WC_SEND &&
			      w->qp_num == from,
		      "send %" PRIu64 ": status %d opcode %d qp %u want %u", id, w ? w->status : -1,
		      w ? (int)w->opcode : -1, w ? w->qp_num : 0, from);
	}
	got = poll_n(rcq, wc, 4, 10.0);
	CHECK(got == 4, "four receive completions, got %d", got);
	w = wc_of(wc, got, 100);
	CHECK(w && w->status == IBV_WC_SUCCESS && w->opcode == IBV_WC_RECV && w->qp_num == B &&
		      w->src_qp == A && w->byte_len == 2500 && (w->wc_flags & IBV_WC_WITH_IMM) &&
		      ntohl(w->imm_data) == 0x1234abcd,
	      "B's receive: status %d qp %u src %u len %u flags %#x imm %#x",
	      w ? w->status : -1, w ? w->qp_num : 0, w ? w->src_qp : 0, w ? w->byte_len : 0,
	      w ? w->wc_flags : 0, w ? ntohl(w->imm_data) : 0);
	CHECK(has_pattern(buf + 0x4000, 2500, 1), "B's bytes");
	/* C's two receives take A's and B's messages in the order the EE context sent them. */
	int from_a = 0, from_b = 0;
	for (uint64_t id = 200; id <= 201; id++) {
		w = wc_of(wc, got, id);
		const char *mem = buf + (id == 200 ? 0x5000 : 0x6000);
		CHECK(w && w->status == IBV_WC_SUCCESS && w->qp_num == C,
		      "C's receive %" PRIu64 ": status %d qp %u", id, w ? w->status : -1,
		      w ? w->qp_num : 0);
		if (!w)
			continue;
		if (w->src_qp == A) {
			from_a++;
			CHECK(w->byte_len == 700 && !(w->wc_flags & IBV_WC_WITH_IMM) &&
				      has_pattern(mem, 700, 2),
			      "A's message to C: len %u flags %#x", w->byte_len, w->wc_flags);
		} else if (w->src_qp == B) {
			from_b++;
			CHECK(w->byte_len == 300 && (w->wc_flags & IBV_WC_WITH_IMM) &&
				      ntohl(w->imm_data) == 0xbeef && has_pattern(mem, 300, 3),
			      "B's message to C: len %u flags %#x imm %#x", w->byte_len,
			      w->wc_flags, ntohl(w->imm_data));
		}
	}
	CHECK(from_a == 1 && from_b == 1, "C got one message from A and one from B: %d %d",
	      from_a, from_b);
	w = wc_of(wc, got, 300);
	CHECK(w && w->status == IBV_WC_SUCCESS && w->qp_num == A && w->src_qp == C &&
		      w->byte_len == 100 && !(w->wc_flags & IBV_WC_WITH_IMM) &&
		      has_pattern(buf + 0x7000, 100, 4),
	      "A's receive (through e2): status %d qp %u src %u len %u", w ? w->status : -1,
	      w ? w->qp_num : 0, w ? w->src_qp : 0, w ? w->byte_len : 0);

	/* RDMA WRITE, READ (of what the WRITE placed), fetch-and-add and WRITE with immediate
	 * from A to B through e1, in one list: the remote addresses in wr.rdma / wr.atomic as
	 * for any QP, the destinations in an array. */
	fill_pattern(buf + 0xb000, 3000, 5);
	uint64_t forty = 40;
	memcpy(buf + 0xe000, &forty, 8);
	fill_pattern(buf + 0xe800, 16, 6);
	post_recv_at(qb, mr, buf, 0x8000, 64, 101);
	struct ibv_sge rs[4] = {
		{.addr = (uintptr_t)buf + 0xb000, .length = 3000, .lkey = mr->lkey},
		{.addr = (uintptr_t)buf + 0xd000, .length = 3000, .lkey = mr->lkey},
		{.addr = (uintptr_t)buf + 0xe100, .length = 8, .lkey = mr->lkey},
		{.addr = (uintptr_t)buf + 0xe800, .length = 16, .lkey = mr->lkey},
	};
	struct ibv_send_wr r[4];
	memset(r, 0, sizeof(r));
	for (int k = 0; k < 4; k++) {
		r[k].wr_id = 10 + k;
		r[k].sg_list = &rs[k];
		r[k].num_sge = 1;
		r[k].send_flags = IBV_SEND_SIGNALED;
		r[k].next = k < 3 ? &r[k + 1] : NULL;
	}
	r[0].opcode = IBV_WR_RDMA_WRITE;
	r[0].wr.rdma.remote_addr = (uintptr_t)buf + 0xc000;
	r[0].wr.rdma.rkey = mr->rkey;
	r[1].opcode = IBV_WR_RDMA_READ;
	r[1].wr.rdma.remote_addr = (uintptr_t)buf + 0xc000;
	r[1].wr.rdma.rkey = mr->rkey;
	r[2].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	r[2].wr.atomic.remote_addr = (uintptr_t)buf + 0xe000;
	r[2].wr.atomic.rkey = mr->rkey;
	r[2].wr.atomic.compare_add = 2;
	r[3].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	r[3].wr.rdma.remote_addr = (uintptr_t)buf + 0xe900;
	r[3].wr.rdma.rkey = mr->rkey;
	r[3].imm_data = htonl(0x5555);
	struct softib_rd_dest to_b[4] = {
		{B, RD_QKEY}, {B, RD_QKEY}, {B, RD_QKEY}, {B, RD_QKEY}};
	CHECK_RET(softib_post_rd_send(qa, e1, &r[0], to_b, &bad), 0);
	got = poll_n(scq, wc, 4, 10.0);
	CHECK(got == 4, "four RDMA completions, got %d", got);
	static const int ops[4] = {IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_FETCH_ADD,
				   IBV_WC_RDMA_WRITE};
	for (int k = 0; k < got; k++)
		CHECK(wc[k].wr_id == (uint64_t)(10 + k) && wc[k].status == IBV_WC_SUCCESS &&
			      (int)wc[k].opcode == ops[wc[k].wr_id - 10 < 4 ? wc[k].wr_id - 10 : 0] &&
			      wc[k].qp_num == A,
		      "RDMA completion %d: wr_id %" PRIu64 " status %d opcode %d qp %u", k,
		      wc[k].wr_id, wc[k].status, (int)wc[k].opcode, wc[k].qp_num);
	CHECK(has_pattern(buf + 0xc000, 3000, 5), "the WRITE placed its bytes");
	CHECK(has_pattern(buf + 0xd000, 3000, 5), "the READ brought them back");
	uint64_t fetched, now_at;
	memcpy(&fetched, buf + 0xe100, 8);
	memcpy(&now_at, buf + 0xe000, 8);
	CHECK(fetched == 40 && now_at == 42, "fetch-and-add: fetched %" PRIu64 ", now %" PRIu64,
	      fetched, now_at);
	CHECK(has_pattern(buf + 0xe900, 16, 6), "the WRITE with immediate placed its bytes");
	got = poll_n(rcq, wc, 1, 10.0);
	CHECK(got == 1 && wc[0].wr_id == 101 && wc[0].status == IBV_WC_SUCCESS &&
		      wc[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM && wc[0].qp_num == B &&
		      wc[0].src_qp == A && (wc[0].wc_flags & IBV_WC_WITH_IMM) &&
		      ntohl(wc[0].imm_data) == 0x5555,
	      "WRITE with immediate at B: got %d wr_id %" PRIu64 " status %d opcode %d qp %u "
	      "src %u imm %#x",
	      got, wc[0].wr_id, wc[0].status, (int)wc[0].opcode, wc[0].qp_num, wc[0].src_qp,
	      ntohl(wc[0].imm_data));
	CHECK(!poll_one(rcq, wc, 0.05), "READ, WRITE and atomics consume no receive");

	/* A wrong Q_Key: A's SEND to B fails (NAK-Invalid RD Request), A enters SQE; B's next
	 * message to C through the same EE context arrives; B's receive stays posted. */
	post_recv_at(qb, mr, buf, 0x9000, 4096, 102);
	post_recv_at(qc, mr, buf, 0xa000, 4096, 202);
	fill_pattern(buf + 0x1c00, 200, 7);
	struct ibv_send_wr wrong = send_wr(20, &sg[0], mr, buf, 0x0000, 16, B, 0x0bad);
	struct ibv_send_wr next = send_wr(21, &sg[1], mr, buf, 0x1c00, 200, C, RD_QKEY);
	CHECK_RET(softib_post_rd_send(qa, e1, &wrong, NULL, &bad), 0);
	CHECK_RET(softib_post_rd_send(qb, e1, &next, NULL, &bad), 0);
	got = poll_n(scq, wc, 2, 10.0);
	CHECK(got == 2, "two send completions, got %d", got);
	w = wc_of(wc, got, 20);
	CHECK(w && w->status == IBV_WC_REM_INV_RD_REQ_ERR && w->qp_num == A,
	      "the wrong Q_Key: status %d (%s) qp %u", w ? w->status : -1,
	      w ? ibv_wc_status_str(w->status) : "-", w ? w->qp_num : 0);
	w = wc_of(wc, got, 21);
	CHECK(w && w->status == IBV_WC_SUCCESS && w->qp_num == B, "B's next: status %d qp %u",
	      w ? w->status : -1, w ? w->qp_num : 0);
	CHECK(qp_state(qa) == IBV_QPS_SQE, "A in SQE: %d", qp_state(qa));
	CHECK(qp_state(qb) == IBV_QPS_RTS, "B in RTS: %d", qp_state(qb));
	CHECK(eec_state(e1) == IBV_QPS_RTS && eec_state(e2) == IBV_QPS_RTS,
	      "the EE contexts go on: %d %d", eec_state(e1), eec_state(e2));
	got = poll_n(rcq, wc, 1, 10.0);
	CHECK(got == 1 && wc[0].wr_id == 202 && wc[0].status == IBV_WC_SUCCESS &&
		      wc[0].qp_num == C && wc[0].src_qp == B && wc[0].byte_len == 200 &&
		      has_pattern(buf + 0xa000, 200, 7),
	      "B's message at C: got %d wr_id %" PRIu64 " status %d src %u len %u", got,
	      wc[0].wr_id, wc[0].status, wc[0].src_qp, wc[0].byte_len);
	CHECK(!poll_one(rcq, wc, 0.05), "B's receive was not consumed");
	/* A in SQE: its new WRs flush. */
	struct ibv_send_wr late = send_wr(22, &sg[0], mr, buf, 0x0000, 16, B, RD_QKEY);
	CHECK_RET(softib_post_rd_send(qa, e1, &late, NULL, &bad), 0);
	got = poll_n(scq, wc, 1, 5.0);
	CHECK(got == 1 && wc[0].wr_id == 22 && wc[0].status == IBV_WC_WR_FLUSH_ERR &&
		      wc[0].qp_num == A,
	      "A's WR in SQE: got %d wr_id %" PRIu64 " status %d", got, wc[0].wr_id,
	      wc[0].status);
	/* e1 after its RESYNC: C's message to B takes B's waiting receive. */
	struct ibv_send_wr to_b_again = send_wr(23, &sg[1], mr, buf, 0x1c00, 200, B, RD_QKEY);
	CHECK_RET(softib_post_rd_send(qc, e1, &to_b_again, NULL, &bad), 0);
	got = poll_n(scq, wc, 1, 10.0);
	CHECK(got == 1 && wc[0].wr_id == 23 && wc[0].status == IBV_WC_SUCCESS &&
		      wc[0].qp_num == C,
	      "C to B: got %d wr_id %" PRIu64 " status %d", got, wc[0].wr_id, wc[0].status);
	got = poll_n(rcq, wc, 1, 10.0);
	CHECK(got == 1 && wc[0].wr_id == 102 && wc[0].status == IBV_WC_SUCCESS &&
		      wc[0].qp_num == B && wc[0].src_qp == C && wc[0].byte_len == 200 &&
		      has_pattern(buf + 0x9000, 200, 7),
	      "C's message at B: got %d wr_id %" PRIu64 " status %d src %u", got, wc[0].wr_id,
	      wc[0].status, wc[0].src_qp);

	/* Destinations that are no RD QP: a QPN nobody has, a UD QP. Each fails D's message
	 * (IBV_WC_REM_INV_RD_REQ_ERR, D to SQE; RESET and up again for the next). */
	struct ibv_qp *qd = softib_create_rd_qp(pd, rdd, &ia);
	struct ibv_qp_init_attr uia = rd_init_attr(scq, rcq);
	uia.qp_type = IBV_QPT_UD;
	struct ibv_qp *ud = ibv_create_qp(pd, &uia);
	if (!qd || !ud)
		DIE("QP D, a UD QP");
	uint32_t nowhere[2] = {0xfffff0, ud->qp_num};
	for (int k = 0; k < 2; k++) {
		struct ibv_qp_attr ra = {.qp_state = IBV_QPS_RESET};
		CHECK_RET(ibv_modify_qp(qd, &ra, IBV_QP_STATE), 0);
		CHECK(rd_qp_up(qd) == 0, "D to RTS");
		struct ibv_send_wr sw = send_wr(50 + k, &sg[0], mr, buf, 0, 16, nowhere[k], RD_QKEY);
		CHECK_RET(softib_post_rd_send(qd, e1, &sw, NULL, &bad), 0);
		got = poll_n(scq, wc, 1, 10.0);
		CHECK(got == 1 && wc[0].wr_id == (uint64_t)(50 + k) &&
			      wc[0].status == IBV_WC_REM_INV_RD_REQ_ERR && wc[0].qp_num == qd->qp_num,
		      "to %s: got %d status %d (%s)", k ? "a UD QP" : "no QP", got, wc[0].status,
		      got ? ibv_wc_status_str(wc[0].status) : "-");
		CHECK(qp_state(qd) == IBV_QPS_SQE, "D in SQE: %d", qp_state(qd));
	}
	CHECK(eec_state(e1) == IBV_QPS_RTS, "e1 in RTS: %d", eec_state(e1));

	/* A bad R_Key: C's WRITE fails with a remote access error, C enters SQE. */
	struct ibv_send_wr bw = {0};
	struct ibv_sge bs = {.addr = (uintptr_t)buf, .length = 32, .lkey = mr->lkey};
	bw.wr_id = 30;
	bw.sg_list = &bs;
	bw.num_sge = 1;
	bw.opcode = IBV_WR_RDMA_WRITE;
	bw.send_flags = IBV_SEND_SIGNALED;
	bw.wr.rdma.remote_addr = (uintptr_t)buf + 0xf000;
	bw.wr.rdma.rkey = mr->rkey ^ 0x5a5a;
	struct softib_rd_dest to_b1 = {B, RD_QKEY};
	CHECK_RET(softib_post_rd_send(qc, e2, &bw, &to_b1, &bad), 0);
	got = poll_n(scq, wc, 1, 10.0);
	CHECK(got == 1 && wc[0].wr_id == 30 && wc[0].status == IBV_WC_REM_ACCESS_ERR &&
		      wc[0].qp_num == C,
	      "bad R_Key: got %d wr_id %" PRIu64 " status %d (%s)", got, wc[0].wr_id,
	      wc[0].status, got ? ibv_wc_status_str(wc[0].status) : "-");
	CHECK(qp_state(qc) == IBV_QPS_SQE, "C in SQE: %d", qp_state(qc));

	/* An EE context of another domain (o9-34): B's WR completes in error without a packet
	 * and B enters SQE; e1 and e2 are untouched. */
	struct softib_eec *e3 = softib_create_eec(other);
	if (!e3)
		DIE("softib_create_eec");
	CHECK(eec_connect(ctx, e3, n1, 0x100) == 0, "e3 to RTS");
	struct ibv_send_wr foreign = send_wr(40, &sg[0], mr, buf, 0x0000, 16, C, RD_QKEY);
	CHECK_RET(softib_post_rd_send(qb, e3, &foreign, NULL, &bad), 0);
	got = poll_n(scq, wc, 1, 10.0);
	CHECK(got == 1 && wc[0].wr_id == 40 && wc[0].status == IBV_WC_LOC_QP_OP_ERR &&
		      wc[0].qp_num == B,
	      "another domain's EE context: got %d wr_id %" PRIu64 " status %d (%s)", got,
	      wc[0].wr_id, wc[0].status, got ? ibv_wc_status_str(wc[0].status) : "-");
	CHECK(qp_state(qb) == IBV_QPS_SQE, "B in SQE: %d", qp_state(qb));
	CHECK(eec_state(e1) == IBV_QPS_RTS && eec_state(e2) == IBV_QPS_RTS,
	      "e1 and e2 in RTS: %d %d", eec_state(e1), eec_state(e2));
	CHECK(!poll_one(scq, wc, 0.05) && !poll_one(rcq, wc, 0.05), "nothing else completed");

	CHECK_RET(ibv_destroy_qp(qa), 0);
	CHECK_RET(ibv_destroy_qp(qb), 0);
	CHECK_RET(ibv_destroy_qp(qc), 0);
	CHECK_RET(ibv_destroy_qp(qd), 0);
	CHECK_RET(ibv_destroy_qp(ud), 0);
	CHECK_RET(softib_destroy_eec(e1), 0);
	CHECK_RET(softib_destroy_eec(e2), 0);
	CHECK_RET(softib_destroy_eec(e3), 0);
	CHECK_RET(softib_dealloc_rdd(rdd), 0);
	CHECK_RET(softib_dealloc_rdd(other), 0);
	CHECK_RET(ibv_dereg_mr(mr), 0);
	free(buf);
	CHECK_RET(ibv_destroy_cq(scq), 0);
	CHECK_RET(ibv_destroy_cq(rcq), 0);
	CHECK_RET(ibv_dealloc_pd(pd), 0);
	ibv_close_device(ctx);
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{"domains", domains},
	{"eec_states", eec_states},
	{"rd_qps", rd_qps},
	{"contexts", contexts},
	{"rd_data", rd_data},
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
