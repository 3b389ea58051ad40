/*
 * rdma_cm through softib's librdmacm.so.1, as an unmodified rdma-core 44 program calls it.
 * Built by tests/cma_cases.rs against the installed <rdma/rdma_cma.h>, linked with -lrdmacm
 * -libverbs, run on softib's libraries (LD_LIBRARY_PATH). `cm_cases CASE` runs one case in
 * one process: a listener bound to a free loopback address and an active id connecting to it,
 * both on that address's softib device (the CM messages go out on its UDP socket and come back
 * to its QP1). It exits 0 only if every check held; each failed check is printed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

static int failures;

#define CHECK(cond, ...)                                                              \
	do {                                                                              \
		if (!(cond)) {                                                                \
			failures++;                                                               \
			fprintf(stderr, "FAIL %s:%d: %s: ", __func__, __LINE__, #cond);          \
			fprintf(stderr, __VA_ARGS__);                                             \
			fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno));             \
		}                                                                             \
	} while (0)

#define DIE(...)                                                                      \
	do {                                                                              \
		fprintf(stderr, "SETUP FAILED %s:%d: ", __func__, __LINE__);                 \
		fprintf(stderr, __VA_ARGS__);                                                 \
		fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno));                  \
		exit(2);                                                                      \
	} while (0)

static struct rdma_event_channel *ch;

/* The next event, which must be `want` (status `status`); NULL (and a failure) otherwise. */
static struct rdma_cm_event *expect(enum rdma_cm_event_type want, int status)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	if (poll(&p, 1, 10000) != 1) {
		failures++;
		fprintf(stderr, "FAIL: no event within 10 s, wanted %s\n", rdma_event_str(want));
		return NULL;
	}
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e))
		DIE("rdma_get_cm_event");
	CHECK(e->event == want && e->status == status, "got %s status %d, want %s status %d",
	      rdma_event_str(e->event), e->status, rdma_event_str(want), status);
	return e;
}

/* A listener on a free loopback address (port chosen by softib); its address in `addr`. */
static struct rdma_cm_id *listener(enum rdma_port_space ps, struct sockaddr_in *addr)
{
	struct rdma_cm_id *l;
	if (rdma_create_id(ch, &l, NULL, ps))
		DIE("rdma_create_id");
	for (int n = 1; n < 255; n++) {
		memset(addr, 0, sizeof(*addr));
		addr->sin_family = AF_INET;
		addr->sin_addr.s_addr = htonl(0x7f000000 | n);
		if (rdma_bind_addr(l, (struct sockaddr *)addr) == 0)
			break;
		if (errno != EADDRINUSE)
			DIE("rdma_bind_addr 127.0.0.%d", n);
	}
	CHECK(l->verbs != NULL, "a bound id has its device");
	CHECK(l->pd != NULL, "a bound id has a PD");
	addr->sin_port = rdma_get_src_port(l);
	CHECK(addr->sin_port != 0, "a free port was chosen");
	if (rdma_listen(l, 4))
		DIE("rdma_listen");
	return l;
}

/* An active id with its address and route resolved towards `to`. */
static struct rdma_cm_id *resolved(enum rdma_port_space ps, struct sockaddr_in *to)
{
	struct rdma_cm_id *a;
	if (rdma_create_id(ch, &a, NULL, ps))
		DIE("rdma_create_id");
	if (rdma_resolve_addr(a, NULL, (struct sockaddr *)to, 2000))
		DIE("rdma_resolve_addr");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED, 0));
	if (rdma_resolve_route(a, 2000))
		DIE("rdma_resolve_route");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
	CHECK(a->route.num_paths == 1 && a->route.path_rec != NULL, "one path");
	CHECK(a->route.path_rec->mtu >= IBV_MTU_1024, "path MTU %d", a->route.path_rec->mtu);
	CHECK(a->verbs != NULL && a->port_num == 1, "the route's device and port");
	return a;
}

static void make_qp(struct rdma_cm_id *id, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr qa = {
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = t,
	};
	if (rdma_create_qp(id, NULL, &qa))
		DIE("rdma_create_qp");
	CHECK(id->qp && id->send_cq && id->recv_cq && id->recv_cq_channel, "QP and its CQs");
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (int i = 0; i < 200000; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
		usleep(10);
	}
	return 0;
}

