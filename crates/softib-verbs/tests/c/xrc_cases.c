/*
 * XRC through libibverbs as an unmodified rdma-core 44 program uses it: XRC domains
 * (ibv_open_xrcd / ibv_close_xrcd, shared through a file's inode), XRC SRQs
 * (ibv_create_srq_ex, ibv_get_srq_num), XRC initiator and target QPs (ibv_create_qp_ex),
 * shared target QPs (ibv_open_qp), posting with wr.qp_type.xrc.remote_srqn and with
 * ibv_wr_set_xrc_srqn, and the errno of every bad call. Built by tests/xrc_cases.rs against
 * the installed <infiniband/verbs.h>, linked with -libverbs and run on softib's
 * libibverbs.so.1. `xrc_cases CASE` runs one case; it exits 0 only if every check held.
 * Every failed check is printed (function:line, what was expected).
 *
 * The initiators and targets of one case live on one context: its QPs reach each other
 * through the context's own GID, so every XRC delivery here is within one process.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "check.h"

/* An int verb that returns 0 or the errno value failed with exactly `want`. */
#define CHECK_RET(expr, want)                                                         \
	do {                                                                              \
		int r_ = (expr);                                                              \
		CHECK(r_ == (want), "%s returned %d (%s), want %s", #expr, r_,                \
		      r_ > 0 ? strerror(r_) : "", #want);                                    \
	} while (0)

/* A fresh file for a domain: its fd (O_RDONLY, as ibv_xsrq_pingpong opens its file). */
static int domain_file(char *path, size_t len)
{
	snprintf(path, len, "/tmp/softib-xrc-%d-XXXXXX", (int)getpid());
	int fd = mkstemp(path);
	if (fd < 0)
		DIE("mkstemp");
	close(fd);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		DIE("open %s", path);
	return fd;
}

static struct ibv_xrcd *xrcd_open(struct ibv_context *ctx, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {0};
	a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
	a.fd = fd;
	a.oflags = oflags;
	return ibv_open_xrcd(ctx, &a);
}

static struct ibv_srq *xrc_srq(struct ibv_context *ctx, struct ibv_pd *pd,
			       struct ibv_xrcd *xrcd, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex a = {0};
	a.attr.max_wr = 16;
	a.attr.max_sge = 1;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
		      IBV_SRQ_INIT_ATTR_PD;
	a.srq_type = IBV_SRQT_XRC;
	a.xrcd = xrcd;
	a.cq = cq;
	a.pd = pd;
	return ibv_create_srq_ex(ctx, &a);
}

static struct ibv_qp *tgt_qp(struct ibv_context *ctx, struct ibv_xrcd *xrcd)
{
	struct ibv_qp_init_attr_ex a = {0};
	a.qp_type = IBV_QPT_XRC_RECV;
	a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	a.xrcd = xrcd;
	return ibv_create_qp_ex(ctx, &a);
}

/* An XRC initiator; with `ops`, one that posts through the ibv_wr_* interface. */
static struct ibv_qp *ini_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq,
			     uint64_t ops)
{
	struct ibv_qp_init_attr_ex a = {0};
	a.qp_type = IBV_QPT_XRC_SEND;
	a.send_cq = cq;
	a.cap.max_send_wr = 16;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_wr = 16; /* an initiator has no receive queue: reads back 0 */
	a.cap.max_recv_sge = 1;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	if (ops) {
		a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.send_ops_flags = ops;
	}
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &a);
	if (qp)
		CHECK(a.cap.max_recv_wr == 0 && a.cap.max_recv_sge == 0,
		      "initiator recv caps %u/%u, want 0/0", a.cap.max_recv_wr, a.cap.max_recv_sge);
	return qp;
}

/* INIT, RTR, RTS with the masks each XRC half needs; `rc_masks` uses RC's full masks on both,
 * as perftest does (the kernel ignores the attributes a half does not have). */
static void connect_qp(struct ibv_context *ctx, struct ibv_qp *qp, uint32_t dqpn, int rc_masks)
{
	int tgt = qp->qp_type == IBV_QPT_XRC_RECV;
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	at.qp_access_flags = tgt ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					   IBV_ACCESS_REMOTE_ATOMIC
				 : 0;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		DIE("INIT");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		DIE("ibv_query_gid");
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = dqpn;
	at.rq_psn = 0x100;
	at.max_dest_rd_atomic = 4;
	at.min_rnr_timer = 12;
	at.ah_attr.is_global = 1;
	at.ah_attr.grh.dgid = gid;
	at.ah_attr.grh.hop_limit = 1;
	at.ah_attr.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (tgt || rc_masks)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	if (ibv_modify_qp(qp, &at, mask))
		DIE("RTR (%s, rc masks %d)", tgt ? "target" : "initiator", rc_masks);
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 14;
	at.retry_cnt = 7;
	at.rnr_retry = 7;
	at.sq_psn = 0x100;
	at.max_rd_atomic = 4;
	mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
	if (!tgt || rc_masks)
		mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	if (ibv_modify_qp(qp, &at, mask))
		DIE("RTS (%s, rc masks %d)", tgt ? "target" : "initiator", rc_masks);
}

static void post_srq_buf(struct ibv_srq *srq, struct ibv_mr *mr, size_t off, uint32_t len,
			 uint64_t wr_id)
{
	struct ibv_sge sge = {(uintptr_t)mr->addr + off, len, mr->lkey};
	struct ibv_recv_wr wr = {0}, *bad = NULL;
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	if (ibv_post_srq_recv(srq, &wr, &bad))
		DIE("ibv_post_srq_recv");
}

