/*
 * The few libfabric calls the ofi backend makes, as plain functions.
 *
 * libfabric's data-path calls (fi_writemsg, fi_compare_atomicmsg, fi_cq_read, ...) are static
 * inline functions in its headers that jump through the provider's operation tables, so Rust
 * cannot link against them directly. This file wraps each one the backend uses, hides the
 * libfabric structures behind one opaque handle per domain and per endpoint, and reports errors
 * as negative libfabric error numbers (fi_strerror gives their text).
 *
 * Nothing here keeps state beyond the handles; locking, routing of completions and every rule of
 * the fabric API live on the Rust side (src/).
 */
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MU_OFI_VERSION FI_VERSION(1, 17)

struct mu_ofi_domain {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	size_t inject_bytes;
};

struct mu_ofi_ep {
	struct fi_info *info;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
};

/* One completion as the Rust side sees it: the caller's context, 0 on success or the positive
 * libfabric error number, and the provider's own error number for messages. */
struct mu_ofi_completion {
	uint64_t context;
	int32_t err;
	int32_t prov_errno;
};

static struct fi_info *hints_for(const char *provider)
{
	struct fi_info *hints = fi_allocinfo();
	if (!hints)
		return NULL;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	/* No FI_CONTEXT mode: the provider may not keep state in our operation contexts, which are
	 * plain numbers. */
	hints->mode = 0;
	/* Keys are chosen by us (no FI_MR_PROV_KEY) and remote addresses are offsets into a
	 * registration (no FI_MR_VIRT_ADDR): a peer computes both without any exchange. */
	hints->domain_attr->mr_mode = 0;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	/* Progress as the provider prefers: `sockets` applies incoming operations on its own
	 * threads; `tcp;ofi_rxm` only within calls on the endpoint, so the backend then runs a
	 * progress thread (mu_ofi_domain_manual_progress). */
	/* A completion must mean "applied in the target's memory", as on RDMA. */
	hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	/* Reliable connections are FIFO: a write followed by a compare-and-swap lands in order.
	 * Providers name orderings within RMA and within atomics (ofi_rxm refuses the older names
	 * that cover every operation); across the two, both providers keep one byte stream per
	 * pair of endpoints, which the conformance suite's fifo_write_then_cas checks. */
	hints->tx_attr->msg_order = FI_ORDER_RMA_RAW | FI_ORDER_RMA_WAW | FI_ORDER_ATOMIC_RAW |
				    FI_ORDER_ATOMIC_WAW;
	hints->fabric_attr->prov_name = strdup(provider);
	return hints;
}

static void say(char *err, size_t err_len, const char *what, int rc)
{
	if (err && err_len)
		snprintf(err, err_len, "%s: %s", what, fi_strerror(rc < 0 ? -rc : rc));
}

const char *mu_ofi_strerror(int rc)
{
	return fi_strerror(rc < 0 ? -rc : rc);
}

static int info_for(const char *provider, const char *node, const char *service,
		    struct fi_info **out)
{
	struct fi_info *hints = hints_for(provider);
	if (!hints)
		return -FI_ENOMEM;
	int rc = fi_getinfo(MU_OFI_VERSION, node, service, FI_SOURCE, hints, out);
	fi_freeinfo(hints);
	return rc;
}

/* The sockets provider's progress threads sleep up to FI_SOCKETS_PE_WAITTIME milliseconds (10 by
 * default) between rounds, which made every round trip cost milliseconds; with 0 they go on
 * while they have work and still sleep when idle (measured: the same CPU time on an idle node).
 * libfabric reads it from the environment when a provider initializes, so it is set before the
 * first fi_getinfo, once, and only where the user has not chosen a value. */
static pthread_once_t tune_once = PTHREAD_ONCE_INIT;
static void tune_providers(void)
{
	setenv("FI_SOCKETS_PE_WAITTIME", "0", 0);
	/* Opening a connection happens inside the post that needs it, which blocks the posting
	 * thread until the peer answers or this many milliseconds pass, and by default tries 5
	 * times. A peer on a working network answers within a millisecond; one that is cut off
	 * never does, and the defaults let such a post hold a replica's background thread (its
	 * heartbeat) or its replication thread for a second each time. One try of 100 ms: a
	 * failed post is a failed operation, which the layers above already retry. */
	setenv("FI_SOCKETS_CONN_TIMEOUT", "100", 0);
	setenv("FI_SOCKETS_MAX_CONN_RETRY", "1", 0);
}

