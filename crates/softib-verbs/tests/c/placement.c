/*
 * RDMA WRITEs placed by their same-host sender (docs/verbs.md, "Placement by the sender"):
 * two RC QPs of one context, QP a writing into QP b's regions one WRITE at a time (each the
 * only unacknowledged request, so the sender may place it itself). The cases check what
 * lands and, above all, what must not: nothing is placed into a region once deregistered
 * or re-registered without remote write or elsewhere, under a wrong R_Key or another PD's
 * region, or for a QP in the error state; the WRITE then fails as the responder decides and
 * the memory keeps its bytes.
 *
 * `placement CASE`, CASE = lands | not_again | dereg | rereg_access | rereg_translation |
 * bad_rkey | other_pd | qp_error | denied_eperm | denied_enosys; exits 0 when every check
 * holds. The denied cases run `lands` with process_vm_writev(2) refused by a seccomp filter
 * (EPERM, as a container's default profile does; ENOSYS, as where the call is missing):
 * every WRITE still lands, copied by the responder. tests/placement.rs runs it with
 * SOFTIB_STATS=1 and checks, from the counters printed at exit, that the WRITEs that should
 * be placed were (tx_placed), and that none was when the call is refused.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include <infiniband/verbs.h>

#include "check.h"

#define SIZE 64
#define ROUNDS 200

static void to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr at = {0};
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
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
	at.timeout = 14; /* 67 ms: a WRITE to a QP in error gives up soon */
	at.retry_cnt = 1;
	at.rnr_retry = 1;
	at.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		DIE("RTS");
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {0};
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 4;
	ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		DIE("ibv_create_qp");
	return qp;
}

static char src[SIZE];
static char dst[4 * SIZE];
static char other[4 * SIZE];

/* Posts one signaled WRITE of `src` to (addr, rkey) from `qp`. */
static void post_write(struct ibv_qp *qp, struct ibv_mr *smr, uint64_t addr, uint32_t rkey)
{
	struct ibv_sge sge = {(uintptr_t)src, SIZE, smr->lkey};
	struct ibv_send_wr wr = {0}, *bad;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(qp, &wr, &bad))
		DIE("ibv_post_send");
}

/* One WRITE of `src` to (addr, rkey) from `qp`; its completion's status. */
static enum ibv_wc_status write_one(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *smr,
				    uint64_t addr, uint32_t rkey)
{
	post_write(qp, smr, addr, rkey);
	struct ibv_wc wc;
	if (!poll_one(cq, &wc, 10))
		DIE("no completion");
	return wc.status;
}

static int all(const char *p, int c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (char)c)
			return 0;
	return 1;
}