/* Connect, accept (private data both ways), a SEND each way, disconnect from the active side. */
static void case_establish(void)
{
	struct sockaddr_in addr;
	struct rdma_cm_id *l = listener(RDMA_PS_TCP, &addr);
	struct rdma_cm_id *a = resolved(RDMA_PS_TCP, &addr);
	make_qp(a, IBV_QPT_RC);
	const char req_data[] = "request private data";
	struct rdma_conn_param cp = {
		.private_data = req_data, .private_data_len = sizeof(req_data),
		.responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
		.rnr_retry_count = 7,
	};
	if (rdma_connect(a, &cp))
		DIE("rdma_connect");
	struct rdma_cm_event *e = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!e)
		return;
	struct rdma_cm_id *p = e->id;
	CHECK(e->listen_id == l, "the request names its listener");
	CHECK(p != l && p->verbs == l->verbs, "a new id on the listener's device");
	CHECK(e->param.conn.private_data_len == 56, "REQ private data after the IP CM header: %d",
	      e->param.conn.private_data_len);
	CHECK(memcmp(e->param.conn.private_data, req_data, sizeof(req_data)) == 0, "REQ data");
	CHECK(e->param.conn.initiator_depth == 1 && e->param.conn.responder_resources == 1,
	      "depths seen from the passive side: %d %d", e->param.conn.initiator_depth,
	      e->param.conn.responder_resources);
	CHECK(e->param.conn.qp_num == a->qp->qp_num, "the active QP number");
	struct sockaddr_in *peer = (struct sockaddr_in *)rdma_get_peer_addr(p);
	struct sockaddr_in *mine = (struct sockaddr_in *)rdma_get_local_addr(a);
	CHECK(peer->sin_addr.s_addr == mine->sin_addr.s_addr && peer->sin_port == mine->sin_port,
	      "the passive side sees the active address and port");
	CHECK(rdma_get_dst_port(p) == rdma_get_src_port(a), "ports match");
	rdma_ack_cm_event(e);
	make_qp(p, IBV_QPT_RC);
	struct ibv_mr *pmr = ibv_reg_mr(p->pd, calloc(1, 64), 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *amr = ibv_reg_mr(a->pd, calloc(1, 64), 64, IBV_ACCESS_LOCAL_WRITE);
	if (!pmr || !amr)
		DIE("ibv_reg_mr");
	struct ibv_sge ps = { (uintptr_t)pmr->addr, 64, pmr->lkey };
	struct ibv_recv_wr rw = { .sg_list = &ps, .num_sge = 1 }, *bad_r;
	if (ibv_post_recv(p->qp, &rw, &bad_r))
		DIE("ibv_post_recv");
	const char rep_data[] = "reply private data";
	struct rdma_conn_param ap = {
		.private_data = rep_data, .private_data_len = sizeof(rep_data),
		.responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7,
	};
	if (rdma_accept(p, &ap))
		DIE("rdma_accept");
	/* The active side reads the reply (its QP moves to RTS, the RTU leaves), then the passive
	 * side gets the RTU. */
	e = expect(RDMA_CM_EVENT_ESTABLISHED, 0);
	if (e) {
		CHECK(e->id == a, "the active id is established first");
		CHECK(e->param.conn.private_data_len >= sizeof(rep_data) &&
			      memcmp(e->param.conn.private_data, rep_data, sizeof(rep_data)) == 0,
		      "REP data");
		CHECK(e->param.conn.qp_num == p->qp->qp_num, "the passive QP number");
		rdma_ack_cm_event(e);
	}
	e = expect(RDMA_CM_EVENT_ESTABLISHED, 0);
	if (e) {
		CHECK(e->id == p, "then the passive id");
		rdma_ack_cm_event(e);
	}
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(a->qp, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN, &qi) == 0 &&
		      qa.qp_state == IBV_QPS_RTS && qa.dest_qp_num == p->qp->qp_num,
	      "active QP in RTS towards the passive QP (state %d dest %u)", qa.qp_state,
	      qa.dest_qp_num);
	strcpy(amr->addr, "over the connection");
	struct ibv_sge as = { (uintptr_t)amr->addr, 64, amr->lkey };
	struct ibv_send_wr sw = { .sg_list = &as, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad_s;
	if (ibv_post_send(a->qp, &sw, &bad_s))
		DIE("ibv_post_send");
	struct ibv_wc wc;
	CHECK(poll_one(a->send_cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "send completes");
	CHECK(poll_one(p->recv_cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 64,
	      "receive completes");
	CHECK(strcmp(pmr->addr, "over the connection") == 0, "the data arrived");

	/* The DREQ: the passive side sees DISCONNECTED; its rdma_disconnect answers with the DREP,
	 * and then the active side sees it (as with the kernel's rdma_cm). */
	if (rdma_disconnect(a))
		DIE("rdma_disconnect");
	e = expect(RDMA_CM_EVENT_DISCONNECTED, 0);
	if (e) {
		CHECK(e->id == p, "the passive side first");
		rdma_ack_cm_event(e);
	}
	CHECK(rdma_disconnect(p) == 0, "the passive side answers the DREQ it saw");
	e = expect(RDMA_CM_EVENT_DISCONNECTED, 0);
	if (e) {
		CHECK(e->id == a, "then the active side");
		rdma_ack_cm_event(e);
	}
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	CHECK(rdma_get_cm_event(ch, &e) == -1 && errno == EAGAIN, "one DISCONNECTED each");
	fcntl(ch->fd, F_SETFL, fl);
	CHECK(ibv_query_qp(a->qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR,
	      "the active QP is in ERR after rdma_disconnect");
	rdma_destroy_qp(a);
	rdma_destroy_qp(p);
	CHECK(rdma_destroy_id(a) == 0 && rdma_destroy_id(p) == 0 && rdma_destroy_id(l) == 0,
	      "destroy");
}

/* rdma_reject with private data; a connect to a port nobody listens on; a request whose id is
 * destroyed unanswered. */
static void case_reject(void)
{
	struct sockaddr_in addr;
	struct rdma_cm_id *l = listener(RDMA_PS_TCP, &addr);
	struct rdma_cm_id *a = resolved(RDMA_PS_TCP, &addr);
	make_qp(a, IBV_QPT_RC);
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	if (rdma_connect(a, &cp))
		DIE("rdma_connect");
	struct rdma_cm_event *e = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!e)
		return;
	struct rdma_cm_id *p = e->id;
	rdma_ack_cm_event(e);
	const char why[] = "no thanks";
	CHECK(rdma_reject(p, why, sizeof(why)) == 0, "rdma_reject");
	e = expect(RDMA_CM_EVENT_REJECTED, 28); /* Consumer Defined */
	if (e) {
		CHECK(e->id == a, "the active id is rejected");
		CHECK(e->param.conn.private_data_len >= sizeof(why) &&
			      memcmp(e->param.conn.private_data, why, sizeof(why)) == 0,
		      "REJ private data");
		rdma_ack_cm_event(e);
	}
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(a->qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR,
	      "a rejected id's QP is in ERR");
	rdma_destroy_qp(a);
	rdma_destroy_id(a);
	rdma_destroy_id(p);

	/* Nobody listens on the next port: Invalid Service ID (8). */
	struct sockaddr_in other = addr;
	other.sin_port = htons(ntohs(addr.sin_port) + 1);
	a = resolved(RDMA_PS_TCP, &other);
	make_qp(a, IBV_QPT_RC);
	if (rdma_connect(a, &cp))
		DIE("rdma_connect");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_REJECTED, 8));
	rdma_destroy_qp(a);
	rdma_destroy_id(a);

	/* The request's id destroyed before an answer: the active side is rejected. */
	a = resolved(RDMA_PS_TCP, &addr);
	make_qp(a, IBV_QPT_RC);
	if (rdma_connect(a, &cp))
		DIE("rdma_connect");
	e = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (e) {
		p = e->id;
		rdma_ack_cm_event(e);
		CHECK(rdma_destroy_id(p) == 0, "destroy an unanswered request");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_REJECTED, 28));
	}
	rdma_destroy_qp(a);
	rdma_destroy_id(a);
	rdma_destroy_id(l);
}

