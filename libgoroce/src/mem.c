/*
 * mem.c: registered memory, shared with goroce-nic in place.
 *
 * The daemon must read and write the application's registered buffers at
 * the addresses the application uses, with no copy per operation. At
 * ibv_reg_mr the pages covering the buffer are moved, without moving, into
 * shared memory:
 *
 *  - a private mapping (heap, anonymous mmap, .data/.bss, stack, private
 *    hugetlb) is copied into a sealed memfd that is then mapped MAP_FIXED |
 *    MAP_SHARED over the same addresses with the same protections ("convert");
 *  - a shared mapping is passed as is, if the process holds a file
 *    descriptor of it that is sealed against shrinking ("adopt"): a file
 *    that could shrink would make the daemon fault.
 *
 * The memfd goes to the daemon, which maps it and registers a verbs region
 * over those bytes. Pages are tracked in segments with reference counts
 * (several regions may share a buffer, or overlap); when the last region
 * over a converted segment is deregistered the pages become a private
 * anonymous mapping again, with their content.
 *
 * Both swaps (private to memfd at registration, back at the last
 * deregistration) go through swap.c: the range is write-protected before it
 * is copied, so a write another thread makes meanwhile waits for the new
 * mapping instead of being lost. The pages hold whatever else the heap put
 * there (the program's state; never the library's own, alloc.c).
 *
 * Semantic differences from pinned pages, documented in README:
 *  - during a swap (microseconds) a system call of another thread writing
 *    into those pages fails with EFAULT, and a thread writing them with
 *    SIGSEGV blocked is killed (swap.c);
 *  - converted pages are shared memory: after free() of a registered buffer
 *    (undefined behaviour anyway) madvise(MADV_DONTNEED) no longer zeroes
 *    them, and mlock, MAP_GROWSDOWN and madvise state of the old mapping is
 *    not carried over;
 *  - after fork the child gets private copies of all converted pages (as
 *    FOLL_PIN gives on hardware), taken in the atfork prepare handler: what
 *    the parent writes after fork returns never shows in the child.
 */
#include "shim.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <dirent.h>
#include <unistd.h>

struct gr_seg {
	uintptr_t start, end;
	int fd;
	uint64_t off; /* of start within fd */
	int refs;
	int converted;
	int writable; /* the descriptor allows writing */
	int huge;
	int dead; /* the process remapped the range: never restore it */
	dev_t dev;
	ino_t ino;
	void *snap; /* the child's private copy, between prepare and fork's end */
	struct gr_seg *next; /* live segments, sorted, disjoint */
};

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gr_seg *segs;

static uintptr_t page_size(void)
{
	static uintptr_t ps;

	if (!ps)
		ps = (uintptr_t)sysconf(_SC_PAGESIZE);
	return ps;
}

/* seg_intact reports whether the range is still mapped from the segment's
 * file at the segment's offsets. */
static int seg_intact(const struct gr_seg *g, struct gr_vma *v, int n)
{
	uintptr_t a = g->start;

	while (a < g->end) {
		struct gr_vma *m = gr_vma_at(v, n, a);

		if (!m || !m->shared || m->dev != g->dev || m->ino != g->ino ||
		    m->off + (a - m->start) != g->off + (a - g->start))
			return 0;
		a = m->end;
	}
	return 1;
}

static void seg_unlink(struct gr_seg *g)
{
	struct gr_seg **p;

	for (p = &segs; *p; p = &(*p)->next)
		if (*p == g) {
			*p = g->next;
			return;
		}
}

static void seg_insert(struct gr_seg *g)
{
	struct gr_seg **p = &segs;

	while (*p && (*p)->start < g->start)
		p = &(*p)->next;
	g->next = *p;
	*p = g;
}

static void *map_anon(size_t len, int huge)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | (huge ? MAP_HUGETLB : 0), -1, 0);
}

/* all_rw reports whether [a, b) is readable and writable throughout. */
static int all_rw(uintptr_t a, uintptr_t b, struct gr_vma *v, int n)
{
	while (a < b) {
		struct gr_vma *m = gr_vma_at(v, n, a);

		if (!m || m->prot != (PROT_READ | PROT_WRITE))
			return 0;
		a = m->end;
	}
	return 1;
}