/* Makes process_vm_writev(2) fail with `err` in this process and the threads it starts. */
static void refuse_process_vm_writev(int err)
{
#if defined(__x86_64__)
	const unsigned arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
	const unsigned arch = AUDIT_ARCH_AARCH64;
#else
	DIE("no seccomp filter for this architecture");
#endif
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		DIE("seccomp: %s", strerror(errno));
	/* The filter holds: the call fails as asked. */
	char x = 0;
	struct iovec v = {.iov_base = &x, .iov_len = 1};
	if (syscall(__NR_process_vm_writev, getpid(), &v, 1, &v, 1, 0) != -1 || errno != err)
		DIE("process_vm_writev was not refused");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc != 2) {
		fprintf(stderr, "usage: placement lands|not_again|dereg|rereg_access|"
				"rereg_translation|bad_rkey|other_pd|qp_error|denied_eperm|"
				"denied_enosys\n");
		return 2;
	}
	const char *c = argv[1];
	/* Before the context, so that its progress thread is filtered too. */
	if (!strcmp(c, "denied_eperm"))
		refuse_process_vm_writev(EPERM);
	else if (!strcmp(c, "denied_enosys"))
		refuse_process_vm_writev(ENOSYS);
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	struct ibv_cq *acq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_cq *bcq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *smr = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, sizeof(dst), access);
	struct ibv_mr *omr = ibv_reg_mr(pd2, other, sizeof(other), access);
	if (!pd || !pd2 || !acq || !bcq || !smr || !dmr || !omr)
		DIE("setup");
	struct ibv_qp *a = make_qp(pd, acq);
	struct ibv_qp *b = make_qp(pd, bcq);
	to_init(a);
	to_init(b);
	to_rts(ctx, a, b->qp_num);
	to_rts(ctx, b, a->qp_num);
	/* A QP's first WRITE takes the general path, which never places: each case starts
	 * after it, so that the WRITEs it tries would be placed if anything let them. */
	memset(src, '-', SIZE);
	if (write_one(a, acq, smr, (uintptr_t)dst, dmr->rkey) != IBV_WC_SUCCESS)
		DIE("warm-up WRITE");

	if (!strcmp(c, "lands") || !strncmp(c, "denied_", 7)) {
		/* Every WRITE lands whole, at its offset, and nothing beside it moves. */
		for (int r = 0; r < ROUNDS; r++) {
			memset(src, 'a' + r % 26, SIZE);
			memset(dst, '.', sizeof(dst));
			int slot = r % 4;
			enum ibv_wc_status st =
				write_one(a, acq, smr, (uintptr_t)(dst + slot * SIZE), dmr->rkey);
			CHECK(st == IBV_WC_SUCCESS, "round %d: %s", r, ibv_wc_status_str(st));
			CHECK(all(dst + slot * SIZE, 'a' + r % 26, SIZE), "round %d: data", r);
			CHECK(all(dst, '.', slot * SIZE) &&
				      all(dst + (slot + 1) * SIZE, '.', (3 - slot) * SIZE),
			      "round %d: bytes beside the WRITE moved", r);
		}
	} else if (!strcmp(c, "not_again")) {
		/* The responder does not copy a placed WRITE again: the application sees the
		 * WRITE's bytes (placed in the sender's post, before any packet is handled), writes
		 * its own over them, and they stay after the WRITE completes. */
		for (int r = 0; r < 50; r++) {
			memset(src, 'k', SIZE);
			memset(dst, '.', sizeof(dst));
			post_write(a, smr, (uintptr_t)dst, dmr->rkey);
			double end = now() + 5;
			while (*(volatile char *)&dst[SIZE - 1] != 'k' && now() < end)
				;
			CHECK(dst[SIZE - 1] == 'k', "round %d: the WRITE never landed", r);
			memset(dst, 'Q', SIZE);
			struct ibv_wc wc;
			if (!poll_one(acq, &wc, 10) || wc.status != IBV_WC_SUCCESS)
				DIE("round %d: completion", r);
			CHECK(all(dst, 'Q', SIZE), "round %d: the WRITE was copied again", r);
		}
	} else if (!strcmp(c, "dereg")) {
		/* WRITEs land; after deregistration the next one fails and leaves the bytes. */
		for (int r = 0; r < 5; r++) {
			memset(src, 'p' + r, SIZE);
			CHECK(write_one(a, acq, smr, (uintptr_t)dst, dmr->rkey) == IBV_WC_SUCCESS,
			      "WRITE %d", r);
			CHECK(all(dst, 'p' + r, SIZE), "WRITE %d's data", r);
		}
		uint32_t rkey = dmr->rkey;
		if (ibv_dereg_mr(dmr))
			DIE("ibv_dereg_mr");
		memset(dst, '.', sizeof(dst));
		memset(src, 'y', SIZE);
		enum ibv_wc_status st = write_one(a, acq, smr, (uintptr_t)dst, rkey);
		CHECK(st == IBV_WC_REM_ACCESS_ERR, "after dereg: %s", ibv_wc_status_str(st));
		CHECK(all(dst, '.', sizeof(dst)), "a deregistered region was written");
	} else if (!strcmp(c, "rereg_access")) {
		/* WRITEs land; once ibv_rereg_mr withdraws REMOTE_WRITE the next one fails and
		 * nothing of it is placed (same keys, so only the withdrawal stops the sender). */
		for (int r = 0; r < 5; r++) {
			memset(src, 'p' + r, SIZE);
			CHECK(write_one(a, acq, smr, (uintptr_t)dst, dmr->rkey) == IBV_WC_SUCCESS,
			      "WRITE %d", r);
		}
		if (ibv_rereg_mr(dmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				 IBV_ACCESS_LOCAL_WRITE))
			DIE("ibv_rereg_mr");
		memset(dst, '.', sizeof(dst));
		memset(src, 'y', SIZE);
		enum ibv_wc_status st = write_one(a, acq, smr, (uintptr_t)dst, dmr->rkey);
		CHECK(st == IBV_WC_REM_ACCESS_ERR, "after rereg: %s", ibv_wc_status_str(st));
		CHECK(all(dst, '.', sizeof(dst)), "a region without REMOTE_WRITE was written");
	} else if (!strcmp(c, "rereg_translation")) {
		/* WRITEs land in dst; after ibv_rereg_mr moves the region to `moved`, a WRITE there
		 * is placed there (published again at its new address), and one at the old
		 * address fails and leaves dst alone. */
		static char moved[2 * SIZE];
		for (int r = 0; r < 5; r++) {
			memset(src, 'p' + r, SIZE);
			CHECK(write_one(a, acq, smr, (uintptr_t)dst, dmr->rkey) == IBV_WC_SUCCESS,
			      "WRITE %d", r);
		}
		if (ibv_rereg_mr(dmr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, moved, sizeof(moved), 0))
			DIE("ibv_rereg_mr");
		memset(dst, '.', sizeof(dst));
		memset(moved, '.', sizeof(moved));
		memset(src, 'm', SIZE);
		enum ibv_wc_status st = write_one(a, acq, smr, (uintptr_t)(moved + SIZE), dmr->rkey);
		CHECK(st == IBV_WC_SUCCESS, "WRITE into the new range: %s", ibv_wc_status_str(st));
		CHECK(all(moved + SIZE, 'm', SIZE) && all(moved, '.', SIZE), "the new range's data");
		memset(src, 'o', SIZE);
		st = write_one(a, acq, smr, (uintptr_t)dst, dmr->rkey);
		CHECK(st == IBV_WC_REM_ACCESS_ERR, "WRITE into the old range: %s",
		      ibv_wc_status_str(st));
		CHECK(all(dst, '.', sizeof(dst)), "the old range was written");
	} else if (!strcmp(c, "bad_rkey")) {
		memset(dst, '.', sizeof(dst));
		memset(src, 'z', SIZE);
		enum ibv_wc_status st = write_one(a, acq, smr, (uintptr_t)dst, dmr->rkey ^ 0x100);
		CHECK(st == IBV_WC_REM_ACCESS_ERR, "wrong R_Key: %s", ibv_wc_status_str(st));
		CHECK(all(dst, '.', sizeof(dst)), "written under a wrong R_Key");
	} else if (!strcmp(c, "other_pd")) {
		/* A region of another PD than b's: the responder refuses it, nothing lands. */
		memset(other, '.', sizeof(other));
		memset(src, 'w', SIZE);
		enum ibv_wc_status st = write_one(a, acq, smr, (uintptr_t)other, omr->rkey);
		CHECK(st == IBV_WC_REM_ACCESS_ERR, "other PD: %s", ibv_wc_status_str(st));
		CHECK(all(other, '.', sizeof(other)), "another PD's region was written");
	} else if (!strcmp(c, "qp_error")) {
		/* b in ERR: the WRITE is dropped (a gives up after its retries), nothing lands. */
		struct ibv_qp_attr at = {0};
		at.qp_state = IBV_QPS_ERR;
		if (ibv_modify_qp(b, &at, IBV_QP_STATE))
			DIE("ERR");
		memset(dst, '.', sizeof(dst));
		memset(src, 'v', SIZE);
		enum ibv_wc_status st = write_one(a, acq, smr, (uintptr_t)dst, dmr->rkey);
		CHECK(st != IBV_WC_SUCCESS, "a WRITE to a QP in ERR succeeded");
		CHECK(all(dst, '.', sizeof(dst)), "written for a QP in ERR");
	} else {
		DIE("unknown case %s", c);
	}
	/* Closed, so that the counters are printed (SOFTIB_STATS). */
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(smr);
	if (strcmp(c, "dereg"))
		ibv_dereg_mr(dmr);
	ibv_dereg_mr(omr);
	ibv_destroy_cq(acq);
	ibv_destroy_cq(bcq);
	ibv_dealloc_pd(pd);
	ibv_dealloc_pd(pd2);
	ibv_close_device(ctx);
	printf("%s: %d checks, %d failures\n", c, checks, failures);
	return failures ? 1 : 0;
}