/* UD: rdma_connect is a SIDR exchange; the answer names the QP and the rdma_cm Q_Key; a
 * datagram sent with the event's address vector arrives. */
static void case_ud(void)
{
	struct sockaddr_in addr;
	struct rdma_cm_id *l = listener(RDMA_PS_UDP, &addr);
	struct rdma_cm_id *a = resolved(RDMA_PS_UDP, &addr);
	CHECK(a->qp_type == IBV_QPT_UD, "RDMA_PS_UDP ids are UD");
	make_qp(a, IBV_QPT_UD);
	if (rdma_connect(a, NULL))
		DIE("rdma_connect");
	struct rdma_cm_event *e = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!e)
		return;
	struct rdma_cm_id *p = e->id;
	rdma_ack_cm_event(e);
	make_qp(p, IBV_QPT_UD);
	struct ibv_mr *pmr = ibv_reg_mr(p->pd, calloc(1, 128), 128, IBV_ACCESS_LOCAL_WRITE);
	if (!pmr)
		DIE("ibv_reg_mr");
	struct ibv_sge ps = { (uintptr_t)pmr->addr, 128, pmr->lkey };
	struct ibv_recv_wr rw = { .sg_list = &ps, .num_sge = 1 }, *bad_r;
	if (ibv_post_recv(p->qp, &rw, &bad_r))
		DIE("ibv_post_recv");
	CHECK(rdma_accept(p, NULL) == 0, "accept names the id's QP");
	e = expect(RDMA_CM_EVENT_ESTABLISHED, 0);
	if (!e)
		return;
	CHECK(e->id == a, "the active id learns the service's QP");
	CHECK(e->param.ud.qp_num == p->qp->qp_num, "QP %u want %u", e->param.ud.qp_num,
	      p->qp->qp_num);
	CHECK(e->param.ud.qkey == RDMA_UDP_QKEY, "Q_Key %#x", e->param.ud.qkey);
	struct ibv_ah *ah = ibv_create_ah(a->pd, &e->param.ud.ah_attr);
	CHECK(ah != NULL, "an AH from the event's address vector");
	uint32_t qpn = e->param.ud.qp_num, qkey = e->param.ud.qkey;
	rdma_ack_cm_event(e);
	if (!ah)
		return;
	struct ibv_mr *amr = ibv_reg_mr(a->pd, calloc(1, 64), 64, IBV_ACCESS_LOCAL_WRITE);
	strcpy(amr->addr, "a datagram");
	struct ibv_sge as = { (uintptr_t)amr->addr, 64, amr->lkey };
	struct ibv_send_wr sw = { .sg_list = &as, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad_s;
	sw.wr.ud.ah = ah;
	sw.wr.ud.remote_qpn = qpn;
	sw.wr.ud.remote_qkey = qkey;
	if (ibv_post_send(a->qp, &sw, &bad_s))
		DIE("ibv_post_send");
	struct ibv_wc wc;
	CHECK(poll_one(a->send_cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "send completes");
	CHECK(poll_one(p->recv_cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "datagram received");
	CHECK(strcmp((char *)pmr->addr + 40, "a datagram") == 0, "after the 40-byte GRH area");
	ibv_destroy_ah(ah);
	rdma_destroy_qp(a);
	rdma_destroy_qp(p);
	rdma_destroy_id(a);
	rdma_destroy_id(p);
	rdma_destroy_id(l);
}

/* Calls that must fail the documented way, and the process goes on. */
static void case_bad_calls(void)
{
	struct rdma_cm_id *id, junk;
	struct rdma_cm_event *e;
	memset(&junk, 0, sizeof(junk));
	errno = 0;
	CHECK(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP) == -1 && errno == EINVAL, "NULL out");
	CHECK(rdma_destroy_id(NULL) == -1 && errno == EINVAL, "destroy NULL");
	CHECK(rdma_destroy_id(&junk) == -1 && errno == EINVAL, "destroy a stranger");
	CHECK(rdma_get_cm_event(ch, NULL) == -1 && errno == EINVAL, "get into NULL");
	CHECK(rdma_ack_cm_event(NULL) == -1 && errno == EINVAL, "ack NULL");
	CHECK(rdma_connect(&junk, NULL) == -1 && errno == EINVAL, "connect a stranger");

	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id");
	struct sockaddr_in sa = { .sin_family = AF_INET };
	sa.sin_addr.s_addr = inet_addr("192.0.2.1"); /* TEST-NET-1: not this host's */
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&sa) == -1 && errno == EADDRNOTAVAIL,
	      "bind a foreign address");
	CHECK(rdma_connect(id, NULL) == -1 && errno == EINVAL, "connect without a route");
	CHECK(rdma_accept(id, NULL) == -1 && errno == EINVAL, "accept without a request");
	CHECK(rdma_disconnect(id) == -1 && errno == EINVAL, "disconnect what is not connected");
	CHECK(rdma_resolve_route(id, 100) == -1 && errno == EINVAL, "route before address");
	rdma_destroy_id(id);

	struct sockaddr_in addr;
	struct rdma_cm_id *l = listener(RDMA_PS_TCP, &addr);
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id");
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&addr) == -1 && errno == EADDRINUSE,
	      "bind a port in use");
	rdma_destroy_id(id);
	id = resolved(RDMA_PS_TCP, &addr);
	make_qp(id, IBV_QPT_RC);
	char big[57] = { 0 };
	struct rdma_conn_param cp = { .private_data = big, .private_data_len = sizeof(big),
				      .retry_count = 7, .rnr_retry_count = 7 };
	CHECK(rdma_connect(id, &cp) == -1 && errno == EINVAL,
	      "REQ private data beyond 56 bytes (92 less the IP CM header)");
	CHECK(rdma_accept(l, NULL) == -1 && errno == EINVAL, "accept on a listener");

	/* A non-blocking channel with nothing queued. */
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	CHECK(rdma_get_cm_event(ch, &e) == -1 && errno == EAGAIN, "empty non-blocking channel");
	fcntl(ch->fd, F_SETFL, fl);

	cp.private_data_len = 0;
	if (rdma_connect(id, &cp))
		DIE("rdma_connect");
	e = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (e) {
		struct rdma_cm_id *p = e->id;
		CHECK(rdma_ack_cm_event(e) == 0, "ack");
		CHECK(rdma_ack_cm_event(e) == -1 && errno == EINVAL, "ack twice");
		CHECK(rdma_reject(p, big, 149) == -1 && errno == EINVAL, "REJ data beyond 148");
		CHECK(rdma_reject(p, NULL, 0) == 0, "reject");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_REJECTED, 28));
		rdma_destroy_id(p);
	}
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	CHECK(rdma_destroy_id(id) == -1 && errno == EINVAL, "destroy twice");
	rdma_destroy_id(l);
	struct rdma_event_channel fake = { .fd = -1 };
	rdma_destroy_event_channel(&fake); /* refused, not a crash */
}