/* set_prots gives the pages of [a, b) the protections the maps entries
 * list, where they are not read and write. */
static void set_prots(uintptr_t a, uintptr_t b, struct gr_vma *v, int n)
{
	while (a < b) {
		struct gr_vma *m = gr_vma_at(v, n, a);
		uintptr_t e = m->end < b ? m->end : b;

		if (m->prot != (PROT_READ | PROT_WRITE))
			mprotect((void *)a, e - a, m->prot);
		a = e;
	}
}

/* swap replaces the pages of [a, b) with tmp holding a copy of src (which
 * is a, or a view of its pages), keeping their protections; no write of
 * another thread is lost (swap.c). */
static int swap(void *tmp, const void *src, uintptr_t a, uintptr_t b, struct gr_vma *v, int n)
{
	int rw = all_rw(a, b, v, n), ret, err;
	struct gr_swap w;

	gr_swap_begin(&w, a, b);
	ret = gr_swap_move(tmp, src, (void *)a, b - a);
	err = errno;
	/* The new pages (or, on failure, the old ones) are readable and
	 * writable: give back the others' protections before the window
	 * closes. */
	if (!rw)
		set_prots(a, b, v, n);
	gr_swap_end(&w);
	errno = err;
	return ret;
}

/* restore turns a converted segment back into private anonymous memory
 * with its current content and the protections the pages have now. */
static void restore(struct gr_seg *g, struct gr_vma *v, int n)
{
	size_t len = g->end - g->start;
	void *src = (void *)g->start, *tmp;
	int rw = all_rw(g->start, g->end, v, n);

	tmp = map_anon(len, g->huge);
	if (tmp == MAP_FAILED)
		return;
	if (!rw) {
		/* Pages the process may not read: copy from a view of the
		 * memfd. */
		src = mmap(NULL, len, PROT_READ, MAP_SHARED, g->fd, (off_t)g->off);
		if (src == MAP_FAILED) {
			munmap(tmp, len);
			return;
		}
	}
	if (swap(tmp, src, g->start, g->end, v, n) < 0)
		munmap(tmp, len);
	if (!rw)
		munmap(src, len);
}

/* convert copies the private range [a, b) (spanning the given maps
 * entries) into a sealed memfd mapped over it. */
static struct gr_seg *convert(uintptr_t a, uintptr_t b, struct gr_vma *v, int n, int huge)
{
	size_t len = b - a;
	struct gr_seg *g = gr_calloc(1, sizeof(*g));
	struct stat st;
	void *tmp;

	if (!g)
		return NULL;
	g->fd = memfd_create("goroce-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING |
						      (huge ? MFD_HUGETLB : 0));
	if (g->fd < 0)
		goto fail;
	if (ftruncate(g->fd, (off_t)len) < 0 ||
	    fcntl(g->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 ||
	    fstat(g->fd, &st) < 0)
		goto fail;
	tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, 0);
	if (tmp == MAP_FAILED)
		goto fail;
	if (swap(tmp, (void *)a, a, b, v, n) < 0) {
		munmap(tmp, len);
		goto fail;
	}
	g->start = a;
	g->end = b;
	g->converted = 1;
	g->writable = 1;
	g->huge = huge;
	g->dev = st.st_dev;
	g->ino = st.st_ino;
	return g;
fail:
	gr_debug("cannot share %#lx-%#lx with the daemon: %s", (unsigned long)a,
		 (unsigned long)b, strerror(errno));
	if (g->fd >= 0)
		close(g->fd);
	gr_free(g);
	return NULL;
}

/* adopt finds a descriptor of the shared mapping m among the process's own,
 * sealed against shrinking, and takes a duplicate. */
