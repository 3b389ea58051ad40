/*
 * ibv_rereg_mr(3) on softib, as an unmodified rdma-core 44 program calls it. Built by
 * tests/mr_rereg.rs against the installed <infiniband/verbs.h>, linked with -libverbs and run
 * on softib's libibverbs.so.1. `mr_rereg CASE` runs one case and exits 0 only if every check
 * held; each failed check is printed.
 *
 * What the man page and libibverbs say: IBV_REREG_MR_CHANGE_TRANSLATION / _PD / _ACCESS
 * change the region's address and length, PD and access rights; libibverbs' own input errors
 * return IBV_REREG_MR_ERR_INPUT with errno EINVAL and the region unchanged; the kernel's
 * return IBV_REREG_MR_ERR_CMD with its errno. The keys stay (as on rxe), and from the call on
 * the target's checks (R_Key, PD, access, bounds) are those of the new registration.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "check.h"

#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* The region's visible fields, to compare before and after a failed call. */
struct mr_view {
	struct ibv_pd *pd;
	void *addr;
	size_t length;
	uint32_t lkey, rkey;
};

static struct mr_view view(struct ibv_mr *mr)
{
	struct mr_view v = {mr->pd, mr->addr, mr->length, mr->lkey, mr->rkey};
	return v;
}

static int same(struct mr_view a, struct mr_view b)
{
	return a.pd == b.pd && a.addr == b.addr && a.length == b.length && a.lkey == b.lkey &&
	       a.rkey == b.rkey;
}

/* ibv_rereg_mr returned `want` (an IBV_REREG_MR_ERR_* code) with errno `werr`, and the
 * region's fields are unchanged. */
#define CHECK_REREG_FAILS(mr, want, werr, ...)                                              \
	do {                                                                                    \
		struct mr_view b_ = view(mr);                                                       \
		errno = 0;                                                                          \
		int r_ = ibv_rereg_mr((mr), __VA_ARGS__);                                           \
		int e_ = errno;                                                                     \
		CHECK(r_ == (want) && e_ == (werr), "ibv_rereg_mr(%s) returned %d errno %d (%s), " \
		      "want %s and %s", #__VA_ARGS__, r_, e_, strerror(e_), #want, #werr);          \
		CHECK(same(b_, view(mr)), "ibv_rereg_mr(%s) changed the region", #__VA_ARGS__);     \
	} while (0)

/* ---- an RC pair on one context, requester `a`, target `b` ---- */

struct pair {
	struct ibv_cq *scq, *tcq;
	struct ibv_qp *a, *b;
};

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
	struct ibv_qp_attr at = {0};
	if (ibv_query_gid(ctx, 1, 0, &at.ah_attr.grh.dgid))
		DIE("ibv_query_gid");
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = dqpn;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 12;
	at.ah_attr.is_global = 1;
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

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {0};
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 8;
	ia.cap.max_recv_wr = 8;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		DIE("ibv_create_qp");
	return qp;
}

/* A new connected pair: requester on pa, target on pb (both PDs of ctx). */
static void pair_up(struct pair *p, struct ibv_context *ctx, struct ibv_pd *pa,
		    struct ibv_pd *pb)
{
	p->scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	p->tcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!p->scq || !p->tcq)
		DIE("ibv_create_cq");
	p->a = rc_qp(pa, p->scq);
	p->b = rc_qp(pb, p->tcq);
	to_init(p->a);
	to_init(p->b);
	to_rts(ctx, p->a, p->b->qp_num);
	to_rts(ctx, p->b, p->a->qp_num);
}

static void pair_down(struct pair *p)
{
	if (ibv_destroy_qp(p->a) || ibv_destroy_qp(p->b) || ibv_destroy_cq(p->scq) ||
	    ibv_destroy_cq(p->tcq))
		DIE("pair_down");
}

static const char *st(int s)
{
	return s < 0 ? "no completion" : ibv_wc_status_str((enum ibv_wc_status)s);
}

/* One signaled RDMA WRITE (READ if `read`) of `len` bytes between local [lkey, laddr] and
 * remote [rkey, raddr] on a new pair; its completion status (-1: none in 5 s). */