/* A peer that vanishes: a REQ to an address nobody holds ends UNREACHABLE; a connection whose
 * passive process is killed ends DISCONNECTED when the DREQ goes unanswered. Run with short
 * CM timeouts (SOFTIB_CM_RESPONSE_TIMEOUT, SOFTIB_CM_RETRIES). */
static void case_vanish(void)
{
	/* A loopback address no process holds. */
	struct sockaddr_in nobody = { .sin_family = AF_INET, .sin_port = htons(7471) };
	for (int n = 254; n > 1; n--) {
		int s = socket(AF_INET, SOCK_DGRAM, 0);
		struct sockaddr_in b = { .sin_family = AF_INET, .sin_port = htons(4791) };
		b.sin_addr.s_addr = htonl(0x7f000000 | n);
		int ok = bind(s, (struct sockaddr *)&b, sizeof(b)) == 0;
		close(s);
		if (ok) {
			nobody.sin_addr = b.sin_addr;
			break;
		}
	}
	struct rdma_cm_id *a = resolved(RDMA_PS_TCP, &nobody);
	make_qp(a, IBV_QPT_RC);
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	if (rdma_connect(a, &cp))
		DIE("rdma_connect");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT));
	rdma_destroy_qp(a);
	rdma_destroy_id(a);

	/* The passive side in a child process, killed once connected. */
	int pfd[2];
	if (pipe(pfd))
		DIE("pipe");
	pid_t child = fork();
	if (child == 0) {
		close(pfd[0]);
		ch = rdma_create_event_channel();
		struct sockaddr_in addr;
		struct rdma_cm_id *l = listener(RDMA_PS_TCP, &addr);
		if (write(pfd[1], &addr, sizeof(addr)) != sizeof(addr))
			_exit(3);
		struct rdma_cm_event *e = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 0);
		if (!e)
			_exit(4);
		struct rdma_cm_id *p = e->id;
		rdma_ack_cm_event(e);
		make_qp(p, IBV_QPT_RC);
		struct rdma_conn_param ap = { .responder_resources = 1, .initiator_depth = 1 };
		if (rdma_accept(p, &ap))
			_exit(5);
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED, 0));
		(void)l;
		pause(); /* until killed */
		_exit(0);
	}
	close(pfd[1]);
	struct sockaddr_in addr;
	if (read(pfd[0], &addr, sizeof(addr)) != sizeof(addr))
		DIE("the child's address");
	a = resolved(RDMA_PS_TCP, &addr);
	make_qp(a, IBV_QPT_RC);
	if (rdma_connect(a, &cp))
		DIE("rdma_connect");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED, 0));
	usleep(200000); /* the RTU reaches the child */
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	CHECK(rdma_disconnect(a) == 0, "DREQ to a vanished peer");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED, 0));
	rdma_destroy_qp(a);
	rdma_destroy_id(a);
}