/* A signaled SEND of `len` bytes at `off` naming SRQ `srqn`; the sender's completion status. */
static int xrc_send(struct ibv_qp *qp, struct ibv_cq *scq, struct ibv_mr *mr, size_t off,
		    uint32_t len, uint32_t srqn, uint64_t wr_id)
{
	struct ibv_sge sge = {(uintptr_t)mr->addr + off, len, mr->lkey};
	struct ibv_send_wr wr = {0}, *bad = NULL;
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.qp_type.xrc.remote_srqn = srqn;
	if (ibv_post_send(qp, &wr, &bad))
		DIE("ibv_post_send");
	struct ibv_wc wc;
	if (!poll_one(scq, &wc, 5.0))
		return -1;
	CHECK(wc.wr_id == wr_id, "send wr_id %" PRIu64 " want %" PRIu64, wc.wr_id, wr_id);
	return wc.status;
}

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed);
}

/* ---- the domains ------------------------------------------------------------------------- */

static void domains(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq)
		DIE("pd/cq");

	/* The device says it has XRC (perftest and others look for the flag). */
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0 && (da.device_cap_flags & IBV_DEVICE_XRC),
	      "IBV_DEVICE_XRC in device_cap_flags 0x%x", da.device_cap_flags);
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0 &&
		      (dx.orig_attr.device_cap_flags & IBV_DEVICE_XRC),
	      "IBV_DEVICE_XRC in ibv_query_device_ex");

	/* Bad attributes (rdma-core's ibv_cmd_open_xrcd, the kernel's ib_uverbs_open_xrcd). */
	struct ibv_xrcd_init_attr a = {0};
	a.fd = -1;
	CHECK_NULL_ERRNO(ibv_open_xrcd(ctx, &a), EINVAL);
	a.comp_mask = IBV_XRCD_INIT_ATTR_FD;
	CHECK_NULL_ERRNO(ibv_open_xrcd(ctx, &a), EINVAL);
	a.comp_mask = IBV_XRCD_INIT_ATTR_OFLAGS;
	CHECK_NULL_ERRNO(ibv_open_xrcd(ctx, &a), EINVAL);
	a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS | IBV_XRCD_INIT_ATTR_RESERVED;
	CHECK_NULL_ERRNO(ibv_open_xrcd(ctx, &a), EOPNOTSUPP);
	int closed = open("/dev/null", O_RDONLY);
	close(closed);
	CHECK_NULL_ERRNO(xrcd_open(ctx, closed, O_CREAT), EBADF);
	CHECK_NULL_ERRNO(xrcd_open(ctx, -2, O_CREAT), EBADF);

	/* A file with no domain yet: without O_CREAT there is none to open. */
	char path[64];
	int fd = domain_file(path, sizeof(path));
	CHECK_NULL_ERRNO(xrcd_open(ctx, fd, 0), EAGAIN);
	CHECK_NULL_ERRNO(xrcd_open(ctx, fd, O_EXCL), EAGAIN);
	struct ibv_xrcd *x1 = xrcd_open(ctx, fd, O_CREAT | O_EXCL);
	CHECK(x1 != NULL && x1->context == ctx, "O_CREAT|O_EXCL on a new file: %p errno %d",
	      (void *)x1, errno);
	if (!x1)
		DIE("xrcd");
	/* The same inode through another descriptor: the same domain; O_EXCL refuses it. */
	int fd2 = open(path, O_RDONLY);
	CHECK_NULL_ERRNO(xrcd_open(ctx, fd2, O_CREAT | O_EXCL), EINVAL);
	struct ibv_xrcd *x2 = xrcd_open(ctx, fd2, 0);
	CHECK(x2 != NULL && x2 != x1, "second open of the same file: %p errno %d", (void *)x2,
	      errno);
	/* Private domains (fd -1), whatever the flags. */
	struct ibv_xrcd *p1 = xrcd_open(ctx, -1, 0);
	struct ibv_xrcd *p2 = xrcd_open(ctx, -1, O_CREAT | O_EXCL);
	CHECK(p1 && p2 && p1 != p2, "private domains %p %p", (void *)p1, (void *)p2);

	/* A handle with an XRC SRQ made through it is busy; the others close. */
	struct ibv_srq *s = xrc_srq(ctx, pd, x1, cq);
	CHECK(s != NULL, "XRC SRQ: errno %d", errno);
	CHECK_RET(ibv_close_xrcd(x1), EBUSY);
	CHECK_RET(ibv_close_xrcd(p1), 0);
	CHECK_RET(ibv_close_xrcd(p2), 0);
	/* x2 closes (x1 still holds the domain): the domain stays and opens without O_CREAT. */
	CHECK_RET(ibv_close_xrcd(x2), 0);
	x2 = xrcd_open(ctx, fd, 0);
	CHECK(x2 != NULL, "reopen while x1 holds the domain: errno %d", errno);
	CHECK_RET(ibv_close_xrcd(x2), 0);
	CHECK_RET(ibv_destroy_srq(s), 0);
	CHECK_RET(ibv_close_xrcd(x1), 0);
	/* Every handle closed: the domain is gone. */
	CHECK_NULL_ERRNO(xrcd_open(ctx, fd, 0), EAGAIN);

	/* A handle never handed out. (Closing one twice cannot be tried: verbs.h's inline
	 * ibv_close_xrcd reads xrcd->context from the freed handle before the library sees it.) */
	struct ibv_xrcd fake = {.context = ctx};
	CHECK_RET(ibv_close_xrcd(&fake), EINVAL);

	/* A domain of another context is refused (each context is its own HCA). */
	struct ibv_context *other = open_ctx();
	struct ibv_xrcd *xo = xrcd_open(other, fd, O_CREAT);
	CHECK(xo != NULL, "the file's domain on another context: errno %d", errno);
	CHECK_NULL_ERRNO(xrc_srq(ctx, pd, xo, cq), EINVAL);
	CHECK_NULL_ERRNO(tgt_qp(ctx, xo), EINVAL);
	CHECK_RET(ibv_close_xrcd(xo), 0);
	CHECK(ibv_close_device(other) == 0, "close the other context");

	close(fd);
	close(fd2);
	unlink(path);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* ---- XRC SRQs -------------------------------------------------------------------------- */