int mu_ofi_domain_open(const char *provider, const char *node, const char *service,
		       struct mu_ofi_domain **out, char *err, size_t err_len)
{
	pthread_once(&tune_once, tune_providers);
	struct mu_ofi_domain *d = calloc(1, sizeof(*d));
	if (!d)
		return -FI_ENOMEM;
	int rc = info_for(provider, node, service, &d->info);
	if (rc) {
		say(err, err_len, "fi_getinfo", rc);
		free(d);
		return rc;
	}
	rc = fi_fabric(d->info->fabric_attr, &d->fabric, NULL);
	if (rc) {
		say(err, err_len, "fi_fabric", rc);
		goto fail;
	}
	rc = fi_domain(d->fabric, d->info, &d->domain, NULL);
	if (rc) {
		say(err, err_len, "fi_domain", rc);
		goto fail;
	}
	d->inject_bytes = d->info->tx_attr->inject_size;
	*out = d;
	return 0;
fail:
	if (d->fabric)
		fi_close(&d->fabric->fid);
	fi_freeinfo(d->info);
	free(d);
	return rc;
}

size_t mu_ofi_domain_inject_bytes(const struct mu_ofi_domain *d)
{
	return d->inject_bytes;
}

int mu_ofi_domain_manual_progress(const struct mu_ofi_domain *d)
{
	return d->info->domain_attr->data_progress == FI_PROGRESS_MANUAL;
}

const char *mu_ofi_domain_provider(const struct mu_ofi_domain *d)
{
	return d->info->fabric_attr->prov_name;
}

void mu_ofi_domain_close(struct mu_ofi_domain *d)
{
	if (!d)
		return;
	fi_close(&d->domain->fid);
	fi_close(&d->fabric->fid);
	fi_freeinfo(d->info);
	free(d);
}

int mu_ofi_ep_open(struct mu_ofi_domain *d, const char *node, const char *service, size_t depth,
		   struct mu_ofi_ep **out, char *err, size_t err_len)
{
	struct mu_ofi_ep *e = calloc(1, sizeof(*e));
	if (!e)
		return -FI_ENOMEM;
	int rc = info_for(d->info->fabric_attr->prov_name, node, service, &e->info);
	if (rc) {
		say(err, err_len, "fi_getinfo (endpoint address)", rc);
		free(e);
		return rc;
	}
	rc = fi_endpoint(d->domain, e->info, &e->ep, NULL);
	if (rc) {
		say(err, err_len, "fi_endpoint", rc);
		goto fail;
	}
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	rc = fi_av_open(d->domain, &av_attr, &e->av, NULL);
	if (rc) {
		say(err, err_len, "fi_av_open", rc);
		goto fail;
	}
	struct fi_cq_attr cq_attr = {
		.size = depth,
		.format = FI_CQ_FORMAT_CONTEXT,
		.wait_obj = FI_WAIT_NONE,
	};
	rc = fi_cq_open(d->domain, &cq_attr, &e->cq, NULL);
	if (rc) {
		say(err, err_len, "fi_cq_open", rc);
		goto fail;
	}
	rc = fi_ep_bind(e->ep, &e->av->fid, 0);
	if (!rc)
		rc = fi_ep_bind(e->ep, &e->cq->fid,
				FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION);
	if (rc) {
		say(err, err_len, "fi_ep_bind", rc);
		goto fail;
	}
	rc = fi_enable(e->ep);
	if (rc) {
		say(err, err_len, "fi_enable", rc);
		goto fail;
	}
	*out = e;
	return 0;
fail:
	if (e->ep)
		fi_close(&e->ep->fid);
	if (e->cq)
		fi_close(&e->cq->fid);
	if (e->av)
		fi_close(&e->av->fid);
	fi_freeinfo(e->info);
	free(e);
	return rc;
}

void mu_ofi_ep_close(struct mu_ofi_ep *e)
{
	if (!e)
		return;
	fi_close(&e->ep->fid);
	fi_close(&e->cq->fid);
	fi_close(&e->av->fid);
	fi_freeinfo(e->info);
	free(e);
}

/* Resolves a peer's "host" and "port" into an address of this endpoint's table. */
int mu_ofi_av_insert(struct mu_ofi_ep *e, const char *node, const char *service, uint64_t *addr)
{
	fi_addr_t a = FI_ADDR_NOTAVAIL;
	int n = fi_av_insertsvc(e->av, node, service, &a, 0, NULL);
	if (n < 0)
		return n;
	if (n != 1)
		return -FI_EADDRNOTAVAIL;
	*addr = a;
	return 0;
}

