/*
 * A connected (FI_EP_MSG) endpoint pair of libfabric's verbs provider, each side found the
 * way an application finds it: the server with the passive-side hints of fi_getinfo (no node,
 * a service, FI_SOURCE: a wildcard address to listen on), the client with the server's node
 * and service. Built and run by crates/softib-cli/tests/libfabric.rs under `softib run`.
 *
 *   fi_msg server SERVICE          prints "listening on ADDR" (stdout), then serves one
 *                                  connection
 *   fi_msg client NODE SERVICE
 *
 * The client sends messages of 1 byte to 1 MiB, each with a pattern of its size and index;
 * the server checks each and sends it back with every byte inverted; the client checks the
 * answer. Exits 0 only if every step and check held; each failure is printed with the step.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#define MAX_SIZE (1 << 20)

static const char *role = "?";

#define TRY(call)                                                                        \
	do {                                                                             \
		int rc_ = (int)(call);                                                   \
		if (rc_) {                                                               \
			fprintf(stderr, "%s: %s: %d (%s)\n", role, #call, rc_,           \
				fi_strerror(-rc_));                                      \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

static void fail(const char *what)
{
	fprintf(stderr, "%s: %s\n", role, what);
	exit(1);
}

static struct fid_fabric *fabric;
static struct fid_eq *eq;
static struct fid_domain *domain;
static struct fid_ep *ep;
static struct fid_cq *cq;
static struct fid_mr *mr;
static char *buf;

static struct fi_info *hints(void)
{
	struct fi_info *h = fi_allocinfo();
	if (!h)
		fail("fi_allocinfo");
	h->ep_attr->type = FI_EP_MSG;
	h->caps = FI_MSG;
	h->mode = FI_CONTEXT;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->fabric_attr->prov_name = strdup("verbs");
	return h;
}

/* The next CM event of the EQ, which must be `want`. */
static void cm_event(uint32_t want, struct fi_eq_cm_entry *entry)
{
	uint32_t event;
	ssize_t n = fi_eq_sread(eq, &event, entry, sizeof(*entry), 20000, 0);
	if (n == -FI_EAVAIL) {
		struct fi_eq_err_entry err = { 0 };
		fi_eq_readerr(eq, &err, 0);
		fprintf(stderr, "%s: EQ error %d (%s)\n", role, err.err, fi_strerror(err.err));
		exit(1);
	}
	if (n != sizeof(*entry) || event != want) {
		fprintf(stderr, "%s: EQ read %zd, event %u, want %u\n", role, n, event, want);
		exit(1);
	}
}

/* Waits for one completion of the CQ. */
static void complete(const char *what)
{
	struct fi_cq_entry e;
	for (;;) {
		ssize_t n = fi_cq_read(cq, &e, 1);
		if (n == 1)
			return;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };
			fi_cq_readerr(cq, &err, 0);
			fprintf(stderr, "%s: %s completed in error: %s\n", role, what,
				fi_strerror(err.err));
			exit(1);
		}
		if (n != -FI_EAGAIN) {
			fprintf(stderr, "%s: fi_cq_read %zd\n", role, n);
			exit(1);
		}
	}
}