static void srqs(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_xrcd *x = xrcd_open(ctx, -1, 0);
	if (!pd || !cq || !x)
		DIE("pd/cq/xrcd");
	static uint8_t buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		DIE("mr");

	struct ibv_srq_init_attr_ex a = {0};
	a.attr.max_wr = 8;
	a.attr.max_sge = 1;
	a.srq_type = IBV_SRQT_XRC;
	a.xrcd = x;
	a.cq = cq;
	a.pd = pd;
	uint32_t all = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
		       IBV_SRQ_INIT_ATTR_PD;
	a.comp_mask = all & ~IBV_SRQ_INIT_ATTR_CQ;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(ctx, &a), EINVAL);
	a.comp_mask = all & ~IBV_SRQ_INIT_ATTR_XRCD;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(ctx, &a), EINVAL);
	a.comp_mask = all & ~IBV_SRQ_INIT_ATTR_PD;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(ctx, &a), EINVAL);
	a.comp_mask = all | IBV_SRQ_INIT_ATTR_RESERVED;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(ctx, &a), EOPNOTSUPP);
	a.comp_mask = all;
	a.srq_type = IBV_SRQT_TM;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(ctx, &a), EOPNOTSUPP);
	a.srq_type = IBV_SRQT_XRC;
	a.xrcd = NULL;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(ctx, &a), EINVAL);
	struct ibv_xrcd fake_x = {.context = ctx};
	a.xrcd = &fake_x;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(ctx, &a), EINVAL);
	a.xrcd = x;
	a.cq = NULL;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(ctx, &a), EINVAL);
	a.cq = cq;

	struct ibv_srq *s1 = ibv_create_srq_ex(ctx, &a);
	struct ibv_srq *s2 = xrc_srq(ctx, pd, x, cq);
	struct ibv_srq_init_attr ba = {0};
	ba.attr.max_wr = 4;
	ba.attr.max_sge = 1;
	struct ibv_srq *basic = ibv_create_srq(pd, &ba);
	if (!s1 || !s2 || !basic)
		DIE("srqs");
	CHECK(a.attr.max_wr >= 8 && a.attr.max_sge >= 1, "XRC SRQ caps %u/%u", a.attr.max_wr,
	      a.attr.max_sge);

	/* Every SRQ has a number; they differ. */
	uint32_t n1 = 0, n2 = 0, nb = 0;
	CHECK_RET(ibv_get_srq_num(s1, &n1), 0);
	CHECK_RET(ibv_get_srq_num(s2, &n2), 0);
	CHECK_RET(ibv_get_srq_num(basic, &nb), 0);
	CHECK(n1 && n2 && nb && n1 != n2 && n1 != nb && n2 != nb && n1 < (1u << 24),
	      "SRQ numbers %u %u %u", n1, n2, nb);
	CHECK_RET(ibv_get_srq_num(s1, NULL), EINVAL);
	struct ibv_srq fake_s = {0};
	fake_s.context = ctx;
	uint32_t nf = 0;
	CHECK_RET(ibv_get_srq_num(&fake_s, &nf), EINVAL);

	/* modify / query / post on an XRC SRQ. */
	struct ibv_srq_attr sa = {0};
	sa.srq_limit = 2;
	CHECK_RET(ibv_modify_srq(s1, &sa, IBV_SRQ_LIMIT), 0);
	memset(&sa, 0, sizeof(sa));
	CHECK_RET(ibv_query_srq(s1, &sa), 0);
	CHECK(sa.srq_limit == 2 && sa.max_wr >= 8, "queried limit %u max_wr %u", sa.srq_limit,
	      sa.max_wr);
	post_srq_buf(s1, mr, 0, 64, 1);
	post_srq_buf(s1, mr, 64, 64, 2);

	/* An XRC SRQ is reached only through its domain: an RC QP does not take it. */
	struct ibv_qp_init_attr qa = {0};
	qa.send_cq = cq;
	qa.recv_cq = cq;
	qa.srq = s1;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 4;
	qa.cap.max_send_sge = 1;
	CHECK_NULL_ERRNO(ibv_create_qp(pd, &qa), EINVAL);

	/* The SRQ's CQ, PD and domain are in use. */
	CHECK_RET(ibv_destroy_cq(cq), EBUSY);
	CHECK_RET(ibv_close_xrcd(x), EBUSY);
	CHECK_RET(ibv_destroy_srq(s1), 0);
	CHECK_RET(ibv_destroy_srq(s1), EINVAL);
	CHECK_RET(ibv_destroy_srq(s2), 0);
	CHECK_RET(ibv_destroy_srq(basic), 0);
	CHECK_RET(ibv_close_xrcd(x), 0);
	CHECK_RET(ibv_dereg_mr(mr), 0);
	CHECK_RET(ibv_destroy_cq(cq), 0);
	CHECK_RET(ibv_dealloc_pd(pd), 0);
	ibv_close_device(ctx);
}