/* Ports are the host's, as with the kernel's rdma_cm: a port another process bound on the
 * address of a shared device is EADDRINUSE here, in either port space it holds; once that
 * process has exited, the port is free again. */
static void case_port_of_another_process(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(7483) };
	a.sin_addr.s_addr = inet_addr("127.0.0.1");
	int up[2], down[2];
	if (pipe(up) || pipe(down))
		DIE("pipe");
	pid_t child = fork();
	if (child < 0)
		DIE("fork");
	if (child == 0) {
		struct rdma_event_channel *c2 = rdma_create_event_channel();
		struct rdma_cm_id *id;
		char b = 0;
		if (!c2 || rdma_create_id(c2, &id, NULL, RDMA_PS_TCP) ||
		    rdma_bind_addr(id, (struct sockaddr *)&a))
			b = 1;
		if (write(up[1], &b, 1) != 1 || read(down[0], &b, 1) != 1)
			_exit(3);
		exit(0);
	}
	char b = 1;
	CHECK(read(up[0], &b, 1) == 1 && b == 0, "the other process bound the port");
	struct rdma_cm_id *id, *udp;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || rdma_create_id(ch, &udp, NULL, RDMA_PS_UDP))
		DIE("rdma_create_id");
	errno = 0;
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == -1 && errno == EADDRINUSE,
	      "bind a port another process holds");
	CHECK(rdma_bind_addr(udp, (struct sockaddr *)&a) == 0, "the same port in another space");
	if (write(down[1], &b, 1) != 1)
		DIE("write");
	int st = 0;
	waitpid(child, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the other process exited: %d", st);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == 0, "bind the port once it went");
	rdma_destroy_id(id);
	rdma_destroy_id(udp);
}