static struct gr_seg *adopt(uintptr_t a, uintptr_t b, const struct gr_vma *m, int writable)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	struct gr_seg *g;
	int fd = -1;

	if (!d)
		return NULL;
	while ((e = readdir(d))) {
		struct stat st;
		int f = atoi(e->d_name), seals, fl;

		if (f == dirfd(d) || fstat(f, &st) < 0 || st.st_dev != m->dev || st.st_ino != m->ino)
			continue;
		seals = fcntl(f, F_GET_SEALS);
		fl = fcntl(f, F_GETFL);
		if (seals < 0 || !(seals & F_SEAL_SHRINK) || fl < 0 ||
		    (writable && (fl & O_ACCMODE) != O_RDWR))
			continue;
		fd = fcntl(f, F_DUPFD_CLOEXEC, 0);
		writable = (fl & O_ACCMODE) == O_RDWR;
		break;
	}
	closedir(d);
	if (fd < 0) {
		gr_debug("shared mapping %#lx-%#lx: no sealed memfd of it in this process",
			 (unsigned long)a, (unsigned long)b);
		errno = EOPNOTSUPP;
		return NULL;
	}
	g = gr_calloc(1, sizeof(*g));
	if (!g) {
		close(fd);
		return NULL;
	}
	g->fd = fd;
	g->writable = writable;
	g->start = a;
	g->end = b;
	g->off = m->off + (a - m->start);
	g->dev = m->dev;
	g->ino = m->ino;
	return g;
}

static void seg_put(struct gr_seg *g, struct gr_vma *v, int n)
{
	if (--g->refs > 0)
		return;
	if (!g->dead) {
		seg_unlink(g);
		if (g->converted && v && seg_intact(g, v, n))
			restore(g, v, n);
	}
	close(g->fd);
	gr_free(g);
}

/* mark_stale retires live segments in [s, e) that the process remapped. */
static void mark_stale(uintptr_t s, uintptr_t e, struct gr_vma *v, int n)
{
	struct gr_seg *g = segs, *next;

	for (; g; g = next) {
		next = g->next;
		if (g->end <= s || g->start >= e || seg_intact(g, v, n))
			continue;
		seg_unlink(g);
		g->dead = 1;
		if (g->refs == 0) {
			close(g->fd);
			gr_free(g);
		}
	}
}

static int add_piece(struct gr_share *sh, struct gr_seg *g, uintptr_t a, uintptr_t b)
{
	struct gr_piece *pc;

	if (sh->nsegs == GR_MAX_FDS)
		return E2BIG;
	pc = &sh->pieces[sh->nsegs];
	pc->fd_index = (uint32_t)sh->nsegs;
	pc->writable = (uint32_t)g->writable;
	pc->offset = g->off + (a - g->start);
	pc->length = b - a;
	sh->segs[sh->nsegs] = g;
	sh->fds[sh->nsegs] = g->fd;
	sh->nsegs++;
	sh->nfds = sh->nsegs;
	g->refs++;
	return 0;
}

/* check_gap validates the unshared range [a, b) before anything changes. */
static int check_gap(uintptr_t a, uintptr_t b, struct gr_vma *v, int n, int writable)
{
	while (a < b) {
		struct gr_vma *m = gr_vma_at(v, n, a);

		if (!m || !(m->prot & PROT_READ) || (writable && !(m->prot & PROT_WRITE)))
			return EFAULT;
		a = m->end;
	}
	return 0;
}

/* share_gap shares [a, b), which no live segment covers: maximal runs of
 * private entries are converted together, shared entries adopted. */
static int share_gap(struct gr_share *sh, uintptr_t a, uintptr_t b, struct gr_vma *v, int n,
		     int writable)
{
	while (a < b) {
		struct gr_vma *m = gr_vma_at(v, n, a);
		uintptr_t e = m->end < b ? m->end : b;
		struct gr_seg *g;
		int err;

		if (m->shared) {
			g = adopt(a, e, m, writable);
		} else {
			/* Extend over the following private entries. */
			struct gr_vma *k = m;

			while (e < b && (k = gr_vma_at(v, n, e)) && !k->shared && k->huge == m->huge)
				e = k->end < b ? k->end : b;
			g = convert(a, e, v, n, m->huge);
		}
		if (!g)
			return errno ? errno : ENOMEM;
		seg_insert(g);
		err = add_piece(sh, g, a, e);
		if (err) {
			g->refs++;
			seg_put(g, v, n);
			return err;
		}
		a = e;
	}
	return 0;
}