static int one_sided(struct ibv_context *ctx, struct ibv_pd *pa, struct ibv_pd *pb, int read,
		     void *laddr, uint32_t lkey, uint32_t len, void *raddr, uint32_t rkey)
{
	struct pair p;
	pair_up(&p, ctx, pa, pb);
	struct ibv_sge sge = {(uintptr_t)laddr, len, lkey};
	struct ibv_send_wr wr = {0}, *bad;
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)raddr;
	wr.wr.rdma.rkey = rkey;
	int s = -1;
	if (ibv_post_send(p.a, &wr, &bad))
		DIE("ibv_post_send");
	struct ibv_wc wc;
	if (poll_one(p.scq, &wc, 5.0))
		s = wc.status;
	usleep(10000);
	pair_down(&p);
	return s;
}

/* ===================================== cases ===================================== */

/* libibverbs' input errors (IBV_REREG_MR_ERR_INPUT, EINVAL) and the kernel's
 * (IBV_REREG_MR_ERR_CMD with its errno), each leaving the region as it was and working. */
static void bad_input(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *other = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_pd *dead = ibv_alloc_pd(ctx);
	struct ibv_pd *foreign = ibv_alloc_pd(other);
	if (!pd || !dead || !foreign || ibv_dealloc_pd(dead))
		DIE("setup");
	static unsigned char target[256], local[256];
	struct ibv_mr *mr = ibv_reg_mr(pd, target, sizeof(target), RW);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, sizeof(local), IBV_ACCESS_LOCAL_WRITE);
	long page = sysconf(_SC_PAGESIZE);
	unsigned char *none = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned char *ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!mr || !lmr || none == MAP_FAILED || ro == MAP_FAILED)
		DIE("setup");

	/* libibverbs: unknown flags, a translation without address or length, access rights
	 * without IBV_REREG_MR_CHANGE_ACCESS, no region at all. */
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_INPUT, EINVAL, 8, NULL, NULL, 0, 0);
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_INPUT, EINVAL, -1, NULL, NULL, 0, 0);
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_INPUT, EINVAL, IBV_REREG_MR_CHANGE_TRANSLATION,
			  NULL, NULL, 64, 0);
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_INPUT, EINVAL, IBV_REREG_MR_CHANGE_TRANSLATION,
			  NULL, target, 0, 0);
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_INPUT, EINVAL, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0,
			  IBV_ACCESS_LOCAL_WRITE);
	errno = 0;
	CHECK(ibv_rereg_mr(NULL, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0) ==
		      IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "ibv_rereg_mr(NULL): errno %d", errno);

	/* The kernel: no change asked, a PD that is NULL, deallocated or of another context,
	 * access a registration refuses (remote write without local write: EINVAL; memory
	 * windows, which softib has not: EOPNOTSUPP), memory that cannot be pinned (EFAULT):
	 * unmapped, read-only for a writable region, or the region's own read-only memory when
	 * the new rights write. */
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_CMD, EINVAL, 0, NULL, NULL, 0, 0);
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_CMD, EINVAL, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0);
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_CMD, EINVAL, IBV_REREG_MR_CHANGE_PD, dead, NULL, 0, 0);
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_CMD, EINVAL, IBV_REREG_MR_CHANGE_PD, foreign, NULL, 0,
			  0);
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_CMD, EINVAL, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			  IBV_ACCESS_REMOTE_WRITE);
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_CMD, EOPNOTSUPP, IBV_REREG_MR_CHANGE_ACCESS, NULL,
			  NULL, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_CMD, EFAULT, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
			  none, page, 0);
	CHECK_REREG_FAILS(mr, IBV_REREG_MR_ERR_CMD, EFAULT, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, ro,
			  page, 0);
	struct ibv_mr *romr = ibv_reg_mr(pd, ro, page, IBV_ACCESS_REMOTE_READ);
	if (!romr)
		DIE("ibv_reg_mr read-only");
	CHECK_REREG_FAILS(romr, IBV_REREG_MR_ERR_CMD, EFAULT, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL,
			  0, RW);
	/* Read-only memory for a read-only region is fine. */
	CHECK(ibv_rereg_mr(romr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0) == 0,
	      "ibv_rereg_mr of a read-only region to no rights: errno %d", errno);
	CHECK(ibv_dereg_mr(romr) == 0, "ibv_dereg_mr");

	/* After all that the region works as before. */
	memset(local, 0x5a, 16);
	int s = one_sided(ctx, pd, pd, 0, local, lmr->lkey, 16, target, mr->rkey);
	CHECK(s == IBV_WC_SUCCESS, "WRITE after the failed calls: %s", st(s));
	CHECK(target[0] == 0x5a && target[15] == 0x5a, "the WRITE did not land");

	/* `pd` is looked at only with IBV_REREG_MR_CHANGE_PD (pyverbs passes garbage there). */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, (struct ibv_pd *)(uintptr_t)0x10, NULL, 0,
			   RW) == 0,
	      "IBV_REREG_MR_CHANGE_ACCESS with a junk pd: errno %d", errno);
	CHECK(mr->pd == pd, "the junk pd was taken");

	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(lmr) == 0, "ibv_dereg_mr");
	munmap(none, page);
	munmap(ro, page);
	ibv_dealloc_pd(pd);
	ibv_dealloc_pd(foreign);
	ibv_close_device(ctx);
	ibv_close_device(other);
}