/* True if an event is queued on the channel (nothing is read). */
static int event_queued(void)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	return poll(&p, 1, 0) == 1;
}

/* The passive side's DISCONNECTED comes after it polled what the peer sent before its DREQ:
 * a SEND, then the DREQ at once; the passive process does not poll its CQ for 100 ms (its
 * progress thread takes both meanwhile): no event yet. Once the receive completion is polled,
 * the event comes. A second connection whose receive is never polled gets its event anyway
 * (the hold is bounded). */
static void case_disconnect_after_data(void)
{
	struct sockaddr_in addr;
	struct rdma_cm_id *l = listener(RDMA_PS_TCP, &addr);
	for (int round = 0; round < 2; round++) {
		struct rdma_cm_id *a = resolved(RDMA_PS_TCP, &addr);
		make_qp(a, IBV_QPT_RC);
		struct rdma_conn_param cp = { .retry_count = 7, .rnr_retry_count = 7 };
		if (rdma_connect(a, &cp))
			DIE("rdma_connect");
		struct rdma_cm_event *e = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 0);
		if (!e)
			return;
		struct rdma_cm_id *p = e->id;
		rdma_ack_cm_event(e);
		make_qp(p, IBV_QPT_RC);
		struct ibv_mr *pmr = ibv_reg_mr(p->pd, calloc(1, 64), 64, IBV_ACCESS_LOCAL_WRITE);
		struct ibv_mr *amr = ibv_reg_mr(a->pd, calloc(1, 64), 64, IBV_ACCESS_LOCAL_WRITE);
		if (!pmr || !amr)
			DIE("ibv_reg_mr");
		struct ibv_sge ps = { (uintptr_t)pmr->addr, 64, pmr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 7, .sg_list = &ps, .num_sge = 1 }, *bad_r;
		if (ibv_post_recv(p->qp, &rw, &bad_r))
			DIE("ibv_post_recv");
		struct rdma_conn_param ap = { .rnr_retry_count = 7 };
		if (rdma_accept(p, &ap))
			DIE("rdma_accept");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED, 0));
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED, 0));
		struct ibv_sge as = { (uintptr_t)amr->addr, 64, amr->lkey };
		struct ibv_send_wr sw = { .sg_list = &as, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad_s;
		if (ibv_post_send(a->qp, &sw, &bad_s))
			DIE("ibv_post_send");
		struct ibv_wc wc;
		CHECK(poll_one(a->send_cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
		      "the SEND was acknowledged");
		if (rdma_disconnect(a))
			DIE("rdma_disconnect");
		usleep(100000);
		if (round == 0) {
			CHECK(!event_queued(),
			      "no DISCONNECTED while the receive before the DREQ is not polled");
			CHECK(poll_one(p->recv_cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
				      wc.wr_id == 7,
			      "the receive completes");
		}
		e = expect(RDMA_CM_EVENT_DISCONNECTED, 0);
		if (e) {
			CHECK(e->id == p, "the passive side's DISCONNECTED (round %d)", round);
			rdma_ack_cm_event(e);
		}
		rdma_disconnect(p);
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED, 0));
		rdma_destroy_qp(a);
		rdma_destroy_qp(p);
		rdma_destroy_id(a);
		rdma_destroy_id(p);
	}
	rdma_destroy_id(l);
}