/* ---- XRC QPs ---------------------------------------------------------------------------- */

static void qps(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_xrcd *x = xrcd_open(ctx, -1, 0);
	struct ibv_xrcd *other = xrcd_open(ctx, -1, 0);
	if (!pd || !cq || !x || !other)
		DIE("pd/cq/xrcd");

	/* Target: needs its domain; has no send queue. */
	struct ibv_qp_init_attr_ex a = {0};
	a.qp_type = IBV_QPT_XRC_RECV;
	a.comp_mask = IBV_QP_INIT_ATTR_PD; /* the inline wrapper routes this to ibv_create_qp */
	a.pd = pd;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &a), EINVAL);
	a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	a.xrcd = NULL;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &a), EINVAL);
	struct ibv_xrcd fake_x = {.context = ctx};
	a.xrcd = &fake_x;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &a), EINVAL);
	a.xrcd = x;
	a.comp_mask = IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.send_ops_flags = IBV_QP_EX_WITH_SEND;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &a), EOPNOTSUPP);
	/* What a target does not have is not looked at (perftest passes receive capabilities). */
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_XRC_RECV;
	a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	a.xrcd = x;
	a.cap.max_recv_wr = 512;
	a.cap.max_recv_sge = 1;
	a.send_cq = (struct ibv_cq *)(uintptr_t)0x10; /* garbage: not used */
	a.qp_context = &a;
	struct ibv_qp *t = ibv_create_qp_ex(ctx, &a);
	CHECK(t != NULL, "target: errno %d", errno);
	if (!t)
		DIE("target");
	CHECK(t->qp_type == IBV_QPT_XRC_RECV && t->state == IBV_QPS_RESET && t->pd == NULL &&
		      t->send_cq == NULL && t->recv_cq == NULL && t->srq == NULL &&
		      t->qp_context == &a && t->context == ctx,
	      "target ibv_qp: type %d state %d pd %p cqs %p %p srq %p", t->qp_type, t->state,
	      (void *)t->pd, (void *)t->send_cq, (void *)t->recv_cq, (void *)t->srq);

	/* Initiator: needs a PD and a send CQ; no receive CQ, no receive queue. */
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_XRC_SEND;
	a.send_cq = cq;
	a.cap.max_send_wr = 4;
	a.cap.max_send_sge = 1;
	a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	a.xrcd = x;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &a), EINVAL);
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	a.send_cq = NULL;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &a), EINVAL);
	struct ibv_qp *i = ini_qp(ctx, pd, cq, 0);
	CHECK(i != NULL && i->qp_type == IBV_QPT_XRC_SEND && i->recv_cq == NULL,
	      "initiator: %p errno %d", (void *)i, errno);
	if (!i)
		DIE("initiator");
	struct ibv_qp *ix = ini_qp(ctx, pd, cq, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE);
	CHECK(ix != NULL && ibv_qp_to_qp_ex(ix) != NULL, "initiator with send_ops: errno %d",
	      errno);

	/* Receives: neither half has a receive queue. Sends: a target has no send queue. */
	static uint8_t buf[256];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		DIE("mr");
	struct ibv_sge sge = {(uintptr_t)buf, 16, mr->lkey};
	struct ibv_recv_wr rwr = {0}, *rbad = NULL;
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	CHECK(ibv_post_recv(i, &rwr, &rbad) != 0 && rbad == &rwr, "post_recv on an initiator");
	rbad = NULL;
	CHECK(ibv_post_recv(t, &rwr, &rbad) != 0 && rbad == &rwr, "post_recv on a target");
	struct ibv_send_wr swr = {0}, *sbad = NULL;
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	CHECK(ibv_post_send(t, &swr, &sbad) != 0 && sbad == &swr, "post_send on a target");

	/* query: a target names no PD, CQ or SRQ. */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	memset(&qi, 0xab, sizeof(qi));
	CHECK_RET(ibv_query_qp(t, &qa, IBV_QP_STATE, &qi), 0);
	CHECK(qa.qp_state == IBV_QPS_RESET && qi.qp_type == IBV_QPT_XRC_RECV &&
		      qi.send_cq == NULL && qi.recv_cq == NULL && qi.srq == NULL &&
		      qi.cap.max_send_wr == 0 && qi.cap.max_recv_wr == 0,
	      "target query: state %d type %d cqs %p %p srq %p caps %u/%u", qa.qp_state,
	      qi.qp_type, (void *)qi.send_cq, (void *)qi.recv_cq, (void *)qi.srq,
	      qi.cap.max_send_wr, qi.cap.max_recv_wr);
	memset(&qi, 0xab, sizeof(qi));
	CHECK_RET(ibv_query_qp(i, &qa, IBV_QP_STATE, &qi), 0);
	CHECK(qi.qp_type == IBV_QPT_XRC_SEND && qi.send_cq == cq && qi.recv_cq == NULL &&
		      qi.cap.max_send_wr >= 4 && qi.cap.max_recv_wr == 0,
	      "initiator query: type %d send_cq %p recv_cq %p caps %u/%u", qi.qp_type,
	      (void *)qi.send_cq, (void *)qi.recv_cq, qi.cap.max_send_wr, qi.cap.max_recv_wr);

	/* The kernel's transition table: an initiator's RTR wants no responder attributes but
	 * ignores them; a target's RTS ignores the requester's. Both reach RTS either way. */
	connect_qp(ctx, i, t->qp_num, 1);
	connect_qp(ctx, t, i->qp_num, 1);
	CHECK_RET(ibv_query_qp(t, &qa, IBV_QP_STATE, &qi), 0);
	CHECK(qa.qp_state == IBV_QPS_RTS && t->state == IBV_QPS_RTS, "target state %d",
	      qa.qp_state);
	/* A missing required attribute is still refused: RTR of a fresh initiator without
	 * DEST_QPN. */
	struct ibv_qp *i2 = ini_qp(ctx, pd, cq, 0);
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	CHECK_RET(ibv_modify_qp(i2, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						 IBV_QP_ACCESS_FLAGS),
		  0);
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	CHECK(ibv_modify_qp(i2, &at, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_RQ_PSN) != 0,
	      "RTR without AV and DEST_QPN accepted");

	/* The domain is busy while its target QP lives. */
	CHECK_RET(ibv_close_xrcd(x), EBUSY);
	CHECK_RET(ibv_close_xrcd(other), 0);
	CHECK_RET(ibv_destroy_qp(t), 0);
	CHECK_RET(ibv_destroy_qp(t), EINVAL);
	CHECK_RET(ibv_close_xrcd(x), 0);
	CHECK_RET(ibv_destroy_qp(i), 0);
	CHECK_RET(ibv_destroy_qp(i2), 0);
	CHECK_RET(ibv_destroy_qp(ix), 0);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* ---- ibv_open_qp ------------------------------------------------------------------------- */

