/* rc_mesh: one rank of an all-to-all mesh of RC connections, for many processes on one or
 * more hosts sharing a device (scripts/host-wide.sh).
 *
 *   rc_mesh DIR RANK NRANKS [-r ROUNDS] [-s SIZE] [-p PACE_US] [-t TIMEOUT] [-d DEAD_RANK]
 *
 * Every rank opens the first device, makes one RC QP per other rank and publishes its GID
 * and QP numbers in DIR/rank.RANK (DIR is shared by all ranks: a directory on one host, or
 * one the hosts' namespaces share). Once every rank has published, each connects its QPs
 * (RTR, RTS), says so in DIR/ready.RANK and waits for the others. Then, ROUNDS times, it
 * SENDs to every peer a SIZE-byte message whose bytes are a function of (sender, receiver,
 * round) and checks every message it receives (length and every byte), pausing PACE_US
 * microseconds between rounds.
 *
 * With -d K, rank K is expected to die mid-run (the test kills it): its peers see their WRs
 * to it fail with IBV_WC_RETRY_EXC_ERR (the transport's retries exhausted) and then flush,
 * stop expecting messages from it and go on with the others. Exit 0 when every message of
 * every live peer arrived intact and, with -d, the dead rank's connection failed with
 * IBV_WC_RETRY_EXC_ERR within the transport's time. Prints one summary line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 64
#define DEPTH 64

static int rank, nranks, rounds = 200, size = 256, pace_us = 0, timeout_s = 60, dead = -1;
static const char *dir;

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "rc_mesh rank %d: ", rank);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno));
	va_end(ap);
	exit(2);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static unsigned char pattern(int from, int to, int round, int i)
{
	return (unsigned char)(from * 131 + to * 29 + round * 7 + i * 3 + 1);
}

struct peer {
	struct ibv_qp *qp;
	uint32_t remote_qpn;
	union ibv_gid gid;
	int sent, received, send_done;
	int failed;          /* a WR to it completed in error */
	int status;          /* the first error status */
	double failed_after; /* seconds from the start of the data phase */
	unsigned char *sbuf, *rbuf;
	struct ibv_mr *smr, *rmr;
};

static struct peer peers[MAX_RANKS];
static struct ibv_cq *cq;

static void post_recv(int p, int slot)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(peers[p].rbuf + (size_t)slot * size),
		.length = size,
		.lkey = peers[p].rmr->lkey,
	};
	struct ibv_recv_wr wr = {.wr_id = ((uint64_t)p << 32) | (uint32_t)slot, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad;
	if (ibv_post_recv(peers[p].qp, &wr, &bad))
		die("ibv_post_recv to %d", p);
}

/* Takes what the CQ holds: a send's completion counts as done, a receive is checked (its
 * length and every byte, in the order the peer sent) and its buffer posted again, an error
 * marks its peer failed (with the time since the data phase began, at data_start). Returns
 * the messages checked. */
static int poll_completions(double data_start)
{
	struct ibv_wc wc[16];
	int got = ibv_poll_cq(cq, 16, wc);
	if (got < 0)
		die("ibv_poll_cq");
	int checked = 0;
	for (int k = 0; k < got; k++) {
		int q = (int)(wc[k].wr_id >> 32);
		struct peer *x = &peers[q];
		if (wc[k].status != IBV_WC_SUCCESS) {
			if (!x->failed) {
				x->failed = 1;
				x->status = wc[k].status;
				x->failed_after = now() - data_start;
			}
			continue;
		}
		if (wc[k].opcode == IBV_WC_SEND) {
			x->send_done++;
			continue;
		}
		int slot = (int)(uint32_t)wc[k].wr_id;
		int rr = x->received;
		unsigned char *b = x->rbuf + (size_t)slot * size;
		if ((int)wc[k].byte_len != size)
			die("message %d from %d: %u bytes", rr, q, wc[k].byte_len);
		for (int i = 0; i < size; i++)
			if (b[i] != pattern(q, rank, rr, i))
				die("message %d from %d: byte %d is %u", rr, q, i, b[i]);
		x->received++;
		checked++;
		post_recv(q, slot);
	}
	return checked;
}

static int wait_for(const char *prefix, double deadline)
{
	for (;;) {
		int have = 0;
		for (int r = 0; r < nranks; r++) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s.%d", dir, prefix, r);
			have += access(path, F_OK) == 0;
		}
		if (have == nranks)
			return 0;
		if (now() > deadline)
			return -1;
		usleep(2000);
	}
}