/* An id bound to `a` (its port 0: a free one); NULL (and errno) if the bind fails. */
static struct rdma_cm_id *bound_to(const struct sockaddr *a)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id");
	if (rdma_bind_addr(id, (struct sockaddr *)a)) {
		int e = errno;
		rdma_destroy_id(id);
		errno = e;
		return NULL;
	}
	return id;
}

/* librdmacm's one context per device (run with SOFTIB_BIND=DEVICE_ADDR, one device on a
 * loopback address): rdma_get_devices lists it once, and every id of the device is on that
 * context, whatever address named it: its own, a loopback address no device holds (the
 * kernel's rdma_cm takes the host's device for a loopback address), a resolved destination,
 * a request that came to a listener. A PD of the listed context makes the QP of an accepted
 * request (libfabric's verbs domain does exactly that: rdma_create_qp checks
 * pd->context == id->verbs). */
static void case_devices(const char *device_addr)
{
	int n = -1;
	struct ibv_context **devs = rdma_get_devices(&n);
	CHECK(devs && n == 1, "one context per device: %d", n);
	if (!devs || n < 1)
		return;
	struct ibv_context **again = rdma_get_devices(NULL);
	CHECK(again && again[0] == devs[0] && again[1] == NULL, "the same context every time");
	rdma_free_devices(again);
	struct ibv_context *dev = devs[0];
	union ibv_gid g1;
	CHECK(ibv_query_gid(dev, 1, 1, &g1) == 0 && g1.raw[0] == 0xfe && g1.raw[1] == 0x80 &&
		      g1.global.interface_id != 0,
	      "GID 1 is the port's link-local default GID");

	struct sockaddr_in own = { .sin_family = AF_INET };
	if (inet_pton(AF_INET, device_addr, &own.sin_addr) != 1)
		DIE("device address %s", device_addr);
	struct rdma_cm_id *a = bound_to((struct sockaddr *)&own);
	CHECK(a && a->verbs == dev, "an id bound to the device's address is on its context");

	struct sockaddr_in lo = { .sin_family = AF_INET };
	lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (own.sin_addr.s_addr == lo.sin_addr.s_addr)
		lo.sin_addr.s_addr = htonl(0x7f000002);
	struct rdma_cm_id *l = bound_to((struct sockaddr *)&lo);
	CHECK(l && l->verbs == dev, "a loopback address no device holds names the device");
	if (!l)
		return;
	struct sockaddr_in *la = (struct sockaddr_in *)rdma_get_local_addr(l);
	CHECK(la->sin_family == AF_INET && la->sin_addr.s_addr == own.sin_addr.s_addr &&
		      la->sin_port != 0,
	      "bound at the device's own address and a free port");
	if (rdma_listen(l, 4))
		DIE("rdma_listen");
	struct sockaddr_in to = *la;
	struct rdma_cm_id *c = resolved(RDMA_PS_TCP, &to);
	CHECK(c->verbs == dev, "a resolved id is on the device's context");
	make_qp(c, IBV_QPT_RC);
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	if (rdma_connect(c, &cp))
		DIE("rdma_connect");
	struct rdma_cm_event *e = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (e) {
		struct rdma_cm_id *p = e->id;
		rdma_ack_cm_event(e);
		CHECK(p->verbs == dev, "a request's id is on the device's context");
		struct ibv_pd *pd = ibv_alloc_pd(dev);
		struct ibv_qp_init_attr qa = {
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};
		qa.send_cq = qa.recv_cq = ibv_create_cq(dev, 8, NULL, NULL, 0);
		CHECK(pd && qa.send_cq && rdma_create_qp(p, pd, &qa) == 0,
		      "a QP of the listed context's PD on the request's id");
		struct rdma_conn_param ap = { .responder_resources = 1, .initiator_depth = 1 };
		CHECK(rdma_accept(p, &ap) == 0, "accept");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED, 0));
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED, 0));
		rdma_disconnect(c);
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED, 0));
		rdma_destroy_qp(p);
		rdma_destroy_id(p);
		ibv_destroy_cq(qa.send_cq);
		ibv_dealloc_pd(pd);
	}
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
	if (a)
		rdma_destroy_id(a);
	rdma_free_devices(devs);
	devs = rdma_get_devices(&n);
	CHECK(devs && n == 1 && devs[0] == dev, "still the one context");
	rdma_free_devices(devs);
}