static struct ibv_qp *open_tgt(struct ibv_context *ctx, struct ibv_xrcd *x, uint32_t qpn,
			       uint32_t mask, enum ibv_qp_type type)
{
	struct ibv_qp_open_attr o = {0};
	o.comp_mask = mask;
	o.qp_num = qpn;
	o.xrcd = x;
	o.qp_type = type;
	o.qp_context = (void *)(uintptr_t)0x5eed;
	return ibv_open_qp(ctx, &o);
}

static void open_qp(void)
{
	struct ibv_context *ctx = open_ctx();
	char path[64];
	int fd = domain_file(path, sizeof(path));
	struct ibv_xrcd *x1 = xrcd_open(ctx, fd, O_CREAT);
	struct ibv_xrcd *x2 = xrcd_open(ctx, fd, O_CREAT); /* the same domain */
	struct ibv_xrcd *other = xrcd_open(ctx, -1, 0);
	if (!x1 || !x2 || !other)
		DIE("xrcds");
	struct ibv_qp *t = tgt_qp(ctx, x1);
	if (!t)
		DIE("target");
	uint32_t all = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_CONTEXT |
		       IBV_QP_OPEN_ATTR_TYPE;
	CHECK_NULL_ERRNO(open_tgt(ctx, x2, t->qp_num, all & ~IBV_QP_OPEN_ATTR_NUM,
				  IBV_QPT_XRC_RECV),
			 EINVAL);
	CHECK_NULL_ERRNO(open_tgt(ctx, x2, t->qp_num, all & ~IBV_QP_OPEN_ATTR_XRCD,
				  IBV_QPT_XRC_RECV),
			 EINVAL);
	CHECK_NULL_ERRNO(open_tgt(ctx, x2, t->qp_num, all & ~IBV_QP_OPEN_ATTR_TYPE,
				  IBV_QPT_XRC_RECV),
			 EINVAL);
	CHECK_NULL_ERRNO(open_tgt(ctx, x2, t->qp_num, all | IBV_QP_OPEN_ATTR_RESERVED,
				  IBV_QPT_XRC_RECV),
			 EOPNOTSUPP);
	CHECK_NULL_ERRNO(open_tgt(ctx, x2, t->qp_num, all, IBV_QPT_RC), EINVAL);
	CHECK_NULL_ERRNO(open_tgt(ctx, x2, t->qp_num, all, IBV_QPT_XRC_SEND), EINVAL);
	CHECK_NULL_ERRNO(open_tgt(ctx, NULL, t->qp_num, all, IBV_QPT_XRC_RECV), EINVAL);
	CHECK_NULL_ERRNO(open_tgt(ctx, other, t->qp_num, all, IBV_QPT_XRC_RECV), EINVAL);
	CHECK_NULL_ERRNO(open_tgt(ctx, x2, t->qp_num + 1000, all, IBV_QPT_XRC_RECV), EINVAL);
	CHECK_NULL_ERRNO(open_tgt(ctx, x2, t->qp_num | (1u << 24), all, IBV_QPT_XRC_RECV),
			 EINVAL);
	CHECK_NULL_ERRNO(ibv_open_qp(ctx, NULL), EINVAL);

	/* Through the other handle of the same domain (CONTEXT is optional). */
	struct ibv_qp *o = open_tgt(ctx, x2, t->qp_num, all & ~IBV_QP_OPEN_ATTR_CONTEXT,
				    IBV_QPT_XRC_RECV);
	CHECK(o != NULL, "ibv_open_qp: errno %d", errno);
	if (!o)
		DIE("open_qp");
	CHECK(o != t && o->qp_num == t->qp_num && o->qp_type == IBV_QPT_XRC_RECV &&
		      o->state == IBV_QPS_UNKNOWN && o->context == ctx && o->pd == NULL &&
		      o->send_cq == NULL && o->recv_cq == NULL && o->srq == NULL,
	      "opened qp: num %u type %d state %d", o->qp_num, o->qp_type, o->state);
	/* One QP: a modify through either is seen through the other. */
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	CHECK_RET(ibv_modify_qp(o, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						IBV_QP_ACCESS_FLAGS),
		  0);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK_RET(ibv_query_qp(t, &qa, IBV_QP_STATE, &qi), 0);
	CHECK(qa.qp_state == IBV_QPS_INIT && (qa.qp_access_flags & IBV_ACCESS_REMOTE_WRITE),
	      "creator sees state %d", qa.qp_state);
	/* Each handle holds the domain through its own QP. */
	CHECK_RET(ibv_close_xrcd(x2), EBUSY);
	/* The creator lets go: the QP lives on for the opener, unchanged. */
	CHECK_RET(ibv_destroy_qp(t), 0);
	CHECK_RET(ibv_close_xrcd(x1), 0);
	CHECK_RET(ibv_query_qp(o, &qa, IBV_QP_STATE, &qi), 0);
	CHECK(qa.qp_state == IBV_QPS_INIT && o->state == IBV_QPS_INIT,
	      "opener after the creator's destroy: state %d", qa.qp_state);
	/* The opener's open of its own QP again, then both go: the QP is gone. */
	struct ibv_qp *o2 = open_tgt(ctx, x2, o->qp_num, all, IBV_QPT_XRC_RECV);
	CHECK(o2 != NULL && o2->qp_context == (void *)(uintptr_t)0x5eed,
	      "second open: errno %d", errno);
	uint32_t qpn = o->qp_num;
	CHECK_RET(ibv_destroy_qp(o), 0);
	CHECK_RET(ibv_destroy_qp(o), EINVAL);
	CHECK_RET(ibv_query_qp(o2, &qa, IBV_QP_STATE, &qi), 0);
	CHECK_RET(ibv_destroy_qp(o2), 0);
	CHECK_NULL_ERRNO(open_tgt(ctx, x2, qpn, all, IBV_QPT_XRC_RECV), EINVAL);
	CHECK_RET(ibv_close_xrcd(x2), 0);
	CHECK_RET(ibv_close_xrcd(other), 0);
	close(fd);
	unlink(path);
	ibv_close_device(ctx);
}