/* An active endpoint of `info` on the domain, with its CQ and registered buffer. */
static void endpoint(struct fi_info *info)
{
	struct fi_cq_attr ca = { .size = 16, .format = FI_CQ_FORMAT_CONTEXT,
				 .wait_obj = FI_WAIT_NONE };
	TRY(fi_domain(fabric, info, &domain, NULL));
	TRY(fi_cq_open(domain, &ca, &cq, NULL));
	TRY(fi_endpoint(domain, info, &ep, NULL));
	TRY(fi_ep_bind(ep, &eq->fid, 0));
	TRY(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	TRY(fi_enable(ep));
	buf = malloc(2 * MAX_SIZE);
	if (!buf)
		fail("malloc");
	TRY(fi_mr_reg(domain, buf, 2 * MAX_SIZE, FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL));
}

static unsigned char pattern(size_t size, int index, size_t i)
{
	return (unsigned char)(size * 7 + index * 13 + i * 31 + (i >> 8));
}

static int sizes(size_t *out)
{
	int n = 0;
	for (size_t s = 1; s <= MAX_SIZE; s *= 4)
		out[n++] = s;
	out[n++] = MAX_SIZE;
	return n;
}

static void server(const char *service)
{
	role = "server";
	struct fi_info *h = hints(), *info;
	TRY(fi_getinfo(FI_VERSION(1, 17), NULL, service, FI_SOURCE, h, &info));
	struct sockaddr_in *sa = info->src_addr;
	if (!sa || info->addr_format != FI_SOCKADDR_IN || ntohs(sa->sin_port) != atoi(service))
		fail("the passive info names no IPv4 address with the service's port");
	TRY(fi_fabric(info->fabric_attr, &fabric, NULL));
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
	TRY(fi_eq_open(fabric, &ea, &eq, NULL));
	struct fid_pep *pep;
	TRY(fi_passive_ep(fabric, info, &pep, NULL));
	TRY(fi_pep_bind(pep, &eq->fid, 0));
	TRY(fi_listen(pep));
	char name[64];
	size_t len = sizeof(name);
	TRY(fi_getname(&pep->fid, name, &len));
	char text[64];
	inet_ntop(AF_INET, &((struct sockaddr_in *)name)->sin_addr, text, sizeof(text));
	printf("listening on %s:%d\n", text, ntohs(((struct sockaddr_in *)name)->sin_port));
	fflush(stdout);

	struct fi_eq_cm_entry entry;
	cm_event(FI_CONNREQ, &entry);
	endpoint(entry.info);
	size_t s[16];
	int n = sizes(s);
	struct fi_context ctx[2];
	TRY(fi_recv(ep, buf, MAX_SIZE, fi_mr_desc(mr), 0, &ctx[0]));
	TRY(fi_accept(ep, NULL, 0));
	cm_event(FI_CONNECTED, &entry);
	for (int k = 0; k < n; k++) {
		complete("receive");
		for (size_t i = 0; i < s[k]; i++)
			if ((unsigned char)buf[i] != pattern(s[k], k, i)) {
				fprintf(stderr, "server: message %d (%zu bytes): byte %zu differs\n",
					k, s[k], i);
				exit(1);
			}
		for (size_t i = 0; i < s[k]; i++)
			buf[MAX_SIZE + i] = (char)~buf[i];
		if (k + 1 < n)
			TRY(fi_recv(ep, buf, MAX_SIZE, fi_mr_desc(mr), 0, &ctx[0]));
		TRY(fi_send(ep, buf + MAX_SIZE, s[k], fi_mr_desc(mr), 0, &ctx[1]));
		complete("send");
	}
	cm_event(FI_SHUTDOWN, &entry);
	/* stdout carried the "listening" line only. */
	fprintf(stderr, "server: %d messages checked and answered\n", n);
	fi_close(&ep->fid);
	fi_close(&mr->fid);
	fi_close(&cq->fid);
	fi_close(&domain->fid);
	fi_close(&pep->fid);
	fi_close(&eq->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(entry.info);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

static void client(const char *node, const char *service)
{
	role = "client";
	struct fi_info *h = hints(), *info;
	TRY(fi_getinfo(FI_VERSION(1, 17), node, service, 0, h, &info));
	if (!info->dest_addr)
		fail("the info has no destination address");
	TRY(fi_fabric(info->fabric_attr, &fabric, NULL));
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
	TRY(fi_eq_open(fabric, &ea, &eq, NULL));
	endpoint(info);
	TRY(fi_connect(ep, info->dest_addr, NULL, 0));
	struct fi_eq_cm_entry entry;
	cm_event(FI_CONNECTED, &entry);
	size_t s[16];
	int n = sizes(s);
	struct fi_context ctx[2];
	for (int k = 0; k < n; k++) {
		TRY(fi_recv(ep, buf + MAX_SIZE, MAX_SIZE, fi_mr_desc(mr), 0, &ctx[0]));
		for (size_t i = 0; i < s[k]; i++)
			buf[i] = (char)pattern(s[k], k, i);
		TRY(fi_send(ep, buf, s[k], fi_mr_desc(mr), 0, &ctx[1]));
		complete("send");
		complete("receive");
		for (size_t i = 0; i < s[k]; i++)
			if ((unsigned char)buf[MAX_SIZE + i] != (unsigned char)~pattern(s[k], k, i)) {
				fprintf(stderr, "client: answer %d (%zu bytes): byte %zu differs\n", k,
					s[k], i);
				exit(1);
			}
	}
	printf("client: %d messages sent, answers checked\n", n);
	TRY(fi_shutdown(ep, 0));
	fi_close(&ep->fid);
	fi_close(&mr->fid);
	fi_close(&cq->fid);
	fi_close(&domain->fid);
	fi_close(&eq->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "server"))
		server(argv[2]);
	else if (argc == 4 && !strcmp(argv[1], "client"))
		client(argv[2], argv[3]);
	else {
		fprintf(stderr, "usage: fi_msg server SERVICE | fi_msg client NODE SERVICE\n");
		return 2;
	}
	return 0;
}