/* IBV_REREG_MR_CHANGE_ACCESS: remote write withdrawn (the keys stay; a WRITE is refused with
 * IBV_WC_REM_ACCESS_ERR and changes nothing, a READ works), then granted again. */
static void change_access(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static unsigned char target[256], local[256];
	struct ibv_mr *mr = ibv_reg_mr(pd, target, sizeof(target), RW);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, sizeof(local), IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !mr || !lmr)
		DIE("setup");
	struct mr_view before = view(mr);
	memset(local, 0x11, 32);
	int s = one_sided(ctx, pd, pd, 0, local, lmr->lkey, 32, target, mr->rkey);
	CHECK(s == IBV_WC_SUCCESS, "WRITE before: %s", st(s));

	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) == 0,
	      "rereg to LOCAL_WRITE | REMOTE_READ: errno %d", errno);
	CHECK(same(before, view(mr)), "the region's fields or keys changed");
	memset(local, 0x22, 32);
	s = one_sided(ctx, pd, pd, 0, local, lmr->lkey, 32, target, mr->rkey);
	CHECK(s == IBV_WC_REM_ACCESS_ERR, "WRITE without REMOTE_WRITE: %s", st(s));
	CHECK(target[0] == 0x11 && target[31] == 0x11, "the refused WRITE changed the target");
	memset(local, 0, 32);
	s = one_sided(ctx, pd, pd, 1, local, lmr->lkey, 32, target, mr->rkey);
	CHECK(s == IBV_WC_SUCCESS && local[0] == 0x11, "READ with REMOTE_READ: %s", st(s));

	/* Local access follows too: without LOCAL_WRITE a READ cannot land in it. */
	CHECK(ibv_rereg_mr(lmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0) == 0,
	      "rereg the local region to no rights: errno %d", errno);
	s = one_sided(ctx, pd, pd, 1, local, lmr->lkey, 32, target, mr->rkey);
	CHECK(s == IBV_WC_LOC_PROT_ERR, "READ into a region without LOCAL_WRITE: %s", st(s));
	CHECK(ibv_rereg_mr(lmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE) == 0, "rereg the local region back");

	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, RW) == 0,
	      "rereg back to RW: errno %d", errno);
	memset(local, 0x33, 32);
	s = one_sided(ctx, pd, pd, 0, local, lmr->lkey, 32, target, mr->rkey);
	CHECK(s == IBV_WC_SUCCESS && target[0] == 0x33, "WRITE after granting it again: %s", st(s));
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(lmr) == 0, "ibv_dereg_mr");
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* IBV_REREG_MR_CHANGE_PD: mr->pd follows; the target's QP (old PD) is refused
 * (IBV_WC_REM_ACCESS_ERR), a requester whose local region moved away gets
 * IBV_WC_LOC_PROT_ERR; the PD holding the region is busy, the one it left is not. */