/* huge_page_size returns the default huge page size (Hugepagesize in
 * /proc/meminfo), the unit of private hugetlb mappings. */
static uintptr_t huge_page_size(void)
{
	static uintptr_t hs;
	char line[128];
	FILE *f;

	if (hs)
		return hs;
	hs = 2UL << 20;
	f = fopen("/proc/meminfo", "re");
	if (f) {
		unsigned long kb;

		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "Hugepagesize: %lu kB", &kb) == 1 && kb) {
				hs = (uintptr_t)kb << 10;
				break;
			}
		fclose(f);
	}
	return hs;
}

/* huge_bounds widens [*s, *e) to whole huge pages where it starts or ends
 * in a hugetlb mapping: such pages are shared (and copied) whole. */
static void huge_bounds(uintptr_t *s, uintptr_t *e, struct gr_vma *v, int n)
{
	uintptr_t hs = huge_page_size();
	struct gr_vma *m = gr_vma_at(v, n, *s);
	struct gr_seg *g;

	if (m && m->huge && (*s & ~(hs - 1)) >= m->start)
		*s &= ~(hs - 1);
	m = gr_vma_at(v, n, *e - 1);
	if (m && m->huge && ((*e + hs - 1) & ~(hs - 1)) <= m->end)
		*e = (*e + hs - 1) & ~(hs - 1);
	/* Huge pages already converted are a hugetlb memfd's, which
	 * /proc/self/maps does not mark: their segments do. */
	for (g = segs; g; g = g->next) {
		if (!g->huge)
			continue;
		if (g->start <= *s && *s < g->end && (*s & ~(hs - 1)) >= g->start)
			*s &= ~(hs - 1);
		if (g->start < *e && *e <= g->end && ((*e + hs - 1) & ~(hs - 1)) <= g->end)
			*e = (*e + hs - 1) & ~(hs - 1);
	}
}

int gr_mem_share(void *addr, size_t len, int writable, struct gr_share *sh)
{
	uintptr_t ps = page_size();
	uintptr_t s = (uintptr_t)addr & ~(ps - 1);
	uintptr_t e = ((uintptr_t)addr + len + ps - 1) & ~(ps - 1);
	struct gr_vma *v = NULL;
	struct gr_seg *g;
	uintptr_t cur;
	int n, err = 0;

	memset(sh, 0, sizeof(*sh));
	if (!len || e < s)
		return EINVAL;
	sh->segs = gr_calloc(GR_MAX_FDS, sizeof(*sh->segs));
	sh->pieces = gr_calloc(GR_MAX_FDS, sizeof(*sh->pieces));
	sh->fds = gr_calloc(GR_MAX_FDS, sizeof(*sh->fds));
	if (!sh->segs || !sh->pieces || !sh->fds) {
		gr_mem_unshare(sh);
		return ENOMEM;
	}
	sh->view_start = s;
	pthread_mutex_lock(&mem_mu);
	n = gr_read_maps(&v);
	if (n < 0) {
		err = EFAULT;
		goto out;
	}
	huge_bounds(&s, &e, v, n);
	sh->view_start = s;
	mark_stale(s, e, v, n);
	/* First check the whole range, then change it. */
	for (cur = s; cur < e;) {
		for (g = segs; g && g->end <= cur; g = g->next)
			;
		if (g && g->start <= cur) {
			cur = g->end;
			continue;
		}
		err = check_gap(cur, g && g->start < e ? g->start : e, v, n, writable);
		if (err)
			goto out;
		cur = g && g->start < e ? g->start : e;
	}
	for (cur = s; cur < e && !err;) {
		uintptr_t end;

		for (g = segs; g && g->end <= cur; g = g->next)
			;
		if (g && g->start <= cur) {
			end = g->end < e ? g->end : e;
			err = add_piece(sh, g, cur, end);
		} else {
			end = g && g->start < e ? g->start : e;
			err = share_gap(sh, cur, end, v, n, writable);
		}
		cur = end;
	}
out:
	pthread_mutex_unlock(&mem_mu);
	gr_free(v);
	if (err)
		gr_mem_unshare(sh);
	return err;
}