/* ---- traffic ------------------------------------------------------------------------------ */

/* Waits up to `secs` for async events of `type` on qps[0..n); returns a bit per QP that got
 * one. Other events are acknowledged and skipped. */
static unsigned async_events_for(struct ibv_context *ctx, struct ibv_qp **qps, int n, int type,
				 double secs)
{
	int fl = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	double end = now() + secs;
	unsigned got = 0, all = (1u << n) - 1;
	while (got != all && now() < end) {
		struct ibv_async_event ev;
		if (ibv_get_async_event(ctx, &ev)) {
			usleep(1000);
			continue;
		}
		for (int k = 0; k < n; k++)
			if ((int)ev.event_type == type && ev.element.qp == qps[k])
				got |= 1u << k;
		ibv_ack_async_event(&ev);
	}
	fcntl(ctx->async_fd, F_SETFL, fl);
	return got;
}

/* Waits up to `secs` for an async event of `type` on `srq`; 1 if it came. */
static int srq_event_for(struct ibv_context *ctx, struct ibv_srq *srq, int type, double secs)
{
	int fl = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	double end = now() + secs;
	int got = 0;
	while (!got && now() < end) {
		struct ibv_async_event ev;
		if (ibv_get_async_event(ctx, &ev)) {
			usleep(1000);
			continue;
		}
		got = (int)ev.event_type == type && ev.element.srq == srq;
		ibv_ack_async_event(&ev);
	}
	fcntl(ctx->async_fd, F_SETFL, fl);
	return got;
}