static void change_pd(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd1 = ibv_alloc_pd(ctx);
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	static unsigned char target[256], local[256];
	struct ibv_mr *mr = ibv_reg_mr(pd1, target, sizeof(target), RW);
	struct ibv_mr *lmr = ibv_reg_mr(pd1, local, sizeof(local), IBV_ACCESS_LOCAL_WRITE);
	if (!pd1 || !pd2 || !mr || !lmr)
		DIE("setup");
	uint32_t lkey = mr->lkey, rkey = mr->rkey;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0,
	      "rereg to pd2: errno %d", errno);
	CHECK(mr->pd == pd2 && mr->lkey == lkey && mr->rkey == rkey, "mr->pd %p keys %#x %#x",
	      (void *)mr->pd, mr->lkey, mr->rkey);
	CHECK(ibv_dealloc_pd(pd2) == EBUSY, "pd2 holds the region: EBUSY");
	memset(local, 0x44, 16);
	int s = one_sided(ctx, pd1, pd1, 0, local, lmr->lkey, 16, target, rkey);
	CHECK(s == IBV_WC_REM_ACCESS_ERR, "WRITE through a QP of the old PD: %s", st(s));
	CHECK(target[0] == 0, "the refused WRITE changed the target");
	s = one_sided(ctx, pd1, pd2, 0, local, lmr->lkey, 16, target, rkey);
	CHECK(s == IBV_WC_SUCCESS && target[0] == 0x44, "WRITE through a QP of the new PD: %s",
	      st(s));

	/* The requester's own region moved to pd2: its QP (pd1) cannot gather from it. */
	CHECK(ibv_rereg_mr(lmr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0, "rereg lmr to pd2");
	s = one_sided(ctx, pd1, pd2, 0, local, lmr->lkey, 16, target, rkey);
	CHECK(s == IBV_WC_LOC_PROT_ERR, "gather from a region of another PD: %s", st(s));

	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd1, NULL, 0, 0) == 0 &&
		      ibv_rereg_mr(lmr, IBV_REREG_MR_CHANGE_PD, pd1, NULL, 0, 0) == 0,
	      "rereg both back to pd1: errno %d", errno);
	CHECK(ibv_dealloc_pd(pd2) == 0, "pd2 freed once the regions left it");
	CHECK(ibv_dealloc_pd(pd1) == EBUSY, "pd1 holds the regions again: EBUSY");
	s = one_sided(ctx, pd1, pd1, 0, local, lmr->lkey, 16, target, rkey);
	CHECK(s == IBV_WC_SUCCESS, "WRITE after moving back: %s", st(s));
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(lmr) == 0, "ibv_dereg_mr");
	CHECK(ibv_dealloc_pd(pd1) == 0, "ibv_dealloc_pd");
	ibv_close_device(ctx);
}

/* IBV_REREG_MR_CHANGE_TRANSLATION: the region covers the new buffer (mr->addr, mr->length,
 * same keys); the old buffer takes nothing, the new one takes WRITEs within its own length. */
static void change_translation(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static unsigned char old[256], fresh[128], local[256];
	struct ibv_mr *mr = ibv_reg_mr(pd, old, sizeof(old), RW);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, sizeof(local), IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !mr || !lmr)
		DIE("setup");
	uint32_t lkey = mr->lkey, rkey = mr->rkey;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, fresh, sizeof(fresh), 0) == 0,
	      "rereg to the new buffer: errno %d", errno);
	CHECK(mr->addr == fresh && mr->length == sizeof(fresh) && mr->lkey == lkey &&
		      mr->rkey == rkey && mr->pd == pd,
	      "mr addr %p length %zu keys %#x %#x", mr->addr, mr->length, mr->lkey, mr->rkey);
	memset(local, 0x66, sizeof(local));
	int s = one_sided(ctx, pd, pd, 0, local, lmr->lkey, 16, old, rkey);
	CHECK(s == IBV_WC_REM_ACCESS_ERR, "WRITE into the old buffer: %s", st(s));
	CHECK(old[0] == 0, "the old buffer changed");
	s = one_sided(ctx, pd, pd, 0, local, lmr->lkey, 16, fresh + sizeof(fresh) - 16, rkey);
	CHECK(s == IBV_WC_SUCCESS && fresh[sizeof(fresh) - 1] == 0x66, "WRITE at the new end: %s",
	      st(s));
	s = one_sided(ctx, pd, pd, 0, local, lmr->lkey, 32, fresh + sizeof(fresh) - 16, rkey);
	CHECK(s == IBV_WC_REM_ACCESS_ERR, "WRITE past the new length: %s", st(s));
	/* Translation and access at once. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, NULL,
			   old, sizeof(old), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) == 0,
	      "rereg back with new rights: errno %d", errno);
	s = one_sided(ctx, pd, pd, 0, local, lmr->lkey, 16, old, rkey);
	CHECK(s == IBV_WC_REM_ACCESS_ERR && old[0] == 0, "WRITE without REMOTE_WRITE: %s", st(s));
	s = one_sided(ctx, pd, pd, 1, local, lmr->lkey, 16, old + sizeof(old) - 16, rkey);
	CHECK(s == IBV_WC_SUCCESS, "READ at the end of the old buffer again: %s", st(s));
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(lmr) == 0, "ibv_dereg_mr");
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{"bad_input", bad_input},
	{"access", change_access},
	{"pd", change_pd},
	{"translation", change_translation},
};

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc != 2) {
		fprintf(stderr, "usage: mr_rereg CASE\n");
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