static void publish(const char *prefix, const char *text)
{
	char path[4096], tmp[4096];
	snprintf(path, sizeof(path), "%s/%s.%d", dir, prefix, rank);
	snprintf(tmp, sizeof(tmp), "%s/.%s.%d.tmp", dir, prefix, rank);
	FILE *f = fopen(tmp, "w");
	if (!f || fputs(text, f) < 0 || fclose(f))
		die("write %s", tmp);
	if (rename(tmp, path))
		die("rename %s", path);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: rc_mesh DIR RANK NRANKS [-r ROUNDS] [-s SIZE] [-p PACE_US] "
				"[-t TIMEOUT] [-d DEAD_RANK]\n");
		return 2;
	}
	dir = argv[1];
	rank = atoi(argv[2]);
	nranks = atoi(argv[3]);
	for (int i = 4; i + 1 < argc; i += 2) {
		int v = atoi(argv[i + 1]);
		if (!strcmp(argv[i], "-r"))
			rounds = v;
		else if (!strcmp(argv[i], "-s"))
			size = v;
		else if (!strcmp(argv[i], "-p"))
			pace_us = v;
		else if (!strcmp(argv[i], "-t"))
			timeout_s = v;
		else if (!strcmp(argv[i], "-d"))
			dead = v;
	}
	if (nranks < 2 || nranks > MAX_RANKS || rank < 0 || rank >= nranks || size < 1)
		die("bad arguments");
	double start = now(), deadline = start + timeout_s;

	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 4 * DEPTH * nranks, NULL, NULL, 0);
	if (!pd || !cq)
		die("pd/cq");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		die("ibv_query_gid");

	char text[8192];
	size_t len = 0;
	for (int i = 0; i < 16; i++)
		len += snprintf(text + len, sizeof(text) - len, "%02x", gid.raw[i]);
	len += snprintf(text + len, sizeof(text) - len, "\n");
	for (int p = 0; p < nranks; p++) {
		if (p == rank)
			continue;
		struct ibv_qp_init_attr ia = {
			.send_cq = cq,
			.recv_cq = cq,
			.cap = {.max_send_wr = DEPTH, .max_recv_wr = DEPTH, .max_send_sge = 1, .max_recv_sge = 1},
			.qp_type = IBV_QPT_RC,
			.sq_sig_all = 1,
		};
		peers[p].qp = ibv_create_qp(pd, &ia);
		peers[p].sbuf = calloc(DEPTH, size);
		peers[p].rbuf = calloc(DEPTH, size);
		if (!peers[p].qp || !peers[p].sbuf || !peers[p].rbuf)
			die("qp for %d", p);
		peers[p].smr = ibv_reg_mr(pd, peers[p].sbuf, (size_t)DEPTH * size, 0);
		peers[p].rmr = ibv_reg_mr(pd, peers[p].rbuf, (size_t)DEPTH * size, IBV_ACCESS_LOCAL_WRITE);
		if (!peers[p].smr || !peers[p].rmr)
			die("mr for %d", p);
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
		if (ibv_modify_qp(peers[p].qp, &a,
				  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			die("INIT %d", p);
		for (int s = 0; s < DEPTH; s++)
			post_recv(p, s);
		len += snprintf(text + len, sizeof(text) - len, "%d %u\n", p, peers[p].qp->qp_num);
	}
	publish("rank", text);
	if (wait_for("rank", deadline))
		die("not every rank published");

	/* Each peer's GID and its QP for this rank. */
	for (int p = 0; p < nranks; p++) {
		if (p == rank)
			continue;
		char path[4096], line[256];
		snprintf(path, sizeof(path), "%s/rank.%d", dir, p);
		FILE *f = fopen(path, "r");
		if (!f || !fgets(line, sizeof(line), f))
			die("read %s", path);
		for (int i = 0; i < 16; i++) {
			unsigned v;
			if (sscanf(line + 2 * i, "%2x", &v) != 1)
				die("gid of %d", p);
			peers[p].gid.raw[i] = v;
		}
		int to;
		unsigned qpn;
		while (fscanf(f, "%d %u", &to, &qpn) == 2)
			if (to == rank)
				peers[p].remote_qpn = qpn;
		fclose(f);
		if (!peers[p].remote_qpn)
			die("no QP of %d for this rank", p);
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR,
			.path_mtu = IBV_MTU_1024,
			.dest_qp_num = peers[p].remote_qpn,
			.rq_psn = 1000 + p,
			.max_dest_rd_atomic = 1,
			.min_rnr_timer = 12,
			.ah_attr = {.is_global = 1, .grh = {.dgid = peers[p].gid, .hop_limit = 64}, .port_num = 1},
		};
		if (ibv_modify_qp(peers[p].qp, &a,
				  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
			die("RTR %d", p);
		/* 4.096 us x 2^14 = 67 ms, 7 retries: a dead peer fails within about 0.6 s. */
		struct ibv_qp_attr r = {
			.qp_state = IBV_QPS_RTS,
			.sq_psn = 1000 + rank,
			.timeout = 14,
			.retry_cnt = 7,
			.rnr_retry = 7,
			.max_rd_atomic = 1,
		};
		if (ibv_modify_qp(peers[p].qp, &r,
				  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
			die("RTS %d", p);
	}
	publish("ready", "ready\n");
	if (wait_for("ready", deadline))
		die("not every rank got ready");

	double data_start = now();
	uint64_t checked = 0;
	for (int round = 0; round < rounds; round++) {
		for (int p = 0; p < nranks; p++) {
			struct peer *pe = &peers[p];
			if (p == rank || pe->failed)
				continue;
			/* At most DEPTH / 2 messages to a peer in flight. */
			while (pe->sent - pe->send_done >= DEPTH / 2 && !pe->failed) {
				checked += poll_completions(data_start);
				if (now() > deadline)
					die("timed out sending to %d", p);
			}
			if (pe->failed)
				continue;
			int slot = pe->sent % DEPTH;
			unsigned char *b = pe->sbuf + (size_t)slot * size;
			for (int i = 0; i < size; i++)
				b[i] = pattern(rank, p, pe->sent, i);
			struct ibv_sge sge = {.addr = (uintptr_t)b, .length = size, .lkey = pe->smr->lkey};
			struct ibv_send_wr wr = {
				.wr_id = (uint64_t)p << 32,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED,
			};
			struct ibv_send_wr *bad;
			if (ibv_post_send(pe->qp, &wr, &bad)) {
				pe->failed = 1;
				pe->status = -errno;
				pe->failed_after = now() - data_start;
				continue;
			}
			pe->sent++;
		}
		if (pace_us)
			usleep(pace_us);
	}
	/* The rest: every live peer's last messages and our sends' completions. */
	for (;;) {
		int pending = 0;
		for (int p = 0; p < nranks; p++) {
			struct peer *pe = &peers[p];
			if (p == rank || pe->failed)
				continue;
			pending += pe->received < rounds || pe->send_done < pe->sent;
		}
		/* A dead rank's messages never come: its connection must fail instead. */
		if (dead >= 0 && dead != rank && !peers[dead].failed)
			pending++;
		if (!pending)
			break;
		checked += poll_completions(data_start);
		/* A peer that is dead but has nothing in flight from us: send it one message, whose
		 * failure is what says it died. */
		if (dead >= 0 && dead != rank && !peers[dead].failed && peers[dead].send_done == peers[dead].sent) {
			struct peer *pe = &peers[dead];
			struct ibv_sge sge = {.addr = (uintptr_t)pe->sbuf, .length = size, .lkey = pe->smr->lkey};
			struct ibv_send_wr wr = {
				.wr_id = (uint64_t)dead << 32,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED,
			};
			struct ibv_send_wr *bad;
			memset(pe->sbuf, 0, size);
			if (!ibv_post_send(pe->qp, &wr, &bad))
				pe->sent++;
		}
		if (now() > deadline) {
			for (int p = 0; p < nranks; p++)
				if (p != rank)
					fprintf(stderr, "rc_mesh rank %d: peer %d sent %d done %d received %d failed %d\n",
						rank, p, peers[p].sent, peers[p].send_done, peers[p].received,
						peers[p].failed);
			die("timed out");
		}
	}
	int bad = 0;
	for (int p = 0; p < nranks; p++) {
		if (p == rank)
			continue;
		struct peer *pe = &peers[p];
		if (p == dead) {
			if (pe->status != IBV_WC_RETRY_EXC_ERR) {
				fprintf(stderr, "rc_mesh rank %d: dead rank %d: status %d, want %d (%s)\n", rank, p,
					pe->status, IBV_WC_RETRY_EXC_ERR, ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR));
				bad++;
			}
			continue;
		}
		if (pe->failed || pe->received != rounds) {
			fprintf(stderr, "rc_mesh rank %d: peer %d: received %d of %d, status %d\n", rank, p,
				pe->received, rounds, pe->status);
			bad++;
		}
	}
	printf("rc_mesh rank %d: %" PRIu64 " messages of %d bytes checked from %d peers in %.2f s",
	       rank, checked, size, nranks - 1 - (dead >= 0 && dead != rank), now() - data_start);
	if (dead >= 0 && dead != rank)
		printf("; rank %d failed with %s after %.2f s", dead,
		       ibv_wc_status_str(peers[dead].status), peers[dead].failed_after);
	printf("\n");
	return bad ? 1 : 0;
}
