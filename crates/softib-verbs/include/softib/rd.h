/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * softib/rd.h: Reliable Datagram (RD) through softib's libibverbs.so.1.
 *
 * libibverbs has no RD verbs. softib's drop-in libibverbs.so.1 (crates/softib-verbs) adds
 * these, exported at the version node SOFTIB_1.0 beside rdma-core's IBVERBS_* nodes:
 * reliable datagram domains (RDD), EE contexts (EEC) and RD QPs. See docs/verbs.md ("RD")
 * and docs/rd.md.
 *
 * Build:  cc -I<softib>/crates/softib-verbs/include prog.c -L<softib>/target/release -libverbs
 * A program using these symbols loads only on softib's library (the loader needs SOFTIB_1.0);
 * one that must also run on rdma-core's finds them with dlsym(RTLD_DEFAULT, "softib_...").
 *
 * Conventions are libibverbs': the objects are opaque; a function returning a pointer returns
 * NULL and sets errno on failure, one returning int returns 0 or the errno value (and sets
 * errno). NULL, pointers softib did not hand out (or of another kind), destroyed objects and
 * objects of another device context are refused with EINVAL.
 *
 * An RD QP sends with softib_post_rd_send() (below), which names the EE context every WR
 * goes through and each WR's remote QP and Q_Key. ibv_post_send() on an RD QP fails with
 * EINVAL (*bad_wr = the first WR) and posts nothing: struct ibv_send_wr has no room for an EE
 * context.
 */
#ifndef SOFTIB_RD_H
#define SOFTIB_RD_H