int mu_ofi_mr_reg(struct mu_ofi_domain *d, void *buf, size_t len, int remote_read,
		  int remote_write, uint64_t key, struct fid_mr **out)
{
	uint64_t access = 0;
	if (remote_read)
		access |= FI_REMOTE_READ;
	if (remote_write)
		access |= FI_REMOTE_WRITE;
	return fi_mr_reg(d->domain, buf, len, access, 0, key, 0, out, NULL);
}

int mu_ofi_mr_close(struct fid_mr *mr)
{
	return fi_close(&mr->fid);
}

#define MU_SIGNALED 1
#define MU_INJECT 2

static uint64_t op_flags(int flags)
{
	uint64_t f = FI_DELIVERY_COMPLETE;
	if (flags & MU_SIGNALED)
		f |= FI_COMPLETION;
	if (flags & MU_INJECT)
		f |= FI_INJECT;
	return f;
}

ssize_t mu_ofi_write(struct mu_ofi_ep *e, const void *buf, size_t len, uint64_t dest,
		     uint64_t offset, uint64_t key, uint64_t context, int flags)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct fi_rma_iov rma = {.addr = offset, .len = len, .key = key};
	struct fi_msg_rma msg = {
		.msg_iov = &iov,
		.desc = NULL,
		.iov_count = 1,
		.addr = dest,
		.rma_iov = &rma,
		.rma_iov_count = 1,
		.context = (void *)(uintptr_t)context,
	};
	return fi_writemsg(e->ep, &msg, op_flags(flags));
}

ssize_t mu_ofi_read(struct mu_ofi_ep *e, void *buf, size_t len, uint64_t dest, uint64_t offset,
		    uint64_t key, uint64_t context, int flags)
{
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct fi_rma_iov rma = {.addr = offset, .len = len, .key = key};
	struct fi_msg_rma msg = {
		.msg_iov = &iov,
		.desc = NULL,
		.iov_count = 1,
		.addr = dest,
		.rma_iov = &rma,
		.rma_iov_count = 1,
		.context = (void *)(uintptr_t)context,
	};
	return fi_readmsg(e->ep, &msg, op_flags(flags) & ~(uint64_t)FI_DELIVERY_COMPLETE);
}

/* 64-bit compare-and-swap: `*desired` replaces the remote word if it equals `*compare`; the
 * previous remote word is written to `*result`. The three words must stay put until the
 * operation completes. */
ssize_t mu_ofi_cas(struct mu_ofi_ep *e, uint64_t *desired, uint64_t *compare, uint64_t *result,
		   uint64_t dest, uint64_t offset, uint64_t key, uint64_t context, int flags)
{
	struct fi_ioc ioc = {.addr = desired, .count = 1};
	struct fi_ioc cmp = {.addr = compare, .count = 1};
	struct fi_ioc res = {.addr = result, .count = 1};
	struct fi_rma_ioc rma = {.addr = offset, .count = 1, .key = key};
	struct fi_msg_atomic msg = {
		.msg_iov = &ioc,
		.desc = NULL,
		.iov_count = 1,
		.addr = dest,
		.rma_iov = &rma,
		.rma_iov_count = 1,
		.datatype = FI_UINT64,
		.op = FI_CSWAP,
		.context = (void *)(uintptr_t)context,
	};
	return fi_compare_atomicmsg(e->ep, &msg, &cmp, NULL, 1, &res, NULL, 1,
				    op_flags(flags) & ~(uint64_t)FI_DELIVERY_COMPLETE);
}

/* Reads up to `max` completions. Returns how many, 0 when there are none, or a negative error.
 * An error completion is read on its own and returned as one entry with `err` set. */
ssize_t mu_ofi_cq_read(struct mu_ofi_ep *e, struct mu_ofi_completion *out, size_t max)
{
	struct fi_cq_entry entries[16];
	if (max > 16)
		max = 16;
	ssize_t n = fi_cq_read(e->cq, entries, max);
	if (n > 0) {
		for (ssize_t i = 0; i < n; i++) {
			out[i].context = (uint64_t)(uintptr_t)entries[i].op_context;
			out[i].err = 0;
			out[i].prov_errno = 0;
		}
		return n;
	}
	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry ee;
		memset(&ee, 0, sizeof(ee));
		ssize_t m = fi_cq_readerr(e->cq, &ee, 0);
		if (m == -FI_EAGAIN)
			return 0;
		if (m < 0)
			return m;
		out[0].context = (uint64_t)(uintptr_t)ee.op_context;
		out[0].err = ee.err ? ee.err : FI_EOTHER;
		out[0].prov_errno = ee.prov_errno;
		return 1;
	}
	return n;
}