/* A loopback address when no device is on a loopback address of its family (run with
 * SOFTIB_BIND=::1: the one device is IPv6): bound as the kernel's rdma_cm binds every
 * loopback address (cma_any_addr), to no device, its port held as the wildcard's; a listen
 * hears every device. */
static void case_loopback_no_device(void)
{
	int n = -1;
	struct ibv_context **devs = rdma_get_devices(&n);
	CHECK(devs && n == 1, "the device on ::1: %d", n);
	if (!devs || n < 1)
		return;
	rdma_free_devices(devs);
	struct sockaddr_in lo = { .sin_family = AF_INET };
	lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct rdma_cm_id *l = bound_to((struct sockaddr *)&lo);
	CHECK(l != NULL, "bind 127.0.0.1");
	if (!l)
		return;
	CHECK(l->verbs == NULL, "on no device");
	struct sockaddr_in *la = (struct sockaddr_in *)rdma_get_local_addr(l);
	CHECK(la->sin_family == AF_INET && la->sin_addr.s_addr == lo.sin_addr.s_addr &&
		      la->sin_port != 0,
	      "at 127.0.0.1 and a free port");
	struct sockaddr_in any = { .sin_family = AF_INET, .sin_port = la->sin_port };
	errno = 0;
	CHECK(bound_to((struct sockaddr *)&any) == NULL && errno == EADDRINUSE,
	      "its port is taken for the wildcard too");
	CHECK(rdma_listen(l, 4) == 0, "it listens (on every device)");
	struct sockaddr_in6 to = { .sin6_family = AF_INET6, .sin6_port = la->sin_port };
	to.sin6_addr = in6addr_loopback;
	struct rdma_cm_id *c;
	if (rdma_create_id(ch, &c, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id");
	if (rdma_resolve_addr(c, NULL, (struct sockaddr *)&to, 2000))
		DIE("rdma_resolve_addr");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED, 0));
	if (rdma_resolve_route(c, 2000))
		DIE("rdma_resolve_route");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
	make_qp(c, IBV_QPT_RC);
	struct rdma_conn_param cp = { .retry_count = 7, .rnr_retry_count = 7 };
	if (rdma_connect(c, &cp))
		DIE("rdma_connect");
	struct rdma_cm_event *e = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (e) {
		CHECK(e->listen_id == l && e->id->verbs != NULL,
		      "the device's request reaches the listener");
		struct rdma_cm_id *p = e->id;
		rdma_ack_cm_event(e);
		rdma_reject(p, NULL, 0);
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_REJECTED, 28));
		rdma_destroy_id(p);
	}
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: cm_cases establish|reject|ud|bad_calls|vanish|ports|"
				"disconnect_after_data|devices|loopback_no_device\n");
		return 2;
	}
	ch = rdma_create_event_channel();
	if (!ch)
		DIE("rdma_create_event_channel");
	if (!strcmp(argv[1], "establish"))
		case_establish();
	else if (!strcmp(argv[1], "reject"))
		case_reject();
	else if (!strcmp(argv[1], "ud"))
		case_ud();
	else if (!strcmp(argv[1], "bad_calls"))
		case_bad_calls();
	else if (!strcmp(argv[1], "vanish"))
		case_vanish();
	else if (!strcmp(argv[1], "ports"))
		case_port_of_another_process();
	else if (!strcmp(argv[1], "disconnect_after_data"))
		case_disconnect_after_data();
	else if (!strcmp(argv[1], "devices"))
		case_devices(getenv("SOFTIB_BIND") ? getenv("SOFTIB_BIND") : "127.0.0.1");
	else if (!strcmp(argv[1], "loopback_no_device"))
		case_loopback_no_device();
	else
		DIE("unknown case %s", argv[1]);
	rdma_destroy_event_channel(ch);
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