#include <stdint.h>

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The qp_type of an RD QP (struct ibv_qp::qp_type, ibv_query_qp's init_attr). Linux's
 * enum ib_qp_type has no RD; 7 is its unused slot between the raw types and
 * IBV_QPT_RAW_PACKET. ibv_create_qp() / ibv_create_qp_ex() refuse it with EINVAL: an RD QP
 * belongs to a domain, so it is made by softib_create_rd_qp(). */
#define SOFTIB_QPT_RD ((enum ibv_qp_type)7)

/* A reliable datagram domain: RD QPs and EE contexts of one domain work together. */
struct softib_rdd;
/* An EE context: the reliable connection of RD, numbered by an EECN (24 bits, never 0, in a
 * number space of its own beside QP numbers). */
struct softib_eec;

/* A new domain of `context`. NULL + errno: EINVAL (not a live context), ENOMEM (device
 * limit: 65536 domains). */
struct softib_rdd *softib_alloc_rdd(struct ibv_context *context);

/* Frees a domain. 0, EINVAL (not a live domain), EBUSY (RD QPs or EE contexts of the domain
 * are alive). */
int softib_dealloc_rdd(struct softib_rdd *rdd);

/* A new EE context of `rdd`, in IBV_QPS_RESET. NULL + errno: EINVAL (not a live domain),
 * ENOMEM (device limit: 65536 EE contexts). */
struct softib_eec *softib_create_eec(struct softib_rdd *rdd);

/* ibv_modify_qp() for an EE context: the fields of `attr` named by `attr_mask` (IBV_QP_*).
 * An EE context holds the connection of an RC QP, so its attributes are those of RC's
 * connection, with `dest_qp_num` the remote EE context's EECN (softib_eec_num() there) and
 * its transition table RC's without IBV_QP_ACCESS_FLAGS (which belong to the RD QPs):
 *   RESET -> INIT  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT
 *   INIT  -> RTR   | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN
 *                  | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER
 *                  (optional IBV_QP_ALT_PATH, IBV_QP_PKEY_INDEX)
 *   RTR   -> RTS   | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY
 *                  | IBV_QP_MAX_QP_RD_ATOMIC (optional IBV_QP_ALT_PATH, IBV_QP_PATH_MIG_STATE,
 *                  IBV_QP_MIN_RNR_TIMER, IBV_QP_CUR_STATE)
 *   any   -> ERR, any -> RESET (except RESET -> ERR): IBV_QP_STATE
 * 0, or EINVAL: not a live EE context, NULL attr, an illegal transition, a missing or
 * disallowed attribute, a value out of range (MTU above the port's, dest_qp_num >= 2^24, ...).
 * A failed modify changes nothing. */
int softib_modify_eec(struct softib_eec *eec, struct ibv_qp_attr *attr, int attr_mask);

/* ibv_query_qp() for an EE context: fills every connection attribute of `attr` (qp_state,
 * ah_attr, path_mtu, dest_qp_num = the remote EECN, rq_psn, sq_psn, timeout, retry_cnt,
 * rnr_retry, min_rnr_timer, max_rd_atomic, max_dest_rd_atomic, port_num, pkey_index, the
 * alternate path); qkey, qp_access_flags and cap are 0. 0, or EINVAL (not a live EE context,
 * NULL attr). */
int softib_query_eec(struct softib_eec *eec, struct ibv_qp_attr *attr);

/* The EECN of an EE context (what the remote end sets as its dest_qp_num). 0 with errno
 * EINVAL for anything that is not a live EE context. */
uint32_t softib_eec_num(struct softib_eec *eec);

/* Destroys an EE context (in any state). 0, or EINVAL (not a live EE context). */
int softib_destroy_eec(struct softib_eec *eec);

/* ibv_create_qp() for an RD QP of `rdd`: attr->qp_type must be SOFTIB_QPT_RD; send_cq,
 * recv_cq (and srq, optional, not an XRC SRQ) live objects of the PD's context; attr->cap is
 * updated with what the QP got. The result is an ordinary struct ibv_qp (qp_type
 * SOFTIB_QPT_RD) for ibv_modify_qp, ibv_query_qp, ibv_post_recv and ibv_destroy_qp; its
 * receive completions go to its CQ. Its transition table is UD's without a send PSN:
 *   RESET -> INIT  IBV_QP_STATE | IBV_QP_PORT | IBV_QP_QKEY
 *                  (optional IBV_QP_PKEY_INDEX, IBV_QP_ACCESS_FLAGS)
 *   INIT  -> RTR   IBV_QP_STATE (optional IBV_QP_PKEY_INDEX, IBV_QP_QKEY,
 *                  IBV_QP_ACCESS_FLAGS)
 *   RTR   -> RTS   IBV_QP_STATE (optional IBV_QP_CUR_STATE, IBV_QP_QKEY, IBV_QP_ACCESS_FLAGS)
 *   any   -> ERR (receives flush to the CQ), any -> RESET (except RESET -> ERR)
 * IBV_QP_SQ_PSN (which UD programs pass at RTS) is refused: an RD QP's PSNs are its EE
 * contexts'.
 * The domain is busy (softib_dealloc_rdd: EBUSY) until ibv_destroy_qp(). It sends with
 * softib_post_rd_send(), not ibv_post_send() (EINVAL). NULL + errno: EINVAL (a NULL or dead PD, domain, CQ or SRQ, a domain or CQ of
 * another context, NULL attr, another qp_type, capabilities beyond the device's), ENOMEM (no
 * QP number left). */
struct ibv_qp *softib_create_rd_qp(struct ibv_pd *pd, struct softib_rdd *rdd,
				   struct ibv_qp_init_attr *attr);

/* The destination of one RD send WR: an RD QP behind the remote end of the EE context the WR
 * goes through. */
struct softib_rd_dest {
	uint32_t remote_qpn;  /* the destination RD QP (24 bits) */
	uint32_t remote_qkey; /* the Q_Key sent; with bit 31 set, the sending QP's own Q_Key */
};

/* ibv_post_send() for an RD QP: posts the list `wr` (linked by wr->next) on `qp`, every WR
 * through EE context `eec`, which must be an EE context of the QP's device context (in any
 * state: a WR waits in the QP's send queue until the EE context is in RTS and takes it).
 * The destination of each WR:
 *   dest == NULL   every WR must be IBV_WR_SEND or IBV_WR_SEND_WITH_IMM; its destination is
 *                  wr->wr.ud.remote_qpn and wr->wr.ud.remote_qkey, as for UD (wr->wr.ud.ah
 *                  is not read: the EE context holds the path; leave it NULL).
 *   dest != NULL   dest[i] is the destination of the i-th WR of the list (counting from 0
 *                  along wr->next; the array must have an entry for every WR), whatever its
 *                  opcode; wr->wr is read as usual for the operation (wr->wr.rdma for RDMA
 *                  WRITE, WRITE with immediate and READ, wr->wr.atomic for the atomics) and
 *                  wr->wr.ud never.
 * The operations: IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE,
 * IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
 * IBV_WR_ATOMIC_FETCH_AND_ADD; send_flags, sg_list, num_sge and imm_data as for
 * ibv_post_send() (IBV_SEND_INLINE up to the QP's max_inline_data).
 * An EE context sends one message at a time, taking them from the RD QPs that have one for it
 * in turn; completions go to the sending QP's send CQ (qp_num = that QP) and, for SENDs and
 * WRITEs with immediate, to the destination QP's receive CQ (qp_num = the destination,
 * src_qp = the sender). A message the destination refuses (another domain, another Q_Key,
 * not an RD QP, no such QP: IBV_WC_REM_INV_RD_REQ_ERR; a bad R_Key: IBV_WC_REM_ACCESS_ERR;
 * ...) completes in error and moves the sending QP to IBV_QPS_SQE; the EE context and the
 * other QPs' messages go on. An EE context of another domain than the QP's completes the WR
 * in error without sending it (IBV_WC_LOC_QP_OP_ERR, the QP to SQE).
 * Returns 0, or the errno value (errno set too) with *bad_wr naming the first WR not posted
 * (those before it are posted, as with ibv_post_send()): EINVAL for a qp that is not a live
 * RD QP, an eec that is not a live EE context of the QP's context (*bad_wr = wr then), a QP
 * in RESET, INIT or RTR, and for a WR ibv_post_send() refuses (unknown opcode, num_sge above
 * the QP's max_send_sge, inline data beyond max_inline_data, an atomic not of 8 bytes, a
 * message above the port's max_msg_sz), IBV_WR_SEND_WITH_INV (RD has no SEND with
 * invalidate), an opcode other than SEND with dest == NULL, a remote_qpn of more than 24
 * bits; ENOMEM when the send queue is full. An empty list (wr NULL) posts nothing and
 * returns 0. In IBV_QPS_SQE and IBV_QPS_ERR the WRs are accepted and complete with
 * IBV_WC_WR_FLUSH_ERR. */
int softib_post_rd_send(struct ibv_qp *qp, struct softib_eec *eec, struct ibv_send_wr *wr,
			const struct softib_rd_dest *dest, struct ibv_send_wr **bad_wr);

#ifdef __cplusplus
}
#endif

#endif /* SOFTIB_RD_H */