static void traffic(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	struct ibv_cq *c1 = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	struct ibv_cq *c2 = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	struct ibv_cq *c3 = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	if (!pd || !scq || !c1 || !c2 || !c3)
		DIE("pd/cqs");
	size_t len = 1 << 16;
	uint8_t *buf = aligned_alloc(4096, len);
	memset(buf, 0, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ);
	if (!mr)
		DIE("mr");

	/* One domain through two handles of one file; SRQ 1 made through the first, SRQ 2
	 * through the second, the target through the first. */
	char path[64];
	int fd = domain_file(path, sizeof(path));
	struct ibv_xrcd *x1 = xrcd_open(ctx, fd, O_CREAT);
	struct ibv_xrcd *x2 = xrcd_open(ctx, fd, O_CREAT);
	struct ibv_xrcd *priv = xrcd_open(ctx, -1, 0);
	if (!x1 || !x2 || !priv)
		DIE("xrcds");
	struct ibv_srq *s1 = xrc_srq(ctx, pd, x1, c1);
	struct ibv_srq *s2 = xrc_srq(ctx, pd, x2, c2);
	struct ibv_srq *s3 = xrc_srq(ctx, pd, priv, c3); /* another domain */
	if (!s1 || !s2 || !s3)
		DIE("srqs");
	uint32_t n1, n2, n3;
	if (ibv_get_srq_num(s1, &n1) || ibv_get_srq_num(s2, &n2) || ibv_get_srq_num(s3, &n3))
		DIE("srq nums");
	struct ibv_qp *t = tgt_qp(ctx, x1);
	struct ibv_qp *i = ini_qp(ctx, pd, scq, 0);
	if (!t || !i)
		DIE("qps");
	connect_qp(ctx, i, t->qp_num, 0);
	connect_qp(ctx, t, i->qp_num, 0);

	/* A 3000-byte SEND (three packets at MTU 1024) to each SRQ: each lands in its own SRQ's
	 * buffer and completes on its own CQ, naming the target QP. */
	fill(buf, 3000, 7);
	fill(buf + 3000, 3000, 9);
	post_srq_buf(s1, mr, 0x4000, 4096, 11);
	post_srq_buf(s2, mr, 0x6000, 4096, 22);
	CHECK(xrc_send(i, scq, mr, 0, 3000, n1, 1) == IBV_WC_SUCCESS, "send to SRQ 1");
	CHECK(xrc_send(i, scq, mr, 3000, 3000, n2, 2) == IBV_WC_SUCCESS, "send to SRQ 2");
	struct ibv_wc wc;
	CHECK(poll_one(c1, &wc, 5.0) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 11 &&
		      wc.opcode == IBV_WC_RECV && wc.byte_len == 3000 && wc.qp_num == t->qp_num,
	      "SRQ 1 completion: status %d wr_id %" PRIu64 " len %u qp_num %u (target %u)",
	      wc.status, wc.wr_id, wc.byte_len, wc.qp_num, t->qp_num);
	CHECK(poll_one(c2, &wc, 5.0) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 22 &&
		      wc.byte_len == 3000 && wc.qp_num == t->qp_num,
	      "SRQ 2 completion: status %d wr_id %" PRIu64 " len %u", wc.status, wc.wr_id,
	      wc.byte_len);
	CHECK(memcmp(buf + 0x4000, buf, 3000) == 0, "SRQ 1 data");
	CHECK(memcmp(buf + 0x6000, buf + 3000, 3000) == 0, "SRQ 2 data");
	CHECK(ibv_poll_cq(c1, 1, &wc) == 0 && ibv_poll_cq(c2, 1, &wc) == 0, "one each");

	/* The ibv_wr_* interface: ibv_wr_set_xrc_srqn names the SRQ; RDMA WRITE and READ go
	 * through the target too, checked in the SRQ's PD. */
	struct ibv_qp *ix = ini_qp(ctx, pd, scq,
				   IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
					   IBV_QP_EX_WITH_RDMA_READ);
	struct ibv_qp *tx = tgt_qp(ctx, x2);
	if (!ix || !tx)
		DIE("ex qps");
	connect_qp(ctx, ix, tx->qp_num, 0);
	connect_qp(ctx, tx, ix->qp_num, 0);
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(ix);
	fill(buf + 0x8000, 2000, 3);
	post_srq_buf(s1, mr, 0xa000, 4096, 33);
	ibv_wr_start(qx);
	qx->wr_id = 5;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_xrc_srqn(qx, n1);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 0x8000, 2000);
	qx->wr_id = 6;
	ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 0xc000);
	ibv_wr_set_xrc_srqn(qx, n2);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 0x8000, 2000);
	qx->wr_id = 7;
	ibv_wr_rdma_read(qx, mr->rkey, (uintptr_t)buf + 0xc000);
	ibv_wr_set_xrc_srqn(qx, n2);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 0xe000, 2000);
	CHECK_RET(ibv_wr_complete(qx), 0);
	for (uint64_t id = 5; id <= 7; id++) {
		CHECK(poll_one(scq, &wc, 5.0) && wc.status == IBV_WC_SUCCESS && wc.wr_id == id,
		      "ibv_wr_* completion %" PRIu64 ": status %d wr_id %" PRIu64, id, wc.status,
		      wc.wr_id);
	}
	CHECK(poll_one(c1, &wc, 5.0) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 33 &&
		      wc.byte_len == 2000 && wc.qp_num == tx->qp_num,
	      "ibv_wr_send into SRQ 1: status %d wr_id %" PRIu64 " qp_num %u", wc.status,
	      wc.wr_id, wc.qp_num);
	CHECK(memcmp(buf + 0xa000, buf + 0x8000, 2000) == 0, "ibv_wr_send data");
	CHECK(memcmp(buf + 0xc000, buf + 0x8000, 2000) == 0, "RDMA WRITE data");
	CHECK(memcmp(buf + 0xe000, buf + 0x8000, 2000) == 0, "RDMA READ data");
	CHECK(ibv_poll_cq(c2, 1, &wc) == 0, "WRITE/READ consume no receive");
	/* ibv_wr_set_xrc_srqn on a QP that is no XRC initiator fails the batch. */
	struct ibv_qp_init_attr_ex ra = {0};
	ra.qp_type = IBV_QPT_RC;
	ra.send_cq = scq;
	ra.recv_cq = scq;
	ra.cap.max_send_wr = 4;
	ra.cap.max_send_sge = 1;
	ra.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ra.pd = pd;
	ra.send_ops_flags = IBV_QP_EX_WITH_SEND;
	struct ibv_qp *rc = ibv_create_qp_ex(ctx, &ra);
	if (!rc)
		DIE("rc qp");
	struct ibv_qp_ex *rx = ibv_qp_to_qp_ex(rc);
	ibv_wr_start(rx);
	ibv_wr_send(rx);
	ibv_wr_set_xrc_srqn(rx, n1);
	ibv_wr_set_sge(rx, mr->lkey, (uintptr_t)buf, 8);
	CHECK_RET(ibv_wr_complete(rx), EOPNOTSUPP);
	CHECK_RET(ibv_destroy_qp(rc), 0);

	/* ibv_open_qp: the creator of target t lets go; the opener keeps it working. */
	struct ibv_qp_open_attr oa = {0};
	oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
	oa.qp_num = t->qp_num;
	oa.xrcd = x2;
	oa.qp_type = IBV_QPT_XRC_RECV;
	struct ibv_qp *o = ibv_open_qp(ctx, &oa);
	CHECK(o != NULL, "ibv_open_qp: errno %d", errno);
	if (!o)
		DIE("open_qp");
	uint32_t tqpn = t->qp_num;
	CHECK_RET(ibv_destroy_qp(t), 0);
	fill(buf + 0x1000, 1500, 5);
	post_srq_buf(s2, mr, 0x2000, 2048, 44);
	CHECK(xrc_send(i, scq, mr, 0x1000, 1500, n2, 3) == IBV_WC_SUCCESS,
	      "send through the opened target");
	CHECK(poll_one(c2, &wc, 5.0) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 44 &&
		      wc.qp_num == tqpn,
	      "opened target's completion: status %d qp_num %u want %u", wc.status, wc.qp_num,
	      tqpn);
	CHECK(memcmp(buf + 0x2000, buf + 0x1000, 1500) == 0, "data through the opened target");

	/* An XRC SRQ's limit event: three receives, limit 2, two messages. */
	for (uint64_t k = 0; k < 3; k++)
		post_srq_buf(s1, mr, 0x2000 + k * 256, 256, 60 + k);
	struct ibv_srq_attr lim = {.srq_limit = 2};
	CHECK_RET(ibv_modify_srq(s1, &lim, IBV_SRQ_LIMIT), 0);
	CHECK(xrc_send(i, scq, mr, 0, 100, n1, 8) == IBV_WC_SUCCESS, "limit send 1");
	CHECK(xrc_send(i, scq, mr, 0, 100, n1, 9) == IBV_WC_SUCCESS, "limit send 2");
	for (uint64_t k = 0; k < 2; k++)
		CHECK(poll_one(c1, &wc, 5.0) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 60 + k,
		      "limit receive %" PRIu64 ": status %d wr_id %" PRIu64, k, wc.status, wc.wr_id);
	CHECK(srq_event_for(ctx, s1, IBV_EVENT_SRQ_LIMIT_REACHED, 5.0),
	      "IBV_EVENT_SRQ_LIMIT_REACHED for the XRC SRQ");
	CHECK_RET(ibv_query_srq(s1, &lim), 0);
	CHECK(lim.srq_limit == 0, "the limit disarms once reached: %u", lim.srq_limit);

	/* A second holder, then an SRQ of another domain named: the target refuses it
	 * (NAK-Invalid RD Request, the initiator's IBV_WC_REM_INV_RD_REQ_ERR), nothing lands in
	 * that SRQ, and every holder of the target gets the QP's async error. */
	struct ibv_qp *o2 = ibv_open_qp(ctx, &oa);
	CHECK(o2 != NULL, "second ibv_open_qp: errno %d", errno);
	post_srq_buf(s3, mr, 0x3000, 1024, 55);
	int st = xrc_send(i, scq, mr, 0, 64, n3, 4);
	CHECK(st == IBV_WC_REM_INV_RD_REQ_ERR, "send to another domain's SRQ: status %d (%s)",
	      st, st >= 0 ? ibv_wc_status_str(st) : "none");
	CHECK(ibv_poll_cq(c3, 1, &wc) == 0, "nothing lands in the other domain's SRQ");
	struct ibv_qp *holders[2] = {o, o2};
	unsigned got = async_events_for(ctx, holders, 2, IBV_EVENT_QP_REQ_ERR, 5.0);
	CHECK(got == 3, "IBV_EVENT_QP_REQ_ERR for each holder: got mask %u", got);

	CHECK_RET(ibv_destroy_qp(o), 0);
	CHECK_RET(ibv_destroy_qp(o2), 0);
	CHECK_RET(ibv_destroy_qp(i), 0);
	CHECK_RET(ibv_destroy_qp(ix), 0);
	CHECK_RET(ibv_destroy_qp(tx), 0);
	CHECK_RET(ibv_destroy_srq(s1), 0);
	CHECK_RET(ibv_destroy_srq(s2), 0);
	CHECK_RET(ibv_destroy_srq(s3), 0);
	CHECK_RET(ibv_close_xrcd(x1), 0);
	CHECK_RET(ibv_close_xrcd(x2), 0);
	CHECK_RET(ibv_close_xrcd(priv), 0);
	CHECK_RET(ibv_dereg_mr(mr), 0);
	free(buf);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(c1);
	ibv_destroy_cq(c2);
	ibv_destroy_cq(c3);
	ibv_dealloc_pd(pd);
	close(fd);
	unlink(path);
	ibv_close_device(ctx);
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{"domains", domains},
	{"srqs", srqs},
	{"qps", qps},
	{"open_qp", open_qp},
	{"traffic", traffic},
};

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc != 2) {
		fprintf(stderr, "usage: xrc_cases CASE\n");
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
