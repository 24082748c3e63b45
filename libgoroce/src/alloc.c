/*
 * alloc.c: memory for libgoroce's own objects, on pages of their own.
 *
 * Programs register buffers that are not page-aligned, and the pages such a
 * buffer spans are swapped when it is registered and deregistered (swap.c).
 * An object of the library on one of those pages (a CM ID's record next to
 * rping's buffers was one) would have its system calls fail with EFAULT
 * during a swap, and would share the fate of whatever the program does to
 * its heap (an overrun, a use after free). So everything the library
 * allocates comes from mappings of its own, which no buffer of the program
 * spans: size classes of 16 bytes to 4 KiB carved from 64 KiB chunks, larger
 * objects in power-of-two runs of pages, kept for reuse when freed. Objects
 * the library hands out are freed by the library too (ibv_free_device_list,
 * rdma_freeaddrinfo, ...), never by the program's free().
 *
 * All of it is carved from one address range reserved at the first
 * allocation (PROT_NONE, no memory behind it until used): a mapping of the
 * library never lands where the program has just unmapped memory, so
 * registering an unmapped address still fails with EFAULT, and no snapshot
 * of /proc/self/maps taken during a registration goes stale because the
 * library unmapped a buffer of its own.
 */
#include "shim.h"

#include <string.h>
#include <sys/mman.h>

#define GR_CLASSES 9 /* 16 << 0 ... 16 << 8 = 4096 bytes */
#define GR_CHUNK (64 << 10)
#define GR_LARGE 48 /* large runs: 1 << 13 ... 1 << 60 bytes */
/* Address space only: PROT_NONE and MAP_NORESERVE commit nothing. */
#define GR_RESERVE (sizeof(void *) == 8 ? (size_t)1 << 30 : (size_t)64 << 20)

/* Before each object: its class, or its mapping's length for a large one. */
struct gr_blk {
	size_t size; /* class size, or mapping length if large */
	size_t large;
};

struct gr_freed {
	struct gr_freed *next;
};

static pthread_mutex_t alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gr_freed *free_list[GR_CLASSES];
static char *carve[GR_CLASSES]; /* the rest of the class's current chunk */
static size_t carve_left[GR_CLASSES];
static struct gr_freed *large_free[GR_LARGE];
static char *resv, *resv_next, *resv_end;

/* region maps len bytes (a multiple of the page size) readable and
 * writable inside the reservation, or anywhere once it is used up. */
static void *region(size_t len)
{
	void *p;

	if (!resv) {
		resv = mmap(NULL, GR_RESERVE, PROT_NONE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (resv == MAP_FAILED)
			resv = resv_next = resv_end = (char *)16;
		else
			resv_next = resv, resv_end = resv + GR_RESERVE;
	}
	if ((size_t)(resv_end - resv_next) >= len) {
		p = mmap(resv_next, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		if (p != MAP_FAILED) {
			resv_next += len;
			return p;
		}
	}
	return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

static int class_of(size_t n)
{
	int c = 0;

	while ((size_t)16 << c < n)
		c++;
	return c;
}

/* large_alloc gives n bytes from a power-of-two run of pages. */
static void *large_alloc(size_t n)
{
	struct gr_blk *h;
	int k = 13;

	if (n > (size_t)-1 / 4) {
		errno = ENOMEM;
		return NULL;
	}
	while (((size_t)1 << k) < n + sizeof(*h))
		k++;
	if (k >= 13 + GR_LARGE) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&alloc_mu);
	h = (struct gr_blk *)large_free[k - 13];
	if (h)
		large_free[k - 13] = large_free[k - 13]->next;
	else
		h = region((size_t)1 << k);
	pthread_mutex_unlock(&alloc_mu);
	if (h == MAP_FAILED)
		return NULL;
	h->size = (size_t)1 << k;
	h->large = 1;
	return h + 1;
}

void *gr_malloc(size_t n)
{
	struct gr_blk *h;
	size_t sz;
	int c;

	if (n > ((size_t)16 << (GR_CLASSES - 1)))
		return large_alloc(n);
	c = class_of(n ? n : 1);
	sz = sizeof(*h) + ((size_t)16 << c);
	pthread_mutex_lock(&alloc_mu);
	if (free_list[c]) {
		h = (struct gr_blk *)free_list[c];
		free_list[c] = free_list[c]->next;
	} else {
		if (carve_left[c] < sz) {
			void *m = region(GR_CHUNK);

			if (m == MAP_FAILED) {
				pthread_mutex_unlock(&alloc_mu);
				return NULL;
			}
			carve[c] = m;
			carve_left[c] = GR_CHUNK;
		}
		h = (struct gr_blk *)carve[c];
		carve[c] += sz;
		carve_left[c] -= sz;
	}
	pthread_mutex_unlock(&alloc_mu);
	h->size = (size_t)16 << c;
	h->large = 0;
	return h + 1;
}

void *gr_calloc(size_t n, size_t size)
{
	void *p;

	if (size && n > (size_t)-1 / size) {
		errno = ENOMEM;
		return NULL;
	}
	p = gr_malloc(n * size);
	if (p)
		memset(p, 0, n * size);
	return p;
}

void gr_free(void *p)
{
	struct gr_blk *h;
	struct gr_freed *f;
	int c;

	if (!p)
		return;
	h = (struct gr_blk *)p - 1;
	f = (struct gr_freed *)h;
	if (h->large) {
		/* Kept, for the next large object of its size; its memory
		 * goes back to the system meanwhile. */
		c = __builtin_ctzl(h->size) - 13;
		if (h->size > 4096)
			madvise((char *)h + 4096, h->size - 4096, MADV_DONTNEED);
		pthread_mutex_lock(&alloc_mu);
		f->next = large_free[c];
		large_free[c] = f;
		pthread_mutex_unlock(&alloc_mu);
		return;
	}
	c = class_of(h->size);
	pthread_mutex_lock(&alloc_mu);
	f->next = free_list[c];
	free_list[c] = f;
	pthread_mutex_unlock(&alloc_mu);
}

void *gr_realloc(void *p, size_t n)
{
	struct gr_blk *h;
	size_t have;
	void *q;

	if (!p)
		return gr_malloc(n);
	h = (struct gr_blk *)p - 1;
	have = h->large ? h->size - sizeof(*h) : h->size;
	if (n <= have)
		return p;
	q = gr_malloc(n);
	if (!q)
		return NULL;
	memcpy(q, p, have);
	gr_free(p);
	return q;
}

void gr_alloc_prefork(void)
{
	pthread_mutex_lock(&alloc_mu);
}

void gr_alloc_postfork(void)
{
	pthread_mutex_unlock(&alloc_mu);
}