void gr_mem_unshare(struct gr_share *sh)
{
	struct gr_vma *v = NULL;
	int i, n;

	if (sh->nsegs) {
		pthread_mutex_lock(&mem_mu);
		n = gr_read_maps(&v);
		for (i = 0; i < sh->nsegs; i++)
			seg_put(sh->segs[i], n < 0 ? NULL : v, n);
		pthread_mutex_unlock(&mem_mu);
		gr_free(v);
	}
	gr_free(sh->segs);
	gr_free(sh->pieces);
	gr_free(sh->fds);
	memset(sh, 0, sizeof(*sh));
}

/* snapshot returns a private anonymous copy of the converted segment g,
 * with the protections its pages have now, or NULL. It reads through a
 * view of the memfd, so pages the process may not read are copied too. */
static void *snapshot(const struct gr_seg *g, struct gr_vma *v, int n)
{
	size_t len = g->end - g->start;
	void *src, *tmp = map_anon(len, g->huge);
	uintptr_t a;

	if (tmp == MAP_FAILED)
		return NULL;
	src = mmap(NULL, len, PROT_READ, MAP_SHARED, g->fd, (off_t)g->off);
	if (src == MAP_FAILED) {
		munmap(tmp, len);
		return NULL;
	}
	memcpy(tmp, src, len);
	munmap(src, len);
	for (a = g->start; a < g->end;) {
		struct gr_vma *m = gr_vma_at(v, n, a);
		uintptr_t e = m->end < g->end ? m->end : g->end;

		if (m->prot != (PROT_READ | PROT_WRITE))
			mprotect((char *)tmp + (a - g->start), e - a, m->prot);
		a = e;
	}
	return tmp;
}

/* The fork handlers. The child's copies of converted pages are taken here,
 * in the parent before fork, and inherited by the child (private memory is
 * the child's own after fork), which moves them into place: copied in the
 * child instead, the copy would race the parent's writes after fork
 * returns, which the child must not see (a child that ran late copied the
 * parent's "parent" over its own "before fork"). */
void gr_mem_prefork(void)
{
	struct gr_vma *v = NULL;
	struct gr_seg *g;
	int n;

	pthread_mutex_lock(&mem_mu);
	if (!segs)
		return;
	n = gr_read_maps(&v);
	for (g = segs; g; g = g->next)
		if (g->converted && n >= 0 && seg_intact(g, v, n))
			g->snap = snapshot(g, v, n);
	gr_free(v);
}

void gr_mem_postfork_parent(void)
{
	struct gr_seg *g;

	for (g = segs; g; g = g->next)
		if (g->snap) {
			munmap(g->snap, g->end - g->start);
			g->snap = NULL;
		}
	pthread_mutex_unlock(&mem_mu);
}

/* In the child of fork: converted pages still shared with the parent (and
 * the daemon) are replaced by the private copies taken before fork (or
 * copied now if there was no memory for one), and the segments are
 * forgotten (the child's regions are the parent's, unusable here). */
void gr_mem_forked(void)
{
	struct gr_seg *g, *next;
	struct gr_vma *v = NULL;
	int n;

	pthread_mutex_init(&mem_mu, NULL);
	n = segs ? gr_read_maps(&v) : 0;
	for (g = segs; g; g = next) {
		size_t len = g->end - g->start;

		next = g->next;
		if (g->snap) {
			if (mremap(g->snap, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
				   (void *)g->start) == MAP_FAILED)
				munmap(g->snap, len);
			g->snap = NULL;
		} else if (g->converted && n >= 0 && seg_intact(g, v, n)) {
			restore(g, v, n); /* no memory for a copy before fork */
		}
		close(g->fd);
		g->dead = 1; /* regions of the parent may still point here */
	}
	segs = NULL;
	gr_free(v);
}
